// The Tetra word and its decode (TETRA-LVQ5.md sections 1.4, 2.2-2.4).
//
// A word names a point y of the Leech lattice (times sqrt 8) in integer
// form, y_j = p + 2c_j + 4k_j, plus one gain bit. Two bit orders exist:
//   disk:   6 bytes, read big-endian, give V = (label << 1) | gain (LVQ5
//           code streams, MSB-first);
//   kernel: W = label | gain << 47, the 48-bit value the decoder takes (and
//           the CUDA kernel holds as 6 little-endian bytes).
// Every 48-bit value is a legal word, so the decode cannot fail. Bits of W:
//   0 p | 1 r | 2-7 s8 | 8 b1 | 9-19 i1 | 20-23 b2 | 24-34 i2 | 35 b3 |
//   36-46 i3 | 47 g
// Coordinates are returned in natural order (y[order[t]] = y_trio[t]).
//
// REQUIRES (all decode functions): `t` is BuiltTables() with TablesStatus()
// OK, or another Tables that passes CheckTables. Other tables decode to
// wrong points, but every index stays inside the tables and the output.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "format/tetra/tables.h"

namespace exlr8::tetra {

inline constexpr std::uint64_t kLabelMask = (std::uint64_t{1} << 47) - 1;
inline constexpr std::uint64_t kGainBit = std::uint64_t{1} << 47;
inline constexpr std::size_t kDiskWordBytes = 6;

// Disk bytes (big-endian V = label << 1 | gain) -> kernel word W.
// REQUIRES: `six` points at 6 readable bytes.
std::uint64_t WordFromDisk(const std::byte* six);

// Kernel word W (bits above 47 ignored) -> 6 disk bytes.
void WordToDisk(std::uint64_t w, std::byte* six);

// The 24 coordinates of word `w` in natural order (spec 2.3). The gain bit
// and bits above 47 are ignored. |natural[j]| <= 10.
void DecodeCoords(const Tables& t, std::uint64_t w, std::int8_t natural[24]);

// The bulk decode: disk words straight to natural-order coordinates, word i
// from disk[6i, 6i+6) to out[24i, 24i+24). Equal to WordFromDisk then
// DecodeCoords word by word; fast (see docs/BENCHMARKS.md) for BuiltTables().
// REQUIRES: disk.size() % 6 == 0 and out.size() == 4 * disk.size() (checked:
// on a mismatch nothing is written).
void DecodeDiskWords(const Tables& t, std::span<const std::byte> disk, std::span<std::int8_t> out);

// The shell index m = sum(y_j^2) / 16 of a decoded point (<= 26 for every
// word; the lattice guarantees 16 divides the sum).
std::uint32_t ShellIndex(const std::int8_t y[24]);

// One block's weights in the rotated basis, as golden.json and the Rust
// reference compute them: scale = (centroid * row_scale) / sqrt(16m) in f64,
// out_j = (float)(y_j * scale) with the product in f64. m = 0 (the origin)
// gives zeros. `centroid` is centroids[gain bit] of the matrix.
void ReconstructBlock(const std::int8_t y[24], double centroid, double row_scale, float out[24]);

}  // namespace exlr8::tetra
