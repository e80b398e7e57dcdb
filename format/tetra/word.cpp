// The word's two byte orders and the reference decode (TETRA-LVQ5.md 1.4,
// 2.2, 2.3), plus the shell index.
#include "format/tetra/word.h"

#include <cstdint>

#include "format/tetra/internal.h"

namespace exlr8::tetra {

std::uint64_t WordFromDisk(const std::byte* six) {
  std::uint64_t v = 0;  // big-endian: V = label << 1 | gain
  for (int i = 0; i < 6; ++i) v = v << 8 | static_cast<std::uint64_t>(six[i]);
  return (v >> 1) | (v & 1) << 47;
}

void WordToDisk(std::uint64_t w, std::byte* six) {
  const std::uint64_t v = (w & kLabelMask) << 1 | (w >> 47 & 1);
  for (int i = 0; i < 6; ++i) six[i] = static_cast<std::byte>(v >> (8 * (5 - i)));
}

void DecodeCoords(const Tables& t, std::uint64_t w, std::int8_t natural[24]) {
  const auto field = [w](int shift, int bits) {
    return static_cast<std::uint32_t>(w >> shift) & ((1U << bits) - 1);
  };
  const std::uint32_t p = field(0, 1), r = field(1, 1), s8 = field(2, 6), b1 = field(8, 1), i1 = field(9, 11),
                      b2 = field(20, 4), i2 = field(24, 11), b3 = field(35, 1), i3 = field(36, 11);
  // Trellis: the codeword's three bytes in trio order.
  const std::uint32_t br = t.branches[16 * s8 + b2];
  const std::uint32_t c[3] = {t.prefixes[2 * s8 + b1], br & 0xFF, t.suffixes[2 * (br >> 8 & 63) + b3]};
  // Rank rows: section 1 in class r, section 2 in the mixed order (the
  // 2048 cheapest of both classes, class 0 first), section 3 in the class
  // that makes sum k = p (mod 2).
  const std::uint32_t delta = i2 >= t.n0 ? 1 : 0;
  const std::uint32_t row2 = delta != 0 ? 2048 + (i2 - t.n0) : i2;
  const std::uint32_t rows[3] = {t.rows[2048 * r + i1], t.rows[row2 & 4095],
                                 t.rows[2048 * (p ^ r ^ delta) + i3]};
  for (int k = 0; k < 3; ++k)
    for (int j = 0; j < 8; ++j) {
      const std::uint32_t o = p + 2 * (c[k] >> j & 1);
      const std::uint32_t rho = rows[k] >> (4 * j) & 7;
      natural[t.order[8 * k + j] % kDim] = internal::kValues[o][rho];
    }
}

std::uint32_t ShellIndex(const std::int8_t y[24]) {
  std::uint32_t sum = 0;
  for (int j = 0; j < kDim; ++j) sum += static_cast<std::uint32_t>(y[j] * y[j]);
  return sum / 16;
}

}  // namespace exlr8::tetra
