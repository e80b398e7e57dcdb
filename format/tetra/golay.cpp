// The extended binary Golay code [24,12,8] from its generator polynomial
// (TETRA-LVQ5.md 2.5 step 1). Coordinate i is bit i.
#include <bit>
#include <cstdint>

#include "format/tetra/internal.h"

namespace exlr8::tetra::internal {

std::uint32_t GolayEncode(std::uint32_t message) {
  std::uint32_t c = 0;
  for (int i = 0; i < 12; ++i)
    if ((message >> i & 1) != 0) c ^= kGolayGenerator << i;
  c &= (1U << 23) - 1;
  return c | static_cast<std::uint32_t>(std::popcount(c) & 1) << 23;
}

bool IsGolayCodeword(std::uint32_t c) {
  if (c >> 24 != 0 || (std::popcount(c) & 1) != 0) return false;
  // The remainder of the low 23 bits modulo the degree-11 generator.
  std::uint32_t r = c & ((1U << 23) - 1);
  for (int bit = 22; bit >= 11; --bit)
    if ((r >> bit & 1) != 0) r ^= kGolayGenerator << (bit - 11);
  return r == 0;
}

}  // namespace exlr8::tetra::internal
