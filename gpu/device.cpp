#include "gpu/device.h"

#include <cctype>
#include <cstdio>
#include <cstring>

#include "format/units.h"
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
      return UnavailableError(std::string("no CUDA device: cudaGetDeviceCount returned ") +
                              cudaGetErrorName(err));
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
  // Sizes in the one unit system of every output (format/units.h).
  std::snprintf(buf, sizeof buf, "%s, sm_%d%d, %d SMs, %s, L2 %s, driver %d.%d, runtime %d.%d", p.name,
                p.major, p.minor, p.multiProcessorCount, HumanBytes(p.totalGlobalMem).c_str(),
                HumanBytes(static_cast<std::uint64_t>(p.l2CacheSize)).c_str(), driver / 1000,
                (driver % 1000) / 10, runtime / 1000, (runtime % 1000) / 10);
  return std::string(buf);
}

std::string FormatCudaUuid(std::span<const unsigned char, 16> bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "GPU-";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    out += kHex[bytes[i] >> 4];
    out += kHex[bytes[i] & 15];
  }
  return out;
}

Result<CudaDeviceIdentity> GetCudaDeviceIdentity(int device) {
  EXLR8_RETURN_IF_ERROR(RequireCudaDevice());
  int count = 0;
  EXLR8_CUDA_TRY(cudaGetDeviceCount(&count));
  if (device < 0 || device >= count)
    return InvalidArgumentError("CUDA device " + std::to_string(device) + " out of range (" +
                                std::to_string(count) + " devices)");
  cudaDeviceProp p{};
  EXLR8_CUDA_TRY(cudaGetDeviceProperties(&p, device));
  unsigned char uuid[16];
  std::memcpy(uuid, p.uuid.bytes, 16);
  char bus[32] = {};
  EXLR8_CUDA_TRY(cudaDeviceGetPCIBusId(bus, sizeof bus, device));
  return CudaDeviceIdentity{FormatCudaUuid(uuid), bus};
}

Result<int> FindCudaDeviceByUuid(std::string_view uuid) {
  // GPU- then 8-4-4-4-12 hex digits.
  bool well_formed = uuid.size() == 40 && uuid.substr(0, 4) == "GPU-";
  for (std::size_t i = 4; well_formed && i < uuid.size(); ++i) {
    const bool dash = i == 12 || i == 17 || i == 22 || i == 27;
    well_formed = dash ? uuid[i] == '-' : std::isxdigit(static_cast<unsigned char>(uuid[i])) != 0;
  }
  if (!well_formed)
    return InvalidArgumentError("device UUID '" + std::string(uuid) +
                                "' is not of the form GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx");
  EXLR8_RETURN_IF_ERROR(RequireCudaDevice());
  int count = 0;
  EXLR8_CUDA_TRY(cudaGetDeviceCount(&count));
  std::string seen;
  for (int d = 0; d < count; ++d) {
    EXLR8_ASSIGN_OR_RETURN(CudaDeviceIdentity id, GetCudaDeviceIdentity(d));
    bool same = true;
    for (std::size_t i = 0; i < uuid.size(); ++i)
      same = same && std::tolower(static_cast<unsigned char>(uuid[i])) ==
                         std::tolower(static_cast<unsigned char>(id.uuid[i]));
    if (same) return d;
    seen += (seen.empty() ? "" : ", ") + std::to_string(d) + ": " + id.uuid;
  }
  return NotFoundError("no visible CUDA device has UUID " + std::string(uuid) + " (visible: " + seen + ")");
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
