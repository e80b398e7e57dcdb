// SpaceAccount (daemon/cache/space_account.h): claims, the reserve file and
// the space decisions, on a real directory; the decisions take their
// numbers as arguments, so they are checked without filling a disk.
#include "daemon/cache/space_account.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>

#include "daemon/base/posix.h"
#include "daemon/cache/cache_paths.h"
#include "tests/daemon/cache_test_util.h"

namespace exlr8 {
namespace {

using ::exlr8::testing::TempDir;

constexpr std::uint64_t kMB = 1'000'000;

struct Fixture {
  explicit Fixture(SpaceAccount::Options options = {})
      : root(::open(dir.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)),
        account(root.get(), dir.path().string(), options) {}
  std::filesystem::path reserve() const { return dir.path() / std::string(kCacheReserveName); }
  TempDir dir;
  UniqueFd root;
  SpaceAccount account;
};

TEST(SpaceAccountTest, SumsSplitTheCallersClaimFromTheOthers) {
  Fixture fx;
  std::atomic<std::uint64_t> a_left{300};
  const std::uint64_t a = fx.account.AddClaim([&] { return ClaimedBytes{a_left.load(), a_left.load() + 5}; });
  const std::uint64_t b = fx.account.AddClaim([] { return ClaimedBytes{10, 20}; });
  const std::uint64_t c = fx.account.AddClaim([] { return ClaimedBytes{1, 2}; });
  EXPECT_NE(a, 0u);
  EXPECT_NE(a, b);
  EXPECT_NE(b, c);

  SpaceAccount::ClaimSums sums = fx.account.SumClaims(a);
  EXPECT_EQ(sums.own.unwritten, 300u);
  EXPECT_EQ(sums.own.unrecorded, 305u);
  EXPECT_EQ(sums.others.unwritten, 11u);
  EXPECT_EQ(sums.others.unrecorded, 22u);

  // Each sum asks the claims again: what they hold now counts.
  a_left = 100;
  sums = fx.account.SumClaims(0);
  EXPECT_EQ(sums.own.unwritten, 0u);
  EXPECT_EQ(sums.others.unwritten, 111u);

  fx.account.DropClaim(b);
  sums = fx.account.SumClaims(c);
  EXPECT_EQ(sums.own.unrecorded, 2u);
  EXPECT_EQ(sums.others.unrecorded, 105u);
}

TEST(SpaceAccountTest, ClaimedFilesetsLiveAsLongAsTheirClaims) {
  Fixture fx;
  const std::uint64_t a = fx.account.AddClaim([] { return ClaimedBytes{}; });
  const std::uint64_t b = fx.account.AddClaim([] { return ClaimedBytes{}; });
  EXPECT_TRUE(fx.account.ClaimedFilesets().empty());  // no fileset named yet
  fx.account.SetClaimFileset(a, 7);
  fx.account.SetClaimFileset(b, 9);
  EXPECT_EQ(fx.account.ClaimedFilesets(), (std::set<FilesetId>{7, 9}));
  fx.account.SetClaimFileset(b, 7);
  EXPECT_EQ(fx.account.ClaimedFilesets(), (std::set<FilesetId>{7}));
  fx.account.DropClaim(a);
  EXPECT_EQ(fx.account.ClaimedFilesets(), (std::set<FilesetId>{7}));
  fx.account.DropClaim(b);
  EXPECT_TRUE(fx.account.ClaimedFilesets().empty());
}

TEST(SpaceAccountTest, CheckCountsOtherClaimsUnwrittenBytesAgainstTheDisk) {
  Fixture fx;
  SpaceAccount::ClaimSums sums;
  EXPECT_TRUE(fx.account.Check(100 * kMB, 0, sums, 100 * kMB).ok());
  sums.others.unwritten = 1;
  const Status s = fx.account.Check(100 * kMB, 0, sums, 100 * kMB);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(), "need 100.00 MB, 100.00 MB free on " + fx.dir.path().string() +
                             " (no budget; 1 B promised to pulls running now)");
  // The caller's own claim is part of what it needs.
  sums = {};
  sums.own.unwritten = 40 * kMB;
  EXPECT_TRUE(fx.account.Check(60 * kMB, 0, sums, 100 * kMB).ok());
  EXPECT_EQ(fx.account.Check(60 * kMB + 1, 0, sums, 100 * kMB).code(), StatusCode::kResourceExhausted);
}

TEST(SpaceAccountTest, CheckCountsRecordedAndUnrecordedBytesAgainstTheBudget) {
  Fixture fx(SpaceAccount::Options{.byte_budget = 10 * kMB});
  SpaceAccount::ClaimSums sums;
  sums.others.unrecorded = 3 * kMB;
  sums.own.unrecorded = 2 * kMB;
  // 4 recorded + 3 others + 2 own + 1 needed = the budget exactly.
  EXPECT_TRUE(fx.account.Check(1 * kMB, 4 * kMB, sums, 1000 * kMB).ok());
  const Status s = fx.account.Check(1 * kMB + 1, 4 * kMB, sums, 1000 * kMB);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(),
            "need 3.00 MB, 1.00 GB free on " + fx.dir.path().string() +
                " (budget 10.00 MB, 4.00 MB used; 3.00 MB promised to pulls running now; over budget: "
                "run gc or raise the budget)");
  // Already over budget without the caller: refused even for 0 bytes.
  EXPECT_EQ(fx.account.Check(0, 11 * kMB, {}, 1000 * kMB).code(), StatusCode::kResourceExhausted);
}

TEST(SpaceAccountTest, RoomTargetIsWhereTheNeededBytesFit) {
  Fixture fx;
  SpaceAccount::ClaimSums sums;
  // Fits: no eviction (target at or above the recorded bytes).
  EXPECT_GE(fx.account.RoomTarget(10, 500, sums, 100), 500u);
  // 150 needed, 100 free: evict 50 of the 500 recorded.
  EXPECT_EQ(fx.account.RoomTarget(150, 500, sums, 100), 450u);
  // Others' unwritten bytes come out of the free space first.
  sums.others.unwritten = 30;
  EXPECT_EQ(fx.account.RoomTarget(150, 500, sums, 100), 420u);
  // More than everything recorded: evict all.
  EXPECT_EQ(fx.account.RoomTarget(10'000, 500, sums, 100), 0u);

  Fixture budgeted(SpaceAccount::Options{.byte_budget = 1000});
  SpaceAccount::ClaimSums claims;
  claims.others.unrecorded = 200;
  claims.own.unrecorded = 100;
  // Budget 1000 less 300 claimed less 50 needed leaves 650 for recorded bytes.
  EXPECT_EQ(budgeted.account.RoomTarget(50, 900, claims, 1'000'000), 650u);
  // The claims alone may exceed the budget: target 0, not an underflow.
  claims.others.unrecorded = 5000;
  EXPECT_EQ(budgeted.account.RoomTarget(50, 900, claims, 1'000'000), 0u);
}

TEST(SpaceAccountTest, ReserveIsMadeReleasedAndOwedUntilMadeAgain) {
  constexpr std::uint64_t kReserve = 256 << 10;
  Fixture fx(SpaceAccount::Options{.reserve_bytes = kReserve});
  EXPECT_FALSE(fx.account.ReleaseReserve());  // none yet
  fx.account.RestoreReserve(/*keep_free=*/0);
  struct stat st;
  ASSERT_EQ(::stat(fx.reserve().c_str(), &st), 0);
  EXPECT_EQ(static_cast<std::uint64_t>(st.st_size), kReserve);
  EXPECT_GE(static_cast<std::uint64_t>(st.st_blocks) * 512, kReserve);  // allocated, not a hole
  EXPECT_EQ(fx.account.ReserveOwed(), 0u);                              // not released by this owner
  EXPECT_FALSE(fx.account.released_reserve());

  EXPECT_TRUE(fx.account.ReleaseReserve());
  EXPECT_FALSE(std::filesystem::exists(fx.reserve()));
  EXPECT_TRUE(fx.account.released_reserve());
  EXPECT_EQ(fx.account.ReserveOwed(), kReserve);
  EXPECT_FALSE(fx.account.ReleaseReserve());  // gone already

  fx.account.RestoreReserve(/*keep_free=*/0);
  EXPECT_EQ(fx.account.ReserveOwed(), 0u);
  ASSERT_EQ(::stat(fx.reserve().c_str(), &st), 0);
  EXPECT_EQ(static_cast<std::uint64_t>(st.st_size), kReserve);
}

TEST(SpaceAccountTest, ReserveNeverTakesTheLastFreeBytes) {
  Fixture fx(SpaceAccount::Options{.reserve_bytes = 1 << 20});
  fx.account.RestoreReserve(/*keep_free=*/~std::uint64_t{0});  // more than any disk has free
  EXPECT_FALSE(std::filesystem::exists(fx.reserve()));
}

TEST(SpaceAccountTest, ForeignFileAtTheReservesNameIsLeftAlone) {
  Fixture fx(SpaceAccount::Options{.reserve_bytes = 1 << 20});
  std::filesystem::create_directory(fx.reserve());
  EXPECT_FALSE(fx.account.ReleaseReserve());
  fx.account.RestoreReserve(/*keep_free=*/0);
  EXPECT_TRUE(std::filesystem::is_directory(fx.reserve()));
}

TEST(SpaceAccountTest, ReadOnlyViewNeverMakesTheReserve) {
  Fixture fx(SpaceAccount::Options{.reserve_bytes = 1 << 20, .read_only = true});
  fx.account.RestoreReserve(/*keep_free=*/0);
  EXPECT_FALSE(std::filesystem::exists(fx.reserve()));
}

TEST(SpaceAccountTest, FreeBytesLeavesOutTheReserveOwed) {
  constexpr std::uint64_t kReserve = 64ull << 20;
  Fixture fx(SpaceAccount::Options{.reserve_bytes = kReserve});
  // Released without ever being made here: all of it is owed.
  ASSERT_FALSE(fx.account.ReleaseReserve());
  fx.account.RestoreReserve(0);
  if (!std::filesystem::exists(fx.reserve())) GTEST_SKIP() << "no 64 MB free under " << fx.dir.path();
  ASSERT_TRUE(fx.account.ReleaseReserve());
  Result<std::uint64_t> free = fx.account.FreeBytes();
  ASSERT_TRUE(free.ok()) << free.status().message();
  struct statvfs vfs;
  ASSERT_EQ(::statvfs(fx.dir.path().c_str(), &vfs), 0);
  const std::uint64_t raw = static_cast<std::uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  // Other writers on this file system move `raw` a little meanwhile.
  EXPECT_LT(*free, raw);
  EXPECT_NEAR(static_cast<double>(raw - *free), static_cast<double>(kReserve), 8.0 * (1 << 20));
}

}  // namespace
}  // namespace exlr8
