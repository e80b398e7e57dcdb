// gpu/tetra_word.cuh compiled as plain C++ (the host emulates __byte_perm):
// the kernel's per-word decode against the CPU reference DecodeCoords over
// the lvq5-tiny fixture's words and millions of seeded random words, and the
// served window read against format/tetra/served.h. No GPU: default tier.
#include "gpu/tetra_word.cuh"

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "format/tetra/served.h"
#include "format/tetra/tables.h"
#include "format/tetra/word.h"
#include "tests/format/test_util.h"

namespace exlr8::tetra_gpu {
namespace {

TetraTableView View() {
  const tetra::Tables& t = tetra::BuiltTables();
  return {t.rows.data(), t.branches.data(), t.prefixes.data(), t.suffixes.data()};
}

// The kernel's decode of W, as 24 int8 in natural order.
std::array<std::int8_t, 24> KernelDecode(std::uint64_t w) {
  std::uint32_t natural[6];
  DecodeTetraWord(View(), static_cast<std::uint32_t>(w), static_cast<std::uint32_t>(w >> 32) & 0xFFFF,
                  natural);
  std::array<std::int8_t, 24> y{};
  std::memcpy(y.data(), natural, 24);
  return y;
}

std::array<std::int8_t, 24> CpuDecode(std::uint64_t w) {
  std::array<std::int8_t, 24> y{};
  tetra::DecodeCoords(tetra::BuiltTables(), w, y.data());
  return y;
}

std::string Show(const std::array<std::int8_t, 24>& y) {
  std::string s;
  for (int v : y) s += std::to_string(v) + " ";
  return s;
}

TEST(TetraGpuWord, TablesAndOrder) {
  ASSERT_TRUE(tetra::TablesStatus().ok()) << tetra::TablesStatus().ToString();
  EXPECT_EQ(tetra::BuiltTables().order, kTetraOrder);
  EXPECT_EQ(tetra::BuiltTables().n0, tetra::kN0);
}

TEST(TetraGpuWord, BytePermEmulation) {
  // Selector nibbles pick bytes 0..7 of y:x; bit 3 of each nibble and the
  // selector's upper 16 bits are ignored.
  EXPECT_EQ(BytePerm(0x33221100u, 0x77665544u, 0x3210u), 0x33221100u);
  EXPECT_EQ(BytePerm(0x33221100u, 0x77665544u, 0x4567u), 0x44556677u);
  EXPECT_EQ(BytePerm(0x33221100u, 0x77665544u, 0xFFFF0000u | 0x8888u), 0x00000000u);
  EXPECT_EQ(ByteMask4(0x5u), 0x00FF00FFu);
  EXPECT_EQ(ByteMask4(0xAu), 0xFF00FF00u);
}

TEST(TetraGpuWord, FixtureWords) {
  const auto bytes = testing::ReadBytes(testing::SharedDir() / "fixtures" / "lvq5-tiny" / "words.bin");
  ASSERT_EQ(bytes.size(), 4096u * 32) << "fixtures/lvq5-tiny/words.bin";
  for (std::size_t i = 0; i < 4096; ++i) {
    std::uint64_t w;
    std::memcpy(&w, bytes.data() + 32 * i, 8);
    std::array<std::int8_t, 24> want{};
    std::memcpy(want.data(), bytes.data() + 32 * i + 8, 24);
    ASSERT_EQ(KernelDecode(w), want) << "fixture word " << i << " 0x" << std::hex << w << std::dec
                                     << ": kernel " << Show(KernelDecode(w)) << " fixture " << Show(want);
  }
}

TEST(TetraGpuWord, RandomWordsMatchTheCpu) {
  std::mt19937_64 rng(0x7e7a);
  for (int i = 0; i < 2'000'000; ++i) {
    const std::uint64_t w = rng() & (tetra::kLabelMask | tetra::kGainBit);
    ASSERT_EQ(KernelDecode(w), CpuDecode(w)) << "word 0x" << std::hex << w << std::dec;
  }
  // Every single-field extreme: all-zero and all-one fields.
  for (std::uint64_t w :
       {std::uint64_t{0}, tetra::kLabelMask, tetra::kGainBit, tetra::kLabelMask | tetra::kGainBit})
    ASSERT_EQ(KernelDecode(w), CpuDecode(w)) << "word 0x" << std::hex << w;
  for (int bit = 0; bit < 48; ++bit) {
    const std::uint64_t w = std::uint64_t{1} << bit;
    ASSERT_EQ(KernelDecode(w), CpuDecode(w)) << "bit " << bit;
    ASSERT_EQ(KernelDecode(~w & 0xFFFFFFFFFFFFULL), CpuDecode(~w & 0xFFFFFFFFFFFFULL))
        << "all but bit " << bit;
  }
}

// The window read of served rows (both parities, the last window of odd
// and even rows) gives the words DiskToServed wrote.
TEST(TetraGpuWord, ServedWindows) {
  std::mt19937_64 rng(5);
  for (std::uint64_t nblocks : {1, 2, 3, 5, 8, 13}) {
    std::vector<std::byte> disk(6 * nblocks * 3);
    for (auto& b : disk) b = static_cast<std::byte>(rng());
    std::vector<std::byte> served(tetra::ServedRowStride(nblocks) * 3);
    ASSERT_TRUE(tetra::DiskToServed(disk, nblocks, served).ok());
    for (std::uint64_t i = 0; i < 3; ++i)
      for (std::uint32_t j = 0; j < nblocks; ++j) {
        std::uint32_t w[2];
        std::memcpy(w, served.data() + tetra::ServedRowStride(nblocks) * i + 4 * ((3 * j) >> 1), 8);
        std::uint32_t lo, hi16;
        ServedWindow(w[0], w[1], j, lo, hi16);
        ASSERT_EQ(std::uint64_t{hi16} << 32 | lo, tetra::WordFromDisk(disk.data() + 6 * (nblocks * i + j)))
            << "nblocks " << nblocks << " row " << i << " block " << j;
      }
  }
}

// The kernel's block reconstruction (host build) against ReconstructBlock,
// bit for bit, with centroids and row scales of both signs.
TEST(TetraGpuWord, ReconstructionMatchesTheCpuBitForBit) {
  std::mt19937_64 rng(24);
  std::normal_distribution<double> gauss(0.0, 0.05);
  for (int i = 0; i < 200'000; ++i) {
    const std::uint64_t w = rng() & (tetra::kLabelMask | tetra::kGainBit);
    const double centroid = gauss(rng) * 20, row_scale = gauss(rng);
    std::uint32_t natural[6];
    DecodeTetraWord(View(), static_cast<std::uint32_t>(w), static_cast<std::uint32_t>(w >> 32) & 0xFFFF,
                    natural);
    std::int8_t y[24];
    std::memcpy(y, natural, 24);
    const std::uint32_t m = TetraShell(natural);
    ASSERT_EQ(m, tetra::ShellIndex(y));
    float want[24];
    tetra::ReconstructBlock(y, centroid, row_scale, want);
    for (int j = 0; j < 24; ++j) {
      const float got = m == 0 ? 0.0F : TetraScaledCoord(y[j], TetraBlockScale(centroid, row_scale, m));
      ASSERT_EQ(std::bit_cast<std::uint32_t>(got), std::bit_cast<std::uint32_t>(want[j]))
          << "word 0x" << std::hex << w << std::dec << " coordinate " << j;
    }
  }
  // The origin (word 0) reconstructs as zeros.
  std::uint32_t zero[6];
  DecodeTetraWord(View(), 0, 0, zero);
  EXPECT_EQ(TetraShell(zero), 0u);
}

}  // namespace
}  // namespace exlr8::tetra_gpu
