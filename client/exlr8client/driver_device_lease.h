// libexlr8client's lessee of a device-memory lease (protocol v2,
// schema/lease/PROTOCOL.md "Device memory") over the CUDA driver loaded at
// run time (cuda_driver.h): the same opening and checks as the in-tree
// OpenDeviceLease (client/lease/device_lease.h, linked with the CUDA
// runtime), without linking CUDA.
//
// Opening, each step a named error and nothing leaked on any of them: the
// tables memfd checked and parsed; the driver loaded (Unavailable "the
// CUDA driver (libcuda.so.1) could not be loaded: ..."), cuInit (Unavailable
// when it fails: no device, a stub or too old a driver); the GPU found by
// the description's UUID among the devices this process sees, whatever
// CUDA_VISIBLE_DEVICES says (Unavailable when none is visible, NotFound when
// none has the UUID; both name the UUID, the PCI bus id and what is
// visible); the device's primary context retained (the one the CUDA
// runtime uses, so a serving process's cudaMemcpy and kernels see the
// mapping); the image's allocation imported with the description's size:
// a "fd" handle through cuMemImportFromShareableHandle, cuMemAddressReserve,
// cuMemMap and cuMemSetAccess read-only (a kernel that writes faults); an
// "ipc:<hex>" handle through cuIpcOpenMemHandle (legacy IPC maps
// read-write; its allocation must be at least `bytes`). Then the image
// header and offset table are copied back and checked against the tables
// and the description (CheckLeaseV2Image).
//
// Private to the library.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <span>

#include "client/exlr8client/cuda_driver.h"
#include "client/exlr8client/half_weights.h"
#include "client/lease/description_v2.h"
#include "client/lease/image_layout.h"
#include "client/lease/lease_v2_opening.h"
#include "format/status.h"

namespace exlr8::cudrv {

// An open device lease. Move-only; the destructor lets go (Close). Const
// members may run on several threads at once; the others need the object
// alone.
class DriverDeviceLease {
 public:
  DriverDeviceLease() = default;
  DriverDeviceLease(DriverDeviceLease&& other) noexcept { *this = std::move(other); }
  DriverDeviceLease& operator=(DriverDeviceLease&& other) noexcept;
  DriverDeviceLease(const DriverDeviceLease&) = delete;
  DriverDeviceLease& operator=(const DriverDeviceLease&) = delete;
  ~DriverDeviceLease() { Close(); }

  bool is_open() const { return connection_.is_open(); }
  // The GPU's ordinal in this process (CUDA_VISIBLE_DEVICES applied), the
  // same for the driver and the runtime.
  int device() const { return ordinal_; }
  // The imported allocation and the image's first byte, as device
  // addresses (CUdeviceptr) in this process. Valid until Close.
  std::uint64_t allocation() const { return ptr_; }
  std::uint64_t base() const { return ptr_ + description_.image.header_offset; }

  const LeaseDescriptionV2& description() const { return description_; }
  const ImageHeader& header() const { return header_; }
  const ImageTables& tables() const { return tables_; }
  std::span<const std::uint64_t> offset_table() const { return tables_.offset_table; }

  int release_fd() const { return connection_.fd(); }
  Result<std::optional<LeaseV2Release>> PollRelease() { return connection_.PollRelease(); }
  Result<std::optional<LeaseV2Release>> WaitRelease(std::chrono::milliseconds timeout) {
    return connection_.WaitRelease(timeout);
  }

  // Copies `n` bytes of the image from `offset` (REQUIRES: inside the
  // image) to host memory at `dst`: cuMemcpyDtoH in the primary context,
  // synchronous. Errors: the driver's (CallStatus).
  Status Read(std::uint64_t offset, void* dst, std::size_t n) const;

  // Enqueues half record `g`'s weights (spec 9) into `out` (device memory
  // on this GPU, g.elements() floats, 4-byte aligned) on `stream` (a
  // CUstream of the primary context; nullptr: the legacy default stream),
  // with the library's embedded kernels (client/exlr8client/kernels/
  // half_weights.cu), loaded into the primary context at the first call.
  // `record` and `signs` are the record's and the layer's signs' image
  // offsets. Errors: Unavailable "not built with CUDA kernels" in a build
  // without them; the driver's (CallStatus, naming the call).
  // Thread safe (the module loads once under a lock).
  Status HalfWeights(const client::HalfRecordGeometry& g, std::uint64_t record, std::uint64_t signs,
                     float* out, void* stream) const;

  // Lets go in PROTOCOL.md's order: waits for the context's work
  // (cuCtxSynchronize), unmaps, releases the imported handle and frees the
  // address range (or closes the IPC mapping), then closes the connection,
  // and releases the primary context last. Failures of the driver here are
  // written to stderr (nothing else can be done). Idempotent.
  void Close();

 private:
  friend Result<DriverDeviceLease> OpenDriverDeviceLease(ReceivedLeaseV2 received,
                                                         const std::filesystem::path& path);
  LeaseV2Connection connection_;
  const Driver* driver_ = nullptr;
  int ordinal_ = -1;
  CUdevice dev_ = 0;
  CUcontext ctx_ = nullptr;  // the primary context, retained while set
  CUmemGenericAllocationHandle handle_ = 0;
  bool imported_ = false;  // handle_ holds an import
  bool reserved_ = false;  // [ptr_, ptr_ + bytes_) reserved
  bool mapped_ = false;    // ... and mapped
  bool ipc_ = false;       // ptr_ is an IPC mapping
  CUdeviceptr ptr_ = 0;
  std::uint64_t bytes_ = 0;
  LeaseDescriptionV2 description_;
  ImageHeader header_;
  ImageTables tables_;
  // The embedded kernels' module in the primary context, loaded at the
  // first HalfWeights (under `mu`), unloaded by Close.
  struct Kernels {
    std::mutex mu;
    CUmodule module = nullptr;
    CUfunction half_weights = nullptr;
  };
  std::unique_ptr<Kernels> kernels_ = std::make_unique<Kernels>();
};

// Opens the device lease whose opening `received` came from `path`
// (REQUIRES: its memory kind is device). The errors above, each message
// starting "lease from PATH: ". Every descriptor in `received` is closed by
// the time this returns.
Result<DriverDeviceLease> OpenDriverDeviceLease(ReceivedLeaseV2 received, const std::filesystem::path& path);

}  // namespace exlr8::cudrv
