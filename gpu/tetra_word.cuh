// The decode of one Tetra word as the GPU runs it (TETRA-LVQ5.md 2.2, 2.3,
// 2.7), shared by the kernel (gpu/tetra_decode.cu) and its CPU tests.
//
//   ServedWindow      spec 2.7's read of block j from the two aligned u32 of
//                     its row at index (3j) >> 1 -> W's low 32 bits and 16
//                     high bits
//   DecodeTetraWord   W -> 24 int8 coordinates in natural order, as 6 u32
//                     (byte b of u32 n = coordinate 4n + b): the trellis and
//                     rank-row loads of spec 2.3, each section's 8 ranks
//                     expanded with __byte_perm against the value lists
//                     val(o, .) for o = p and o = p + 2, picked per byte by
//                     the pattern bits (spec 2.7, unbiased int8 operands),
//                     then the trio -> natural permutation, fixed at compile
//                     time from tetra::kTrioOctads.
//   TetraShell, TetraBlockScale, TetraScaledCoord
//                     one block's f32 weights exactly as tetra::
//                     ReconstructBlock computes them (golden.json's recipe:
//                     f64 products and quotient, each rounded on its own
//                     (explicit _rn intrinsics on the device), narrowed last).
//
// Everything is __host__ __device__ (plain inline C++ without nvcc; the host
// emulates __byte_perm), so the CPU tests run exactly the kernel's code.
// REQUIRES: the table view points at tables that pass tetra::CheckTables and
// whose order is kTetraOrder (DeviceTetraTables::Upload checks both).
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <utility>

#include "format/tetra/tables.h"

#ifndef EXLR8_HD
#if defined(__CUDACC__)
#define EXLR8_HD __host__ __device__ __forceinline__
#else
#define EXLR8_HD inline
#endif
#endif

namespace exlr8::tetra_gpu {

// val(o, rho) of spec 2.3: the rho-th member of o + 4Z listed outward from
// zero, the positive member of a tied pair first.
constexpr int Val(int o, int rho) {
  int seen = 0;
  for (int a = 0;; ++a)
    for (int sign = 1; sign >= -1; sign -= 2) {
      const int v = sign * a;
      if ((sign < 0 && a == 0) || ((v - o) % 4 + 4) % 4 != 0) continue;
      if (seen++ == rho) return v;
    }
}
static_assert(Val(0, 7) == 16 && Val(1, 1) == -3 && Val(2, 7) == -14 && Val(3, 0) == -1 && Val(3, 7) == 15);

// val(o, first + b) as byte b of a u32 (int8 two's complement).
constexpr std::uint32_t ValWord(int o, int first) {
  std::uint32_t w = 0;
  for (int b = 0; b < 4; ++b) w |= std::uint32_t{static_cast<std::uint8_t>(Val(o, first + b))} << (8 * b);
  return w;
}

// Trio position t holds natural coordinate kTetraOrder[t] (spec 2.5 step 2:
// each octad's coordinates ascending, octad 0 first).
inline constexpr std::array<std::uint8_t, 24> kTetraOrder = [] {
  std::array<std::uint8_t, 24> order{};
  int t = 0;
  for (std::uint32_t octad : tetra::kTrioOctads)
    for (int bit = 0; bit < 24; ++bit)
      if ((octad >> bit & 1) != 0 && t < 24) order[t++] = static_cast<std::uint8_t>(bit);
  return order;
}();
// Its inverse: natural coordinate n comes from trio position kTetraSource[n].
inline constexpr std::array<int, 24> kTetraSource = [] {
  std::array<int, 24> src{};
  for (int t = 0; t < 24; ++t) src[kTetraOrder[t]] = t;
  return src;
}();
EXLR8_HD constexpr int SourceOf(int n) { return kTetraSource[n]; }

// The decode tables as the kernel reads them (shared or global memory).
struct TetraTableView {
  const std::uint32_t* rows;      // [4096]
  const std::uint16_t* branches;  // [1024]
  const std::uint8_t* prefixes;   // [128]
  const std::uint8_t* suffixes;   // [128]
};

EXLR8_HD std::uint32_t BytePerm(std::uint32_t x, std::uint32_t y, std::uint32_t s) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(x, y, s);
#else
  const std::uint64_t in = std::uint64_t{y} << 32 | x;
  std::uint32_t r = 0;
  for (int n = 0; n < 4; ++n)
    r |= static_cast<std::uint32_t>(in >> (8 * ((s >> (4 * n)) & 7)) & 0xFF) << (8 * n);
  return r;
#endif
}

// Block j of a served row from the two aligned u32 at index (3j) >> 1.
EXLR8_HD void ServedWindow(std::uint32_t w0, std::uint32_t w1, std::uint32_t j, std::uint32_t& lo,
                           std::uint32_t& hi16) {
  lo = (j & 1) != 0 ? (w0 >> 16 | w1 << 16) : w0;
  hi16 = (j & 1) != 0 ? (w1 >> 16) : (w1 & 0xFFFFu);
}

// Byte j of the result is 0xFF where bit j of c4 (4 bits) is set (spec 2.7).
EXLR8_HD std::uint32_t ByteMask4(std::uint32_t c4) { return ((c4 * 0x00204081u) & 0x01010101u) * 0xFFu; }

// One section (trio positions 8k..8k+7) as two u32: rank rho_j = nibble j
// of `row` (& 7, as the CPU), class o = p + 2 * bit j of the pattern byte c.
EXLR8_HD void DecodeSection(std::uint32_t row, std::uint32_t c, std::uint32_t p, std::uint32_t& lo,
                            std::uint32_t& hi) {
  const std::uint32_t a0 = p != 0 ? ValWord(1, 0) : ValWord(0, 0);
  const std::uint32_t a1 = p != 0 ? ValWord(1, 4) : ValWord(0, 4);
  const std::uint32_t b0 = p != 0 ? ValWord(3, 0) : ValWord(2, 0);
  const std::uint32_t b1 = p != 0 ? ValWord(3, 4) : ValWord(2, 4);
  const std::uint32_t s0 = row & 0x7777u, s1 = (row >> 16) & 0x7777u;
  const std::uint32_t m0 = ByteMask4(c & 0xFu), m1 = ByteMask4((c >> 4) & 0xFu);
  lo = (BytePerm(a0, a1, s0) & ~m0) | (BytePerm(b0, b1, s0) & m0);
  hi = (BytePerm(a0, a1, s1) & ~m1) | (BytePerm(b0, b1, s1) & m1);
}

template <int T>
EXLR8_HD std::uint32_t TrioByte(const std::uint32_t (&trio)[6]) {
  return (trio[T >> 2] >> (8 * (T & 3))) & 0xFFu;
}

// Natural coordinates 4N..4N+3 as one u32 (byte b = coordinate 4N + b).
template <int N, int... B>
EXLR8_HD std::uint32_t NaturalWord(const std::uint32_t (&trio)[6], std::integer_sequence<int, B...>) {
  return ((TrioByte<SourceOf(4 * N + B)>(trio) << (8 * B)) | ...);
}

// W (lo = bits 0..31, hi16 = bits 32..47; the gain bit 47 is not read) ->
// natural[n] = coordinates 4n..4n+3.
EXLR8_HD void DecodeTetraWord(const TetraTableView& t, std::uint32_t lo, std::uint32_t hi16,
                              std::uint32_t (&natural)[6]) {
  // Fields of W (spec 2.2).
  const std::uint32_t p = lo & 1, r = lo >> 1 & 1, s8 = lo >> 2 & 63, b1 = lo >> 8 & 1, i1 = lo >> 9 & 2047,
                      b2 = lo >> 20 & 15, i2 = lo >> 24 | (hi16 & 7) << 8, b3 = hi16 >> 3 & 1,
                      i3 = hi16 >> 4 & 2047;
  // Spec 2.3 step 1: the trellis (the only dependent load is s16 -> c3).
  const std::uint32_t br = t.branches[16 * s8 + b2];
  const std::uint32_t c1 = t.prefixes[2 * s8 + b1], c2 = br & 0xFF, c3 = t.suffixes[2 * (br >> 8 & 63) + b3];
  // Step 2: the rank rows (section 2 in the mixed order).
  const std::uint32_t delta = i2 >= tetra::kN0 ? 1 : 0;
  const std::uint32_t row1 = t.rows[2048 * r + i1];
  const std::uint32_t row2 = t.rows[delta != 0 ? 2048 + i2 - tetra::kN0 : i2];
  const std::uint32_t row3 = t.rows[2048 * (p ^ r ^ delta) + i3];
  // Step 3: values in trio order; step 4: natural order.
  std::uint32_t trio[6];
  DecodeSection(row1, c1, p, trio[0], trio[1]);
  DecodeSection(row2, c2, p, trio[2], trio[3]);
  DecodeSection(row3, c3, p, trio[4], trio[5]);
  constexpr auto kBytes = std::make_integer_sequence<int, 4>();
  natural[0] = NaturalWord<0>(trio, kBytes);
  natural[1] = NaturalWord<1>(trio, kBytes);
  natural[2] = NaturalWord<2>(trio, kBytes);
  natural[3] = NaturalWord<3>(trio, kBytes);
  natural[4] = NaturalWord<4>(trio, kBytes);
  natural[5] = NaturalWord<5>(trio, kBytes);
}

// m = sum(y_j^2) / 16 of the 24 natural coordinates in natural[0..5].
EXLR8_HD std::uint32_t TetraShell(const std::uint32_t (&natural)[6]) {
  std::uint32_t sum = 0;
  for (int k = 0; k < 6; ++k)
    for (int b = 0; b < 4; ++b) {
      const int y = static_cast<std::int8_t>(natural[k] >> (8 * b) & 0xFF);
      sum += static_cast<std::uint32_t>(y * y);
    }
  return sum / 16;
}

// (centroid * row_scale) / sqrt(16m) in f64. REQUIRES: m > 0.
EXLR8_HD double TetraBlockScale(double centroid, double row_scale, std::uint32_t m) {
#if defined(__CUDA_ARCH__)
  return __ddiv_rn(__dmul_rn(centroid, row_scale), __dsqrt_rn(__dmul_rn(16.0, static_cast<double>(m))));
#else
  return (centroid * row_scale) / std::sqrt(16.0 * static_cast<double>(m));
#endif
}

// (float)(y * scale), the product in f64.
EXLR8_HD float TetraScaledCoord(int y, double scale) {
#if defined(__CUDA_ARCH__)
  return __double2float_rn(__dmul_rn(static_cast<double>(y), scale));
#else
  return static_cast<float>(static_cast<double>(y) * scale);
#endif
}

}  // namespace exlr8::tetra_gpu
