// The bulk decode of disk words to natural-order coordinates: the hot loop
// of verifying and decoding a Tetra code stream on the CPU.
//
// Per word: one 8-byte load and byte swap, the three trellis loads, and per
// section one 16-byte load from the expansion table: for every (rank row,
// parity p) the row's 8 values for o = p and the XOR with those for o = p+2,
// so a section's 8 values are lo ^ (x & bytemask(pattern byte)). The three
// sections are then moved to natural order with shifts and masks derived at
// compile time from the trio octads. No per-coordinate branch or loop.
// The expansion table (4096 x 2 x 16 B = 128 KiB) is built once for
// BuiltTables() and per call for other tables.
#include <array>
#include <bit>
#include <cstdint>
#include <cstring>
#include <memory>
#include <utility>

#include "format/tetra/internal.h"
#include "format/tetra/word.h"

namespace exlr8::tetra {

namespace {

// kByteMask[c]: byte j is 0xFF where bit j of c is set.
constexpr std::array<std::uint64_t, 256> kByteMask = [] {
  std::array<std::uint64_t, 256> m{};
  for (int c = 0; c < 256; ++c)
    for (int j = 0; j < 8; ++j)
      if ((c >> j & 1) != 0) m[c] |= std::uint64_t{0xFF} << (8 * j);
  return m;
}();

// The move from trio order (three u64, section k byte j = position 8k+j) to
// natural order (three u64, byte n%8 of word n/8 = coordinate n), as runs of
// consecutive bytes that stay consecutive.
struct ScatterRun {
  int dst_word, dst_shift, src_word, src_shift;
  std::uint64_t mask;
};

constexpr std::array<int, kDim> TrioSourceOf() {
  std::array<int, kDim> src{};
  for (int t = 0; t < kDim; ++t) src[internal::kTrioOrder[t]] = t;
  return src;
}

template <typename F>
constexpr void ForEachRun(F&& f) {
  constexpr auto src = TrioSourceOf();
  for (int n = 0; n < kDim;) {
    int len = 1;
    while (n + len < kDim && (n + len) / 8 == n / 8 && src[n + len] == src[n] + len &&
           src[n + len] / 8 == src[n] / 8)
      ++len;
    f(ScatterRun{n / 8, 8 * (n % 8), src[n] / 8, 8 * (src[n] % 8),
                 len == 8 ? ~std::uint64_t{0} : (std::uint64_t{1} << (8 * len)) - 1});
    n += len;
  }
}

constexpr int kRunCount = [] {
  int n = 0;
  ForEachRun([&n](const ScatterRun&) { ++n; });
  return n;
}();

constexpr std::array<ScatterRun, kRunCount> kRuns = [] {
  std::array<ScatterRun, kRunCount> runs{};
  int i = 0;
  ForEachRun([&](const ScatterRun& r) { runs[i++] = r; });
  return runs;
}();

template <std::size_t... I>
inline void ScatterToNatural(const std::uint64_t (&s)[3], std::uint64_t (&out)[3],
                             std::index_sequence<I...>) {
  out[0] = out[1] = out[2] = 0;
  ((out[kRuns[I].dst_word] |= ((s[kRuns[I].src_word] >> kRuns[I].src_shift) & kRuns[I].mask)
                              << kRuns[I].dst_shift),
   ...);
}

struct Expansion {
  // e[4*row + 2*p]: byte j = val(p, rho_j); e[4*row + 2*p + 1]: XOR with val(p+2, rho_j).
  std::array<std::uint64_t, 4 * kRankRows> e;
  std::array<std::uint8_t, 128> prefixes;
  std::array<std::uint16_t, 1024> branches;
  std::array<std::uint8_t, 128> suffixes;
  std::uint32_t n0;
};

std::unique_ptr<Expansion> Expand(const Tables& t) {
  auto x = std::make_unique<Expansion>();
  for (int row = 0; row < kRankRows; ++row)
    for (int p = 0; p < 2; ++p) {
      std::uint64_t lo = 0, hi = 0;
      for (int j = 0; j < 8; ++j) {
        const std::uint32_t rho = t.rows[row] >> (4 * j) & 7;
        lo |= std::uint64_t{static_cast<std::uint8_t>(internal::kValues[p][rho])} << (8 * j);
        hi |= std::uint64_t{static_cast<std::uint8_t>(internal::kValues[p + 2][rho])} << (8 * j);
      }
      x->e[4 * row + 2 * p] = lo;
      x->e[4 * row + 2 * p + 1] = lo ^ hi;
    }
  x->prefixes = t.prefixes;
  x->branches = t.branches;
  x->suffixes = t.suffixes;
  x->n0 = t.n0 > 2048 ? 2048 : t.n0;  // keeps 2048 + i2 - n0 inside the table
  return x;
}

inline std::uint64_t LoadBigEndian48(const std::byte* six, bool may_overread) {
  std::uint64_t v = 0;
  if (may_overread) {
    std::memcpy(&v, six, 8);
    return __builtin_bswap64(v) >> 16;
  }
  for (int i = 0; i < 6; ++i) v = v << 8 | static_cast<std::uint64_t>(six[i]);
  return v;
}

inline void DecodeOne(const Expansion& x, std::uint64_t v, std::int8_t* out) {
  const std::uint64_t w = v >> 1;  // the label; the gain bit (v & 1) does not move the point
  const std::uint32_t p = w & 1, r = w >> 1 & 1, s8 = w >> 2 & 63, b1 = w >> 8 & 1, i1 = w >> 9 & 2047,
                      b2 = w >> 20 & 15, i2 = w >> 24 & 2047, b3 = w >> 35 & 1, i3 = w >> 36 & 2047;
  const std::uint32_t br = x.branches[16 * s8 + b2];
  const std::uint32_t c1 = x.prefixes[2 * s8 + b1], c2 = br & 0xFF, c3 = x.suffixes[2 * (br >> 8 & 63) + b3];
  const std::uint32_t delta = i2 >= x.n0 ? 1 : 0;
  const std::uint32_t row1 = r << 11 | i1, row2 = i2 + delta * (2048 - x.n0),
                      row3 = (p ^ r ^ delta) << 11 | i3;
  const std::uint64_t* e = x.e.data() + 2 * p;
  const std::uint64_t s[3] = {e[4 * row1] ^ (e[4 * row1 + 1] & kByteMask[c1]),
                              e[4 * row2] ^ (e[4 * row2 + 1] & kByteMask[c2]),
                              e[4 * row3] ^ (e[4 * row3 + 1] & kByteMask[c3])};
  std::uint64_t natural[3];
  ScatterToNatural(s, natural, std::make_index_sequence<kRunCount>());
  std::memcpy(out, natural, 24);
}

}  // namespace

void DecodeDiskWords(const Tables& t, std::span<const std::byte> disk, std::span<std::int8_t> out) {
  if (disk.size() % kDiskWordBytes != 0 || out.size() != 4 * disk.size()) return;
  const std::size_t n = disk.size() / kDiskWordBytes;
  if (n == 0) return;
  if (t.order != internal::kTrioOrder) {  // tables for another trio: the reference path
    for (std::size_t i = 0; i < n; ++i)
      DecodeCoords(t, WordFromDisk(disk.data() + 6 * i), out.data() + 24 * i);
    return;
  }
  static_assert(std::endian::native == std::endian::little, "the scatter assumes little-endian words");
  std::unique_ptr<Expansion> local;
  const Expansion* x = nullptr;
  if (&t == &BuiltTables()) {
    static const std::unique_ptr<Expansion> built = Expand(BuiltTables());
    x = built.get();
  } else {
    local = Expand(t);
    x = local.get();
  }
  const std::byte* in = disk.data();
  std::int8_t* o = out.data();
  for (std::size_t i = 0; i + 1 < n; ++i) DecodeOne(*x, LoadBigEndian48(in + 6 * i, true), o + 24 * i);
  DecodeOne(*x, LoadBigEndian48(in + 6 * (n - 1), false), o + 24 * (n - 1));
}

}  // namespace exlr8::tetra
