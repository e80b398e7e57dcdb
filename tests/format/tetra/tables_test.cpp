// The Tetra tables against TETRA-LVQ5.md 2.5, 2.6 and 3 checks 1-2: the
// fingerprints, the pinned trellis columns and rank rows, and CheckTables
// naming the entry when one is broken.
#include "format/tetra/tables.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "format/tetra/internal.h"

namespace exlr8::tetra {
namespace {

std::array<std::uint32_t, 8> Ranks(std::uint32_t row) {
  std::array<std::uint32_t, 8> rho{};
  for (int j = 0; j < 8; ++j) rho[j] = row >> (4 * j) & 0xF;
  return rho;
}

TEST(TetraTables, BuiltTablesPassTheirSelfCheck) {
  ASSERT_TRUE(TablesStatus().ok()) << TablesStatus().ToString();
  EXPECT_TRUE(CheckTables(BuiltTables()).ok());
}

TEST(TetraTables, FingerprintsAreThePublishedValues) {
  EXPECT_EQ(MapFingerprint(BuiltTables()), 0x9c3060086c7a13e6ULL);
  EXPECT_EQ(MapFingerprint(BuiltTables(), "llvq codebook fingerprint trio v1"), 0xebc752638c8db088ULL);
  EXPECT_EQ(kTetraMapFingerprint, 0x9c3060086c7a13e6ULL);
  EXPECT_EQ(kBallMapFingerprint, 0x338f420f11866319ULL);
}

TEST(TetraTables, TrellisColumnsArePinned) {
  const std::array<std::uint32_t, 12> pinned = {0x2d002e, 0x3a005a, 0x740033, 0x03061e, 0x050963, 0x090578,
                                                0x0000ff, 0x2d1d00, 0x3a2b00, 0x744700, 0x638e00, 0xff0000};
  EXPECT_EQ(BuiltTables().columns, pinned);
}

TEST(TetraTables, RankTablePinnedRowsAndBounds) {
  const Tables& t = BuiltTables();
  EXPECT_EQ(t.n0, 1240U);
  EXPECT_EQ(Ranks(t.rows[2047]), (std::array<std::uint32_t, 8>{1, 1, 0, 3, 0, 0, 1, 1}));
  EXPECT_EQ(internal::RankCost(t.rows[2047]), 88);
  EXPECT_EQ(Ranks(t.rows[4095]), (std::array<std::uint32_t, 8>{0, 0, 2, 2, 2, 0, 1, 1}));
  EXPECT_EQ(internal::RankCost(t.rows[4095]), 96);
  EXPECT_EQ(t.rows[0], 0U);  // the cheapest vector, cost 8
  // The 2048 cheapest of both classes (the mixed order of section 2): n0 of
  // class 0, the last one pinned.
  std::vector<std::pair<int, std::uint32_t>> all;
  for (std::uint32_t row : t.rows) all.emplace_back(internal::RankCost(row), internal::RankLexKey(row));
  std::sort(all.begin(), all.end());
  int class0 = 0;
  for (std::size_t i = 0; i < 2048; ++i) class0 += all[i].first % 16 == 0 ? 0 : 1;
  EXPECT_EQ(class0, 1240);
  EXPECT_EQ(all[2047].first, 72);
  EXPECT_EQ(all[2047].second, internal::RankLexKey(0x01010003U));  // rho = (3,0,0,0,1,0,1,0)
  std::uint32_t max_rank = 0;
  for (std::uint32_t row : t.rows)
    for (std::uint32_t r : Ranks(row)) max_rank = std::max(max_rank, r);
  EXPECT_EQ(max_rank, 4U);
  // Class 1 <=> cost = 0 (mod 16) (spec 2.5 step 5).
  for (std::size_t i = 0; i < t.rows.size(); ++i)
    ASSERT_EQ(internal::RankCost(t.rows[i]) % 16 == 0, i >= 2048) << "rows[" << i << "]";
  EXPECT_EQ(kDecodeTableBytes, 18816U);
}

TEST(TetraTables, NormTable) {
  const Tables& t = BuiltTables();
  EXPECT_EQ(t.invnorm[0], 0.0F);
  EXPECT_EQ(t.invnorm[1], 0.25F);
  EXPECT_EQ(t.invnorm[4], 0.125F);
  EXPECT_EQ(t.invnorm[31], static_cast<float>(1.0 / std::sqrt(16.0 * 31)));
}

TEST(TetraTables, GolayCodeWeightDistribution) {
  std::array<int, 25> by_weight{};
  std::set<std::uint32_t> words;
  for (std::uint32_t m = 0; m < 4096; ++m) {
    const std::uint32_t c = internal::GolayEncode(m);
    ASSERT_TRUE(internal::IsGolayCodeword(c)) << m;
    words.insert(c);
    ++by_weight[std::popcount(c)];
  }
  EXPECT_EQ(words.size(), 4096U);
  EXPECT_EQ(by_weight[0], 1);
  EXPECT_EQ(by_weight[8], 759);
  EXPECT_EQ(by_weight[12], 2576);
  EXPECT_EQ(by_weight[16], 759);
  EXPECT_EQ(by_weight[24], 1);
  EXPECT_FALSE(internal::IsGolayCodeword(1));
  EXPECT_FALSE(internal::IsGolayCodeword(0x3));
}

TEST(TetraTables, OrderAndValuesAreTheSpecs) {
  const std::array<std::uint8_t, 24> order = {0,  1,  2,  3,  4, 7, 10, 12, 6,  11, 13, 14,
                                              16, 17, 18, 19, 5, 8, 9,  15, 20, 21, 22, 23};
  EXPECT_EQ(BuiltTables().order, order);
  const int values[4][8] = {{0, 4, -4, 8, -8, 12, -12, 16},
                            {1, -3, 5, -7, 9, -11, 13, -15},
                            {2, -2, 6, -6, 10, -10, 14, -14},
                            {-1, 3, -5, 7, -9, 11, -13, 15}};
  for (int o = 0; o < 4; ++o)
    for (int rho = 0; rho < 8; ++rho) EXPECT_EQ(internal::kValues[o][rho], values[o][rho]) << o << "," << rho;
}

TEST(TetraTables, TrellisPathsAreTheDistinctCodewords) {
  const Tables& t = BuiltTables();
  std::set<std::uint32_t> natural;
  for (std::uint32_t x = 0; x < 4096; ++x) {
    const std::uint32_t trio = internal::TrellisPath(t, x);
    std::uint32_t c = 0;
    for (int pos = 0; pos < 24; ++pos) c |= (trio >> pos & 1) << t.order[pos];
    ASSERT_TRUE(internal::IsGolayCodeword(c)) << x;
    natural.insert(c);
  }
  EXPECT_EQ(natural.size(), 4096U);
}

// One broken entry of a copy of the tables: CheckTables fails, names it.
struct Breakage {
  const char* name;
  void (*apply)(Tables&);
  const char* message;  // a part of the error
};

TEST(TetraTables, CheckTablesNamesABrokenEntry) {
  const Breakage cases[] = {
      {"row", [](Tables& t) { std::swap(t.rows[100], t.rows[101]); }, "rows[101]"},
      {"row class", [](Tables& t) { t.rows[3000] = t.rows[5]; }, "rows[3000]"},
      {"last row", [](Tables& t) { t.rows[2047] = t.rows[2046] + 0x10000000; }, "rows[2047]"},
      {"prefix", [](Tables& t) { t.prefixes[9] ^= 0x01; }, "prefixes[8], prefixes[9]"},
      {"branch", [](Tables& t) { t.branches[37] ^= 0x0100; }, "trellis path (s8 2, b1 0, b2 5"},
      {"suffix", [](Tables& t) { std::swap(t.suffixes[4], t.suffixes[5]); }, "suffixes[4]"},
      {"column", [](Tables& t) { t.columns[3] ^= 1; }, "columns[3]"},
      {"order", [](Tables& t) { std::swap(t.order[0], t.order[1]); }, "order[0]"},
      {"n0", [](Tables& t) { t.n0 = 1241; }, "n0 is 1241"},
      {"invnorm", [](Tables& t) { t.invnorm[7] *= 1.0000001F; }, "invnorm[7]"},
  };
  for (const Breakage& b : cases) {
    Tables copy = BuiltTables();
    b.apply(copy);
    const Status s = CheckTables(copy);
    EXPECT_EQ(s.code(), StatusCode::kInternal) << b.name;
    EXPECT_NE(s.message().find(b.message), std::string::npos) << b.name << ": " << s.message();
  }
}

TEST(TetraTables, FingerprintSeesEveryRowAndProbe) {
  const std::uint64_t good = MapFingerprint(BuiltTables());
  for (std::size_t i : {0U, 1U, 1239U, 2047U, 2048U, 4095U}) {
    Tables copy = BuiltTables();
    copy.rows[i] ^= 1;
    EXPECT_NE(MapFingerprint(copy), good) << "rows[" << i << "]";
  }
  Tables copy = BuiltTables();
  copy.prefixes[0] ^= 0xFF;  // changes decodes only (the columns are stored)
  EXPECT_NE(MapFingerprint(copy), good);
  EXPECT_NE(MapFingerprint(BuiltTables(), "llvq codebook fingerprint tetra v2"), good);
}

}  // namespace
}  // namespace exlr8::tetra
