// Disk <-> served transcoding of Tetra code streams (TETRA-LVQ5.md 1.4, 2.7).
#include "format/tetra/served.h"

#include <bit>
#include <cstdint>
#include <cstring>
#include <string>

#include "format/tetra/word.h"

static_assert(std::endian::native == std::endian::little, "the 8-byte moves assume a little-endian host");

namespace exlr8::tetra {

namespace {

constexpr std::uint64_t kMaxBlocks = std::uint64_t{1} << 60;

// Disk V (big-endian 48 bits) -> W.
inline std::uint64_t DiskToWord(std::uint64_t v) { return (v >> 1) | (v & 1) << 47; }
inline std::uint64_t WordToDiskValue(std::uint64_t w) { return (w & kLabelMask) << 1 | (w >> 47 & 1); }

Status CheckSizes(const char* what, std::size_t disk, std::uint64_t nblocks, std::size_t served,
                  std::uint64_t* rows) {
  if (nblocks == 0 || nblocks > kMaxBlocks)
    return InvalidArgumentError(std::string(what) + ": nblocks " + std::to_string(nblocks) +
                                " is outside 1..2^60");
  const std::uint64_t disk_row = 6 * nblocks;
  if (disk % disk_row != 0)
    return InvalidArgumentError(std::string(what) + ": " + std::to_string(disk) +
                                " disk bytes are not whole rows of " + std::to_string(nblocks) + " blocks (" +
                                std::to_string(disk_row) + " bytes)");
  *rows = disk / disk_row;
  const std::uint64_t stride = ServedRowStride(nblocks);
  if (served / stride != *rows || served % stride != 0)
    return InvalidArgumentError(std::string(what) + ": " + std::to_string(served) + " served bytes for " +
                                std::to_string(*rows) + " rows of stride " + std::to_string(stride) +
                                " (expected rows * stride)");
  return Status::Ok();
}

}  // namespace

Result<std::uint64_t> ServedBytes(std::uint64_t d_out, std::uint64_t nblocks) {
  if (nblocks > kMaxBlocks)
    return InvalidArgumentError("tetra served size: nblocks " + std::to_string(nblocks) + " exceeds 2^60");
  const std::uint64_t stride = ServedRowStride(nblocks);
  if (stride != 0 && d_out > UINT64_MAX / stride)
    return InvalidArgumentError("tetra served size: " + std::to_string(d_out) + " rows of " +
                                std::to_string(stride) + " bytes overflow 64 bits");
  return d_out * stride;
}

Status DiskToServed(std::span<const std::byte> disk, std::uint64_t nblocks, std::span<std::byte> served) {
  std::uint64_t rows = 0;
  EXLR8_RETURN_IF_ERROR(CheckSizes("tetra DiskToServed", disk.size(), nblocks, served.size(), &rows));
  const std::uint64_t stride = ServedRowStride(nblocks);
  for (std::uint64_t i = 0; i < rows; ++i) {
    const std::byte* in = disk.data() + 6 * nblocks * i;
    std::byte* out = served.data() + stride * i;
    // Every word but the row's last: one 8-byte load and store (the 2 extra
    // bytes written are the next word's, rewritten by the next step).
    for (std::uint64_t j = 0; j + 1 < nblocks; ++j) {
      std::uint64_t v;
      std::memcpy(&v, in + 6 * j, 8);
      const std::uint64_t w = DiskToWord(__builtin_bswap64(v) >> 16);
      std::memcpy(out + 6 * j, &w, 8);
    }
    std::uint64_t v = 0;
    for (int b = 0; b < 6; ++b) v = v << 8 | static_cast<std::uint64_t>(in[6 * (nblocks - 1) + b]);
    WordToServed(DiskToWord(v), out + 6 * (nblocks - 1));
    std::memset(out + 6 * nblocks, 0, stride - 6 * nblocks);
  }
  return Status::Ok();
}

Status ServedToDisk(std::span<const std::byte> served, std::uint64_t nblocks, std::span<std::byte> disk) {
  std::uint64_t rows = 0;
  EXLR8_RETURN_IF_ERROR(CheckSizes("tetra ServedToDisk", disk.size(), nblocks, served.size(), &rows));
  const std::uint64_t stride = ServedRowStride(nblocks);
  for (std::uint64_t i = 0; i < rows; ++i) {
    const std::byte* in = served.data() + stride * i;
    std::byte* out = disk.data() + 6 * nblocks * i;
    for (std::uint64_t b = 6 * nblocks; b < stride; ++b)
      if (in[b] != std::byte{0})
        return CorruptionError("tetra ServedToDisk: row " + std::to_string(i) + " padding byte " +
                               std::to_string(b) + " (served offset " + std::to_string(stride * i + b) +
                               ") is not zero");
    for (std::uint64_t j = 0; j < nblocks; ++j) {
      std::uint64_t w = 0;
      for (int b = 5; b >= 0; --b) w = w << 8 | static_cast<std::uint64_t>(in[6 * j + b]);
      const std::uint64_t v = WordToDiskValue(w);
      for (int b = 0; b < 6; ++b) out[6 * j + b] = static_cast<std::byte>(v >> (8 * (5 - b)));
    }
  }
  return Status::Ok();
}

std::uint64_t ServedWord(const std::byte* row, std::uint64_t j) {
  static_assert(std::endian::native == std::endian::little, "the u32 windows are little-endian loads");
  std::uint32_t w[2];
  std::memcpy(w, row + 4 * ((3 * j) >> 1), 8);  // the two aligned u32 of spec 2.7 (little-endian host)
  std::uint32_t lo, hi16;
  if (j % 2 == 0) {
    lo = w[0];
    hi16 = w[1] & 0xFFFF;
  } else {
    lo = w[0] >> 16 | w[1] << 16;
    hi16 = w[1] >> 16;
  }
  return std::uint64_t{hi16} << 32 | lo;
}

void WordToServed(std::uint64_t w, std::byte* six) {
  for (int b = 0; b < 6; ++b) six[b] = static_cast<std::byte>(w >> (8 * b));
}

}  // namespace exlr8::tetra
