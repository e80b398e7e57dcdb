// JobRunner: what `exlr8d serve` runs its queued jobs (job_store.h) with:
// pulls with the pull engine, verify jobs with the scrub, evict jobs. It
// wires three pieces, each owning its own state:
//   JobScheduler (job_scheduler.h)  the scheduler thread, the running jobs,
//                                   the concurrency limits, how each job's
//                                   start and end are recorded;
//   CacheOwner (cache_owner.h)      the cache, open only while there is
//                                   work, and the retry while another
//                                   process holds its lock;
//   Job (job.h, job_kinds.h)        one per job kind: the work and its
//                                   progress.
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
#include <vector>

#include "daemon/base/clock.h"
#include "daemon/cache/cache.h"
#include "daemon/pull/pull_job.h"
#include "daemon/scrub/scrub.h"
#include "daemon/serve/job.h"
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
  // Between tries of a cache another process holds, and of a start or an
  // end the queue could not record.
  std::chrono::milliseconds lock_retry{2000};
  // Jobs running at once (of different repos); 1 runs the queue strictly
  // in order.
  int max_running = 4;
  // Every wait of the runner's (tests: a FakeClock). Outlives the runner.
  Clock* clock = &Clock::Real();
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
  Result<std::vector<JobSnapshot>> List(std::size_t limit = 100,
                                        std::optional<JobState> state = std::nullopt) const;
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
