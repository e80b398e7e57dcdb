#include "daemon/pull/pull_progress.h"

namespace exlr8 {

PhaseTimer::PhaseTimer(Clock& clock) : clock_(clock), start_(clock.Now()), phase_start_(start_) {}

void PhaseTimer::Set(PullPhase p) {
  const Clock::TimePoint now = clock_.Now();
  phase_s_[static_cast<std::size_t>(phase_.load())] +=
      std::chrono::duration<double>(now - phase_start_).count();
  phase_start_ = now;
  phase_.store(static_cast<int>(p));
}

double PhaseTimer::Elapsed() const { return std::chrono::duration<double>(clock_.Now() - start_).count(); }

std::int64_t PhaseTimer::StartedUnixMs() const {
  return clock_.NowUnixMs() - static_cast<std::int64_t>(Elapsed() * 1000);
}

ProgressReporter::ProgressReporter(Clock& clock, std::chrono::milliseconds min_interval,
                                   std::function<void(PullId)> write)
    : clock_(clock), min_interval_(min_interval), write_(std::move(write)) {}

void ProgressReporter::Start(PullId id) { pull_id_.store(id); }

void ProgressReporter::Write(bool always) {
  const PullId id = pull_id_.load();
  if (id == 0) return;
  {
    MutexLock lock(&mu_);
    const Clock::TimePoint now = clock_.Now();
    if (!always && last_ && now - *last_ < min_interval_) return;
    last_ = now;
  }
  write_(id);
}

}  // namespace exlr8
