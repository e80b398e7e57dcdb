// Single-core throughput of the Tetra bulk decode (format/tetra/word.h):
// DecodeDiskWords on N random disk words (every 48-bit value is a legal
// word) to natural-order int8 coordinates, against memcpy of the same
// 24 B-per-word output measured in the same run, and the word-by-word
// reference path (WordFromDisk + DecodeCoords) for scale.
//
// Usage: tetra_decode_bench [words] [seconds_per_row]   (defaults 1048576, 0.5)
// The last line is CSV.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "format/tetra/tables.h"
#include "format/tetra/word.h"

namespace {

volatile std::int8_t g_sink;

// Best words per second of `fn` (which handles `words` words) over runs
// filling about `seconds`.
double Measure(double seconds, double words, const std::function<void()>& fn) {
  using Clock = std::chrono::steady_clock;
  fn();  // warm-up: tables, page faults
  double best = 0, total = 0;
  do {
    const auto start = Clock::now();
    fn();
    const double dt = std::chrono::duration<double>(Clock::now() - start).count();
    total += dt;
    if (dt > 0 && words / dt > best) best = words / dt;
  } while (total < seconds);
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const std::size_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1048576;
  const double seconds = argc > 2 ? std::atof(argv[2]) : 0.5;
  if (n == 0) return 2;
  namespace tetra = exlr8::tetra;
  if (!tetra::TablesStatus().ok()) {
    std::fprintf(stderr, "%s\n", tetra::TablesStatus().ToString().c_str());
    return 1;
  }
  const tetra::Tables& t = tetra::BuiltTables();
  std::mt19937_64 rng(28);
  std::vector<std::byte> disk(6 * n);
  for (auto& b : disk) b = static_cast<std::byte>(rng());
  std::vector<std::int8_t> out(24 * n), src(24 * n);
  for (auto& x : src) x = static_cast<std::int8_t>(rng());

  std::printf("Tetra bulk decode, one core, %zu random words (%zu B in, %zu B out)\n", n, disk.size(),
              out.size());
  std::printf("%-48s %12s %10s\n", "row", "Mwords/s", "vs memcpy");
  const double memcpy_rate = Measure(seconds, static_cast<double>(n), [&] {
    std::memcpy(out.data(), src.data(), out.size());
    g_sink = out[n];
  });
  std::printf("%-48s %12.1f %10.2f\n", "baseline: memcpy of the 24 B/word output", memcpy_rate / 1e6, 1.0);
  const double bulk = Measure(seconds, static_cast<double>(n), [&] {
    tetra::DecodeDiskWords(t, disk, out);
    g_sink = out[n];
  });
  std::printf("%-48s %12.1f %10.2f\n", "DecodeDiskWords", bulk / 1e6, bulk / memcpy_rate);
  const double reference = Measure(seconds, static_cast<double>(n), [&] {
    for (std::size_t i = 0; i < n; ++i)
      tetra::DecodeCoords(t, tetra::WordFromDisk(&disk[6 * i]), &out[24 * i]);
    g_sink = out[n];
  });
  std::printf("%-48s %12.1f %10.2f\n", "WordFromDisk + DecodeCoords per word", reference / 1e6,
              reference / memcpy_rate);
  std::printf("csv,words,memcpy_wps,decode_wps,ratio,reference_wps\n");
  std::printf("csv,%zu,%.0f,%.0f,%.3f,%.0f\n", n, memcpy_rate, bulk, bulk / memcpy_rate, reference);
  return 0;
}
