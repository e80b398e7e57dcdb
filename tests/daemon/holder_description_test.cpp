// The holder's description of a real staged rank (daemon/stage/
// holder_description.h): a rank pulled from the hub simulator and read back
// from the cache, placed as UploadHalves places it, is described so that
// the lessee's strict parser (client/lease/description.h) takes it and
// reads back every half where it was staged. No GPU: the handles are stand-ins.
#include "daemon/stage/holder_description.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tests/daemon/cache_test_util.h"
#include "tests/daemon/pull_test_util.h"
#include "tests/daemon/rank_test_util.h"

namespace exlr8 {
namespace {

using ::exlr8::testing::TempDir;

// The offsets UploadHalves gives the halves (gpu/upload.cpp): each starts at
// the next 256-byte boundary after the one before.
std::vector<std::uint64_t> UploadOffsets(const RankHalves& rank) {
  std::vector<std::uint64_t> offsets;
  std::uint64_t end = 0;
  for (const RankHalf& h : rank.halves) {
    const std::uint64_t start = (end + 255) & ~std::uint64_t{255};
    offsets.push_back(start);
    end = start + h.length;
  }
  return offsets;
}

TEST(HolderDescriptionTest, AStagedRankAsTheHolderDescribesItPassesTheStrictParser) {
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  // TP 1 holds every half of the release, the shared expert's too; rank 2
  // of TP 3 a share of the routed ones.
  for (const auto& [tp, rank] : {std::pair{1, 0}, std::pair{3, 2}}) {
    auto pulled = Pull(cache.path(), Options(*sim, "home", tp, rank));
    ASSERT_TRUE(pulled.ok()) << pulled.status().ToString();
    const RankRequest request = TestRankRequest(cache.path(), tp, rank);
    auto read = ReadRankHalves(request);
    ASSERT_TRUE(read.ok()) << read.status().ToString();
    const std::vector<std::uint64_t> offsets = UploadOffsets(*read);
    auto described = DescribeStagedRank(request, *read, offsets, 3);
    ASSERT_TRUE(described.ok()) << described.status().ToString();
    described->data_handle = std::string(128, 'a');
    described->offsets_handle = std::string(128, 'b');

    auto parsed = ParseLeaseDescription(WriteLeaseDescription(*described));
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    EXPECT_EQ(parsed->tp, tp);
    EXPECT_EQ(parsed->rank, rank);
    EXPECT_EQ(parsed->device, 3);
    EXPECT_EQ(parsed->commit, pulled->commit);
    EXPECT_EQ(parsed->bytes, read->total_bytes);
    EXPECT_EQ(parsed->data_bytes, offsets.back() + read->halves.back().length);
    ASSERT_EQ(parsed->halves.size(), read->halves.size());
    const PlanTotals& totals = pulled->plan.totals;
    EXPECT_EQ(parsed->halves.size(), totals.routed_halves + totals.shared_halves);
    if (tp == 1) {
      EXPECT_GT(totals.shared_halves, 0u) << "the fixture has a shared expert";
    }
    for (std::size_t i = 0; i < read->halves.size(); ++i) {
      const LeasedHalf& got = parsed->halves[i];
      const RankHalf& want = read->halves[i];
      EXPECT_EQ(got.tag.What(), want.tag.What()) << i;
      EXPECT_EQ(got.tag.k, want.tag.k) << i;
      EXPECT_EQ(got.hidden, want.hidden) << i;
      EXPECT_EQ(got.offset, offsets[i]) << i;
      EXPECT_EQ(got.length, want.length) << i;
    }
  }
}

TEST(HolderDescriptionTest, OffsetsThatDoNotMatchTheRankAreRefused) {
  RankHalves rank;
  rank.halves.resize(2);
  const std::vector<std::uint64_t> one{0};
  EXPECT_EQ(DescribeStagedRank(TestRankRequest("/nonexistent", 1, 0), rank, one, 0).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace exlr8
