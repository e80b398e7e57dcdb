#include "daemon/base/clock.h"

#include <thread>

namespace exlr8 {
namespace {

class RealClock final : public Clock {
 public:
  TimePoint Now() const override { return std::chrono::steady_clock::now(); }

  std::int64_t NowUnixMs() const override {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }

  void SleepUntil(TimePoint deadline) override { std::this_thread::sleep_until(deadline); }

  bool WaitUntil(CondVar* cv, Mutex* mu, TimePoint deadline) override EXLR8_REQUIRES(mu) {
    if (deadline == TimePoint::max()) {
      cv->Wait(mu);
      return true;
    }
    return cv->WaitUntil(mu, deadline);
  }
};

}  // namespace

Clock& Clock::Real() {
  static RealClock* const clock = new RealClock();  // never destroyed: threads may outlive main()
  return *clock;
}

Clock::TimePoint Clock::Deadline(Duration d) const {
  const Duration since = Now().time_since_epoch();
  if (d > Duration::zero() && since > Duration::max() - d) return TimePoint::max();
  if (d < Duration::zero() && since < Duration::min() - d) return TimePoint::min();
  return TimePoint(since + d);
}

}  // namespace exlr8
