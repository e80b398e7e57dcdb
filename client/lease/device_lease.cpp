#include "client/lease/device_lease.h"

#include <cuda_runtime.h>

#include <string>
#include <utility>
#include <vector>

#include "gpu/cuda_check.h"
#include "gpu/device.h"

namespace exlr8 {

namespace {

// `n` bytes of device memory at `src` (on `device`) into host memory.
Status CopyToHost(std::byte* dst, const std::byte* src, std::size_t n, int device) {
  CudaSetDeviceGuard guard;
  EXLR8_RETURN_IF_ERROR(guard.Set(device));
  EXLR8_CUDA_TRY(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost));
  return Status::Ok();
}

}  // namespace

DeviceLease::DeviceLease(DeviceLease&& other) noexcept
    : connection_(std::move(other.connection_)),
      imported_(std::move(other.imported_)),
      ipc_(std::move(other.ipc_)),
      device_(std::exchange(other.device_, -1)),
      allocation_(std::exchange(other.allocation_, nullptr)),
      allocation_bytes_(std::exchange(other.allocation_bytes_, 0)),
      description_(std::move(other.description_)),
      header_(std::move(other.header_)),
      tables_(std::move(other.tables_)) {}

DeviceLease& DeviceLease::operator=(DeviceLease&& other) noexcept {
  if (this != &other) {
    Close();
    connection_ = std::move(other.connection_);
    imported_ = std::move(other.imported_);
    ipc_ = std::move(other.ipc_);
    device_ = std::exchange(other.device_, -1);
    allocation_ = std::exchange(other.allocation_, nullptr);
    allocation_bytes_ = std::exchange(other.allocation_bytes_, 0);
    description_ = std::move(other.description_);
    header_ = std::move(other.header_);
    tables_ = std::move(other.tables_);
  }
  return *this;
}

void DeviceLease::Close() {
  // The memory first: once the connection closes the holder may free it.
  imported_ = ImportedDeviceMemory();
  ipc_ = IpcMapping();
  allocation_ = nullptr;
  allocation_bytes_ = 0;
  connection_.Close();
}

Result<DeviceLease> OpenDeviceLease(const std::filesystem::path& path, const DeviceLeaseOptions& options) {
  EXLR8_ASSIGN_OR_RETURN(ReceivedLeaseV2 received, ReceiveLeaseV2(path, options.timeout));
  const LeaseDescriptionV2& d = received.description;
  const std::string from = "lease from " + path.string() + ": ";
  if (d.memory_kind != LeaseMemoryKind::kDevice)
    return FailedPreconditionError(from + "memory kind host: OpenHostLease maps host images");
  if (!d.device) return CorruptionError(from + "memory kind device without memory.device");
  const LeaseGpu& gpu = *d.device;
  const std::string gpu_name = gpu.uuid + " (PCI bus " + gpu.pci_bus_id + ")";

  const std::size_t tables_index = received.fds.fds.size() - 1;
  EXLR8_RETURN_IF_ERROR(CheckLeaseV2Memfd(received.tables_fd(), d.tables.bytes,
                                          "file descriptor " + std::to_string(tables_index) +
                                              " (tables.bytes " + std::to_string(d.tables.bytes) + ")",
                                          from));
  DeviceLease lease;
  EXLR8_ASSIGN_OR_RETURN(lease.tables_, ReadLeaseV2Tables(received.tables_fd(), d, from));

  // The GPU, by UUID: ordinals differ with CUDA_VISIBLE_DEVICES.
  if (Status s = RequireCudaDevice(); !s.ok())
    return Status(s.code(), from + "the image is in device memory of " + gpu_name + ": " + s.message());
  Result<int> device = FindCudaDeviceByUuid(gpu.uuid);
  if (!device.ok())
    return Status(device.status().code(), from + "the image is in device memory of " + gpu_name +
                                              ", not found in this process: " + device.status().message());
  lease.device_ = *device;

  // The image's allocation, read-only.
  const std::uint32_t a = d.image.allocation;
  const LeaseAllocation& alloc = d.allocations[a];
  const std::string alloc_name = "allocation " + std::to_string(a) + " (" + std::to_string(alloc.bytes) +
                                 " bytes, handle " + (alloc.is_fd() ? "fd" : "ipc") + ") on device " +
                                 std::to_string(lease.device_) + ", " + gpu_name;
  if (alloc.is_fd()) {
    Result<ImportedDeviceMemory> m = ImportedDeviceMemory::Import(
        received.allocation_fd(a), alloc.bytes, lease.device_, DeviceMemoryAccess::kReadOnly);
    if (!m.ok()) return m.status().WithContext(from + "import " + alloc_name);
    lease.imported_ = std::move(*m);
    lease.allocation_ = static_cast<const std::byte*>(lease.imported_.data());
  } else {
    CudaSetDeviceGuard guard;
    if (Status s = guard.Set(lease.device_); !s.ok()) return s.WithContext(from + "import " + alloc_name);
    Result<IpcMapping> m = IpcMapping::Open(std::string_view(alloc.handle).substr(4));
    if (!m.ok()) return m.status().WithContext(from + "import " + alloc_name);
    lease.ipc_ = std::move(*m);
    lease.allocation_ = static_cast<const std::byte*>(lease.ipc_.data());
  }
  lease.allocation_bytes_ = alloc.bytes;

  // The header and the offset table, copied back once.
  const std::byte* base = lease.allocation_ + d.image.header_offset;
  std::vector<std::byte> header(kImageHeaderBytes);
  std::vector<std::byte> offsets(d.image.offset_table_bytes);
  if (Status s = CopyToHost(header.data(), base, header.size(), lease.device_); !s.ok())
    return s.WithContext(from + "copy the image header from " + alloc_name);
  if (Status s = CopyToHost(offsets.data(), base + d.image.offset_table, offsets.size(), lease.device_);
      !s.ok())
    return s.WithContext(from + "copy the image's offset table from " + alloc_name);
  EXLR8_ASSIGN_OR_RETURN(lease.header_, CheckLeaseV2Image(d, lease.tables_, header, offsets, from));

  lease.description_ = std::move(received.description);
  lease.connection_ = std::move(received.connection);
  return lease;
}

}  // namespace exlr8
