// JobRunner: runs the queued jobs of `exlr8d serve` (job_store.h) on threads
// of its own: pulls with the pull engine (PullJob), verify jobs with the
// scrub (daemon/scrub/scrub.h), which forgets what no longer matches.
//
// Several at once, one repo at a time. Up to `max_running` jobs run side by
// side, so a small pull does not wait an hour behind a large one, and a
// verify job (disk-bound) runs beside a pull (network-bound). Jobs of one
// repo run in the order they were asked for, one at a time: ranks of one
// release share files (the dense ones), and in order the first rank asked
// for is ready first and the second reuses its bytes instead of fetching
// them at the same moment. A scheduler thread starts what may start and
// says of every other queued job why it waits (Snapshot's `waiting`).
//
// The cache. The runner opens it (taking its lock) only while it has work,
// and closes it when nothing is queued or running, so `exlr8d pull`, `gc`,
// `pin` and the systemd units still run between jobs. While another process
// owns the cache, queued jobs wait and the runner tries again every
// `lock_retry`. Running jobs share one Cache (thread-safe).
//
// Bandwidth. A limit in `pull.fetch.max_bytes_per_second` is the total of
// every running job: Start makes one RateLimiter that all of them share.
//
// Restarts. Stop() cancels the running jobs and queues them again; a
// server that dies leaves them 'running', and the next Start() queues them
// again. Either way each resumes at the next start, fetching only what the
// cache does not hold yet.
//
// Thread-safe: Submit, Cancel and Snapshot may be called from any thread
// (the REST handler's) while the runner works.
#pragma once

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "daemon/cache/cache.h"
#include "daemon/pull/pull_job.h"
#include "daemon/scrub/scrub.h"
#include "daemon/serve/job_store.h"
#include "format/status.h"

namespace exlr8 {

struct JobRunnerOptions {
  std::filesystem::path cache_dir;
  CacheOptions cache;
  // The server's defaults for every job: hub (endpoint, token, proxy),
  // fetch settings. A job naming another endpoint gets no token (see
  // OptionsFor) and the same fetch settings.
  PullOptions pull;
  std::chrono::milliseconds lock_retry{2000};
  // Jobs running at once (of different repos); 1 runs the queue strictly
  // in order.
  int max_running = 4;
};

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
  std::optional<PullProgress> progress;  // a pull, while it runs here
  std::optional<VerifyProgress> verify_progress;  // a verify job, while it runs here
  std::string waiting;                   // why a queued job has not started
  bool cancel_requested = false;
};

// Sums over every job this server ran since it started, the running ones
// included: what GET /metrics exposes as Prometheus counters.
struct RunnerTotals {
  std::uint64_t bytes_received = 0;     // off the network, refetches included
  std::uint64_t bytes_verified = 0;     // fetched, verified and recorded
  std::uint64_t http_requests = 0;      // range GETs sent, retries included
  std::uint64_t http_retries = 0;
  std::uint64_t hub_resolves = 0;       // /resolve/ requests to the hub
  std::uint64_t checksum_failures = 0;  // fetched bytes that failed and were refetched
  std::uint64_t scrub_bytes_checked = 0;
  std::uint64_t scrub_failures = 0;
};

struct RunnerMetrics {
  RunnerTotals totals;
  std::map<std::string, std::uint64_t> jobs_by_state;  // the queue's rows
  std::vector<JobSnapshot> running;                    // with their progress
  int max_running = 0;
};

class JobRunner {
 public:
  // Opens <cache_dir>/exlr8d.jobs.db, queues again any job a dead server
  // left running, and starts the runner thread.
  static Result<std::unique_ptr<JobRunner>> Start(JobRunnerOptions options);
  ~JobRunner();  // Stop()
  JobRunner(const JobRunner&) = delete;
  JobRunner& operator=(const JobRunner&) = delete;

  // Records a queued job (validated: InvalidArgument naming the field).
  Result<JobSnapshot> Submit(const JobRequest& request);
  // Queued: cancelled at once. Running: its pull is cancelled, and the job
  // ends 'cancelled' shortly after (the snapshot says cancel_requested).
  // FailedPrecondition for a finished job, NotFound for an unknown one.
  Result<JobSnapshot> Cancel(JobId id);
  // The job whose latest attempt is pull row `pull`, if this server runs
  // it now (for DELETE /v1/pulls/{id}); nullopt otherwise.
  std::optional<JobId> RunningJobOfPull(std::int64_t pull) const;
  Result<JobSnapshot> Snapshot(JobId id) const;
  Result<std::vector<JobSnapshot>> List(std::size_t limit = 100, std::optional<JobState> state = std::nullopt) const;
  Result<RunnerMetrics> Metrics() const;

  // Idempotent: cancels the running jobs (each is queued again, to resume
  // at the next start), joins the threads and releases the cache.
  void Stop();

  // The options a job runs with: the server's, with the job's repo,
  // revision, manifest, TP degree and rank; local manifest files refused.
  // A job naming an endpoint other than the server's gets no token at all,
  // so a client cannot send the server's token to a host of its choosing.
  static PullOptions OptionsFor(const PullOptions& defaults, const JobRequest& request);

  struct Rep;

 private:
  explicit JobRunner(std::unique_ptr<Rep> rep);
  std::unique_ptr<Rep> rep_;
};

}  // namespace exlr8
