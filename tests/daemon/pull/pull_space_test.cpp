#include "daemon/pull/pull_space.h"

#include <gtest/gtest.h>

#include <atomic>
#include <string>

#include "tests/daemon/base/fake_clock.h"
#include "tests/daemon/cache_test_util.h"

namespace exlr8 {
namespace {

using testing::FakeClock;
using testing::kCommitA;
using testing::kCommitB;
using testing::kCommitC;
using testing::Pattern;
using testing::TempDir;

std::unique_ptr<Cache> MustOpen(const std::filesystem::path& dir, CacheOptions options) {
  Result<std::unique_ptr<Cache>> cache = Cache::Open(dir, std::move(options));
  EXPECT_TRUE(cache.ok()) << cache.status().ToString();
  return cache.ok() ? std::move(cache).value() : nullptr;
}

// A fileset holding `bytes` verified bytes, recorded.
FilesetId FilesetWithVerifiedBytes(Cache& cache, const char* repo, const char* commit, std::uint64_t bytes) {
  const FilesetId fs = *cache.PutFileset(repo, "main", commit);
  const FileId f = *cache.PutFile(fs, "w.bin", bytes);
  EXPECT_TRUE(cache.WriteAt(f, 0, Pattern(f, 0, bytes)).ok());
  const VerifiedExtent e{f, 0, bytes};
  EXPECT_TRUE(cache.CommitVerified({&e, 1}).ok());
  return fs;
}

struct Fixture {
  TempDir tmp;
  FakeClock clock{1000};
  std::unique_ptr<Cache> cache;
  explicit Fixture(std::uint64_t budget) {
    CacheOptions options;
    options.clock = &clock;
    options.byte_budget = budget;
    cache = MustOpen(tmp.path(), options);
  }
};

TEST(PullSpaceTest, ADryRunOnlyChecksAndClaimsNothing) {
  Fixture fx(1000);
  std::atomic<std::uint64_t> written{0};
  PullSpace space(*fx.cache, /*make_room=*/false, written);
  EXPECT_TRUE(space.CheckAndClaim(1000).ok());
  EXPECT_EQ(space.claimed(), 0u);
  EXPECT_EQ(space.CheckAndClaim(1001).code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(fx.cache->CheckSpace(1000).ok());  // nothing counted as taken
}

TEST(PullSpaceTest, AClaimCountsAsTakenForOtherPullsUntilClosed) {
  Fixture fx(1000);
  std::atomic<std::uint64_t> written_a{0}, written_b{0};
  PullSpace a(*fx.cache, false, written_a);
  PullSpace b(*fx.cache, false, written_b);
  a.Open();
  b.Open();
  ASSERT_TRUE(a.CheckAndClaim(700).ok());
  EXPECT_EQ(a.claimed(), 700u);
  const Status short_of_space = b.CheckAndClaim(400);
  EXPECT_EQ(short_of_space.code(), StatusCode::kResourceExhausted) << short_of_space.ToString();
  EXPECT_EQ(b.claimed(), 0u);  // a shortfall takes the bytes back
  EXPECT_TRUE(b.CheckAndClaim(300).ok());
  a.Close();  // a pull that ended claims nothing
  EXPECT_TRUE(b.CheckAndClaim(700).ok());
  EXPECT_EQ(b.claimed(), 1000u);
}

TEST(PullSpaceTest, OutstandingIsWhatIsNeitherWrittenNorRecordedYet) {
  Fixture fx(10000);
  std::atomic<std::uint64_t> written{0};
  PullSpace space(*fx.cache, false, written);
  space.Open();
  ASSERT_TRUE(space.CheckAndClaim(1000).ok());
  Cache::ClaimedBytes out = space.Outstanding();
  EXPECT_EQ(out.unwritten, 1000u);
  EXPECT_EQ(out.unrecorded, 1000u);
  written = 400;
  space.recorded_counter()->store(100);
  out = space.Outstanding();
  EXPECT_EQ(out.unwritten, 600u);
  EXPECT_EQ(out.unrecorded, 900u);
  written = 1500;  // more than claimed (a header longer than its estimate): never below 0
  space.recorded_counter()->store(1500);
  out = space.Outstanding();
  EXPECT_EQ(out.unwritten, 0u);
  EXPECT_EQ(out.unrecorded, 0u);
  // What a step wrote beyond its estimate joins the claim (modulo 2^64, so
  // an estimate above what was written takes bytes back the same way).
  space.Adjust(500);
  EXPECT_EQ(space.claimed(), 1500u);
  space.Adjust(0 - std::uint64_t{200});
  EXPECT_EQ(space.claimed(), 1300u);
}

TEST(PullSpaceTest, MakeRoomEvictsLeastRecentlyUsedButNeverTheOwnFileset) {
  Fixture fx(3000);
  const FilesetId old_one = FilesetWithVerifiedBytes(*fx.cache, "org/a", kCommitA, 1000);
  fx.clock.Advance(std::chrono::milliseconds(1));
  const FilesetId own = FilesetWithVerifiedBytes(*fx.cache, "org/b", kCommitB, 1000);
  fx.clock.Advance(std::chrono::milliseconds(1));
  const FilesetId newer = FilesetWithVerifiedBytes(*fx.cache, "org/c", kCommitC, 1000);
  std::atomic<std::uint64_t> written{0};
  // `own` is the least recently used once `old_one` is touched: the claim
  // names it, so it stays.
  fx.clock.Advance(std::chrono::milliseconds(1));
  ASSERT_TRUE(fx.cache->Touch(old_one).ok());
  PullSpace space(*fx.cache, /*make_room=*/true, written);
  space.Open();
  space.SetFileset(own);
  ASSERT_TRUE(space.CheckAndClaim(1000).ok());
  EXPECT_EQ(space.evicted(), std::vector<FilesetId>{newer});
  EXPECT_EQ(space.bytes_evicted(), 1000u);
  EXPECT_EQ(space.claimed(), 1000u);
  EXPECT_TRUE(fx.cache->GetFileset(own).ok());
  EXPECT_TRUE(fx.cache->GetFileset(old_one).ok());
}

TEST(PullSpaceTest, MakeRoomThatCannotFreeEnoughSaysWhatItEvicted) {
  Fixture fx(2000);
  const FilesetId other = FilesetWithVerifiedBytes(*fx.cache, "org/a", kCommitA, 1000);
  const FilesetId own = FilesetWithVerifiedBytes(*fx.cache, "org/b", kCommitB, 1000);
  std::atomic<std::uint64_t> written{0};
  PullSpace space(*fx.cache, /*make_room=*/true, written);
  space.Open();
  space.SetFileset(own);
  const Status s = space.CheckAndClaim(1500);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_NE(s.message().find("after evicting 1 unpinned fileset (--make-room)"), std::string::npos)
      << s.ToString();
  EXPECT_EQ(space.evicted(), std::vector<FilesetId>{other});
  EXPECT_EQ(space.claimed(), 0u);
}

TEST(PullSpaceTest, WithoutMakeRoomAShortfallEvictsNothing) {
  Fixture fx(1000);
  const FilesetId other = FilesetWithVerifiedBytes(*fx.cache, "org/a", kCommitA, 1000);
  std::atomic<std::uint64_t> written{0};
  PullSpace space(*fx.cache, /*make_room=*/false, written);
  space.Open();
  EXPECT_EQ(space.CheckAndClaim(1).code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(space.evicted().empty());
  EXPECT_TRUE(fx.cache->GetFileset(other).ok());
}

}  // namespace
}  // namespace exlr8
