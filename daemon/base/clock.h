// The daemon's source of time, injected so that tests control it (LevelDB's
// Env::NowMicros / SleepForMicroseconds are the model).
//
// Two kinds of time:
//   Now()       steady, never goes back: deadlines, timeouts, backoff, rates.
//   NowUnixMs() wall time, milliseconds since the Unix epoch (UTC): what is
//               recorded (database rows, state files, JSON answers). It may
//               jump when the system clock is set; never measure with it.
// Code that waits for time to pass (a sleep, a timed wait on a CondVar)
// waits through the same Clock, so that a test's FakeClock
// (tests/daemon/base/fake_clock.h) decides when the wait ends.
//
// Thread safety: every method may be called from any thread at once.
#pragma once

#include <chrono>
#include <cstdint>

#include "daemon/base/mutex.h"

namespace exlr8 {

class Clock {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  using Duration = std::chrono::steady_clock::duration;

  virtual ~Clock() = default;

  // The process's clock: steady_clock and system_clock, real sleeps and
  // waits. Lives for the whole process; the default wherever a Clock* is
  // taken.
  static Clock& Real();

  virtual TimePoint Now() const = 0;
  virtual std::int64_t NowUnixMs() const = 0;
  // NowUnixMs as a system_clock time point.
  std::chrono::system_clock::time_point WallNow() const {
    return std::chrono::system_clock::time_point(std::chrono::milliseconds(NowUnixMs()));
  }

  // Blocks the calling thread until Now() >= deadline (at once if it is).
  virtual void SleepUntil(TimePoint deadline) = 0;
  void SleepFor(Duration d) { SleepUntil(Deadline(d)); }

  // Blocks on `cv` until it is signalled or Now() >= deadline. Returns false
  // when the deadline has passed, true on a wake, which may be spurious:
  //   while (!done_) if (!clock->WaitUntil(&cv_, &mu_, deadline)) break;
  // REQUIRES: `mu` held, and `mu` is the Mutex every wait on `cv` uses; it
  // is released while blocked and held again on return.
  virtual bool WaitUntil(CondVar* cv, Mutex* mu, TimePoint deadline) EXLR8_REQUIRES(mu) = 0;
  bool WaitFor(CondVar* cv, Mutex* mu, Duration d) EXLR8_REQUIRES(mu) {
    return WaitUntil(cv, mu, Deadline(d));
  }

  // Now() + d, saturating at TimePoint::max() (d may be Duration::max(),
  // "no deadline"); a negative d is a deadline that has passed.
  TimePoint Deadline(Duration d) const;
};

}  // namespace exlr8
