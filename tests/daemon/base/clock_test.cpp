// daemon/base/clock.h: the real clock, and the FakeClock the daemon's unit
// tests run on (tests/daemon/base/fake_clock.h).
#include "daemon/base/clock.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "tests/daemon/base/fake_clock.h"

namespace exlr8 {
namespace {

using std::chrono::hours;
using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::FakeClock;

TEST(RealClockTest, NowUnixMsIsTheSystemClock) {
  const auto sys =
      std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch());
  const std::int64_t ms = Clock::Real().NowUnixMs();
  EXPECT_GE(ms, sys.count());
  EXPECT_LT(ms, sys.count() + 60'000);
}

TEST(RealClockTest, SleepForTakesAtLeastItsDuration) {
  Clock& clock = Clock::Real();
  const Clock::TimePoint start = clock.Now();
  clock.SleepFor(milliseconds(20));
  EXPECT_GE(clock.Now() - start, milliseconds(20));
  clock.SleepFor(milliseconds(-5));  // a deadline that has passed: at once
}

TEST(RealClockTest, WaitForTimesOutOrReturnsOnASignal) {
  Clock& clock = Clock::Real();
  Mutex mu;
  CondVar cv;
  {
    MutexLock l(&mu);
    const Clock::TimePoint deadline = clock.Deadline(milliseconds(20));
    while (clock.WaitUntil(&cv, &mu, deadline)) {
    }
    EXPECT_GE(clock.Now(), deadline);
  }
  bool done = false;  // guarded by mu
  std::thread waker([&] {
    MutexLock l(&mu);
    done = true;
    cv.Signal();
  });
  {
    MutexLock l(&mu);
    // No deadline at all: only the signal ends it.
    while (!done) ASSERT_TRUE(clock.WaitFor(&cv, &mu, Clock::Duration::max()));
  }
  waker.join();
}

TEST(ClockTest, DeadlineSaturates) {
  FakeClock clock;
  EXPECT_EQ(clock.Deadline(Clock::Duration::max()), Clock::TimePoint::max());
  EXPECT_LT(clock.Deadline(Clock::Duration::min()), clock.Now());  // passed, not wrapped round
  EXPECT_EQ(clock.Deadline(seconds(5)), clock.Now() + seconds(5));
  EXPECT_EQ(clock.Deadline(-seconds(5)), clock.Now() - seconds(5));
  EXPECT_EQ(Clock::Real().Deadline(Clock::Duration::max()), Clock::TimePoint::max());
}

TEST(FakeClockTest, TimeMovesOnlyWhenAdvanced) {
  FakeClock clock(5000);
  const Clock::TimePoint t0 = clock.Now();
  std::this_thread::sleep_for(milliseconds(5));
  EXPECT_EQ(clock.Now(), t0);
  EXPECT_EQ(clock.NowUnixMs(), 5000);
  clock.Advance(milliseconds(1500));
  EXPECT_EQ(clock.Now(), t0 + milliseconds(1500));
  EXPECT_EQ(clock.NowUnixMs(), 6500);
  clock.SetUnixMs(100);  // the system clock was set back: steady time stays
  EXPECT_EQ(clock.NowUnixMs(), 100);
  EXPECT_EQ(clock.Now(), t0 + milliseconds(1500));
}

TEST(FakeClockTest, SleepReturnsOnlyWhenAdvancedPastItsDeadline) {
  FakeClock clock;
  std::atomic<bool> woke{false};
  std::thread sleeper([&] {
    clock.SleepFor(seconds(10));
    woke = true;
  });
  ASSERT_TRUE(clock.AwaitWaiters(1));
  EXPECT_EQ(clock.NextDeadline(), clock.Now() + seconds(10));
  clock.Advance(seconds(9));
  std::this_thread::sleep_for(milliseconds(20));  // time for a wrong wake to show
  EXPECT_FALSE(woke);
  EXPECT_EQ(clock.waiters(), 1u);
  clock.Advance(seconds(1));
  sleeper.join();
  EXPECT_TRUE(woke);
  EXPECT_EQ(clock.waiters(), 0u);
  EXPECT_EQ(clock.NextDeadline(), std::nullopt);
  clock.SleepFor(Clock::Duration::zero());  // at once, no advance needed
}

TEST(FakeClockTest, WaitReturnsFalseWhenAdvancedPastItsDeadline) {
  FakeClock clock;
  Mutex mu;
  CondVar cv;
  std::atomic<int> result{-1};
  std::thread waiter([&] {
    MutexLock l(&mu);
    const Clock::TimePoint deadline = clock.Deadline(seconds(30));
    bool woken = true;
    while (woken) woken = clock.WaitUntil(&cv, &mu, deadline);  // wakes are spurious here
    result = clock.Now() >= deadline ? 0 : 1;
  });
  ASSERT_TRUE(clock.AwaitWaiters(1));
  clock.Advance(seconds(29));
  std::this_thread::sleep_for(milliseconds(20));
  EXPECT_EQ(result, -1);
  clock.Advance(seconds(1));
  waiter.join();
  EXPECT_EQ(result, 0);

  MutexLock l(&mu);
  EXPECT_FALSE(clock.WaitFor(&cv, &mu, Clock::Duration::zero()));  // passed already: no block
}

TEST(FakeClockTest, WaitReturnsTrueWhenSignalledWithoutTimeMoving) {
  FakeClock clock;
  const Clock::TimePoint t0 = clock.Now();
  Mutex mu;
  CondVar cv;
  bool done = false;  // guarded by mu
  std::thread waiter([&] {
    MutexLock l(&mu);
    while (!done) EXPECT_TRUE(clock.WaitFor(&cv, &mu, hours(1)));
  });
  ASSERT_TRUE(clock.AwaitWaiters(1));
  {
    MutexLock l(&mu);
    done = true;
    cv.SignalAll();
  }
  waiter.join();
  EXPECT_EQ(clock.Now(), t0);
}

// Many threads with different deadlines wake in deadline order as time
// moves one step at a time, and no advance wakes one early.
TEST(FakeClockTest, ManySleepersWakeInDeadlineOrder) {
  FakeClock clock;
  constexpr int kThreads = 8;
  Mutex mu;
  std::vector<int> order;  // guarded by mu
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      const int step = kThreads - i;  // started in reverse order of waking
      clock.SleepFor(seconds(step));
      MutexLock l(&mu);
      order.push_back(step);
    });
  }
  ASSERT_TRUE(clock.AwaitWaiters(kThreads));
  for (int step = 1; step <= kThreads; ++step) {
    clock.Advance(seconds(1));
    // The woken one leaves the waiter list before it records itself.
    for (;;) {
      {
        MutexLock l(&mu);
        if (order.size() == static_cast<std::size_t>(step)) break;
      }
      std::this_thread::yield();
    }
    EXPECT_EQ(clock.waiters(), static_cast<std::size_t>(kThreads - step));
  }
  for (std::thread& t : threads) t.join();
  std::vector<int> expected;
  for (int step = 1; step <= kThreads; ++step) expected.push_back(step);
  EXPECT_EQ(order, expected);
}

// A signal sent while the wait's recheck times out may be reported as a
// timeout; the wait then returns to its caller (as a spurious wake), whose
// loop sees the condition its signaller set. So a wait with neither an
// advance nor a signal still comes back within milliseconds of real time.
TEST(FakeClockTest, AWaitComesBackToItsCallerSoASignalRacingItsRecheckIsNotLost) {
  FakeClock clock;
  Mutex mu;
  CondVar cv;
  std::atomic<bool> returned{false};
  std::thread waiter([&] {
    MutexLock l(&mu);
    clock.WaitFor(&cv, &mu, hours(1));
    returned = true;
  });
  const auto give_up = std::chrono::steady_clock::now() + seconds(5);
  while (!returned && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
  EXPECT_TRUE(returned);
  clock.Advance(hours(1));  // ends the wait where it did not come back
  waiter.join();
}

// An advance that comes right as a thread starts waiting on its CondVar
// still ends the wait (the race FakeClock's recheck exists for).
TEST(FakeClockTest, AnAdvanceRacingTheStartOfAWaitIsNotLost) {
  FakeClock clock;
  for (int i = 0; i < 200; ++i) {
    Mutex mu;
    CondVar cv;
    std::thread waiter([&] {
      MutexLock l(&mu);
      const Clock::TimePoint deadline = clock.Deadline(seconds(1));
      while (clock.WaitUntil(&cv, &mu, deadline)) {
      }
    });
    ASSERT_TRUE(clock.AwaitWaiters(1));
    clock.Advance(seconds(1));
    waiter.join();
  }
}

}  // namespace
}  // namespace exlr8
