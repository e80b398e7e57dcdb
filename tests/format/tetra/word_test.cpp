// The Tetra word: both byte orders, the decode against the lvq5-tiny
// fixture's 4,096 words, the lattice invariants of TETRA-LVQ5.md 3.3 over
// seeded random words, the bulk decode against the reference decode, and
// the block reconstruction.
#include "format/tetra/word.h"

#include <gtest/gtest.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "format/tetra/internal.h"
#include "format/tetra/tables.h"
#include "tests/format/test_util.h"

namespace exlr8::tetra {
namespace {

using Point = std::array<std::int8_t, 24>;

Point Decode(std::uint64_t w) {
  Point y{};
  DecodeCoords(BuiltTables(), w, y.data());
  return y;
}

std::vector<std::byte> Bytes(std::initializer_list<int> v) {
  std::vector<std::byte> b;
  for (int x : v) b.push_back(static_cast<std::byte>(x));
  return b;
}

TEST(TetraWord, DiskOrderHandBuilt) {
  // V = 0x123456789abc: gain 0, label V >> 1.
  EXPECT_EQ(WordFromDisk(Bytes({0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc}).data()), 0x091a2b3c4d5eULL);
  // V = 1: gain 1, label 0 -> W = 2^47.
  EXPECT_EQ(WordFromDisk(Bytes({0, 0, 0, 0, 0, 1}).data()), kGainBit);
  // V = 2: label 1 (the parity bit p).
  EXPECT_EQ(WordFromDisk(Bytes({0, 0, 0, 0, 0, 2}).data()), 1ULL);
  // V = 2^47: the label's top bit (bit 46, top of i3).
  EXPECT_EQ(WordFromDisk(Bytes({0x80, 0, 0, 0, 0, 0}).data()), 1ULL << 46);
  std::byte six[6];
  WordToDisk(0x091a2b3c4d5eULL | kGainBit, six);
  EXPECT_EQ(std::vector<std::byte>(six, six + 6), Bytes({0x12, 0x34, 0x56, 0x78, 0x9a, 0xbd}));
}

TEST(TetraWord, DiskOrderRoundTrip) {
  std::mt19937_64 rng(28);
  for (int i = 0; i < 100000; ++i) {
    const std::uint64_t w = rng() & (kGainBit | kLabelMask);
    std::byte six[6];
    WordToDisk(w | (rng() << 48), six);  // bits above 47 are ignored
    ASSERT_EQ(WordFromDisk(six), w);
    std::byte again[6];
    WordToDisk(WordFromDisk(six), again);
    ASSERT_EQ(std::memcmp(six, again, 6), 0);
  }
}

TEST(TetraWord, FixtureWordsDecodeToTheirCoordinates) {
  const auto bytes = testing::ReadBytes(testing::SharedDir() / "fixtures" / "lvq5-tiny" / "words.bin");
  ASSERT_EQ(bytes.size(), 4096U * 32) << "fixtures/lvq5-tiny/words.bin";
  for (std::size_t i = 0; i < 4096; ++i) {
    std::uint64_t w = 0;
    std::memcpy(&w, bytes.data() + 32 * i, 8);
    ASSERT_EQ(w >> 48, 0U) << "record " << i;
    Point want{};
    std::memcpy(want.data(), bytes.data() + 32 * i + 8, 24);
    ASSERT_EQ(Decode(w), want) << "record " << i << " word 0x" << std::hex << w;
  }
}

TEST(TetraWord, OriginAndExtremes) {
  EXPECT_EQ(Decode(0), Point{});
  EXPECT_EQ(Decode(kGainBit), Point{});
  EXPECT_EQ(Decode(kLabelMask), Decode(kLabelMask | kGainBit));
  EXPECT_EQ(Decode(kLabelMask | 0xFFFF000000000000ULL), Decode(kLabelMask));
}

// Spec 3.3: parity, Golay codeword, sum k = p (mod 2), sum y^2 = 0 (mod 16),
// |y_j| <= 10, m <= 26, the gain bit never moves the point.
TEST(TetraWord, LatticeInvariantsOfRandomWords) {
  std::mt19937_64 rng(2026);
  std::uint32_t max_m = 0;
  for (int n = 0; n < 300000; ++n) {
    const std::uint64_t w = rng() & kLabelMask;
    const Point y = Decode(w);
    const int p = static_cast<int>(w & 1);
    std::uint32_t c = 0;
    int sum_k = 0, sum_sq = 0;
    for (int j = 0; j < 24; ++j) {
      ASSERT_LE(std::abs(y[j]), 10) << std::hex << w;
      ASSERT_EQ(((y[j] % 2) + 2) % 2, p) << std::hex << w;
      const int cj = (((y[j] - p) / 2) % 2 + 2) % 2;
      c |= static_cast<std::uint32_t>(cj) << j;
      sum_k += (y[j] - p - 2 * cj) / 4;
      sum_sq += y[j] * y[j];
    }
    ASSERT_TRUE(internal::IsGolayCodeword(c)) << std::hex << w;
    ASSERT_EQ(((sum_k % 2) + 2) % 2, p) << std::hex << w;
    ASSERT_EQ(sum_sq % 16, 0) << std::hex << w;
    ASSERT_EQ(ShellIndex(y.data()), static_cast<std::uint32_t>(sum_sq / 16));
    max_m = std::max(max_m, ShellIndex(y.data()));
    if (n % 8 == 0) {
      ASSERT_EQ(Decode(w | kGainBit), y) << std::hex << w;
    }
  }
  EXPECT_LE(max_m, 26U);
}

TEST(TetraWord, DistinctLabelsDecodeToDistinctPoints) {
  std::mt19937_64 rng(47);
  std::set<Point> points;
  std::set<std::uint64_t> labels;
  for (int n = 0; n < 100000; ++n) {
    const std::uint64_t w = rng() & kLabelMask;
    if (labels.insert(w).second) {
      ASSERT_TRUE(points.insert(Decode(w)).second) << std::hex << w;
    }
  }
  // Neighbours: every single-bit change of a label moves the point.
  for (int n = 0; n < 2000; ++n) {
    const std::uint64_t w = rng() & kLabelMask;
    const Point y = Decode(w);
    for (int bit = 0; bit < 47; ++bit)
      ASSERT_NE(Decode(w ^ (1ULL << bit)), y) << std::hex << w << " bit " << bit;
  }
}

// DecodeDiskWords (SIMD where the CPU has it, and the portable path)
// equals WordFromDisk + DecodeCoords word by word, for the built tables
// (cached expansion), a copy (expanded per call) and tables with another
// order (the reference path).
TEST(TetraWord, BulkDecodeEqualsReferenceDecode) {
  Tables copy = BuiltTables();
  Tables reordered = BuiltTables();
  std::swap(reordered.order[0], reordered.order[23]);
  std::mt19937_64 rng(6);
  for (std::size_t n : {1U, 2U, 3U, 7U, 4099U}) {
    std::vector<std::byte> disk(6 * n);
    for (auto& b : disk) b = static_cast<std::byte>(rng());
    for (const Tables* t :
         {&BuiltTables(), static_cast<const Tables*>(&copy), static_cast<const Tables*>(&reordered)}) {
      std::vector<std::int8_t> out(24 * n, 99), portable(24 * n, 99);
      DecodeDiskWords(*t, disk, out);
      internal::DecodeDiskWordsPortable(*t, disk, portable);
      for (std::size_t i = 0; i < n; ++i) {
        std::int8_t want[24];
        DecodeCoords(*t, WordFromDisk(disk.data() + 6 * i), want);
        ASSERT_EQ(std::memcmp(out.data() + 24 * i, want, 24), 0) << "n " << n << " word " << i;
        ASSERT_EQ(std::memcmp(portable.data() + 24 * i, want, 24), 0) << "portable, n " << n << " word " << i;
      }
    }
  }
}

TEST(TetraWord, BulkDecodeRefusesMismatchedSizes) {
  std::vector<std::byte> disk(12, std::byte{0xff});
  std::vector<std::int8_t> out(47, 99);
  DecodeDiskWords(BuiltTables(), disk, out);
  EXPECT_EQ(out, std::vector<std::int8_t>(47, 99));
  std::vector<std::int8_t> out2(24, 99);
  DecodeDiskWords(BuiltTables(), std::span<const std::byte>(disk).first(5), out2);
  EXPECT_EQ(out2, std::vector<std::int8_t>(24, 99));
}

TEST(TetraWord, ReconstructBlockFollowsTheRecipe) {
  float out[24];
  const Point origin{};
  ReconstructBlock(origin.data(), 1.5, 2.0, out);
  for (float v : out) EXPECT_EQ(std::bit_cast<std::uint32_t>(v), 0U);
  std::mt19937_64 rng(9);
  for (int n = 0; n < 1000; ++n) {
    const Point y = Decode(rng() & kLabelMask);
    const double centroid = 0.25 + static_cast<double>(rng() % 1000) / 997.0;
    const double row_scale = static_cast<double>(rng() % 100000) / 3e6;
    ReconstructBlock(y.data(), centroid, row_scale, out);
    const std::uint32_t m = ShellIndex(y.data());
    const double scale = m == 0 ? 0.0 : (centroid * row_scale) / std::sqrt(16.0 * m);
    for (int j = 0; j < 24; ++j) {
      volatile double product = static_cast<double>(y[j]) * scale;  // rounded on its own
      ASSERT_EQ(std::bit_cast<std::uint32_t>(out[j]),
                std::bit_cast<std::uint32_t>(static_cast<float>(product)));
    }
  }
}

}  // namespace
}  // namespace exlr8::tetra
