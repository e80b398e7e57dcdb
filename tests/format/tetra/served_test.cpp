// The served layout of Tetra code streams (format/tetra/served.h,
// TETRA-LVQ5.md 2.7): hand-built bytes, the round trip, the row padding, the
// device's two-u32 window read, and the size and padding errors.
#include "format/tetra/served.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "format/tetra/word.h"

namespace exlr8::tetra {
namespace {

std::vector<std::byte> RandomBytes(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::byte> b(n);
  for (auto& x : b) x = static_cast<std::byte>(rng());
  return b;
}

TEST(TetraServed, RowStride) {
  EXPECT_EQ(ServedRowStride(0), 0u);
  EXPECT_EQ(ServedRowStride(1), 8u);    // 6 -> 8
  EXPECT_EQ(ServedRowStride(2), 16u);   // 12 -> 16
  EXPECT_EQ(ServedRowStride(3), 24u);   // 18 -> 24
  EXPECT_EQ(ServedRowStride(4), 24u);   // 24 -> 24
  EXPECT_EQ(ServedRowStride(11), 72u);  // 66 -> 72
  EXPECT_EQ(ServedRowStride(106), 640u);
  for (std::uint64_t n = 1; n < 1000; ++n) {
    const std::uint64_t s = ServedRowStride(n);
    ASSERT_EQ(s % 8, 0u);
    ASSERT_GE(s, 6 * n);
    ASSERT_LT(s, 6 * n + 8);
  }
  EXPECT_EQ(*ServedBytes(3, 11), 216u);
  EXPECT_FALSE(ServedBytes(UINT64_MAX / 8, 11).ok());
}

TEST(TetraServed, HandBuiltWord) {
  // Disk V = 0x123456789abd: label 0x091a2b3c4d5e, gain 1 -> W = label | 2^47,
  // served little-endian: 5e 4d 3c 2b 1a 89, then 2 padding bytes.
  const std::vector<std::byte> disk = {std::byte{0x12}, std::byte{0x34}, std::byte{0x56},
                                       std::byte{0x78}, std::byte{0x9a}, std::byte{0xbd}};
  std::vector<std::byte> served(8, std::byte{0xEE});
  ASSERT_TRUE(DiskToServed(disk, 1, served).ok());
  const std::vector<std::byte> want = {std::byte{0x5e}, std::byte{0x4d}, std::byte{0x3c}, std::byte{0x2b},
                                       std::byte{0x1a}, std::byte{0x89}, std::byte{0},    std::byte{0}};
  EXPECT_EQ(served, want);
  EXPECT_EQ(ServedWord(served.data(), 0), 0x091a2b3c4d5eULL | kGainBit);
  EXPECT_EQ(ServedWord(served.data(), 0), WordFromDisk(disk.data()));
}

// Both window parities, odd and even row lengths, several rows: every word
// read through spec 2.7's u32 windows equals WordFromDisk of its disk bytes,
// the padding is zero, and the round trip gives the disk stream back.
TEST(TetraServed, RoundTripAndWindows) {
  for (std::uint64_t nblocks : {1, 2, 3, 4, 5, 7, 11, 16, 107}) {
    const std::uint64_t rows = 5;
    const auto disk = RandomBytes(6 * nblocks * rows, 28 + nblocks);
    const std::uint64_t stride = ServedRowStride(nblocks);
    std::vector<std::byte> served(stride * rows, std::byte{0xEE});
    ASSERT_TRUE(DiskToServed(disk, nblocks, served).ok()) << nblocks;
    for (std::uint64_t i = 0; i < rows; ++i) {
      const std::byte* row = served.data() + stride * i;
      for (std::uint64_t j = 0; j < nblocks; ++j)
        ASSERT_EQ(ServedWord(row, j), WordFromDisk(disk.data() + 6 * (nblocks * i + j)))
            << "nblocks " << nblocks << " row " << i << " block " << j;
      for (std::uint64_t b = 6 * nblocks; b < stride; ++b)
        ASSERT_EQ(row[b], std::byte{0}) << "padding, nblocks " << nblocks << " row " << i << " byte " << b;
    }
    std::vector<std::byte> back(disk.size());
    ASSERT_TRUE(ServedToDisk(served, nblocks, back).ok());
    EXPECT_EQ(back, disk) << nblocks;
  }
}

TEST(TetraServed, WordToServedIsLittleEndian) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 10000; ++i) {
    const std::uint64_t w = rng() & (kLabelMask | kGainBit);
    std::byte row[8] = {};
    WordToServed(w | (rng() << 48), row);
    std::uint64_t le = 0;
    std::memcpy(&le, row, 8);
    ASSERT_EQ(le, w);
    ASSERT_EQ(ServedWord(row, 0), w);
  }
}

TEST(TetraServed, SizeErrors) {
  std::vector<std::byte> disk(6 * 3 * 2), served(24 * 2);
  EXPECT_EQ(DiskToServed(disk, 0, served).code(), StatusCode::kInvalidArgument);
  // 36 disk bytes are not whole rows of 5 blocks.
  EXPECT_EQ(DiskToServed(disk, 5, served).code(), StatusCode::kInvalidArgument);
  // Served one row short / one byte long.
  EXPECT_EQ(DiskToServed(disk, 3, std::span(served).first(24)).code(), StatusCode::kInvalidArgument);
  std::vector<std::byte> longer(49);
  EXPECT_EQ(DiskToServed(disk, 3, longer).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ServedToDisk(longer, 3, disk).code(), StatusCode::kInvalidArgument);
  const Status s = DiskToServed(disk, 5, served);
  EXPECT_NE(s.message().find("36 disk bytes"), std::string::npos) << s.ToString();
  EXPECT_TRUE(DiskToServed(disk, 3, served).ok());
  // Empty streams are zero rows.
  EXPECT_TRUE(DiskToServed({}, 3, {}).ok());
}

TEST(TetraServed, NonZeroPaddingIsCorruption) {
  const auto disk = RandomBytes(6 * 3 * 2, 1);
  std::vector<std::byte> served(24 * 2);
  ASSERT_TRUE(DiskToServed(disk, 3, served).ok());
  served[24 + 20] = std::byte{1};  // row 1, padding byte 20
  std::vector<std::byte> back(disk.size());
  const Status s = ServedToDisk(served, 3, back);
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_NE(s.message().find("row 1 padding byte 20"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace exlr8::tetra
