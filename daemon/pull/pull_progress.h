// What a watcher sees of a running pull, measured on an injected Clock:
//   PhaseTimer        the pull's phase, and the wall time spent in each
//   ProgressReporter  the pull's row in the cache (`exlr8d list`, the REST
//                     API), written at most every min_interval
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>

#include "daemon/base/clock.h"
#include "daemon/base/mutex.h"
#include "daemon/cache/cache.h"
#include "daemon/pull/pull_job.h"

namespace exlr8 {

// The phase a pull is in and how long each phase took.
//
// Thread rules: Set() and phase_seconds() on the pull's Run() thread only
// (the per-phase sums are that thread's own, unlocked); phase() and
// Elapsed() from any thread (an atomic and the clock).
class PhaseTimer {
 public:
  // Starts the clock: Elapsed() counts from here. REQUIRES: `clock`
  // outlives the timer.
  explicit PhaseTimer(Clock& clock);

  // Ends the current phase (its time joins phase_seconds()) and starts `p`.
  void Set(PullPhase p);
  PullPhase phase() const { return static_cast<PullPhase>(phase_.load()); }
  // Seconds since the timer was made.
  double Elapsed() const;
  // When the timer was made, in wall-clock milliseconds since the Unix epoch
  // (what the pull's row records as its start).
  std::int64_t StartedUnixMs() const;
  // Time spent in each phase that ended (indexed by PullPhase).
  const std::array<double, kPullPhaseCount>& phase_seconds() const { return phase_s_; }

 private:
  Clock& clock_;
  const Clock::TimePoint start_;
  std::atomic<int> phase_{static_cast<int>(PullPhase::kStarting)};
  std::array<double, kPullPhaseCount> phase_s_{};  // Run() thread only
  Clock::TimePoint phase_start_;                   // Run() thread only
};

// Writes the pull's counters to its row in the cache, throttled: each
// write is a SQLite transaction with its own WAL fsync, and commits (which
// ask for a report) come as often as every 16 MiB.
//
// Thread rules: Start() on the Run() thread, once, before any report is
// asked for; Report(), ReportNow() and pull_id() from any thread (the
// commit threads report after each commit). `mu_` guards the time of the
// last write; the write itself runs outside it, on the reporting thread.
class ProgressReporter {
 public:
  // `write` writes the counters to row `id` (Cache::UpdatePull); errors are
  // the writer's to ignore: progress is advisory. REQUIRES: `clock`
  // outlives the reporter.
  ProgressReporter(Clock& clock, std::chrono::milliseconds min_interval, std::function<void(PullId)> write);

  // The row exists from here on: reports before this write nothing.
  void Start(PullId id);
  // 0 until Start().
  PullId pull_id() const { return pull_id_.load(); }
  // Writes unless the last write was less than min_interval ago.
  void Report() EXLR8_EXCLUDES(mu_) { Write(/*always=*/false); }
  // Writes now (the plan's size, before the first commit).
  void ReportNow() EXLR8_EXCLUDES(mu_) { Write(/*always=*/true); }

 private:
  void Write(bool always) EXLR8_EXCLUDES(mu_);

  Clock& clock_;
  const std::chrono::milliseconds min_interval_;
  const std::function<void(PullId)> write_;
  std::atomic<PullId> pull_id_{0};
  Mutex mu_;
  std::optional<Clock::TimePoint> last_ EXLR8_GUARDED_BY(mu_);  // the last write's start
};

}  // namespace exlr8
