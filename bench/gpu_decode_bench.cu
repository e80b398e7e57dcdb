// GPU trellis tile decode throughput and host -> device upload bandwidth.
//
// Data: a pool of pseudo-random bytes (a few GiB) cut into GLM-5.3-sized
// expert halves (hidden 6144: 786,432 weights, 3072 tiles, 98,304*K bytes) at
// K = 2, 3, 4, staged to the GPU with gpu/upload.h.
//
// Rows, per K:
//   baseline: CPU reference DecodeHalfTiles, one thread, on the first halves of
//             the same data (measured in this run; the named baseline)
//   GPU decode per layout (gate/up, down) x table mode (global-f32,
//             shared-e4m3) x output (fp32, E4M3 bytes): every half decoded,
//             in batches into a bounded output buffer; best of `reps` passes,
//             timed with CUDA events. Columns: Gweights/s, GB/s of input read,
//             GB/s of output written, speed-up over the CPU baseline.
//   upload: UploadHalves through pinned staging (4 host copy threads; at
//             K = 2 also 1 and 8), once from pageable memory, and a plain
//             cudaMemcpyAsync from one pinned buffer (the link's ceiling).
// Before timing, CheckGpuDecode compares a few halves bit for bit with the CPU.
//
// Usage: gpu_decode_bench [GiB_of_halves (default 2)] [reps (default 3)]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "format/trellis.h"
#include "gpu/check.h"
#include "gpu/cuda_check.h"
#include "gpu/decode.cuh"
#include "gpu/device.h"
#include "gpu/device_buffer.h"
#include "gpu/event.h"
#include "gpu/stream.h"
#include "gpu/upload.h"

namespace {

using exlr8::HalfLayout;
using Clock = std::chrono::steady_clock;
constexpr std::uint64_t kHidden = 6144;
constexpr std::uint64_t kHalfWeights = 128 * kHidden;
constexpr std::uint64_t kOutBudgetBytes = std::uint64_t{2} << 30;  // fp32 output per batch

void Die(const exlr8::Status& s, const char* what) {
  std::fprintf(stderr, "gpu_decode_bench: %s: %s\n", what, s.ToString().c_str());
  std::exit(s.code() == exlr8::StatusCode::kUnavailable ? 2 : 1);
}
#define OR_DIE(expr, what)                \
  do {                                    \
    const ::exlr8::Status st_ = (expr);   \
    if (!st_.ok()) Die(st_, what);        \
  } while (0)
template <typename T>
T Take(exlr8::Result<T> r, const char* what) {
  if (!r.ok()) Die(r.status(), what);
  return std::move(r).value();
}

// splitmix64: fast, reproducible filler for GiBs of bytes.
void FillRandom(std::vector<std::byte>& v, std::uint64_t seed) {
  std::uint64_t x = seed;
  const std::size_t words = v.size() / 8;
  for (std::size_t i = 0; i < words; ++i) {
    std::uint64_t z = (x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    std::memcpy(v.data() + 8 * i, &z, 8);
  }
}

const char* LayoutName(HalfLayout l) { return l == HalfLayout::kGateUp ? "gate/up" : "down"; }

}  // namespace

int main(int argc, char** argv) {
  const double gib = argc > 1 ? std::atof(argv[1]) : 2.0;
  const int reps = argc > 2 ? std::max(1, std::atoi(argv[2])) : 3;
  if (!(gib > 0 && gib <= 64)) {
    std::fprintf(stderr, "usage: gpu_decode_bench [GiB_of_halves in (0, 64]] [reps]\n");
    return 1;
  }
  OR_DIE(exlr8::RequireCudaDevice(), "device");
  std::printf("device: %s\n", Take(exlr8::DescribeCudaDevice(0), "describe").c_str());
  exlr8::CudaStream stream = Take(exlr8::CudaStream::Create(), "stream");
  const exlr8::CudaStreamView sv = stream.view();
  const exlr8::DeviceCodebook codebook = Take(exlr8::DeviceCodebook::Upload(sv), "codebook");

  const std::size_t pool_bytes = static_cast<std::size_t>(gib * (1ull << 30));
  std::vector<std::byte> pool(pool_bytes);
  FillRandom(pool, 42);
  std::printf("pool: %.2f GiB of pseudo-random half bytes; half = 128 x %llu weights; reps %d\n\n",
              static_cast<double>(pool_bytes) / (1ull << 30), static_cast<unsigned long long>(kHidden), reps);

  // ---- upload ceiling: one pinned buffer, plain cudaMemcpyAsync ----
  {
    const std::size_t n = std::min<std::size_t>(pool_bytes, std::size_t{1} << 30);
    auto pinned = Take(exlr8::PinnedHostBuffer::Allocate(n), "pinned");
    std::memcpy(pinned.bytes().data(), pool.data(), n);
    auto dev = Take(exlr8::DeviceBuffer::Allocate(n), "device buffer");
    auto e0 = Take(exlr8::CudaEvent::Create(true), "event");
    auto e1 = Take(exlr8::CudaEvent::Create(true), "event");
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
      OR_DIE(e0.Record(sv), "record");
      OR_DIE(dev.CopyFromHostAsync(pinned.bytes(), 0, sv), "h2d");
      OR_DIE(e1.Record(sv), "record");
      OR_DIE(sv.Synchronize(), "sync");
      best = std::min(best, Take(exlr8::CudaEvent::ElapsedSeconds(e0, e1), "elapsed"));
    }
    std::printf("%-58s %8.2f GB/s  (%.2f GiB)\n", "H2D ceiling: cudaMemcpyAsync from one pinned buffer",
                static_cast<double>(n) / best / 1e9, static_cast<double>(n) / (1ull << 30));
    // The host side of pinned staging: memcpy pageable -> pinned.
    for (int threads : {1, 4, 8}) {
      double best_cpu = 1e30;
      for (int r = 0; r < reps; ++r) {
        const auto t0 = Clock::now();
        std::vector<std::thread> ts;
        const std::size_t per = n / threads;
        for (int t = 0; t < threads; ++t)
          ts.emplace_back([&, t] { std::memcpy(pinned.bytes().data() + t * per, pool.data() + t * per, per); });
        for (auto& t : ts) t.join();
        best_cpu = std::min(best_cpu, std::chrono::duration<double>(Clock::now() - t0).count());
      }
      char name[80];
      std::snprintf(name, sizeof name, "host memcpy pageable -> pinned, %d thread%s", threads, threads == 1 ? "" : "s");
      std::printf("%-58s %8.2f GB/s\n", name, static_cast<double>(n) / best_cpu / 1e9);
    }
  }

  std::printf("\n%-44s %2s %10s %10s %10s %9s\n", "row", "K", "Gweights/s", "in GB/s", "out GB/s", "vs CPU");
  for (int k : {2, 3, 4}) {
    const std::size_t half_bytes = 16 * static_cast<std::size_t>(k) * kHidden;
    const std::size_t count = pool_bytes / half_bytes;
    std::vector<std::span<const std::byte>> halves;
    for (std::size_t i = 0; i < count; ++i) halves.emplace_back(pool.data() + i * half_bytes, half_bytes);

    // upload (pinned staging for every K; pageable once, at K = 2)
    exlr8::UploadStats up;
    const exlr8::StagedHalves staged = Take(exlr8::UploadHalves(halves, 1, sv, {}, &up), "upload");
    std::printf("%-44s %2d %10s %10.2f %10s %9s  (%.2f GiB, %zu halves)\n",
                "upload: pinned staging 2 x 32 MiB, 4 threads", k, "-", up.GBPerSecond(), "-", "-",
                static_cast<double>(up.bytes) / (1ull << 30), count);
    if (k == 2) {
      for (int threads : {1, 8}) {
        exlr8::UploadOptions o;
        o.copy_threads = threads;
        exlr8::UploadStats st;
        { auto tmp = Take(exlr8::UploadHalves(halves, 1, sv, o, &st), "upload threads"); }
        char name[64];
        std::snprintf(name, sizeof name, "upload: pinned staging 2 x 32 MiB, %d thread%s", threads,
                      threads == 1 ? "" : "s");
        std::printf("%-44s %2d %10s %10.2f %10s %9s\n", name, k, "-", st.GBPerSecond(), "-", "-");
      }
      exlr8::UploadOptions pageable;
      pageable.pinned_staging = false;
      exlr8::UploadStats upp;
      { auto tmp = Take(exlr8::UploadHalves(halves, 1, sv, pageable, &upp), "upload pageable"); }
      std::printf("%-44s %2d %10s %10.2f %10s %9s\n", "upload: pageable, cudaMemcpyAsync per half", k, "-",
                  upp.GBPerSecond(), "-", "-");
    }

    // correctness on a few halves before timing
    for (HalfLayout layout : {HalfLayout::kGateUp, HalfLayout::kDown}) {
      const std::vector<std::span<const std::byte>> few(halves.begin(), halves.begin() + std::min<std::size_t>(4, count));
      const auto rep = Take(exlr8::CheckGpuDecode(few, k, layout, kHidden, sv), "check");
      if (!rep.ok()) {
        std::fprintf(stderr, "gpu_decode_bench: GPU decode differs from CPU: %s\n", rep.ToString().c_str());
        return 1;
      }
    }

    // CPU baseline: same data, first halves, one thread, >= 0.5 s
    std::vector<float> cpu_out(kHalfWeights);
    double cpu_rate[2] = {0, 0};
    for (HalfLayout layout : {HalfLayout::kGateUp, HalfLayout::kDown}) {
      std::size_t done = 0;
      const auto t0 = Clock::now();
      double el = 0;
      do {
        OR_DIE(exlr8::DecodeHalfTiles(halves[done % count], k, layout, kHidden, cpu_out), "cpu decode");
        ++done;
        el = std::chrono::duration<double>(Clock::now() - t0).count();
      } while (el < 0.5);
      cpu_rate[layout == HalfLayout::kDown] = static_cast<double>(done) * kHalfWeights / el;
      char name[64];
      std::snprintf(name, sizeof name, "baseline: CPU DecodeHalfTiles 1 thread, %s", LayoutName(layout));
      std::printf("%-44s %2d %10.3f %10.2f %10.2f %9.2f\n", name, k, cpu_rate[layout == HalfLayout::kDown] / 1e9,
                  cpu_rate[layout == HalfLayout::kDown] * k / 8 / 1e9,
                  cpu_rate[layout == HalfLayout::kDown] * 4 / 1e9, 1.0);
    }

    // GPU decode
    const std::uint64_t per_batch = std::max<std::uint64_t>(1, kOutBudgetBytes / (kHalfWeights * sizeof(float)));
    auto out_f32 = Take(exlr8::DeviceBuffer::Allocate(per_batch * kHalfWeights * sizeof(float)), "out f32");
    auto out_e4m3 = Take(exlr8::DeviceBuffer::Allocate(per_batch * kHalfWeights), "out e4m3");
    auto e0 = Take(exlr8::CudaEvent::Create(true), "event");
    auto e1 = Take(exlr8::CudaEvent::Create(true), "event");
    for (HalfLayout layout : {HalfLayout::kGateUp, HalfLayout::kDown}) {
      for (auto mode : {exlr8::DecodeTableMode::kGlobalF32, exlr8::DecodeTableMode::kSharedE4M3}) {
        for (bool bytes_out : {false, true}) {
          double best = 1e30;
          for (int r = 0; r < reps + 1; ++r) {  // first pass warms up
            OR_DIE(e0.Record(sv), "record");
            for (std::uint64_t first = 0; first < count; first += per_batch) {
              const exlr8::HalfBatch batch{staged.device_base(), staged.device_offsets(), first,
                                           std::min<std::uint64_t>(per_batch, count - first), k, layout, kHidden};
              exlr8::DecodeOutputs out;
              if (bytes_out) {
                out.e4m3 = out_e4m3.data_as<std::uint8_t>();
              } else {
                out.f32 = out_f32.data_as<float>();
              }
              OR_DIE(exlr8::LaunchDecodeHalves(batch, out, codebook, mode, sv), "launch");
            }
            OR_DIE(e1.Record(sv), "record");
            OR_DIE(sv.Synchronize(), "sync");
            const double s = Take(exlr8::CudaEvent::ElapsedSeconds(e0, e1), "elapsed");
            if (r > 0) best = std::min(best, s);
          }
          const double rate = static_cast<double>(count) * kHalfWeights / best;
          char name[80];
          std::snprintf(name, sizeof name, "GPU %s %s -> %s", LayoutName(layout), exlr8::DecodeTableModeName(mode),
                        bytes_out ? "e4m3" : "fp32");
          std::printf("%-44s %2d %10.2f %10.2f %10.2f %9.0f\n", name, k, rate / 1e9, rate * k / 8 / 1e9,
                      rate * (bytes_out ? 1 : 4) / 1e9, rate / cpu_rate[layout == HalfLayout::kDown]);
        }
      }
    }
    std::printf("\n");
  }
  return 0;
}
