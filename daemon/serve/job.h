// Job: one job of `exlr8d serve` while this server runs it, behind one
// interface whatever its kind (job_kinds.h makes them: a pull, a verify, an
// evict). The scheduler (job_scheduler.h) owns the queue and decides when a
// job starts and how its end is recorded; a Job owns only its work and the
// state of that work (a pull's engine, a scrub's counters).
//
// Threads. The scheduler creates a Job on its own thread and calls Run on
// a thread of the job's own, once. Cancel, Report and AddTotals may be
// called from any thread at any time, before, during or after Run; each
// kind guards the state they share with Run by a lock of its own, taken
// after the scheduler's (the scheduler calls them holding its lock, so a
// Job never calls back into the scheduler).
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include "daemon/cache/cache.h"
#include "daemon/pull/pull_job.h"
#include "daemon/serve/job_store.h"
#include "format/status.h"

namespace exlr8 {

// How far a running verify job got.
struct VerifyProgress {
  std::uint64_t bytes_total = 0;  // to check (known once it has planned)
  std::uint64_t bytes_checked = 0;
  std::uint64_t failures = 0;
  double elapsed_s = 0;
};

// A job as the API shows it: the stored row, plus what only the running
// server knows.
struct JobSnapshot {
  JobInfo info;
  std::optional<PullProgress> progress;           // a pull, while it runs here
  std::optional<VerifyProgress> verify_progress;  // a verify job, while it runs here
  std::string waiting;                            // why a queued job has not started
  bool cancel_requested = false;
};

// Sums over every job this server ran since it started, the running ones
// included: what GET /metrics exposes as Prometheus counters.
struct RunnerTotals {
  std::uint64_t bytes_received = 0;  // off the network, refetches included
  std::uint64_t bytes_verified = 0;  // fetched, verified and recorded
  std::uint64_t http_requests = 0;   // range GETs sent, retries included
  std::uint64_t http_retries = 0;
  std::uint64_t hub_resolves = 0;       // /resolve/ requests to the hub
  std::uint64_t checksum_failures = 0;  // fetched bytes that failed and were refetched
  std::uint64_t scrub_bytes_checked = 0;
  std::uint64_t scrub_failures = 0;
};

// What a job's work says of itself while it runs (JobSnapshot's parts).
struct JobReport {
  std::optional<PullProgress> progress;
  std::optional<VerifyProgress> verify_progress;
};

// How a job's work ended, for the scheduler to record.
struct JobOutcome {
  // OK: done. Cancelled: stopped by Cancel (recorded cancelled when a
  // client asked, queued again when the server is stopping). Anything
  // else: failed with this error.
  Status status;
  std::string result;  // a done job's result (a JSON object), or ""
  // Set: the job failed with this error whatever else happened (a pull
  // that ended with bytes of its plan unverified, a pin that failed).
  std::optional<std::string> failure;
};

class Job {
 public:
  virtual ~Job() = default;

  // The job's thread, once: does the work on `cache` (open, and open until
  // Run returns) and says how it ended. Records nothing of its end; it may
  // record what it learns on the way (a pull's row, an evict's commit).
  virtual JobOutcome Run(Cache& cache) = 0;
  // Any thread: asks the work to stop soon; idempotent. A cancel before Run
  // makes Run stop at once. An evict, one short cache transaction, runs to
  // its end once started.
  virtual void Cancel() = 0;
  // Any thread: the work's progress, empty before Run has begun it.
  virtual JobReport Report() const = 0;
  // Any thread: adds what this job did so far to `totals` (final once Run
  // has returned).
  virtual void AddTotals(RunnerTotals& totals) const = 0;
};

// The queue could not record a step (a full disk, a damaged file): the job
// keeps its last recorded state, which the next start sorts out
// (RequeueInterrupted); the log says so.
inline void LogIfUnrecorded(const Status& s, JobId job, const char* step) {
  if (!s.ok())
    std::fprintf(stderr, "exlr8d serve: job %lld: could not record %s: %s\n", static_cast<long long>(job),
                 step, s.ToString().c_str());
}

}  // namespace exlr8
