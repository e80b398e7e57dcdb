#include "client/exlr8client/driver_device_lease.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace exlr8::cudrv {

namespace {

constexpr char kHexDigits[] = "0123456789abcdef";

// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (as nvidia-smi -L and
// gpu/device.h write it).
std::string FormatUuid(const CUuuid& u) {
  std::string s = "GPU-";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) s += '-';
    const auto b = static_cast<unsigned char>(u.bytes[i]);
    s += kHexDigits[b >> 4];
    s += kHexDigits[b & 15];
  }
  return s;
}

// The UUID without its "GPU-" or "MIG-" prefix, lower case: a MIG instance's
// UUID compares by its digits whichever prefix a tool wrote.
std::string UuidDigits(std::string_view uuid) {
  if (uuid.size() > 4 && (uuid.substr(0, 4) == "GPU-" || uuid.substr(0, 4) == "MIG-")) uuid.remove_prefix(4);
  std::string out(uuid);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void Log(const Driver& drv, const char* what, CUresult r) {
  if (r != kSuccess)
    std::fprintf(stderr, "libexlr8client: letting go of a device lease: %s failed: %s\n", what,
                 ErrorText(drv, r).c_str());
}

}  // namespace

DriverDeviceLease& DriverDeviceLease::operator=(DriverDeviceLease&& other) noexcept {
  if (this != &other) {
    Close();
    connection_ = std::move(other.connection_);
    driver_ = std::exchange(other.driver_, nullptr);
    ordinal_ = std::exchange(other.ordinal_, -1);
    dev_ = std::exchange(other.dev_, 0);
    ctx_ = std::exchange(other.ctx_, nullptr);
    handle_ = std::exchange(other.handle_, 0);
    imported_ = std::exchange(other.imported_, false);
    reserved_ = std::exchange(other.reserved_, false);
    mapped_ = std::exchange(other.mapped_, false);
    ipc_ = std::exchange(other.ipc_, false);
    ptr_ = std::exchange(other.ptr_, 0);
    bytes_ = std::exchange(other.bytes_, 0);
    description_ = std::move(other.description_);
    header_ = std::move(other.header_);
    tables_ = std::move(other.tables_);
    kernels_ = std::move(other.kernels_);
  }
  return *this;
}

Status DriverDeviceLease::Read(std::uint64_t offset, void* dst, std::size_t n) const {
  if (n == 0) return Status::Ok();
  if (driver_ == nullptr || ctx_ == nullptr || ptr_ == 0)
    return FailedPreconditionError("the device lease is not open");
  ContextScope scope(*driver_, ctx_);
  EXLR8_RETURN_IF_ERROR(scope.status());
  return CallStatus(
      *driver_, driver_->MemcpyDtoH(dst, base() + offset, n),
      "cuMemcpyDtoH of " + std::to_string(n) + " bytes at image offset " + std::to_string(offset),
      StatusCode::kInternal);
}

void DriverDeviceLease::Close() {
  if (driver_ != nullptr && ctx_ != nullptr && (mapped_ || reserved_ || imported_ || ipc_)) {
    const Driver& drv = *driver_;
    ContextScope scope(drv, ctx_);
    if (!scope.status().ok()) {
      std::fprintf(stderr, "libexlr8client: letting go of a device lease: %s\n",
                   scope.status().ToString().c_str());
    } else {
      // The caller's work on the image first (its contract; this makes
      // sure), then the memory: unmap, release, free the range.
      Log(drv, "cuCtxSynchronize", drv.CtxSynchronize());
      if (mapped_) Log(drv, "cuMemUnmap", drv.MemUnmap(ptr_, bytes_));
      if (imported_) Log(drv, "cuMemRelease", drv.MemRelease(handle_));
      if (reserved_) Log(drv, "cuMemAddressFree", drv.MemAddressFree(ptr_, bytes_));
      if (ipc_) Log(drv, "cuIpcCloseMemHandle", drv.IpcCloseMemHandle(ptr_));
    }
  }
  // The library's kernels, loaded into the primary context by HalfWeights.
  if (driver_ != nullptr && ctx_ != nullptr && kernels_ != nullptr && kernels_->module != nullptr) {
    ContextScope scope(*driver_, ctx_);
    if (scope.status().ok()) {
      Log(*driver_, "cuCtxSynchronize", driver_->CtxSynchronize());
      Log(*driver_, "cuModuleUnload", driver_->ModuleUnload(kernels_->module));
    }
  }
  kernels_.reset();
  mapped_ = imported_ = reserved_ = ipc_ = false;
  handle_ = 0;
  ptr_ = 0;
  bytes_ = 0;
  // The holder counts this lessee gone only now, with nothing mapped.
  connection_.Close();
  if (driver_ != nullptr && ctx_ != nullptr)
    Log(*driver_, "cuDevicePrimaryCtxRelease", driver_->DevicePrimaryCtxRelease(dev_));
  ctx_ = nullptr;
}

Result<DriverDeviceLease> OpenDriverDeviceLease(ReceivedLeaseV2 received, const std::filesystem::path& path) {
  const LeaseDescriptionV2& d = received.description;
  const std::string from = "lease from " + path.string() + ": ";
  if (d.memory_kind != LeaseMemoryKind::kDevice)
    return FailedPreconditionError(from + "memory kind host: not a device lease");
  if (!d.device) return CorruptionError(from + "memory kind device without memory.device");
  const LeaseGpu& gpu = *d.device;
  const std::string on_gpu =
      from + "the image is in device memory of " + gpu.uuid + " (PCI bus " + gpu.pci_bus_id + ")";

  const std::size_t tables_index = received.fds.fds.size() - 1;
  EXLR8_RETURN_IF_ERROR(CheckLeaseV2Memfd(received.tables_fd(), d.tables.bytes,
                                          "file descriptor " + std::to_string(tables_index) +
                                              " (tables.bytes " + std::to_string(d.tables.bytes) + ")",
                                          from));
  DriverDeviceLease lease;
  EXLR8_ASSIGN_OR_RETURN(lease.tables_, ReadLeaseV2Tables(received.tables_fd(), d, from));
  // From here on the connection is the lease's, so that a failure lets go
  // in order (memory, then the connection).
  lease.connection_ = std::move(received.connection);

  // The driver, and the GPU by UUID among the devices this process sees.
  Result<const Driver*> loaded = LoadDriver();
  if (!loaded.ok()) return loaded.status().WithContext(on_gpu);
  const Driver& drv = **loaded;
  if (Status s = CallStatus(drv, drv.Init(0), "cuInit", StatusCode::kUnavailable); !s.ok())
    return Status(StatusCode::kUnavailable, on_gpu + ": " + s.message());
  int count = 0;
  if (Status s = CallStatus(drv, drv.DeviceGetCount(&count), "cuDeviceGetCount"); !s.ok())
    return s.WithContext(on_gpu);
  if (count <= 0)
    return UnavailableError(on_gpu + ": this process sees no CUDA device (CUDA_VISIBLE_DEVICES=" + [] {
      const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
      return v != nullptr ? "'" + std::string(v) + "'" : std::string("unset");
    }() + ")");
  const std::string want = UuidDigits(gpu.uuid);
  std::string seen;
  for (int i = 0; i < count && lease.ordinal_ < 0; ++i) {
    CUdevice dev = 0;
    CUuuid uuid{};
    char bus[32] = {};
    if (Status s = CallStatus(drv, drv.DeviceGet(&dev, i), "cuDeviceGet(" + std::to_string(i) + ")"); !s.ok())
      return s.WithContext(on_gpu);
    if (Status s =
            CallStatus(drv, drv.DeviceGetUuid(&uuid, dev), "cuDeviceGetUuid(" + std::to_string(i) + ")");
        !s.ok())
      return s.WithContext(on_gpu);
    if (drv.DeviceGetPCIBusId(bus, sizeof bus - 1, dev) != kSuccess) std::strcpy(bus, "?");
    const std::string text = FormatUuid(uuid);
    if (UuidDigits(text) == want) {
      lease.ordinal_ = i;
      lease.dev_ = dev;
    }
    seen += (seen.empty() ? "" : ", ") + std::to_string(i) + ": " + text + " (PCI bus " + bus + ")";
  }
  if (lease.ordinal_ < 0)
    return NotFoundError(on_gpu + ", not found among the CUDA devices this process sees (" + seen +
                         "): check CUDA_VISIBLE_DEVICES, and that the holder runs on this machine");
  lease.driver_ = &drv;

  // Its primary context: the runtime's, so the serving process's CUDA
  // calls see what is mapped here.
  CUcontext ctx = nullptr;
  if (Status s = CallStatus(drv, drv.DevicePrimaryCtxRetain(&ctx, lease.dev_), "cuDevicePrimaryCtxRetain",
                            StatusCode::kInternal);
      !s.ok())
    return s.WithContext(on_gpu);
  lease.ctx_ = ctx;
  ContextScope scope(drv, ctx);
  EXLR8_RETURN_IF_ERROR(scope.status().WithContext(on_gpu));

  // The image's allocation.
  const std::uint32_t a = d.image.allocation;
  const LeaseAllocation& alloc = d.allocations[a];
  const std::string import =
      from + "import allocation " + std::to_string(a) + " (" + std::to_string(alloc.bytes) +
      " bytes, handle " + (alloc.is_fd() ? "fd" : "ipc") + ") on device " + std::to_string(lease.ordinal_) +
      ", " + gpu.uuid + " (PCI bus " + gpu.pci_bus_id + ")";
  lease.bytes_ = alloc.bytes;
  if (alloc.is_fd()) {
    const int fd = received.allocation_fd(a);
    EXLR8_RETURN_IF_ERROR(
        CallStatus(drv,
                   drv.MemImportFromShareableHandle(&lease.handle_,
                                                    reinterpret_cast<void*>(static_cast<std::intptr_t>(fd)),
                                                    kMemHandleTypePosixFileDescriptor),
                   "cuMemImportFromShareableHandle")
            .WithContext(import));
    lease.imported_ = true;
    // The range aligned to the allocation's granularity (cuMemMap's rule):
    // the exporter's size is a multiple of it, a power of two, so the
    // size's lowest set bit is at least it (up to 1 GiB, far above any GPU's).
    const std::uint64_t alignment =
        std::min<std::uint64_t>(alloc.bytes & (~alloc.bytes + 1), std::uint64_t{1} << 30);
    EXLR8_RETURN_IF_ERROR(CallStatus(drv, drv.MemAddressReserve(&lease.ptr_, alloc.bytes, alignment, 0, 0),
                                     "cuMemAddressReserve", StatusCode::kInternal)
                              .WithContext(import));
    lease.reserved_ = true;
    // A size other than the exported allocation's fails here.
    EXLR8_RETURN_IF_ERROR(
        CallStatus(drv, drv.MemMap(lease.ptr_, alloc.bytes, 0, lease.handle_, 0), "cuMemMap")
            .WithContext(import));
    lease.mapped_ = true;
    CUmemAccessDesc access{};
    access.location.type = kMemLocationTypeDevice;
    access.location.id = lease.dev_;
    access.flags = kMemAccessFlagsProtRead;
    EXLR8_RETURN_IF_ERROR(
        CallStatus(drv, drv.MemSetAccess(lease.ptr_, alloc.bytes, &access, 1), "cuMemSetAccess (read only)")
            .WithContext(import));
  } else {
    const std::string_view hex = std::string_view(alloc.handle).substr(4);
    CUipcMemHandle handle{};
    if (hex.size() != 2 * kIpcHandleSize)
      return CorruptionError(import + ": the IPC handle has " + std::to_string(hex.size()) +
                             " hex digits, not " + std::to_string(2 * kIpcHandleSize));
    for (std::size_t i = 0; i < kIpcHandleSize; ++i) {
      const int hi = HexValue(hex[2 * i]), lo = HexValue(hex[2 * i + 1]);
      if (hi < 0 || lo < 0)
        return CorruptionError(import + ": the IPC handle's digit " + std::to_string(2 * i) + " is not hex");
      handle.reserved[i] = static_cast<char>(hi * 16 + lo);
    }
    EXLR8_RETURN_IF_ERROR(CallStatus(drv,
                                     drv.IpcOpenMemHandle(&lease.ptr_, handle, kIpcMemLazyEnablePeerAccess),
                                     "cuIpcOpenMemHandle")
                              .WithContext(import));
    lease.ipc_ = true;
    // A legacy handle carries no size; the driver knows the allocation's:
    // at least `bytes` must follow the pointer it gave.
    CUdeviceptr range_base = 0;
    std::size_t range_bytes = 0;
    if (drv.MemGetAddressRange(&range_base, &range_bytes, lease.ptr_) == kSuccess &&
        (lease.ptr_ < range_base || range_base + range_bytes - lease.ptr_ < alloc.bytes))
      return InvalidArgumentError(import + ": the IPC allocation has " +
                                  std::to_string(range_base + range_bytes - lease.ptr_) +
                                  " bytes from the mapped pointer, fewer than the description's");
  }

  // The header and the offset table, copied back once and checked.
  std::vector<std::byte> header(kImageHeaderBytes);
  std::vector<std::byte> offsets(d.image.offset_table_bytes);
  const CUdeviceptr base = lease.ptr_ + d.image.header_offset;
  EXLR8_RETURN_IF_ERROR(CallStatus(drv, drv.MemcpyDtoH(header.data(), base, header.size()),
                                   "cuMemcpyDtoH (the image header)", StatusCode::kInternal)
                            .WithContext(import));
  if (!offsets.empty())
    EXLR8_RETURN_IF_ERROR(
        CallStatus(drv, drv.MemcpyDtoH(offsets.data(), base + d.image.offset_table, offsets.size()),
                   "cuMemcpyDtoH (the offset table)", StatusCode::kInternal)
            .WithContext(import));
  EXLR8_ASSIGN_OR_RETURN(lease.header_, CheckLeaseV2Image(d, lease.tables_, header, offsets, from));
  lease.description_ = std::move(received.description);
  return lease;
}

}  // namespace exlr8::cudrv
