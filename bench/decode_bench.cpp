// Single-core throughput of the CPU reference decoder on a GLM-5.3-sized
// expert half (hidden 6144: 786,432 weights, 3072 tiles), at K = 2, 3, 4.
//
// Rows: tile decode alone (DecodeHalfTiles, gate/up and down placement),
// full reconstruction (decode + ReconstructHalf), and two baselines measured
// in the same run: memcpy of the same 3 MiB fp32 output, and a naive decoder
// that extracts every bit separately (spec 7 read literally).
//
// Usage: decode_bench [seconds_per_row]   (default 0.5)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "format/dtype.h"
#include "format/reconstruct.h"
#include "format/trellis.h"

namespace {

using exlr8::HalfLayout;
constexpr std::uint64_t kHidden = 6144;
constexpr double kWeights = 128.0 * kHidden;

volatile float g_sink;

// Runs `fn` repeatedly for about `seconds`; returns weights per second.
double Measure(double seconds, const std::function<void()>& fn) {
  using Clock = std::chrono::steady_clock;
  fn();  // warm-up (codebook, caches)
  std::uint64_t iters = 0;
  const auto start = Clock::now();
  double elapsed = 0;
  do {
    fn();
    ++iters;
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  } while (elapsed < seconds);
  return iters * kWeights / elapsed;
}

// Spec 7 literally: one bit at a time, then the state window, then 7.6.
void NaiveDecodeHalf(const std::byte* half, int k, float* out) {
  const float* cb = exlr8::CodebookF32();
  const std::size_t tiles = kHidden / 2, tile_bytes = 32 * k;
  std::uint32_t v[256];
  for (std::size_t n = 0; n < tiles; ++n) {
    const std::byte* t = half + n * tile_bytes;
    auto bit = [&](int pos) {  // u32 LE words, bit 31 first
      const int word = pos / 32, b = 31 - pos % 32;
      return (exlr8::LoadLE32(t + 4 * word) >> b) & 1u;
    };
    for (int i = 0; i < 256; ++i) {
      std::uint32_t x = 0;
      for (int b = 0; b < k; ++b) x = x * 2 + bit(i * k + b);
      v[i] = x;
    }
    float* dst = out + (n / 8) * 16 * 128 + (n % 8) * 16;
    for (int i = 0; i < 256; ++i) {
      std::uint32_t s = 0;
      for (int j = 0; j * k < 16; ++j) s |= v[(i - j + 256) % 256] << (j * k);
      const int pos = exlr8::TilePositionOfStreamIndex(i);
      dst[(pos / 16) * 128 + pos % 16] = cb[s & 0xFFFF];
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? std::atof(argv[1]) : 0.5;
  std::mt19937_64 rng(42);
  std::vector<float> out(128 * kHidden), src(128 * kHidden);
  for (auto& x : src) x = static_cast<float>(rng() % 1000) / 100.0f;
  std::vector<float> u_gate(kHidden, 0.5f), v_gate(128, 2.0f), u_down(128, 0.5f), v_down(kHidden, 2.0f);
  (void)exlr8::CodebookF32();

  std::printf("EXLR8 CPU reference decode, one core, half = 128 x %llu = %.0f weights\n",
              static_cast<unsigned long long>(kHidden), kWeights);
  std::printf("%-44s %4s %12s %10s\n", "row", "K", "Mweights/s", "vs memcpy");
  const double memcpy_rate = Measure(seconds, [&] {
    std::memcpy(out.data(), src.data(), out.size() * sizeof(float));
    g_sink = out[12345];
  });
  std::printf("%-44s %4s %12.1f %10.2f\n", "baseline: memcpy of the 3 MiB fp32 output", "-", memcpy_rate / 1e6, 1.0);

  for (int k : {2, 3, 4}) {
    std::vector<std::byte> half(16 * k * kHidden);
    for (auto& b : half) b = static_cast<std::byte>(rng());
    auto row = [&](const char* name, double rate) {
      std::printf("%-44s %4d %12.1f %10.2f\n", name, k, rate / 1e6, rate / memcpy_rate);
    };
    const double naive = Measure(seconds, [&] {
      NaiveDecodeHalf(half.data(), k, out.data());
      g_sink = out[7];
    });
    row("baseline: naive per-bit decode (gate/up)", naive);
    const double tiles_gu = Measure(seconds, [&] {
      if (!exlr8::DecodeHalfTiles(half, k, HalfLayout::kGateUp, kHidden, out).ok()) std::abort();
      g_sink = out[7];
    });
    row("tile decode, gate/up placement", tiles_gu);
    const double tiles_dn = Measure(seconds, [&] {
      if (!exlr8::DecodeHalfTiles(half, k, HalfLayout::kDown, kHidden, out).ok()) std::abort();
      g_sink = out[7];
    });
    row("tile decode, down placement", tiles_dn);
    const double full_gu = Measure(seconds, [&] {
      if (!exlr8::DecodeHalfTiles(half, k, HalfLayout::kGateUp, kHidden, out).ok()) std::abort();
      if (!exlr8::ReconstructHalf(HalfLayout::kGateUp, kHidden, out, u_gate, v_gate).ok()) std::abort();
      g_sink = out[7];
    });
    row("decode + reconstruct, gate/up half", full_gu);
    const double full_dn = Measure(seconds, [&] {
      if (!exlr8::DecodeHalfTiles(half, k, HalfLayout::kDown, kHidden, out).ok()) std::abort();
      if (!exlr8::ReconstructHalf(HalfLayout::kDown, kHidden, out, u_down, v_down).ok()) std::abort();
      g_sink = out[7];
    });
    row("decode + reconstruct, down half", full_dn);
    std::printf("%-44s %4d %11.1fx\n", "  tile decode speed-up over naive (gate/up)", k, tiles_gu / naive);
  }
  return 0;
}
