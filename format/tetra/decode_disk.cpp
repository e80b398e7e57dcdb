// The bulk decode of disk words to natural-order coordinates: the hot loop
// of verifying and decoding a Tetra code stream on the CPU.
//
// Per word: one 8-byte load and byte swap, six loads from small tables
// indexed by the word's bits as they lie (pattern bytes stored as byte
// masks, section 2's mixed row), and per section one 16-byte load from the
// expansion table: for every (rank row, parity p) the row's 8 values for
// o = p and their XOR with those for o = p+2, so a section's 8 values are
// lo ^ (x & bytemask(pattern byte)). The three sections then move to natural
// order with four SSSE3 byte shuffles (checked at run time) or, elsewhere,
// shifts and masks; both are derived at compile time from the trio octads.
// No per-coordinate branch or loop. The expansion (about 150 KiB) is built
// once for BuiltTables() and per call for other tables.
#include <array>
#include <bit>
#include <cstdint>
#include <cstring>
#include <memory>
#include <utility>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

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

// The decode tables rearranged for the hot loop: pattern bytes stored as
// byte masks and indexed by the word's bits as they lie.
struct Expansion {
  // e[4*row + 2*p]: byte j = val(p, rho_j); e[4*row + 2*p + 1]: XOR with val(p+2, rho_j).
  std::array<std::uint64_t, 4 * kRankRows> e;
  std::array<std::uint64_t, 128> prefix_mask;   // [s8 | b1 << 6]: kByteMask[c1]
  std::array<std::uint64_t, 1024> branch_mask;  // [s8 | b2 << 6]: kByteMask[c2]
  std::array<std::uint8_t, 1024> branch_state;  // [s8 | b2 << 6]: s16
  std::array<std::uint64_t, 128> suffix_mask;   // [s16 | b3 << 6]: kByteMask[c3]
  std::array<std::uint16_t, 2048> row2;         // [i2]: rank row of section 2 (>= 2048 iff delta)
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
  for (std::uint32_t s = 0; s < 64; ++s) {
    for (std::uint32_t b = 0; b < 2; ++b) {
      x->prefix_mask[s | b << 6] = kByteMask[t.prefixes[2 * s + b]];
      x->suffix_mask[s | b << 6] = kByteMask[t.suffixes[2 * s + b]];
    }
    for (std::uint32_t b = 0; b < 16; ++b) {
      const std::uint16_t br = t.branches[16 * s + b];
      x->branch_mask[s | b << 6] = kByteMask[br & 0xFF];
      x->branch_state[s | b << 6] = static_cast<std::uint8_t>(br >> 8 & 63);
    }
  }
  for (std::uint32_t i2 = 0; i2 < 2048; ++i2)
    x->row2[i2] = static_cast<std::uint16_t>(i2 < t.n0 ? i2 : 2048 + ((i2 - t.n0) & 2047));
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

// The three sections of disk word V (trio order, section k byte j = the
// coordinate at trio position 8k+j).
inline void DecodeSections(const Expansion& x, std::uint64_t v, std::uint64_t (&s)[3]) {
  const std::uint64_t w = v >> 1;  // the label; the gain bit (v & 1) does not move the point
  const std::uint32_t p = w & 1;
  const std::uint32_t branch = (w >> 2 & 63) | (w >> 14 & 0x3C0);  // s8 | b2 << 6
  const std::uint32_t s16 = x.branch_state[branch];
  const std::uint64_t m1 = x.prefix_mask[w >> 2 & 127];  // s8 | b1 << 6
  const std::uint64_t m2 = x.branch_mask[branch];
  const std::uint64_t m3 = x.suffix_mask[s16 | (w >> 29 & 64)];  // s16 | b3 << 6
  const std::uint32_t row1 = (w >> 9 & 2047) | (w & 2) << 10;    // r << 11 | i1
  const std::uint32_t row2 = x.row2[w >> 24 & 2047];
  const std::uint32_t row3 =
      ((p << 11 ^ (w & 2) << 10 ^ row2) & 2048) | (w >> 36 & 2047);  // (p^r^delta) << 11 | i3
  const std::uint64_t* e = x.e.data() + 2 * p;
  s[0] = e[4 * row1] ^ (e[4 * row1 + 1] & m1);
  s[1] = e[4 * row2] ^ (e[4 * row2 + 1] & m2);
  s[2] = e[4 * row3] ^ (e[4 * row3 + 1] & m3);
}

inline void DecodeOne(const Expansion& x, std::uint64_t v, std::int8_t* out) {
  std::uint64_t s[3];
  DecodeSections(x, v, s);
  std::uint64_t natural[3];
  ScatterToNatural(s, natural, std::make_index_sequence<kRunCount>());
  std::memcpy(out, natural, 24);
}

void DecodeRange(const Expansion& x, const std::byte* in, std::size_t n, std::int8_t* out) {
  for (std::size_t i = 0; i + 1 < n; ++i) DecodeOne(x, LoadBigEndian48(in + 6 * i, true), out + 24 * i);
  DecodeOne(x, LoadBigEndian48(in + 6 * (n - 1), false), out + 24 * (n - 1));
}

#if defined(__x86_64__)
// The same with SSSE3: the move to natural order is two byte shuffles per
// half of the output, with masks derived at compile time from the trio.
struct ShuffleMasks {
  alignas(16) std::array<std::uint8_t, 16> lo_from_a, lo_from_b, hi_from_a, hi_from_b;
};
constexpr ShuffleMasks kShuffle = [] {
  constexpr auto src = TrioSourceOf();
  ShuffleMasks m{};
  for (int n = 0; n < 16; ++n) {
    m.lo_from_a[n] = src[n] < 16 ? static_cast<std::uint8_t>(src[n]) : 0x80;
    m.lo_from_b[n] = src[n] >= 16 ? static_cast<std::uint8_t>(src[n] - 16) : 0x80;
    const int h = n + 16;
    m.hi_from_a[n] = h < kDim && src[h] < 16 ? static_cast<std::uint8_t>(src[h]) : 0x80;
    m.hi_from_b[n] = h < kDim && src[h] >= 16 ? static_cast<std::uint8_t>(src[h] - 16) : 0x80;
  }
  return m;
}();

__attribute__((target("ssse3"))) void DecodeRangeSsse3(const Expansion& x, const std::byte* in, std::size_t n,
                                                       std::int8_t* out) {
  const __m128i lo_a = _mm_load_si128(reinterpret_cast<const __m128i*>(kShuffle.lo_from_a.data()));
  const __m128i lo_b = _mm_load_si128(reinterpret_cast<const __m128i*>(kShuffle.lo_from_b.data()));
  const __m128i hi_a = _mm_load_si128(reinterpret_cast<const __m128i*>(kShuffle.hi_from_a.data()));
  const __m128i hi_b = _mm_load_si128(reinterpret_cast<const __m128i*>(kShuffle.hi_from_b.data()));
  for (std::size_t i = 0; i < n; ++i) {
    std::uint64_t s[3];
    DecodeSections(x, LoadBigEndian48(in + 6 * i, i + 1 < n), s);
    const __m128i a = _mm_set_epi64x(static_cast<long long>(s[1]), static_cast<long long>(s[0]));
    const __m128i b = _mm_cvtsi64_si128(static_cast<long long>(s[2]));
    const __m128i lo = _mm_or_si128(_mm_shuffle_epi8(a, lo_a), _mm_shuffle_epi8(b, lo_b));
    const __m128i hi = _mm_or_si128(_mm_shuffle_epi8(a, hi_a), _mm_shuffle_epi8(b, hi_b));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 24 * i), lo);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(out + 24 * i + 16), hi);
  }
}
#endif

// Both paths share this: size checks, the reference path for tables with
// another trio, and the expansion (cached for BuiltTables()).
void DecodeDiskWordsWith(const Tables& t, std::span<const std::byte> disk, std::span<std::int8_t> out,
                         bool allow_simd) {
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
#if defined(__x86_64__)
  static const bool ssse3 = __builtin_cpu_supports("ssse3");
  if (allow_simd && ssse3) return DecodeRangeSsse3(*x, disk.data(), n, out.data());
#endif
  (void)allow_simd;
  DecodeRange(*x, disk.data(), n, out.data());
}

}  // namespace

void DecodeDiskWords(const Tables& t, std::span<const std::byte> disk, std::span<std::int8_t> out) {
  DecodeDiskWordsWith(t, disk, out, true);
}

namespace internal {
void DecodeDiskWordsPortable(const Tables& t, std::span<const std::byte> disk, std::span<std::int8_t> out) {
  DecodeDiskWordsWith(t, disk, out, false);
}
}  // namespace internal

}  // namespace exlr8::tetra
