// GPU XXH64 of a staged rank image's regions (gpu/region_hash.h) against a
// device-to-device cudaMemcpy of the same bytes.
//
// Data: N GiB of pseudo-random device memory cut into GLM-5.3-like regions:
// half records of 16*K*6144 + 704 bytes (K = 2, 3, 4: 197,312 / 295,616 /
// 393,920 bytes, 256-byte aligned), and after every 48 halves two 6,144-byte
// sign vectors and one two-segment dense check (4-64 KiB of data plus
// 7-500 bytes of scales at an offset that is 3 mod 8). At 64 GiB that is
// about 230,000 regions, the size of one GLM-5.3 rank.
//
// Rows (best of `reps` passes, timed with CUDA events):
//   baseline: cudaMemcpyAsync device -> device of the same bytes (in <= 4 GiB
//             chunks); GB/s = bytes copied / s (DRAM moves twice that: it
//             reads and writes each byte, the hash only reads)
//   hash:     EnqueueRegionHash over every region, one launch; GB/s = bytes
//             hashed / s; "vs memcpy" = hash GB/s / memcpy GB/s
// Before timing, 64 sampled regions are hashed on the CPU (libxxhash) and
// compared with the GPU's digests; every timed pass must report 0
// mismatches. The last line is CSV (prefix "csv,").
//
// Usage: gpu_hash_bench [GiB (default 16, at most 120)] [reps (default 5)]
// Exit status: 0 ok, 1 failure or wrong digest, 2 no CUDA device.
#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "gpu/cuda_check.h"
#include "gpu/device.h"
#include "gpu/device_buffer.h"
#include "gpu/event.h"
#include "gpu/region_hash.h"
#include "gpu/stream.h"

namespace {

using exlr8::RegionCheck;

void Die(const exlr8::Status& s, const char* what) {
  std::fprintf(stderr, "gpu_hash_bench: %s: %s\n", what, s.ToString().c_str());
  std::exit(s.code() == exlr8::StatusCode::kUnavailable ? 2 : 1);
}
#define OR_DIE(expr, what)              \
  do {                                  \
    const ::exlr8::Status st_ = (expr); \
    if (!st_.ok()) Die(st_, what);      \
  } while (0)
template <typename T>
T Take(exlr8::Result<T> r, const char* what) {
  if (!r.ok()) Die(r.status(), what);
  return std::move(r).value();
}

// splitmix64 of the word index: fills device memory at full speed.
__global__ void FillRandom(std::uint64_t* p, std::uint64_t words, std::uint64_t seed) {
  for (std::uint64_t i = std::uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < words;
       i += std::uint64_t{gridDim.x} * blockDim.x) {
    std::uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    p[i] = z ^ (z >> 31);
  }
}

constexpr std::uint64_t kHidden = 6144;
constexpr std::uint64_t kVectors = 704;  // 128-element slice + 48-element block row, fp32

std::uint64_t AlignUp(std::uint64_t x, std::uint64_t a) { return (x + a - 1) / a * a; }

// The regions' check entries (digests unknown yet) covering at most `bytes`.
std::vector<RegionCheck> Layout(std::uint64_t bytes) {
  std::vector<RegionCheck> out;
  std::mt19937_64 rng(53);
  std::uint64_t at = 0;
  auto add = [&](std::uint64_t len) -> bool {
    if (at + len > bytes) return false;
    RegionCheck c{};
    c.segment_count = 1;
    c.segments[0] = {at, len};
    out.push_back(c);
    at = AlignUp(at + len, 256);
    return true;
  };
  for (std::uint64_t half = 0;; ++half) {
    const std::uint64_t k = 2 + (half / 16) % 3;  // 16 halves of one expert share K
    if (!add(16 * k * kHidden + kVectors)) break;
    if (half % 48 == 47) {
      if (!add(kHidden) || !add(kHidden)) break;
      const std::uint64_t data = 4096 + rng() % (60 * 1024);
      const std::uint64_t scales = 7 + rng() % 494;
      const std::uint64_t scales_at = AlignUp(at + data, 256) + 3;
      if (scales_at + scales > bytes) break;
      RegionCheck c{};
      c.segment_count = 2;
      c.segments[0] = {at, data};
      c.segments[1] = {scales_at, scales};
      out.push_back(c);
      at = AlignUp(scales_at + scales, 256);
    }
  }
  return out;
}

std::uint64_t Bytes(const RegionCheck& c) {
  std::uint64_t n = 0;
  for (std::uint32_t k = 0; k < c.segment_count; ++k) n += c.segments[k].length;
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  const double gib = argc > 1 ? std::atof(argv[1]) : 16.0;
  const int reps = argc > 2 ? std::max(1, std::atoi(argv[2])) : 5;
  if (!(gib > 0 && gib <= 120)) {
    std::fprintf(stderr, "usage: gpu_hash_bench [GiB in (0, 120]] [reps]\n");
    return 1;
  }
  OR_DIE(exlr8::RequireCudaDevice(), "device");
  const std::string device = Take(exlr8::DescribeCudaDevice(0), "describe");
  std::printf("device: %s\n", device.c_str());
  exlr8::CudaStream stream = Take(exlr8::CudaStream::Create(), "stream");
  const exlr8::CudaStreamView sv = stream.view();

  const std::uint64_t pool_bytes = static_cast<std::uint64_t>(gib * (1ull << 30)) / 256 * 256;
  exlr8::DeviceBuffer pool = Take(exlr8::DeviceBuffer::Allocate(pool_bytes), "pool");
  FillRandom<<<4096, 256, 0, sv.value()>>>(pool.data_as<std::uint64_t>(), pool_bytes / 8, 42);
  OR_DIE(exlr8::CudaErrorToStatus(cudaGetLastError(), "FillRandom", __FILE__, __LINE__), "fill");

  std::vector<RegionCheck> checks = Layout(pool_bytes);
  if (checks.empty()) {
    std::fprintf(stderr, "gpu_hash_bench: %.6f GiB holds no region; give at least 0.001\n", gib);
    return 1;
  }
  std::uint64_t hashed = 0, multi = 0, small = 0;
  for (const auto& c : checks) {
    hashed += Bytes(c);
    multi += c.segment_count > 1;
    small += Bytes(c) < 65536 + 512;
  }
  std::printf(
      "image: %.2f GiB of pseudo-random device bytes; %zu regions (%llu small, %llu of two segments), "
      "%.2f GiB hashed; reps %d\n",
      static_cast<double>(pool_bytes) / (1ull << 30), checks.size(), static_cast<unsigned long long>(small),
      static_cast<unsigned long long>(multi), static_cast<double>(hashed) / (1ull << 30), reps);

  // First pass: the GPU's digests (expected 0, so every entry "mismatches").
  auto d_checks = Take(exlr8::DeviceBuffer::Allocate(checks.size() * sizeof(RegionCheck)), "checks");
  auto d_digests = Take(exlr8::DeviceBuffer::Allocate(checks.size() * 8), "digests");
  auto d_summary = Take(exlr8::DeviceBuffer::Allocate(sizeof(exlr8::RegionHashSummary)), "summary");
  auto upload_checks = [&] {
    OR_DIE(d_checks.CopyFromHostAsync(std::as_bytes(std::span(checks)), 0, sv), "upload checks");
  };
  auto enqueue = [&] {
    OR_DIE(exlr8::EnqueueRegionHash(pool.data(), pool.size(), d_checks.data_as<RegionCheck>(), checks.size(),
                                    d_digests.data_as<std::uint64_t>(),
                                    d_summary.data_as<exlr8::RegionHashSummary>(), sv),
           "hash");
  };
  upload_checks();
  enqueue();
  std::vector<std::uint64_t> digests(checks.size());
  OR_DIE(d_digests.CopyToHostAsync(0, std::as_writable_bytes(std::span(digests)), sv), "download digests");
  OR_DIE(sv.Synchronize(), "first pass");

  // Correctness: 64 sampled regions (the first, the last, the multi-segment
  // ones first) against libxxhash on the CPU.
  std::vector<std::size_t> sample{0, checks.size() - 1};
  for (std::size_t i = 0; i < checks.size() && sample.size() < 16; ++i)
    if (checks[i].segment_count > 1) sample.push_back(i);
  std::mt19937_64 rng(7);
  while (sample.size() < 64) sample.push_back(rng() % checks.size());
  for (std::size_t i : sample) {
    std::vector<std::byte> cat;
    for (std::uint32_t k = 0; k < checks[i].segment_count; ++k) {
      std::vector<std::byte> part(checks[i].segments[k].length);
      OR_DIE(exlr8::CudaErrorToStatus(
                 cudaMemcpy(part.data(), pool.data_as<std::byte>() + checks[i].segments[k].offset,
                            part.size(), cudaMemcpyDeviceToHost),
                 "cudaMemcpy", __FILE__, __LINE__),
             "sample download");
      cat.insert(cat.end(), part.begin(), part.end());
    }
    const std::uint64_t cpu = XXH64(cat.data(), cat.size(), 0);
    if (cpu != digests[i]) {
      std::fprintf(stderr, "gpu_hash_bench: region %zu (%llu bytes): GPU XXH64 %016llx, CPU %016llx\n", i,
                   static_cast<unsigned long long>(cat.size()), static_cast<unsigned long long>(digests[i]),
                   static_cast<unsigned long long>(cpu));
      return 1;
    }
  }
  std::printf("check: %zu sampled regions agree with libxxhash on the CPU\n\n", sample.size());
  for (std::size_t i = 0; i < checks.size(); ++i) checks[i].digest = digests[i];
  upload_checks();

  auto e0 = Take(exlr8::CudaEvent::Create(true), "event");
  auto e1 = Take(exlr8::CudaEvent::Create(true), "event");
  auto time_best = [&](auto&& body) {
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
      OR_DIE(e0.Record(sv), "record");
      body();
      OR_DIE(e1.Record(sv), "record");
      OR_DIE(sv.Synchronize(), "sync");
      best = std::min(best, Take(exlr8::CudaEvent::ElapsedSeconds(e0, e1), "elapsed"));
    }
    return best;
  };

  // Baseline: device -> device copy of the same bytes.
  const std::uint64_t chunk = std::min<std::uint64_t>(pool_bytes, std::uint64_t{4} << 30);
  auto dst = Take(exlr8::DeviceBuffer::Allocate(chunk), "copy destination");
  const double copy_s = time_best([&] {
    for (std::uint64_t at = 0; at < hashed; at += chunk) {
      const std::uint64_t n = std::min(chunk, hashed - at);
      OR_DIE(exlr8::CudaErrorToStatus(cudaMemcpyAsync(dst.data(), pool.data_as<std::byte>() + at, n,
                                                      cudaMemcpyDeviceToDevice, sv.value()),
                                      "cudaMemcpyAsync", __FILE__, __LINE__),
             "copy");
    }
  });
  const double copy_gbs = static_cast<double>(hashed) / copy_s / 1e9;
  std::printf("%-56s %9.2f GB/s  %8.2f ms\n", "baseline: cudaMemcpy device -> device, same bytes", copy_gbs,
              copy_s * 1e3);

  const double hash_s = time_best(enqueue);
  exlr8::RegionHashSummary summary{};
  OR_DIE(d_summary.CopyToHostAsync(0, std::as_writable_bytes(std::span(&summary, 1)), sv), "summary");
  OR_DIE(sv.Synchronize(), "summary");
  const double hash_gbs = static_cast<double>(hashed) / hash_s / 1e9;
  std::printf("%-56s %9.2f GB/s  %8.2f ms  %.2fx memcpy  %.0f regions/s\n",
              "hash: EnqueueRegionHash, one launch", hash_gbs, hash_s * 1e3, hash_gbs / copy_gbs,
              static_cast<double>(checks.size()) / hash_s);
  std::printf("mismatches in the timed passes: %llu (must be 0)\n\n",
              static_cast<unsigned long long>(summary.mismatches));
  std::printf("csv,bench,device,regions,bytes_hashed,hash_GBps,memcpy_d2d_GBps,hash_vs_memcpy,mismatches\n");
  std::printf("csv,gpu_hash_bench,\"%s\",%zu,%llu,%.2f,%.2f,%.3f,%llu\n", device.c_str(), checks.size(),
              static_cast<unsigned long long>(hashed), hash_gbs, copy_gbs, hash_gbs / copy_gbs,
              static_cast<unsigned long long>(summary.mismatches));
  return summary.mismatches == 0 ? 0 : 1;
}
