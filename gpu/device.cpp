#include "gpu/device.h"

#include <cstdio>

#include "gpu/cuda_check.h"

namespace exlr8 {

namespace {

bool MeansNoDevice(cudaError_t err) {
  return err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver || err == cudaErrorStubLibrary ||
         err == cudaErrorDevicesUnavailable || err == cudaErrorSystemNotReady;
}

}  // namespace

Result<int> CudaDeviceCount() {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (MeansNoDevice(err)) {
    (void)cudaGetLastError();  // not sticky, but leave nothing behind for later checks
    return 0;
  }
  EXLR8_CUDA_TRY(err);
  return n;
}

Status RequireCudaDevice() {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    if (MeansNoDevice(err))
      return UnavailableError(std::string("no CUDA device: cudaGetDeviceCount returned ") + cudaGetErrorName(err));
    return CudaErrorToStatus(err, "cudaGetDeviceCount(&n)", __FILE__, __LINE__);
  }
  if (n == 0) return UnavailableError("no CUDA device: cudaGetDeviceCount reports 0 devices");
  return Status::Ok();
}

Result<std::string> DescribeCudaDevice(int device) {
  EXLR8_RETURN_IF_ERROR(RequireCudaDevice());
  cudaDeviceProp p{};
  EXLR8_CUDA_TRY(cudaGetDeviceProperties(&p, device));
  int driver = 0, runtime = 0;
  EXLR8_CUDA_TRY(cudaDriverGetVersion(&driver));
  EXLR8_CUDA_TRY(cudaRuntimeGetVersion(&runtime));
  char buf[512];
  std::snprintf(buf, sizeof buf, "%s, sm_%d%d, %d SMs, %.1f GiB, L2 %d MiB, driver %d.%d, runtime %d.%d", p.name,
                p.major, p.minor, p.multiProcessorCount, static_cast<double>(p.totalGlobalMem) / (1ull << 30),
                p.l2CacheSize >> 20, driver / 1000, (driver % 1000) / 10, runtime / 1000, (runtime % 1000) / 10);
  return std::string(buf);
}

Status CudaSetDeviceGuard::Set(int device) {
  int count = 0;
  EXLR8_CUDA_TRY(cudaGetDeviceCount(&count));
  if (device < 0 || device >= count)
    return InvalidArgumentError("CUDA device " + std::to_string(device) + " out of range (" +
                                std::to_string(count) + " devices)");
  int current = 0;
  EXLR8_CUDA_TRY(cudaGetDevice(&current));
  if (current != device) EXLR8_CUDA_TRY(cudaSetDevice(device));
  if (previous_ < 0) previous_ = current;
  return Status::Ok();
}

CudaSetDeviceGuard::~CudaSetDeviceGuard() {
  if (previous_ >= 0) EXLR8_ASSERT_CUDA_SUCCESS(cudaSetDevice(previous_));
}

}  // namespace exlr8
