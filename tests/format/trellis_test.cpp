// Tile decode against spec 7/8/15 and the golden fixtures (spec 16).
#include "format/trellis.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "format/dtype.h"
#include "tests/format/golden_files.h"

namespace exlr8 {
namespace {

using testing::LoadSafetensors;
using testing::ReadWholeFile;
using testing::Sha256Hex;
using testing::SharedPath;

std::uint32_t Bits(float f) { return std::bit_cast<std::uint32_t>(f); }

// Independent per-bit decoder written straight from spec 7.1 (the u16 pair
// swap form), 7.2, 7.3 (the value-sum form) and 7.6.
std::vector<float> NaiveDecode(const std::vector<std::uint8_t>& tile, int k) {
  const int words = 16 * k;
  std::vector<std::uint16_t> w(words), s(words);
  for (int i = 0; i < words; ++i) w[i] = static_cast<std::uint16_t>(tile[2 * i] | (tile[2 * i + 1] << 8));
  for (int q = 0; q < words / 2; ++q) {
    s[2 * q] = w[2 * q + 1];
    s[2 * q + 1] = w[2 * q];
  }
  auto bit = [&](int n) { return (s[n / 16] >> (15 - n % 16)) & 1; };
  std::vector<std::uint32_t> v(256);
  for (int i = 0; i < 256; ++i) {
    std::uint32_t val = 0;
    for (int b = 0; b < k; ++b) val = val * 2 + bit(i * k + b);
    v[i] = val;
  }
  std::vector<float> out(256);
  const int terms = (16 + k - 1) / k;
  for (int i = 0; i < 256; ++i) {
    std::uint64_t st = 0;
    for (int j = 0; j < terms; ++j) st += static_cast<std::uint64_t>(v[(i - j + 256) % 256]) << (j * k);
    st &= 0xFFFF;
    const int t = i / 8, m = i % 8;
    const int row = 2 * (t % 4) + (m & 1) + 8 * ((m >> 1) & 1);
    const int col = t / 4 + 8 * (m >> 2);
    out[row * 16 + col] = CodebookF32()[st];
  }
  return out;
}

std::vector<float> Decode(const std::vector<std::uint8_t>& tile, int k) {
  std::vector<float> out(256);
  DecodeTile(reinterpret_cast<const std::byte*>(tile.data()), k, out.data());
  return out;
}

TEST(Codebook, MatchesGoldenFileBitForBit) {
  const auto golden = ReadWholeFile(SharedPath("fixtures/golden/codebook.f32"));
  ASSERT_EQ(golden.size(), kCodebookSize * 4);
  const float* cb = CodebookF32();
  std::size_t mismatches = 0;
  for (std::size_t s = 0; s < kCodebookSize; ++s) {
    const std::uint32_t want = LoadLE32(golden.data() + 4 * s);
    if (Bits(cb[s]) != want && ++mismatches < 5) ADD_FAILURE() << "state " << s;
  }
  EXPECT_EQ(mismatches, 0u);
  EXPECT_EQ(Sha256Hex(cb, kCodebookSize * 4), "44e78f7a0260c97e54c7f0122e7df4bcdd362601baa36f45d8038973877c624d");
}

TEST(Codebook, BytesTableAgreesWithFloatTable) {
  const float* f = CodebookF32();
  const std::uint8_t* b = CodebookE4M3Bytes();
  for (std::size_t s = 0; s < kCodebookSize; ++s) ASSERT_EQ(Bits(E4M3ToFloat(b[s])), Bits(f[s])) << s;
}

TEST(Codebook, FirstEntriesSpec15Item4) {
  const float want[8] = {1.875f, 0.140625f, -0.75f, 0.8125f, 0.6875f, -0.46875f, -1.625f, -1.125f};
  for (int s = 0; s < 8; ++s) EXPECT_EQ(CodebookF32()[s], want[s]) << s;
}

TEST(Codebook, StatisticsSpec15Item5) {
  std::set<float> distinct;
  int pos_zero = 0, neg_zero = 0;
  double sum = 0;
  for (std::size_t s = 0; s < kCodebookSize; ++s) {
    const float f = CodebookF32()[s];
    ASSERT_TRUE(std::isfinite(f));
    ASSERT_LE(std::fabs(f), 4.0f);
    distinct.insert(f);  // +0 == -0 in a set<float>
    if (f == 0) (std::signbit(f) ? neg_zero : pos_zero)++;
    sum += f;
  }
  EXPECT_EQ(distinct.size(), 145u);
  EXPECT_EQ(pos_zero, 41);
  EXPECT_EQ(neg_zero, 34);
  EXPECT_EQ(sum, -1551.0 / 256.0);
}

TEST(Codebook, DoubleRoundingSpec15Item3) {
  // state 0x0010: exact sum -0.5313720703125 -> fp16 -0.53125 -> E4M3 tie -> -0.5
  EXPECT_EQ(HalfToFloat(CodebookFp16Bits(0x0010)), -0.53125f);
  EXPECT_EQ(CodebookF32()[0x0010], -0.5f);
  // Rounding the exact sum straight to E4M3 would give -0.5625.
  EXPECT_EQ(E4M3ToFloat(FloatToE4M3(-0.5313720703125f)), -0.5625f);
}

TEST(E4M3, EveryFiniteByteRoundTrips) {
  for (int b = 0; b < 256; ++b) {
    const float f = E4M3ToFloat(static_cast<std::uint8_t>(b));
    if (IsE4M3NaN(static_cast<std::uint8_t>(b))) {
      EXPECT_TRUE(std::isnan(f)) << b;
      continue;
    }
    EXPECT_EQ(FloatToE4M3(f), b) << b;
  }
  EXPECT_EQ(E4M3ToFloat(0x7E), 448.0f);
  EXPECT_EQ(E4M3ToFloat(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(E4M3ToFloat(0x08), std::ldexp(1.0f, -6));
}

TEST(E4M3, RoundingSaturationAndSigns) {
  EXPECT_EQ(FloatToE4M3(1.8125f), FloatToE4M3(1.75f));    // tie -> even mantissa (1.75 = 1.110b)
  EXPECT_EQ(FloatToE4M3(1.84375f), FloatToE4M3(1.875f));  // above the midpoint
  EXPECT_EQ(FloatToE4M3(1000.0f), 0x7E);
  EXPECT_EQ(FloatToE4M3(464.0f), 0x7E);
  EXPECT_EQ(FloatToE4M3(INFINITY), 0x7E);
  EXPECT_EQ(FloatToE4M3(-INFINITY), 0xFE);
  EXPECT_EQ(FloatToE4M3(NAN), 0x7F);
  EXPECT_EQ(FloatToE4M3(std::ldexp(1.0f, -10)), 0x00);        // tie 0 / 2^-9 -> 0
  EXPECT_EQ(FloatToE4M3(std::ldexp(3.0f, -10)), 0x02);        // tie 2^-9 / 2^-8 -> even (2)
  EXPECT_EQ(FloatToE4M3(-1e-9f), 0x80);                       // -0 keeps its sign
  EXPECT_EQ(FloatToE4M3(std::ldexp(15.5f, -10)), 0x08);       // carry from subnormal into normal
  EXPECT_EQ(FloatToE4M3(15.5f), FloatToE4M3(16.0f));          // carry into the next binade
  EXPECT_EQ(FloatToE4M3(-0.5625f), 0xB1);
}

TEST(Tile, PermutationIsABijectionWithSpecFirstPositions) {
  std::set<int> seen;
  for (int i = 0; i < 256; ++i) seen.insert(TilePositionOfStreamIndex(i));
  EXPECT_EQ(seen.size(), 256u);
  const int first[9][2] = {{0, 0}, {1, 0}, {8, 0}, {9, 0}, {0, 8}, {1, 8}, {8, 8}, {9, 8}, {2, 0}};
  for (int i = 0; i < 9; ++i) EXPECT_EQ(TilePositionOfStreamIndex(i), first[i][0] * 16 + first[i][1]) << i;
}

TEST(Tile, AllZeroAndAllOnesSpec15Items1And2) {
  for (int k = kMinTrellisK; k <= kMaxTrellisK; ++k) {
    for (float v : Decode(std::vector<std::uint8_t>(32 * k, 0x00), k)) ASSERT_EQ(v, 1.875f) << k;
    for (float v : Decode(std::vector<std::uint8_t>(32 * k, 0xFF), k)) ASSERT_EQ(v, 0.875f) << k;
  }
}

struct BitCase {
  int k;
  int byte;
  std::uint8_t value;
  std::vector<std::pair<std::pair<int, int>, float>> expect;  // (row, col) -> value
};

TEST(Tile, SingleSetBitSpec15Item6) {
  const std::vector<BitCase> cases = {
      {2, 3, 0x80, {{{0, 0}, -0.75f}, {{1, 0}, 0.125f}, {{8, 0}, 1.25f}, {{9, 0}, -2.75f},
                    {{0, 8}, 0.0625f}, {{1, 8}, 1.125f}, {{8, 8}, -1.5f}, {{9, 8}, -0.625f}}},
      {2, 1, 0x80, {{{2, 0}, -0.75f}, {{3, 0}, 0.125f}, {{10, 0}, 1.25f}, {{11, 0}, -2.75f},
                    {{2, 8}, 0.0625f}, {{3, 8}, 1.125f}, {{10, 8}, -1.5f}, {{11, 8}, -0.625f}}},
      {2, 60, 0x01, {{{15, 15}, 0.140625f}, {{0, 0}, 0.6875f}, {{1, 0}, -0.5f}, {{8, 0}, -0.28125f},
                     {{9, 0}, -0.875f}, {{0, 8}, -2.75f}, {{1, 8}, -1.75f}, {{8, 8}, 2.0f}}},
      {3, 3, 0x80, {{{0, 0}, 0.6875f}, {{1, 0}, 1.25f}, {{8, 0}, -0.875f}, {{9, 0}, 1.125f}, {{0, 8}, 2.0f}}},
      {4, 3, 0x80, {{{0, 0}, 0.125f}, {{1, 0}, -2.75f}, {{8, 0}, 1.125f}, {{9, 0}, -0.625f}}},
  };
  for (const BitCase& c : cases) {
    std::vector<std::uint8_t> tile(32 * c.k, 0);
    tile[c.byte] = c.value;
    const auto out = Decode(tile, c.k);
    std::vector<bool> listed(256, false);
    for (const auto& [pos, v] : c.expect) {
      EXPECT_EQ(out[pos.first * 16 + pos.second], v) << "K" << c.k << " byte " << c.byte << " at (" << pos.first
                                                     << "," << pos.second << ")";
      listed[pos.first * 16 + pos.second] = true;
    }
    for (int i = 0; i < 256; ++i) {
      if (listed[i]) continue;
      EXPECT_EQ(out[i], 1.875f) << "K" << c.k << " byte " << c.byte << " element " << i;
    }
  }
}

TEST(Tile, RampTilesSpec15Item7) {
  struct Ramp {
    int k;
    const char* sha;
    double sum;
  };
  const Ramp ramps[] = {
      {2, "1a63b3d9343836848b997c79a8b8a90f469e14eb3b82706a7a5de59796a06744", -6.078125},
      {3, "be04263673e94d29f61f3717a3e9e5da66aad50552e8e1af42806602a444b446", 1.10546875},
      {4, "b91df5b63a91f679895c5adfef09567fa625d69b611b24ad6b6112f4d6be5d04", -1.775390625},
  };
  for (const Ramp& r : ramps) {
    std::vector<std::uint8_t> tile(32 * r.k);
    for (std::size_t j = 0; j < tile.size(); ++j) tile[j] = static_cast<std::uint8_t>(j % 256);
    const auto out = Decode(tile, r.k);
    EXPECT_EQ(Sha256Hex(out), r.sha) << "K" << r.k;
    double sum = 0;
    for (float v : out) sum += v;
    EXPECT_EQ(sum, r.sum) << "K" << r.k;
    if (r.k == 2) {
      EXPECT_EQ(out[0], -0.9375f);
      EXPECT_EQ(out[1], -0.3125f);
      EXPECT_EQ(out[2], 2.25f);
      EXPECT_EQ(out[3], 0.5625f);
      EXPECT_EQ(out[0], CodebookF32()[0xF4F0]);
    }
  }
}

TEST(Tile, MatchesNaivePerBitDecoderOnRandomTiles) {
  const unsigned seed = 20240611;
  std::mt19937 rng(seed);
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (int k = kMinTrellisK; k <= kMaxTrellisK; ++k) {
    for (int rep = 0; rep < 40; ++rep) {
      std::vector<std::uint8_t> tile(32 * k);
      for (auto& b : tile) b = static_cast<std::uint8_t>(rng());
      const auto fast = Decode(tile, k);
      const auto naive = NaiveDecode(tile, k);
      for (int i = 0; i < 256; ++i) ASSERT_EQ(Bits(fast[i]), Bits(naive[i])) << "K" << k << " rep " << rep << " i " << i;
    }
  }
}

TEST(Tile, GoldenTilesEveryWidthBitForBit) {
  auto file = LoadSafetensors(SharedPath("fixtures/golden/tiles.safetensors"));
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  for (int k = kMinTrellisK; k <= kMaxTrellisK; ++k) {
    const std::string prefix = "k" + std::to_string(k);
    const auto raw = file->Tensor(prefix + ".raw");
    const auto want = file->F32(prefix + ".decoded");
    ASSERT_EQ(raw.size(), 64 * TileBytes(k)) << prefix;
    ASSERT_EQ(want.size(), 64u * 256u) << prefix;
    for (int t = 0; t < 64; ++t) {
      float out[256];
      DecodeTile(raw.data() + t * TileBytes(k), k, out);
      for (int i = 0; i < 256; ++i)
        ASSERT_EQ(Bits(out[i]), Bits(want[t * 256 + i])) << prefix << " tile " << t << " element " << i;
    }
  }
}

std::vector<std::byte> RandomBytes(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<std::byte> b(n);
  for (auto& x : b) x = static_cast<std::byte>(rng());
  return b;
}

TEST(HalfTiles, GateUpPlacementSpec8_1) {
  const int k = 3;
  const std::uint64_t hidden = 256;
  const auto half = RandomBytes(16 * k * hidden, 7);
  std::vector<float> t(128 * hidden);
  ASSERT_TRUE(DecodeHalfTiles(half, k, HalfLayout::kGateUp, hidden, t).ok());
  for (std::size_t n = 0; n < hidden / 2; ++n) {
    float tile[256];
    DecodeTile(half.data() + n * TileBytes(k), k, tile);
    const std::size_t a = n / 8, c = n % 8;
    for (int r = 0; r < 16; ++r)
      for (int col = 0; col < 16; ++col)
        ASSERT_EQ(Bits(t[(16 * a + r) * 128 + 16 * c + col]), Bits(tile[r * 16 + col])) << n;
  }
}

TEST(HalfTiles, DownPlacementSpec8_2) {
  const int k = 2;
  const std::uint64_t hidden = 384;
  const auto half = RandomBytes(16 * k * hidden, 8);
  std::vector<float> t(128 * hidden);
  ASSERT_TRUE(DecodeHalfTiles(half, k, HalfLayout::kDown, hidden, t).ok());
  for (std::size_t n = 0; n < hidden / 2; ++n) {
    float tile[256];
    DecodeTile(half.data() + n * TileBytes(k), k, tile);
    const std::size_t beta = n / 64, rho = (n / 8) % 8, c = n % 8;
    for (int r = 0; r < 16; ++r)
      for (int col = 0; col < 16; ++col)
        ASSERT_EQ(Bits(t[(16 * rho + r) * hidden + 128 * beta + 16 * c + col]), Bits(tile[r * 16 + col])) << n;
  }
}

TEST(HalfTiles, RejectsBadArguments) {
  std::vector<float> out(128 * 256);
  const auto half = RandomBytes(16 * 2 * 256, 9);
  EXPECT_EQ(DecodeHalfTiles(half, 0, HalfLayout::kGateUp, 256, out).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeHalfTiles(half, 9, HalfLayout::kGateUp, 256, out).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeHalfTiles(half, 2, HalfLayout::kGateUp, 200, out).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeHalfTiles(half, 2, HalfLayout::kGateUp, 0, out).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeHalfTiles(half, 3, HalfLayout::kDown, 256, out).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeHalfTiles(std::span(half).first(half.size() - 1), 2, HalfLayout::kDown, 256, out).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeHalfTiles(half, 2, HalfLayout::kDown, 256, std::span(out).first(100)).code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(DecodeHalfTiles(half, 2, HalfLayout::kDown, 256, out).ok());
}

}  // namespace
}  // namespace exlr8
