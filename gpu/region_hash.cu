#include <cstring>
#include <string>

#include "gpu/cuda_check.h"
#include "gpu/device_buffer.h"
#include "gpu/region_hash.h"

namespace exlr8 {

namespace {

constexpr int kThreadsPerEntry = 4;  // one per XXH64 accumulator
constexpr int kBlockThreads = 256;
constexpr std::size_t kMaxEntries = std::size_t{1} << 36;

// The entry's stream length, or false when its segments are unusable.
__device__ bool CheckEntry(const RegionCheck& c, std::uint64_t base_bytes, std::uint64_t* total) {
  if (c.segment_count < 1 || c.segment_count > xxh64::kMaxSegments) return false;
  std::uint64_t sum = 0;
  for (std::uint32_t k = 0; k < c.segment_count; ++k) {
    const xxh64::HashSegment s = c.segments[k];
    if (s.offset > base_bytes || s.length > base_bytes - s.offset) return false;
    sum += s.length;  // each <= base_bytes < 2^62: no overflow
  }
  *total = sum;
  return true;
}

__global__ void ResetSummary(RegionHashSummary* summary) {
  *summary = RegionHashSummary{0, RegionHashSummary::kNone, 0, RegionHashSummary::kNone};
}

// Thread t hashes lane t % 4 of entry t / 4; lane 0 merges after a shuffle.
// Every thread of the warp reaches the shuffles (no early return).
__global__ void __launch_bounds__(kBlockThreads)
    HashRegionsKernel(const std::uint8_t* __restrict__ base, std::uint64_t base_bytes,
                      const RegionCheck* __restrict__ checks, std::uint64_t count, std::uint64_t* digests,
                      RegionHashSummary* summary) {
  const std::uint64_t t = std::uint64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const std::uint64_t entry = t / kThreadsPerEntry;
  const int lane = static_cast<int>(t % kThreadsPerEntry);
  const bool active = entry < count;
  // The entry stays in global memory (cached): a local copy indexed by
  // segment number would live in the stack frame.
  const RegionCheck& c = checks[active ? entry : 0];
  std::uint64_t total = 0;
  const bool valid = active && CheckEntry(c, base_bytes, &total);
  const int n = valid ? static_cast<int>(c.segment_count) : 0;
  const std::uint64_t mine = valid ? xxh64::Xxh64Lane(base, c.segments, n, total, lane) : 0;
  std::uint64_t v[4];
  for (int i = 0; i < 4; ++i) v[i] = __shfl_sync(0xffffffffu, mine, i, kThreadsPerEntry);
  if (!active || lane != 0) return;
  const std::uint64_t digest = valid ? xxh64::Xxh64Finish(v, base, c.segments, n, total) : 0;
  if (digests != nullptr) digests[entry] = digest;
  if (!valid) {
    atomicAdd(reinterpret_cast<unsigned long long*>(&summary->invalid), 1ull);
    atomicMin(reinterpret_cast<unsigned long long*>(&summary->first_invalid), entry);
  }
  if (!valid || digest != c.digest) {
    atomicAdd(reinterpret_cast<unsigned long long*>(&summary->mismatches), 1ull);
    atomicMin(reinterpret_cast<unsigned long long*>(&summary->first_mismatch), entry);
  }
}

}  // namespace

Status EnqueueRegionHash(const void* device_base, std::size_t base_bytes, const RegionCheck* device_checks,
                         std::size_t count, std::uint64_t* device_digests, RegionHashSummary* device_summary,
                         CudaStreamView stream) {
  if (device_summary == nullptr) return InvalidArgumentError("EnqueueRegionHash: null summary pointer");
  if (count > kMaxEntries)
    return InvalidArgumentError("EnqueueRegionHash: " + std::to_string(count) + " entries, at most 2^36");
  if (count > 0 && device_checks == nullptr)
    return InvalidArgumentError("EnqueueRegionHash: null checks pointer");
  if (base_bytes > 0 && device_base == nullptr)
    return InvalidArgumentError("EnqueueRegionHash: null base pointer");
  if (reinterpret_cast<std::uintptr_t>(device_base) % 8 != 0)
    return InvalidArgumentError("EnqueueRegionHash: base pointer is not 8-byte aligned");
  ResetSummary<<<1, 1, 0, stream.value()>>>(device_summary);
  EXLR8_CUDA_TRY(cudaGetLastError());
  if (count == 0) return Status::Ok();
  const std::uint64_t threads = std::uint64_t{count} * kThreadsPerEntry;
  const auto blocks = static_cast<unsigned>((threads + kBlockThreads - 1) / kBlockThreads);
  HashRegionsKernel<<<blocks, kBlockThreads, 0, stream.value()>>>(
      static_cast<const std::uint8_t*>(device_base), base_bytes, device_checks, count, device_digests,
      device_summary);
  EXLR8_CUDA_TRY(cudaGetLastError());
  return Status::Ok();
}

Result<RegionHashReport> HashRegions(const void* device_base, std::size_t base_bytes,
                                     std::span<const RegionCheck> checks, CudaStreamView stream) {
  const std::size_t n = checks.size();
  EXLR8_ASSIGN_OR_RETURN(DeviceBuffer d_checks, DeviceBuffer::Allocate(n * sizeof(RegionCheck)));
  EXLR8_ASSIGN_OR_RETURN(DeviceBuffer d_digests, DeviceBuffer::Allocate(n * sizeof(std::uint64_t)));
  EXLR8_ASSIGN_OR_RETURN(DeviceBuffer d_summary, DeviceBuffer::Allocate(sizeof(RegionHashSummary)));
  EXLR8_RETURN_IF_ERROR(d_checks.CopyFromHostAsync(std::as_bytes(checks), 0, stream));
  EXLR8_RETURN_IF_ERROR(EnqueueRegionHash(device_base, base_bytes, d_checks.data_as<RegionCheck>(), n,
                                          d_digests.data_as<std::uint64_t>(),
                                          d_summary.data_as<RegionHashSummary>(), stream));
  RegionHashReport report;
  report.digests.resize(n);
  EXLR8_RETURN_IF_ERROR(
      d_digests.CopyToHostAsync(0, std::as_writable_bytes(std::span(report.digests)), stream));
  EXLR8_RETURN_IF_ERROR(
      d_summary.CopyToHostAsync(0, std::as_writable_bytes(std::span(&report.summary, 1)), stream));
  EXLR8_RETURN_IF_ERROR(stream.Synchronize());
  return report;
}

}  // namespace exlr8
