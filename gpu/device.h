// Device discovery and the current-device guard.
//
// Thread safety: all functions may be called from any thread. The current
// device is per host thread (CUDA semantics); CudaSetDeviceGuard changes it
// for the calling thread only.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "format/status.h"

namespace exlr8 {

// Number of CUDA devices visible to this process. 0 when the runtime reports
// no device or no (sufficient) driver: a build machine with nvcc but no GPU
// is a normal state, not an error.
// Errors: Internal for any other CUDA failure.
Result<int> CudaDeviceCount();

// OK when at least one device is visible; otherwise Unavailable with the
// message "no CUDA device: <why>" (the CUDA error name when there is one).
Status RequireCudaDevice();

// "NVIDIA H200, sm_90, 132 SMs, 139.8 GiB, driver 13.0, runtime 13.0" for
// logs and bench output. Errors: as RequireCudaDevice, Internal otherwise.
Result<std::string> DescribeCudaDevice(int device);

// A device as another process names it: the lease description carries both
// (docs/design/RANK_IMAGE.md), since ordinals depend on CUDA_VISIBLE_DEVICES.
struct CudaDeviceIdentity {
  std::string uuid;        // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", lower-case hex, as nvidia-smi -L
  std::string pci_bus_id;  // "0000:4E:00.0", as cudaDeviceGetPCIBusId gives it
};

// "GPU-" and the 16 bytes as 8-4-4-4-12 lower-case hex digits. Pure.
std::string FormatCudaUuid(std::span<const unsigned char, 16> bytes);

// The identity of `device` (an ordinal of this process). Errors: as
// RequireCudaDevice; InvalidArgument when `device` is out of range.
Result<CudaDeviceIdentity> GetCudaDeviceIdentity(int device);

// The ordinal in this process of the device whose UUID is `uuid` (compared
// case-insensitively). Errors: InvalidArgument for text that is not a
// "GPU-" UUID (checked before CUDA is touched); NotFound when no visible
// device has it (the message lists the visible ones); as RequireCudaDevice.
Result<int> FindCudaDeviceByUuid(std::string_view uuid);

// Makes `device` current for the calling thread and restores the previous
// one on destruction (non-throwing; a failed restore is logged). The guard
// is neither copyable nor movable:
//   CudaSetDeviceGuard guard;
//   EXLR8_RETURN_IF_ERROR(guard.Set(1));
class CudaSetDeviceGuard {
 public:
  CudaSetDeviceGuard() = default;
  CudaSetDeviceGuard(const CudaSetDeviceGuard&) = delete;
  CudaSetDeviceGuard& operator=(const CudaSetDeviceGuard&) = delete;
  ~CudaSetDeviceGuard();

  // Switches to `device`, remembering the device current before the first
  // successful Set(). Errors: InvalidArgument if `device` is out of range;
  // Unavailable / Internal from the runtime.
  Status Set(int device);

 private:
  int previous_ = -1;  // -1: nothing to restore
};

}  // namespace exlr8
