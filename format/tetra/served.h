// The served layout of a Tetra code stream (TETRA-LVQ5.md 2.7, "tetra48"):
// what the GPU decodes and what a lease hands to a serving process.
//
//   disk   (1.4): row-major 6-byte blocks, each big-endian V = label << 1 |
//                 gain (MSB-first), no row padding: row i at 6*nblocks*i.
//   served (2.7): the same blocks as little-endian 6-byte kernel words
//                 W = label | gain << 47, each row padded with zero bytes to
//                 ServedRowStride(nblocks) = round_up(6*nblocks, 8), so a row
//                 starts on an 8-byte boundary and block j is read with the
//                 two aligned u32 loads at u32 index (3j) >> 1 of its row
//                 (even j: lo = w0, hi16 = w1 & 0xffff; odd j: lo = w0 >> 16 |
//                 w1 << 16, hi16 = w1 >> 16); the padding keeps the last
//                 window inside the row.
//
// The transcode only moves bits; it is a bijection on the words, and
// ServedToDisk(DiskToServed(x)) == x for every stream. Pure functions:
// thread safe, no allocation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "format/status.h"

namespace exlr8::tetra {

// round_up(6 * nblocks, 8): the byte stride of a served row. 0 for 0.
// REQUIRES: nblocks <= 2^60 (no overflow; real rows have < 2^27 blocks).
constexpr std::uint64_t ServedRowStride(std::uint64_t nblocks) { return (6 * nblocks + 7) / 8 * 8; }

// Served bytes of a d_out x nblocks matrix, or InvalidArgument when the
// size overflows 64 bits (or nblocks > 2^60).
Result<std::uint64_t> ServedBytes(std::uint64_t d_out, std::uint64_t nblocks);

// Transcodes whole rows of `nblocks` blocks: disk.size() must be a multiple
// of 6 * nblocks (rows = disk.size() / (6 * nblocks)) and served.size() must
// be rows * ServedRowStride(nblocks). Writes every served byte (padding 0).
// Rows are independent, so a caller may transcode any run of rows (a chunk)
// into the matching run of served rows. Errors: InvalidArgument naming the
// sizes (nothing is written then); nblocks 0 is InvalidArgument.
// REQUIRES: disk and served do not overlap.
Status DiskToServed(std::span<const std::byte> disk, std::uint64_t nblocks, std::span<std::byte> served);

// The inverse: served rows back to the disk stream. Errors: InvalidArgument
// for sizes as above; Corruption naming the row and byte when a padding byte
// is not zero (the served bytes were not written by DiskToServed). On an
// error `disk` may be partly written.
Status ServedToDisk(std::span<const std::byte> served, std::uint64_t nblocks, std::span<std::byte> disk);

// The kernel word W of block j of a served row, read exactly as the device
// does (spec 2.7's two aligned u32 windows). A reference for tests and for
// CPU checks of served memory.
// REQUIRES: `row` is 4-byte aligned or any alignment (read with memcpy),
// j < nblocks, and the row holds ServedRowStride(nblocks) readable bytes.
std::uint64_t ServedWord(const std::byte* row, std::uint64_t j);

// W -> its 6 little-endian served bytes (bits above 47 dropped).
void WordToServed(std::uint64_t w, std::byte* six);

}  // namespace exlr8::tetra
