// Unit tests of TransferScheduler (daemon/hub/transfer_scheduler.h) on a
// FakeClock: every wait is fake time, none is slept.
#include "daemon/hub/transfer_scheduler.h"

#include <gtest/gtest.h>

#include <vector>

#include "tests/daemon/base/fake_clock.h"

namespace exlr8 {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::FakeClock;

RetryPolicy Policy() {
  RetryPolicy p;
  p.max_attempts = 5;
  p.max_throttled = 3;
  p.retry_base = milliseconds(100);
  p.retry_cap = milliseconds(1000);
  p.max_throttle_wait = seconds(60);
  return p;
}

std::vector<std::uint32_t> DrainReady(TransferScheduler& s) {
  std::vector<std::uint32_t> out;
  while (s.HasReady()) {
    out.push_back(s.FrontReady());
    s.PopReady();
  }
  return out;
}

TEST(TransferSchedulerTest, BackoffGrowsAndCapsWithJitterInItsUpperHalf) {
  FakeClock clock;
  TransferScheduler s(clock, Policy(), /*seed=*/7);
  for (int attempt = 1; attempt <= 12; ++attempt) {
    const std::int64_t cap = std::min<std::int64_t>(100LL << (attempt - 1), 1000);
    for (int draw = 0; draw < 50; ++draw) {
      const std::int64_t b = s.Backoff(attempt).count();
      EXPECT_GE(b, cap - cap / 2) << "attempt " << attempt;
      EXPECT_LE(b, cap) << "attempt " << attempt;
    }
  }
  // A huge attempt number neither overflows nor passes the cap.
  EXPECT_LE(s.Backoff(1'000'000).count(), 1000);
  EXPECT_GE(s.Backoff(1'000'000).count(), 500);
}

TEST(TransferSchedulerTest, FailedTryWaitsItsBackoffInFakeTime) {
  FakeClock clock;
  TransferScheduler s(clock, Policy(), 1);
  const auto when = s.AfterFailedTry(3);
  ASSERT_TRUE(when.has_value());
  const auto wait = *when - clock.Now();
  EXPECT_GE(wait, milliseconds(200));
  EXPECT_LE(wait, milliseconds(400));
  s.RetryAt(9, 0, *when);
  auto waiting = [](std::uint32_t) { return true; };
  s.PromoteDue(waiting);
  EXPECT_FALSE(s.HasReady());
  clock.Advance(wait - std::chrono::nanoseconds(1));
  s.PromoteDue(waiting);
  EXPECT_FALSE(s.HasReady());
  clock.Advance(std::chrono::nanoseconds(1));
  s.PromoteDue(waiting);
  EXPECT_EQ(DrainReady(s), std::vector<std::uint32_t>{9});
}

TEST(TransferSchedulerTest, TriesRunOutAtMaxAttempts) {
  FakeClock clock;
  TransferScheduler s(clock, Policy(), 1);
  EXPECT_TRUE(s.AfterFailedTry(4).has_value());
  EXPECT_FALSE(s.AfterFailedTry(5).has_value());
}

TEST(TransferSchedulerTest, RetryAfterHoldsTheRequestUntilFakeTimePassesIt) {
  FakeClock clock;
  TransferScheduler s(clock, Policy(), 1);
  const auto t = s.AfterThrottle(1, seconds(7));
  ASSERT_EQ(t.kind, TransferScheduler::Throttle::Kind::kRetryAt);
  EXPECT_EQ(t.when, clock.Now() + seconds(7));  // the server's wait exactly, no jitter
  s.RetryAt(1, 2, t.when);
  s.RetryAt(2, 0, clock.Now() + seconds(1));
  auto waiting = [](std::uint32_t) { return true; };
  clock.Advance(seconds(1));
  s.PromoteDue(waiting);
  EXPECT_EQ(DrainReady(s), std::vector<std::uint32_t>{2});
  clock.Advance(seconds(5));
  s.PromoteDue(waiting);
  EXPECT_FALSE(s.HasReady());
  clock.Advance(seconds(1));
  s.PromoteDue(waiting);
  EXPECT_EQ(DrainReady(s), std::vector<std::uint32_t>{1});
}

TEST(TransferSchedulerTest, ThrottleWithoutAWaitBacksOff) {
  FakeClock clock;
  TransferScheduler s(clock, Policy(), 1);
  const auto t = s.AfterThrottle(2, std::nullopt);
  ASSERT_EQ(t.kind, TransferScheduler::Throttle::Kind::kRetryAt);
  EXPECT_GE(t.when - clock.Now(), milliseconds(100));
  EXPECT_LE(t.when - clock.Now(), milliseconds(200));
}

TEST(TransferSchedulerTest, ThrottleFailsPastTheWaitCapOrTooOften) {
  FakeClock clock;
  TransferScheduler s(clock, Policy(), 1);
  EXPECT_EQ(s.AfterThrottle(1, seconds(61)).kind, TransferScheduler::Throttle::Kind::kWaitTooLong);
  EXPECT_EQ(s.AfterThrottle(1, seconds(60)).kind, TransferScheduler::Throttle::Kind::kRetryAt);
  EXPECT_EQ(s.AfterThrottle(3, seconds(1)).kind, TransferScheduler::Throttle::Kind::kRetryAt);
  EXPECT_EQ(s.AfterThrottle(4, seconds(1)).kind, TransferScheduler::Throttle::Kind::kTooOften);
}

TEST(TransferSchedulerTest, ResolvePauseHoldsEveryResolveUntilFakeTimePassesIt) {
  FakeClock clock;
  TransferScheduler s(clock, Policy(), 1);
  EXPECT_FALSE(s.ResolvesPaused());
  s.PauseResolvesUntil(clock.Now() + seconds(30));  // one file's Retry-After
  s.PauseResolvesUntil(clock.Now() + seconds(5));   // a shorter one later does not shorten it
  clock.Advance(seconds(29));
  EXPECT_TRUE(s.ResolvesPaused());
  clock.Advance(seconds(1));
  EXPECT_FALSE(s.ResolvesPaused());
  s.PauseResolvesUntil(clock.Now() + seconds(1));
  s.Clear();
  EXPECT_FALSE(s.ResolvesPaused());
}

TEST(TransferSchedulerTest, ReadyLineServesHigherPriorityFirstInArrivalOrder) {
  FakeClock clock;
  TransferScheduler s(clock, Policy(), 1);
  s.MakeReady(1, 0);
  s.MakeReady(2, 3);
  s.MakeReady(3, 1);
  s.MakeReady(4, 3);
  s.MakeReady(5, 9);  // above the top priority: served as the top
  s.MakeReady(6, 0);
  EXPECT_EQ(DrainReady(s), (std::vector<std::uint32_t>{2, 4, 5, 3, 1, 6}));
}

TEST(TransferSchedulerTest, PromoteDueDropsJobsThatEndedMeanwhile) {
  FakeClock clock;
  TransferScheduler s(clock, Policy(), 1);
  s.RetryAt(1, 0, clock.Now());
  s.RetryAt(2, 0, clock.Now());
  s.PromoteDue([](std::uint32_t job) { return job != 1; });
  EXPECT_EQ(DrainReady(s), std::vector<std::uint32_t>{2});
}

TEST(TransferSchedulerTest, PollTimeoutIsTheNearestThingToDo) {
  FakeClock clock;
  TransferScheduler s(clock, Policy(), 1);
  EXPECT_EQ(s.PollTimeout(false, false), milliseconds(100));
  s.PauseResolvesUntil(clock.Now() + milliseconds(40));
  EXPECT_EQ(s.PollTimeout(false, false), milliseconds(100));  // no resolve waits for it
  EXPECT_EQ(s.PollTimeout(true, false), milliseconds(40));
  s.RetryAt(1, 0, clock.Now() + milliseconds(25));
  EXPECT_EQ(s.PollTimeout(true, false), milliseconds(25));
  EXPECT_EQ(s.PollTimeout(true, true), milliseconds(2));
  clock.Advance(milliseconds(30));
  EXPECT_EQ(s.PollTimeout(false, false), milliseconds(0));  // a timer is due
}

}  // namespace
}  // namespace exlr8
