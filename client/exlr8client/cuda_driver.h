// The CUDA driver API as libexlr8client uses it for device leases: the few
// types, values and entry points it needs, declared here with the ABI of
// cuda.h (CUDA 12 and 13; the versioned entry points the driver exports,
// e.g. cuMemcpyDtoH_v2), so that the library builds without the CUDA
// Toolkit and links no CUDA library. The driver (libcuda.so.1) is loaded
// with dlopen at the first device open and kept for the life of the
// process. tests/gpu/exlr8client_device_test.cpp checks every value and
// size here against cuda.h where the Toolkit is.
//
// Private to the library (not installed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "format/status.h"

namespace exlr8::cudrv {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = struct CUctx_st*;
using CUmemGenericAllocationHandle = unsigned long long;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUstream = struct CUstream_st*;
struct CUuuid {
  char bytes[16];
};
struct CUipcMemHandle {
  char reserved[64];
};
struct CUmemLocation {
  int type;  // CUmemLocationType
  int id;
};
struct CUmemAccessDesc {
  CUmemLocation location;
  int flags;  // CUmemAccess_flags
};

inline constexpr CUresult kSuccess = 0;                        // CUDA_SUCCESS
inline constexpr CUresult kErrorInvalidValue = 1;              // CUDA_ERROR_INVALID_VALUE
inline constexpr CUresult kErrorOutOfMemory = 2;               // CUDA_ERROR_OUT_OF_MEMORY
inline constexpr CUresult kErrorNotInitialized = 3;            // CUDA_ERROR_NOT_INITIALIZED
inline constexpr CUresult kErrorDeinitialized = 4;             // CUDA_ERROR_DEINITIALIZED
inline constexpr CUresult kErrorStubLibrary = 34;              // CUDA_ERROR_STUB_LIBRARY
inline constexpr CUresult kErrorCallRequiresNewerDriver = 36;  // CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER
inline constexpr CUresult kErrorNoDevice = 100;                // CUDA_ERROR_NO_DEVICE
inline constexpr CUresult kErrorInvalidHandle = 400;           // CUDA_ERROR_INVALID_HANDLE
inline constexpr CUresult kErrorNotSupported = 801;            // CUDA_ERROR_NOT_SUPPORTED
inline constexpr CUresult kErrorSystemDriverMismatch = 803;    // CUDA_ERROR_SYSTEM_DRIVER_MISMATCH

inline constexpr int kMemHandleTypePosixFileDescriptor = 1;  // CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
inline constexpr int kMemLocationTypeDevice = 1;             // CU_MEM_LOCATION_TYPE_DEVICE
inline constexpr int kMemAccessFlagsProtRead = 1;            // CU_MEM_ACCESS_FLAGS_PROT_READ
inline constexpr unsigned kIpcMemLazyEnablePeerAccess = 1;   // CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS
inline constexpr std::size_t kIpcHandleSize = 64;            // CU_IPC_HANDLE_SIZE
inline constexpr int kFuncAttributeMaxDynamicSharedSizeBytes =
    8;  // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES

// The entry points, each looked up by its exported (versioned) name.
struct Driver {
  CUresult (*GetErrorName)(CUresult, const char**) = nullptr;
  CUresult (*GetErrorString)(CUresult, const char**) = nullptr;
  CUresult (*Init)(unsigned) = nullptr;
  CUresult (*DeviceGetCount)(int*) = nullptr;
  CUresult (*DeviceGet)(CUdevice*, int) = nullptr;
  CUresult (*DeviceGetUuid)(CUuuid*, CUdevice) = nullptr;  // cuDeviceGetUuid_v2 (MIG aware)
  CUresult (*DeviceGetPCIBusId)(char*, int, CUdevice) = nullptr;
  CUresult (*DevicePrimaryCtxRetain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*DevicePrimaryCtxRelease)(CUdevice) = nullptr;  // _v2
  CUresult (*CtxPushCurrent)(CUcontext) = nullptr;          // _v2
  CUresult (*CtxPopCurrent)(CUcontext*) = nullptr;          // _v2
  CUresult (*CtxSynchronize)() = nullptr;
  CUresult (*MemImportFromShareableHandle)(CUmemGenericAllocationHandle*, void*, int) = nullptr;
  CUresult (*MemAddressReserve)(CUdeviceptr*, std::size_t, std::size_t, CUdeviceptr,
                                unsigned long long) = nullptr;
  CUresult (*MemMap)(CUdeviceptr, std::size_t, std::size_t, CUmemGenericAllocationHandle,
                     unsigned long long) = nullptr;
  CUresult (*MemSetAccess)(CUdeviceptr, std::size_t, const CUmemAccessDesc*, std::size_t) = nullptr;
  CUresult (*MemUnmap)(CUdeviceptr, std::size_t) = nullptr;
  CUresult (*MemAddressFree)(CUdeviceptr, std::size_t) = nullptr;
  CUresult (*MemRelease)(CUmemGenericAllocationHandle) = nullptr;
  CUresult (*IpcOpenMemHandle)(CUdeviceptr*, CUipcMemHandle, unsigned) = nullptr;  // _v2
  CUresult (*IpcCloseMemHandle)(CUdeviceptr) = nullptr;
  CUresult (*MemGetAddressRange)(CUdeviceptr*, std::size_t*, CUdeviceptr) = nullptr;  // _v2
  CUresult (*MemcpyDtoH)(void*, CUdeviceptr, std::size_t) = nullptr;                  // _v2
  // The library's embedded kernels (exlr8_lease_half_weights).
  CUresult (*ModuleLoadData)(CUmodule*, const void*) = nullptr;
  CUresult (*ModuleGetFunction)(CUfunction*, CUmodule, const char*) = nullptr;
  CUresult (*ModuleUnload)(CUmodule) = nullptr;
  CUresult (*FuncSetAttribute)(CUfunction, int, int) = nullptr;
  CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                           CUstream, void**, void**) = nullptr;
};

// Makes `ctx` current on the calling thread for the scope, then restores
// the thread's previous context (cuCtxPushCurrent / cuCtxPopCurrent).
class ContextScope {
 public:
  ContextScope(const Driver& drv, CUcontext ctx) : drv_(drv) { result_ = drv.CtxPushCurrent(ctx); }
  ~ContextScope() {
    if (result_ != kSuccess) return;
    CUcontext popped = nullptr;
    (void)drv_.CtxPopCurrent(&popped);
  }
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;
  Status status() const;

 private:
  const Driver& drv_;
  CUresult result_ = kSuccess;
};

// The environment variable that names another driver library to load
// instead of libcuda.so.1 (a path or a soname), for tests: the no-driver
// and stub-driver paths on any machine. Read at each load attempt until
// one succeeds.
inline constexpr const char* kDriverEnv = "EXLR8CLIENT_CUDA_DRIVER";

// The driver, loaded (once, any thread; kept until the process exits) and
// every entry point found. Unavailable "the CUDA driver (libcuda.so.1)
// could not be loaded: <dlerror>" when dlopen fails, "... has no entry
// point cuMemMap_...: <dlerror>" (a driver older than CUDA 11.0's) when
// one is missing; a failed load is tried again on the next call. Does not
// call cuInit.
Result<const Driver*> LoadDriver();

// "CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected)", or
// "CUresult N" when the driver has no name for it.
std::string ErrorText(const Driver& drv, CUresult r);

// The Status of a failed call `what` (OK for kSuccess): Unavailable for
// the driver's not-ready answers (no device, not initialized, stub library,
// a driver too old for the call), ResourceExhausted for out of memory, `bad_input`
// for invalid value / handle (the holder's data is the likely cause),
// Unimplemented for not supported, Internal otherwise. The message is
// "<what> failed: <ErrorText>".
Status CallStatus(const Driver& drv, CUresult r, const std::string& what,
                  StatusCode bad_input = StatusCode::kInvalidArgument);

}  // namespace exlr8::cudrv
