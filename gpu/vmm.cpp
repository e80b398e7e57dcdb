#include "gpu/vmm.h"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <string>
#include <string_view>
#include <utility>

#include "gpu/cuda_check.h"
#include "gpu/device.h"

namespace exlr8 {

namespace {

// The driver entry points this file uses, looked up once through the
// runtime (versions as of CUDA 12.0's ABI).
struct Driver {
  PFN_cuGetErrorName_v6000 GetErrorName = nullptr;
  PFN_cuGetErrorString_v6000 GetErrorString = nullptr;
  PFN_cuDeviceGet_v2000 DeviceGet = nullptr;
  PFN_cuDeviceGetAttribute_v2000 DeviceGetAttribute = nullptr;
  PFN_cuMemGetAllocationGranularity_v10020 MemGetAllocationGranularity = nullptr;
  PFN_cuMemCreate_v10020 MemCreate = nullptr;
  PFN_cuMemRelease_v10020 MemRelease = nullptr;
  PFN_cuMemAddressReserve_v10020 MemAddressReserve = nullptr;
  PFN_cuMemAddressFree_v10020 MemAddressFree = nullptr;
  PFN_cuMemMap_v10020 MemMap = nullptr;
  PFN_cuMemUnmap_v10020 MemUnmap = nullptr;
  PFN_cuMemSetAccess_v10020 MemSetAccess = nullptr;
  PFN_cuMemExportToShareableHandle_v10020 MemExportToShareableHandle = nullptr;
  PFN_cuMemImportFromShareableHandle_v10020 MemImportFromShareableHandle = nullptr;
  Status status;  // why the lookup failed, if it did
};

template <typename Fn>
Status Lookup(const char* name, Fn* fn) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found{};
  const cudaError_t err = cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &found);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return UnavailableError(std::string("CUDA driver entry point ") + name +
                            ": cudaGetDriverEntryPointByVersion failed: " + cudaGetErrorName(err));
  }
  if (found != cudaDriverEntryPointSuccess || p == nullptr)
    return UnavailableError(std::string("CUDA driver entry point ") + name + " not found (driver too old?)");
  *fn = reinterpret_cast<Fn>(p);
  return Status::Ok();
}

const Driver& GetDriver() {
  static const Driver d = [] {
    Driver x;
    x.status = [&]() -> Status {
      EXLR8_RETURN_IF_ERROR(Lookup("cuGetErrorName", &x.GetErrorName));
      EXLR8_RETURN_IF_ERROR(Lookup("cuGetErrorString", &x.GetErrorString));
      EXLR8_RETURN_IF_ERROR(Lookup("cuDeviceGet", &x.DeviceGet));
      EXLR8_RETURN_IF_ERROR(Lookup("cuDeviceGetAttribute", &x.DeviceGetAttribute));
      EXLR8_RETURN_IF_ERROR(Lookup("cuMemGetAllocationGranularity", &x.MemGetAllocationGranularity));
      EXLR8_RETURN_IF_ERROR(Lookup("cuMemCreate", &x.MemCreate));
      EXLR8_RETURN_IF_ERROR(Lookup("cuMemRelease", &x.MemRelease));
      EXLR8_RETURN_IF_ERROR(Lookup("cuMemAddressReserve", &x.MemAddressReserve));
      EXLR8_RETURN_IF_ERROR(Lookup("cuMemAddressFree", &x.MemAddressFree));
      EXLR8_RETURN_IF_ERROR(Lookup("cuMemMap", &x.MemMap));
      EXLR8_RETURN_IF_ERROR(Lookup("cuMemUnmap", &x.MemUnmap));
      EXLR8_RETURN_IF_ERROR(Lookup("cuMemSetAccess", &x.MemSetAccess));
      EXLR8_RETURN_IF_ERROR(Lookup("cuMemExportToShareableHandle", &x.MemExportToShareableHandle));
      EXLR8_RETURN_IF_ERROR(Lookup("cuMemImportFromShareableHandle", &x.MemImportFromShareableHandle));
      return Status::Ok();
    }();
    return x;
  }();
  return d;
}

std::string DriverErrorText(const Driver& drv, CUresult r) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (drv.GetErrorName == nullptr || drv.GetErrorName(r, &name) != CUDA_SUCCESS || name == nullptr)
    return "CUresult " + std::to_string(static_cast<int>(r));
  std::string out = name;
  if (drv.GetErrorString != nullptr && drv.GetErrorString(r, &text) == CUDA_SUCCESS && text != nullptr)
    out += std::string(" (") + text + ")";
  return out;
}

// The Status for a failed driver call `what`. `bad_input` is the code for
// the driver's invalid-value answers (InvalidArgument when the caller's data,
// e.g. an imported descriptor, is the likely cause).
Status DriverStatus(const Driver& drv, CUresult r, std::string_view what,
                    StatusCode bad_input = StatusCode::kInternal) {
  if (r == CUDA_SUCCESS) return Status::Ok();
  std::string m = std::string(what) + " failed: " + DriverErrorText(drv, r);
  switch (r) {
    case CUDA_ERROR_NOT_SUPPORTED:
      return UnimplementedError(m + "; fall back to legacy CUDA IPC (gpu/ipc.h)");
    case CUDA_ERROR_OUT_OF_MEMORY:
      return ResourceExhaustedError(m);
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_DEINITIALIZED:
    case CUDA_ERROR_STUB_LIBRARY:
      return UnavailableError(m);
    case CUDA_ERROR_INVALID_VALUE:
    case CUDA_ERROR_INVALID_HANDLE:
      return Status(bad_input, m);
    default:
      return InternalError(m);
  }
}

// The driver function a call through the table names, as its users know
// it: "drv->MemMap(ptr, ...)" is "cuMemMap".
std::string DriverFunctionName(std::string_view call) {
  const std::size_t arrow = call.find("->");
  const std::size_t paren = arrow == std::string_view::npos ? arrow : call.find('(', arrow);
  if (paren == std::string_view::npos) return std::string(call);
  return "cu" + std::string(call.substr(arrow + 2, paren - arrow - 2));
}

#define EXLR8_CU_TRY(drv, call, ...)                                                                 \
  do {                                                                                               \
    const CUresult exlr8_cu_r_ = (call);                                                             \
    if (exlr8_cu_r_ != CUDA_SUCCESS)                                                                 \
      return DriverStatus(drv, exlr8_cu_r_, DriverFunctionName(#call) __VA_OPT__(, ) __VA_ARGS__); \
  } while (0)

// The driver ready for `device`: entry points found, the device's primary
// context created (the runtime's, which the driver calls then use).
Result<const Driver*> Ready(int device, CudaSetDeviceGuard& guard) {
  EXLR8_RETURN_IF_ERROR(RequireCudaDevice());
  const Driver& drv = GetDriver();
  EXLR8_RETURN_IF_ERROR(drv.status);
  EXLR8_RETURN_IF_ERROR(guard.Set(device));
  EXLR8_CUDA_TRY(cudaFree(nullptr));  // creates the primary context, makes it current
  return &drv;
}

CUmemAllocationProp Properties(CUdevice dev) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  return prop;
}

Status CheckSupport(const Driver& drv, int device, CUdevice dev) {
  int vmm = 0, fd = 0;
  EXLR8_CU_TRY(drv,
               drv.DeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev));
  if (vmm == 0)
    return UnimplementedError(
        "CUDA device " + std::to_string(device) +
        " has no virtual memory management "
        "(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED is 0); fall back to legacy "
        "CUDA IPC (gpu/ipc.h)");
  EXLR8_CU_TRY(
      drv, drv.DeviceGetAttribute(&fd, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, dev));
  if (fd == 0)
    return UnimplementedError(
        "CUDA device " + std::to_string(device) +
        " cannot export POSIX file descriptors "
        "(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED is 0); fall back to "
        "legacy CUDA IPC (gpu/ipc.h)");
  return Status::Ok();
}

// Reserves an address range for `handle`, maps it and grants `device`
// access. On failure everything this did is undone (the handle is not
// released: the caller owns it).
Result<CUdeviceptr> MapHandle(const Driver& drv, CUmemGenericAllocationHandle handle, std::size_t size,
                              std::size_t alignment, CUdevice dev, CUmemAccess_flags flags) {
  CUdeviceptr ptr = 0;
  EXLR8_CU_TRY(drv, drv.MemAddressReserve(&ptr, size, alignment, 0, 0));
  CUresult r = drv.MemMap(ptr, size, 0, handle, 0);
  if (r != CUDA_SUCCESS) {
    (void)drv.MemAddressFree(ptr, size);
    return DriverStatus(drv, r, "cuMemMap");
  }
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = dev;
  access.flags = flags;
  r = drv.MemSetAccess(ptr, size, &access, 1);
  if (r != CUDA_SUCCESS) {
    (void)drv.MemUnmap(ptr, size);
    (void)drv.MemAddressFree(ptr, size);
    return DriverStatus(drv, r, "cuMemSetAccess");
  }
  return ptr;
}

// Waits for the device, then unmap -> release -> free the range. Never
// throws; failures are logged.
void Unmap(int device, std::uint64_t ptr, std::uint64_t handle, std::size_t size) noexcept {
  if (size == 0) return;
  const Driver& drv = GetDriver();
  CudaSetDeviceGuard guard;
  if (const Status s = guard.Set(device); !s.ok())
    std::fprintf(stderr, "exlr8d: releasing exported device memory: %s\n", s.ToString().c_str());
  EXLR8_ASSERT_CUDA_SUCCESS(cudaDeviceSynchronize());
  // Unmap first (the range then maps nothing), then drop this process's
  // handle (the memory goes when no process holds one or maps it), then
  // give the address range back.
  auto log = [&](const char* what, CUresult r) {
    if (r != CUDA_SUCCESS)
      std::fprintf(stderr, "exlr8d: %s failed: %s\n", what, DriverErrorText(drv, r).c_str());
  };
  log("cuMemUnmap", drv.MemUnmap(static_cast<CUdeviceptr>(ptr), size));
  log("cuMemRelease", drv.MemRelease(static_cast<CUmemGenericAllocationHandle>(handle)));
  log("cuMemAddressFree", drv.MemAddressFree(static_cast<CUdeviceptr>(ptr), size));
}

}  // namespace

Status CheckFdExportSupport(int device) {
  CudaSetDeviceGuard guard;
  EXLR8_ASSIGN_OR_RETURN(const Driver* drv, Ready(device, guard));
  CUdevice dev = 0;
  EXLR8_CU_TRY(*drv, drv->DeviceGet(&dev, device));
  return CheckSupport(*drv, device, dev);
}

// ---- ExportableDeviceMemory ----

Result<ExportableDeviceMemory> ExportableDeviceMemory::Allocate(int device, std::size_t bytes) {
  if (bytes == 0) return InvalidArgumentError("ExportableDeviceMemory::Allocate: 0 bytes");
  CudaSetDeviceGuard guard;
  EXLR8_ASSIGN_OR_RETURN(const Driver* drv, Ready(device, guard));
  CUdevice dev = 0;
  EXLR8_CU_TRY(*drv, drv->DeviceGet(&dev, device));
  EXLR8_RETURN_IF_ERROR(CheckSupport(*drv, device, dev));
  const CUmemAllocationProp prop = Properties(dev);
  std::size_t granularity = 0;
  EXLR8_CU_TRY(*drv,
               drv->MemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  if (granularity == 0) return InternalError("cuMemGetAllocationGranularity gave 0");
  if (bytes > SIZE_MAX - granularity)
    return InvalidArgumentError("ExportableDeviceMemory::Allocate: " + std::to_string(bytes) +
                                " bytes is too large");
  const std::size_t size = (bytes + granularity - 1) / granularity * granularity;
  CUmemGenericAllocationHandle handle = 0;
  EXLR8_CU_TRY(*drv, drv->MemCreate(&handle, size, &prop, 0));
  auto ptr = MapHandle(*drv, handle, size, granularity, dev, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  if (!ptr.ok()) {
    (void)drv->MemRelease(handle);
    return ptr.status();
  }
  ExportableDeviceMemory m;
  m.ptr_ = *ptr;
  m.handle_ = handle;
  m.size_ = size;
  m.device_ = device;
  return m;
}

ExportableDeviceMemory::ExportableDeviceMemory(ExportableDeviceMemory&& other) noexcept
    : ptr_(std::exchange(other.ptr_, 0)),
      handle_(std::exchange(other.handle_, 0)),
      size_(std::exchange(other.size_, 0)),
      device_(std::exchange(other.device_, -1)) {}

ExportableDeviceMemory& ExportableDeviceMemory::operator=(ExportableDeviceMemory&& other) noexcept {
  if (this != &other) {
    Unmap(device_, ptr_, handle_, size_);
    ptr_ = std::exchange(other.ptr_, 0);
    handle_ = std::exchange(other.handle_, 0);
    size_ = std::exchange(other.size_, 0);
    device_ = std::exchange(other.device_, -1);
  }
  return *this;
}

ExportableDeviceMemory::~ExportableDeviceMemory() { Unmap(device_, ptr_, handle_, size_); }

Result<int> ExportableDeviceMemory::ExportFd() const {
  if (empty()) return FailedPreconditionError("ExportableDeviceMemory::ExportFd on an empty object");
  const Driver& drv = GetDriver();
  int fd = -1;
  EXLR8_CU_TRY(drv, drv.MemExportToShareableHandle(&fd, static_cast<CUmemGenericAllocationHandle>(handle_),
                                                   CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  return fd;
}

// ---- ImportedDeviceMemory ----

Result<ImportedDeviceMemory> ImportedDeviceMemory::Import(int fd, std::size_t bytes, int device,
                                                          DeviceMemoryAccess access) {
  if (fd < 0)
    return InvalidArgumentError("ImportedDeviceMemory::Import: file descriptor " + std::to_string(fd));
  if (bytes == 0) return InvalidArgumentError("ImportedDeviceMemory::Import: 0 bytes");
  CudaSetDeviceGuard guard;
  EXLR8_ASSIGN_OR_RETURN(const Driver* drv, Ready(device, guard));
  CUdevice dev = 0;
  EXLR8_CU_TRY(*drv, drv->DeviceGet(&dev, device));
  EXLR8_RETURN_IF_ERROR(CheckSupport(*drv, device, dev));
  const CUmemAllocationProp prop = Properties(dev);
  std::size_t granularity = 0;
  EXLR8_CU_TRY(*drv, drv->MemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  if (granularity == 0 || bytes % granularity != 0)
    return InvalidArgumentError("ImportedDeviceMemory::Import: " + std::to_string(bytes) +
                                " bytes is not a multiple of the allocation granularity " +
                                std::to_string(granularity));
  CUmemGenericAllocationHandle handle = 0;
  EXLR8_CU_TRY(
      *drv,
      drv->MemImportFromShareableHandle(&handle, reinterpret_cast<void*>(static_cast<std::intptr_t>(fd)),
                                        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
      StatusCode::kInvalidArgument);
  const CUmemAccess_flags flags = access == DeviceMemoryAccess::kReadWrite
                                      ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE
                                      : CU_MEM_ACCESS_FLAGS_PROT_READ;
  auto ptr = MapHandle(*drv, handle, bytes, granularity, dev, flags);
  if (!ptr.ok()) {
    (void)drv->MemRelease(handle);
    return ptr.status();
  }
  ImportedDeviceMemory m;
  m.ptr_ = *ptr;
  m.handle_ = handle;
  m.size_ = bytes;
  m.device_ = device;
  return m;
}

ImportedDeviceMemory::ImportedDeviceMemory(ImportedDeviceMemory&& other) noexcept
    : ptr_(std::exchange(other.ptr_, 0)),
      handle_(std::exchange(other.handle_, 0)),
      size_(std::exchange(other.size_, 0)),
      device_(std::exchange(other.device_, -1)) {}

ImportedDeviceMemory& ImportedDeviceMemory::operator=(ImportedDeviceMemory&& other) noexcept {
  if (this != &other) {
    Unmap(device_, ptr_, handle_, size_);
    ptr_ = std::exchange(other.ptr_, 0);
    handle_ = std::exchange(other.handle_, 0);
    size_ = std::exchange(other.size_, 0);
    device_ = std::exchange(other.device_, -1);
  }
  return *this;
}

ImportedDeviceMemory::~ImportedDeviceMemory() { Unmap(device_, ptr_, handle_, size_); }

}  // namespace exlr8
