#include "client/exlr8client/cuda_driver.h"

#include <dlfcn.h>

#include <cstdlib>
#include <memory>
#include <mutex>
#include <utility>

namespace exlr8::cudrv {

namespace {

constexpr const char* kDefaultDriver = "libcuda.so.1";

template <typename Fn>
bool Find(void* lib, const char* name, Fn* fn, std::string& missing) {
  if (!missing.empty()) return false;
  ::dlerror();
  void* p = ::dlsym(lib, name);
  if (p == nullptr) {
    const char* why = ::dlerror();
    missing = std::string(name) + (why != nullptr ? std::string(": ") + why : std::string());
    return false;
  }
  *fn = reinterpret_cast<Fn>(p);
  return true;
}

}  // namespace

Result<const Driver*> LoadDriver() {
  static std::mutex mu;
  static Driver* loaded = nullptr;  // kept until exit: the driver is never unloaded
  std::lock_guard<std::mutex> lock(mu);
  if (loaded != nullptr) return static_cast<const Driver*>(loaded);

  const char* env = std::getenv(kDriverEnv);
  const bool overridden = env != nullptr && env[0] != '\0';
  const std::string name = overridden ? env : kDefaultDriver;
  const std::string named =
      "the CUDA driver (" + name + (overridden ? std::string(", from ") + kDriverEnv : "") + ")";
  ::dlerror();
  void* lib = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = ::dlerror();
    return UnavailableError(named + " could not be loaded: " + (why != nullptr ? why : "dlopen failed"));
  }
  auto d = std::make_unique<Driver>();
  std::string missing;
  Find(lib, "cuGetErrorName", &d->GetErrorName, missing);
  Find(lib, "cuGetErrorString", &d->GetErrorString, missing);
  Find(lib, "cuInit", &d->Init, missing);
  Find(lib, "cuDeviceGetCount", &d->DeviceGetCount, missing);
  Find(lib, "cuDeviceGet", &d->DeviceGet, missing);
  Find(lib, "cuDeviceGetUuid_v2", &d->DeviceGetUuid, missing);
  Find(lib, "cuDeviceGetPCIBusId", &d->DeviceGetPCIBusId, missing);
  Find(lib, "cuDevicePrimaryCtxRetain", &d->DevicePrimaryCtxRetain, missing);
  Find(lib, "cuDevicePrimaryCtxRelease_v2", &d->DevicePrimaryCtxRelease, missing);
  Find(lib, "cuCtxPushCurrent_v2", &d->CtxPushCurrent, missing);
  Find(lib, "cuCtxPopCurrent_v2", &d->CtxPopCurrent, missing);
  Find(lib, "cuCtxSynchronize", &d->CtxSynchronize, missing);
  Find(lib, "cuMemImportFromShareableHandle", &d->MemImportFromShareableHandle, missing);
  Find(lib, "cuMemAddressReserve", &d->MemAddressReserve, missing);
  Find(lib, "cuMemMap", &d->MemMap, missing);
  Find(lib, "cuMemSetAccess", &d->MemSetAccess, missing);
  Find(lib, "cuMemUnmap", &d->MemUnmap, missing);
  Find(lib, "cuMemAddressFree", &d->MemAddressFree, missing);
  Find(lib, "cuMemRelease", &d->MemRelease, missing);
  Find(lib, "cuIpcOpenMemHandle_v2", &d->IpcOpenMemHandle, missing);
  Find(lib, "cuIpcCloseMemHandle", &d->IpcCloseMemHandle, missing);
  Find(lib, "cuMemGetAddressRange_v2", &d->MemGetAddressRange, missing);
  Find(lib, "cuMemcpyDtoH_v2", &d->MemcpyDtoH, missing);
  Find(lib, "cuModuleLoadData", &d->ModuleLoadData, missing);
  Find(lib, "cuModuleGetFunction", &d->ModuleGetFunction, missing);
  Find(lib, "cuModuleUnload", &d->ModuleUnload, missing);
  Find(lib, "cuFuncSetAttribute", &d->FuncSetAttribute, missing);
  Find(lib, "cuLaunchKernel", &d->LaunchKernel, missing);
  if (!missing.empty()) {
    ::dlclose(lib);
    return UnavailableError(named + " has no entry point " + missing + " (a driver older than CUDA 11.3?)");
  }
  loaded = d.release();
  return static_cast<const Driver*>(loaded);
}

std::string ErrorText(const Driver& drv, CUresult r) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (drv.GetErrorName == nullptr || drv.GetErrorName(r, &name) != kSuccess || name == nullptr) {
    // A stub driver names nothing: the answers a lessee meets before the
    // driver works, named here.
    std::string out = "CUresult " + std::to_string(r);
    switch (r) {
      case kErrorStubLibrary:
        return out + " (CUDA_ERROR_STUB_LIBRARY: a stub, not the real CUDA driver)";
      case kErrorCallRequiresNewerDriver:
        return out + " (CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER)";
      case kErrorNoDevice:
        return out + " (CUDA_ERROR_NO_DEVICE)";
      case kErrorSystemDriverMismatch:
        return out + " (CUDA_ERROR_SYSTEM_DRIVER_MISMATCH)";
      default:
        return out;
    }
  }
  std::string out = name;
  if (drv.GetErrorString != nullptr && drv.GetErrorString(r, &text) == kSuccess && text != nullptr)
    out += std::string(" (") + text + ")";
  return out;
}

Status ContextScope::status() const {
  return CallStatus(drv_, result_, "cuCtxPushCurrent", StatusCode::kInternal);
}

Status CallStatus(const Driver& drv, CUresult r, const std::string& what, StatusCode bad_input) {
  if (r == kSuccess) return Status::Ok();
  std::string m = what + " failed: " + ErrorText(drv, r);
  switch (r) {
    case kErrorNoDevice:
    case kErrorNotInitialized:
    case kErrorDeinitialized:
    case kErrorStubLibrary:
    case kErrorCallRequiresNewerDriver:
    case kErrorSystemDriverMismatch:
      return UnavailableError(std::move(m));
    case kErrorOutOfMemory:
      return ResourceExhaustedError(std::move(m));
    case kErrorInvalidValue:
    case kErrorInvalidHandle:
      return Status(bad_input, std::move(m));
    case kErrorNotSupported:
      return UnimplementedError(std::move(m));
    default:
      return InternalError(std::move(m));
  }
}

}  // namespace exlr8::cudrv
