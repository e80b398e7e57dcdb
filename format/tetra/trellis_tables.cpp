// The Golay code as a 3-section trellis in trio order (TETRA-LVQ5.md 2.5
// steps 2-4): states at cuts 8 and 16 numbered by coset minima, then the
// prefix, branch and suffix tables and the 12 F2 columns of the path map.
#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "format/tetra/internal.h"

namespace exlr8::tetra::internal {

namespace {

// Codeword (natural order) -> trio order: bit t of the result is bit
// order[t] of `c`.
std::uint32_t ToTrioOrder(const std::array<std::uint8_t, kDim>& order, std::uint32_t c) {
  std::uint32_t out = 0;
  for (int t = 0; t < kDim; ++t) out |= (c >> order[t] & 1) << t;
  return out;
}

// The state numbering at one cut: V is the span of the codewords that are
// zero on one side of the cut; a codeword's state is the rank, in ascending
// order, of its coset minimum min(c ^ V) among the distinct minima. The
// minimum comes from reducing against V's fully reduced echelon basis with
// highest-bit pivots. `states[i]` is the state of codewords[i].
Status CutStates(const std::vector<std::uint32_t>& codewords, int cut, std::vector<std::uint32_t>& states) {
  const std::uint32_t low = (1U << cut) - 1;
  const std::uint32_t high = ((1U << kDim) - 1) & ~low;
  std::array<std::uint32_t, kDim> basis{};  // basis[b]: the vector with pivot (highest bit) b, or 0
  for (std::uint32_t c : codewords) {
    if ((c & low) != 0 && (c & high) != 0) continue;
    std::uint32_t v = c;
    for (int b = kDim - 1; b >= 0 && v != 0; --b) {
      if ((v >> b & 1) == 0) continue;
      if (basis[b] == 0) {
        basis[b] = v;
        break;
      }
      v ^= basis[b];
    }
  }
  // Full reduction: clear each pivot bit from every vector above it (lowest
  // pivot first, so later steps cannot bring a cleared bit back).
  int dim = 0;
  for (int b = 0; b < kDim; ++b) {
    if (basis[b] == 0) continue;
    ++dim;
    for (int above = b + 1; above < kDim; ++above)
      if ((basis[above] >> b & 1) != 0) basis[above] ^= basis[b];
  }
  if (dim != 6)
    return InternalError("tetra trellis: the span of the codewords zero on one side of cut " +
                         std::to_string(cut) + " has dimension " + std::to_string(dim) + ", expected 6");
  std::vector<std::uint32_t> minima(codewords.size());
  for (std::size_t i = 0; i < codewords.size(); ++i) {
    std::uint32_t v = codewords[i];
    for (int b = kDim - 1; b >= 0; --b)
      if ((v >> b & 1) != 0 && basis[b] != 0) v ^= basis[b];
    minima[i] = v;
  }
  std::vector<std::uint32_t> distinct = minima;
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  if (distinct.size() != 64)
    return InternalError("tetra trellis: " + std::to_string(distinct.size()) + " states at cut " +
                         std::to_string(cut) + ", expected 64");
  states.resize(codewords.size());
  for (std::size_t i = 0; i < codewords.size(); ++i)
    states[i] = static_cast<std::uint32_t>(std::lower_bound(distinct.begin(), distinct.end(), minima[i]) -
                                           distinct.begin());
  return Status::Ok();
}

// The distinct values of `v`, ascending.
template <typename T>
std::vector<T> SortedDistinct(std::vector<T> v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

}  // namespace

std::uint32_t TrellisPath(const Tables& t, std::uint32_t x) {
  const std::uint32_t s8 = x & 63, b1 = x >> 6 & 1, b2 = x >> 7 & 15, b3 = x >> 11 & 1;
  const std::uint32_t c1 = t.prefixes[2 * s8 + b1];
  const std::uint32_t br = t.branches[16 * s8 + b2];
  const std::uint32_t s16 = br >> 8 & 63;
  const std::uint32_t c3 = t.suffixes[2 * s16 + b3];
  return c1 | (br & 0xFF) << 8 | c3 << 16;
}

Status BuildTrellisTables(Tables& t) {
  t.octads = kTrioOctads;
  for (std::uint32_t o : t.octads)
    if (std::popcount(o) != 8 || !IsGolayCodeword(o))
      return InternalError("tetra trellis: trio octad " + std::to_string(o) +
                           " is not a weight-8 Golay codeword");
  if ((t.octads[0] | t.octads[1] | t.octads[2]) != (1U << kDim) - 1 ||
      std::popcount(t.octads[0]) + std::popcount(t.octads[1]) + std::popcount(t.octads[2]) != kDim)
    return InternalError("tetra trellis: the trio octads are not disjoint or do not cover 24 coordinates");
  t.order = OrderFromOctads(t.octads);

  std::vector<std::uint32_t> code(4096);
  for (std::uint32_t m = 0; m < 4096; ++m) code[m] = ToTrioOrder(t.order, GolayEncode(m));
  if (SortedDistinct(code).size() != 4096)
    return InternalError("tetra trellis: the Golay code has repeated words");

  std::vector<std::uint32_t> s8, s16;
  EXLR8_RETURN_IF_ERROR(CutStates(code, 8, s8));
  EXLR8_RETURN_IF_ERROR(CutStates(code, 16, s16));

  for (std::uint32_t state = 0; state < 64; ++state) {
    std::vector<std::uint32_t> low, branch, high;
    for (std::size_t i = 0; i < code.size(); ++i) {
      if (s8[i] == state) {
        low.push_back(code[i] & 0xFF);
        // (middle byte, s16) sorted by byte: the byte is the high part of the key.
        branch.push_back((code[i] >> 8 & 0xFF) << 8 | s16[i]);
      }
      if (s16[i] == state) high.push_back(code[i] >> 16);
    }
    low = SortedDistinct(std::move(low));
    branch = SortedDistinct(std::move(branch));
    high = SortedDistinct(std::move(high));
    if (low.size() != 2 || high.size() != 2 || branch.size() != 16 || (low[0] ^ low[1]) != 0xFF)
      return InternalError("tetra trellis: state " + std::to_string(state) + " has " +
                           std::to_string(low.size()) + " prefix bytes, " + std::to_string(branch.size()) +
                           " branches and " + std::to_string(high.size()) +
                           " suffix bytes, expected 2 (complementary), 16 and 2");
    for (int b = 0; b < 2; ++b) {
      t.prefixes[2 * state + b] = static_cast<std::uint8_t>(low[b]);
      t.suffixes[2 * state + b] = static_cast<std::uint8_t>(high[b]);
    }
    for (int b = 0; b < 16; ++b)
      t.branches[16 * state + b] = static_cast<std::uint16_t>((branch[b] >> 8) | (branch[b] & 0xFF) << 8);
  }
  for (int i = 0; i < 12; ++i) t.columns[i] = TrellisPath(t, 1U << i);
  return Status::Ok();
}

}  // namespace exlr8::tetra::internal
