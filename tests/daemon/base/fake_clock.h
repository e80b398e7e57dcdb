// A Clock for tests whose time moves only when the test moves it.
//
// Both of its clocks stand still until Advance(); a thread that sleeps or
// waits on it (SleepUntil, WaitUntil) stays blocked until the test advances
// past its deadline, or, for WaitUntil, until its CondVar is signalled. So a
// test of code that waits 30 s for a retry runs in microseconds and does
// not depend on how fast the machine is:
//
//   FakeClock clock;
//   Thing thing(&clock);              // waits 30 s between tries
//   ASSERT_TRUE(clock.AwaitWaiters(1));  // its thread is now waiting
//   clock.Advance(std::chrono::seconds(30));
//
// Thread safety: every method may be called from any thread at once.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "daemon/base/clock.h"
#include "daemon/base/mutex.h"

namespace exlr8::testing {

class FakeClock final : public Clock {
 public:
  // 2023-11-14T22:13:20Z: any fixed time will do, so records are the same
  // in every run.
  static constexpr std::int64_t kDefaultUnixMs = 1'700'000'000'000;

  // Wall time starts at `unix_ms`; steady time at a fixed point of its own.
  explicit FakeClock(std::int64_t unix_ms = kDefaultUnixMs);
  // REQUIRES: no thread is blocked in SleepUntil or WaitUntil.
  ~FakeClock() override = default;

  TimePoint Now() const override;
  std::int64_t NowUnixMs() const override;
  void SleepUntil(TimePoint deadline) override;
  // A wake that the advance causes can reach the waiter up to a few
  // milliseconds of real time late (when it raced with the waiter entering
  // the wait); it is never lost, and the result is the same. Returns true
  // (a spurious wake) every few milliseconds of real time while neither
  // comes, so a caller that loops on its condition never misses a signal.
  bool WaitUntil(CondVar* cv, Mutex* mu, TimePoint deadline) override EXLR8_REQUIRES(mu);

  // Moves both clocks forward by `d` and wakes every sleep and wait whose
  // deadline that reaches. REQUIRES: d >= 0.
  void Advance(Duration d);
  // Sets wall time alone, as when the system clock is set; steady time and
  // the blocked threads are not affected.
  void SetUnixMs(std::int64_t unix_ms);

  // Threads blocked in SleepUntil or WaitUntil now.
  std::size_t waiters() const;
  // The earliest deadline of the blocked threads; nullopt when none is.
  std::optional<TimePoint> NextDeadline() const;
  // Blocks until at least `n` threads are blocked in SleepUntil or
  // WaitUntil; false when `real_limit` of real time passes first.
  bool AwaitWaiters(std::size_t n, std::chrono::milliseconds real_limit = std::chrono::seconds(10)) const;

 private:
  struct Waiter {
    TimePoint deadline;
    CondVar* cv;           // the caller's, for WaitUntil; null for SleepUntil
    bool reached = false;  // set by Advance once Now() >= deadline
  };
  void AddWaiter(Waiter* w) EXLR8_REQUIRES(mu_);
  void RemoveWaiter(Waiter* w) EXLR8_REQUIRES(mu_);

  mutable Mutex mu_;
  // Signalled on every Advance and whenever a thread starts or stops waiting.
  mutable CondVar changed_;
  TimePoint now_ EXLR8_GUARDED_BY(mu_);
  Duration unix_ EXLR8_GUARDED_BY(mu_);  // since the Unix epoch
  std::vector<Waiter*> waiters_ EXLR8_GUARDED_BY(mu_);
};

}  // namespace exlr8::testing
