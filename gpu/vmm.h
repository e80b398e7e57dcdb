// Device memory that another process can map: a CUDA VMM allocation
// (cuMemCreate with a POSIX file descriptor handle, cuMemAddressReserve,
// cuMemMap, cuMemSetAccess) exported as a file descriptor
// (cuMemExportToShareableHandle) and mapped by the receiver of that
// descriptor (cuMemImportFromShareableHandle). The holder of a rank image
// allocates with ExportableDeviceMemory, passes ExportFd()'s descriptor with
// SCM_RIGHTS, and the lessee maps it with ImportedDeviceMemory; the GPU is
// named by UUID (gpu/device.h: FindCudaDeviceByUuid).
//
// The driver's entry points come from cudaGetDriverEntryPointByVersion, so
// nothing links libcuda (CI and build machines have no driver).
//
// Lifetime: the physical memory lives while any process holds a handle or a
// mapping of it (the driver counts references): an importer's mapping stays
// valid after the exporter is destroyed. Destructors wait for the device
// (cudaDeviceSynchronize on the mapping's device), then unmap, release the
// handle and free the address range; failures are logged, never thrown.
//
// Errors, for every call:
//   Unavailable       no device or no usable driver / entry point
//   Unimplemented     the device or driver cannot export POSIX file descriptors
//                     (VMM or CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_
//                     SUPPORTED missing, or the driver answers CUDA_ERROR_NOT_SUPPORTED):
//                     fall back to legacy IPC (gpu/ipc.h)
//   ResourceExhausted the device is out of memory
//   InvalidArgument   bad arguments; a descriptor the driver cannot import
//   Internal          any other driver error
// Messages name the driver call and the driver's error name
// ("cuMemCreate failed: CUDA_ERROR_NOT_SUPPORTED (operation not supported)").
//
// Thread safety: distinct objects may be used from distinct threads; one
// object is not synchronised. Objects are move-only.
#pragma once

#include <cstddef>
#include <cstdint>

#include "format/status.h"

namespace exlr8 {

// OK when `device` can make exportable allocations; Unimplemented (naming the
// missing attribute) when it cannot; the errors above otherwise.
Status CheckFdExportSupport(int device);

class ExportableDeviceMemory {
 public:
  // At least `bytes` (> 0) of uninitialised memory on `device` (an ordinal
  // of this process), rounded up to the allocation granularity, mapped
  // read-write for `device` in this process. Makes `device` current on the
  // calling thread while it works and restores the previous one.
  static Result<ExportableDeviceMemory> Allocate(int device, std::size_t bytes);

  ExportableDeviceMemory() = default;
  ExportableDeviceMemory(ExportableDeviceMemory&& other) noexcept;
  ExportableDeviceMemory& operator=(ExportableDeviceMemory&& other) noexcept;
  ExportableDeviceMemory(const ExportableDeviceMemory&) = delete;
  ExportableDeviceMemory& operator=(const ExportableDeviceMemory&) = delete;
  ~ExportableDeviceMemory();

  void* data() const noexcept { return reinterpret_cast<void*>(ptr_); }
  // The mapped size, a multiple of the granularity: what an importer passes.
  std::size_t size() const noexcept { return size_; }
  int device() const noexcept { return device_; }

  // A new file descriptor for the allocation, owned by the caller (close it
  // once sent; the receiver's import holds its own reference). Each call
  // gives a fresh descriptor. REQUIRES: !empty.
  Result<int> ExportFd() const;
  bool empty() const noexcept { return size_ == 0; }

 private:
  std::uint64_t ptr_ = 0;     // CUdeviceptr
  std::uint64_t handle_ = 0;  // CUmemGenericAllocationHandle
  std::size_t size_ = 0;
  int device_ = -1;
};

// Whether an importer may write through its mapping.
enum class DeviceMemoryAccess { kReadOnly, kReadWrite };

class ImportedDeviceMemory {
 public:
  // Maps the allocation behind `fd` (an ExportFd() descriptor, perhaps of
  // another process, received with SCM_RIGHTS) into this process on
  // `device`, an ordinal of this process naming the same GPU (find it by
  // UUID). `bytes` is the exporter's size() (from the lease description),
  // which must be a multiple of the granularity. The descriptor is not
  // consumed: the caller still closes it. Makes `device` current on the
  // calling thread while it works and restores the previous one.
  // `access` kReadOnly maps with CU_MEM_ACCESS_FLAGS_PROT_READ (a lessee
  // that must not write the image); kReadWrite with PROT_READWRITE.
  static Result<ImportedDeviceMemory> Import(int fd, std::size_t bytes, int device,
                                             DeviceMemoryAccess access);

  ImportedDeviceMemory() = default;
  ImportedDeviceMemory(ImportedDeviceMemory&& other) noexcept;
  ImportedDeviceMemory& operator=(ImportedDeviceMemory&& other) noexcept;
  ImportedDeviceMemory(const ImportedDeviceMemory&) = delete;
  ImportedDeviceMemory& operator=(const ImportedDeviceMemory&) = delete;
  ~ImportedDeviceMemory();

  void* data() const noexcept { return reinterpret_cast<void*>(ptr_); }
  std::size_t size() const noexcept { return size_; }
  int device() const noexcept { return device_; }

 private:
  std::uint64_t ptr_ = 0;
  std::uint64_t handle_ = 0;
  std::size_t size_ = 0;
  int device_ = -1;
};

}  // namespace exlr8
