// Fuzz target for the Tetra bulk decode (format/tetra/word.h). The input is
// a code stream as an LVQ5 record carries it: 6-byte disk words, any bytes
// (every 48-bit value is a legal word; a trailing partial word is cut off).
//
// Invariants: no crash or sanitizer report; DecodeDiskWords (SIMD where the
// CPU has it) equals its portable path and WordFromDisk + DecodeCoords word
// by word; every point has one parity, |y_j| <= 10, sum y^2 = 16m with
// m <= 26; the gain bit does not move it; WordToDisk gives the bytes back.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "format/tetra/internal.h"
#include "format/tetra/tables.h"
#include "format/tetra/word.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace tetra = exlr8::tetra;
  EXLR8_FUZZ_CHECK(tetra::TablesStatus().ok());
  const tetra::Tables& t = tetra::BuiltTables();
  const std::size_t n = size / 6;
  const std::span<const std::byte> disk(reinterpret_cast<const std::byte*>(data), 6 * n);
  std::vector<std::int8_t> out(24 * n), portable(24 * n);
  tetra::DecodeDiskWords(t, disk, out);
  tetra::internal::DecodeDiskWordsPortable(t, disk, portable);
  EXLR8_FUZZ_CHECK(out == portable);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t w = tetra::WordFromDisk(disk.data() + 6 * i);
    std::byte back[6];
    tetra::WordToDisk(w, back);
    EXLR8_FUZZ_CHECK(std::memcmp(back, disk.data() + 6 * i, 6) == 0);
    std::int8_t y[24], flipped[24];
    tetra::DecodeCoords(t, w, y);
    tetra::DecodeCoords(t, w ^ tetra::kGainBit, flipped);
    EXLR8_FUZZ_CHECK(std::memcmp(y, out.data() + 24 * i, 24) == 0);
    EXLR8_FUZZ_CHECK(std::memcmp(y, flipped, 24) == 0);
    int sum = 0;
    for (int j = 0; j < 24; ++j) {
      EXLR8_FUZZ_CHECK(y[j] >= -10 && y[j] <= 10);
      EXLR8_FUZZ_CHECK(((y[j] ^ y[0]) & 1) == 0);
      sum += y[j] * y[j];
    }
    EXLR8_FUZZ_CHECK(sum % 16 == 0 && sum / 16 <= 26);
    EXLR8_FUZZ_CHECK(tetra::ShellIndex(y) == static_cast<std::uint32_t>(sum / 16));
  }
  return 0;
}
