// Internals of the Tetra codec shared by its .cpp files (not a public API):
// the Golay code, the value table val(o, rho), rank vector cost and class,
// the table builders and the trellis map of one path.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "format/status.h"
#include "format/tetra/tables.h"

namespace exlr8::tetra::internal {

// The extended Golay codeword of message m (12 bits): the carry-less product
// m (x) 0xC75 in bits 0..22, overall parity in bit 23 (spec 2.5 step 1).
std::uint32_t GolayEncode(std::uint32_t message);

// True if `c` (natural order, 24 bits) is an extended Golay codeword: its
// low 23 bits are a multiple of the generator and its weight is even.
bool IsGolayCodeword(std::uint32_t c);

// val(o, rho): the rho-th member of o + 4Z listed outward from zero, the
// positive member of a tied pair first (spec 2.3). o in 0..3, rho in 0..7.
constexpr int RankValue(int o, int rho) {
  int seen = 0;
  for (int a = 0;; ++a) {
    for (int sign = 1; sign >= -1; sign -= 2) {
      const int v = sign * a;
      if ((sign < 0 && a == 0) || ((v - o) % 4 + 4) % 4 != 0) continue;
      if (seen++ == rho) return v;
    }
  }
}

// kValues[o][rho] = RankValue(o, rho).
inline constexpr std::array<std::array<std::int8_t, 8>, 4> kValues = [] {
  std::array<std::array<std::int8_t, 8>, 4> v{};
  for (int o = 0; o < 4; ++o)
    for (int rho = 0; rho < 8; ++rho) v[o][rho] = static_cast<std::int8_t>(RankValue(o, rho));
  return v;
}();

// Trio position t holds natural coordinate order[t]: the coordinates of
// each octad in ascending order, octad 0 first (spec 2.5 step 2). Positions
// past the octads' total weight stay 0xFF.
constexpr std::array<std::uint8_t, kDim> OrderFromOctads(const std::array<std::uint32_t, 3>& octads) {
  std::array<std::uint8_t, kDim> order{};
  for (auto& o : order) o = 0xFF;
  int t = 0;
  for (std::uint32_t octad : octads)
    for (int bit = 0; bit < kDim; ++bit)
      if ((octad >> bit & 1) != 0 && t < kDim) order[t++] = static_cast<std::uint8_t>(bit);
  return order;
}
inline constexpr std::array<std::uint8_t, kDim> kTrioOrder = OrderFromOctads(kTrioOctads);

// A rank row's cost sum (2 rho_j + 1)^2 and class (parity of the number of
// rho_j in {1, 2, 5, 6}); rho_j is bits 4j..4j+3 of the row.
int RankCost(std::uint32_t row);
int RankClass(std::uint32_t row);
// rho as a number with rho_0 most significant, 3 bits per rank (the
// tie-break order of the rank table). REQUIRES: every rank <= 7.
std::uint32_t RankLexKey(std::uint32_t row);

// c1 | c2 << 8 | c3 << 16 (trio order) of trellis path x: s8 = x bits 0..5,
// b1 bit 6, b2 bits 7..10, b3 bit 11. Indexes stay in bounds for any table
// contents.
std::uint32_t TrellisPath(const Tables& t, std::uint32_t x);

// Fill t.order, t.octads, t.prefixes, t.branches, t.suffixes and t.columns
// (trellis_tables.cpp), and t.rows and t.n0 (rank_table.cpp), from the
// spec's definitions. An error names the construction step that did not
// come out as the spec says.
Status BuildTrellisTables(Tables& t);
Status BuildRankTable(Tables& t);

// DecodeDiskWords without SIMD (what other CPUs run), for its tests.
void DecodeDiskWordsPortable(const Tables& t, std::span<const std::byte> disk, std::span<std::int8_t> out);

}  // namespace exlr8::tetra::internal
