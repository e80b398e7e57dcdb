// JobScheduler: decides which queued jobs of `exlr8d serve` run, starts
// each on a thread of its own, and records how each ends.
//
// Several at once, one repo at a time. Up to `max_running` jobs run side by
// side, so a small pull does not wait an hour behind a large one, and a
// verify job (disk-bound) runs beside a pull (network-bound). Jobs of one
// repo run in the order they were asked for, one at a time: ranks of one
// release share files (the dense ones), and in order the first rank asked
// for is ready first and the second reuses its bytes instead of fetching
// them at the same moment. Every other queued job says why it waits
// (JobSnapshot::waiting).
//
// The queue is the record. A job starts only once the queue has recorded
// its start (MarkRunning); one a client cancelled before or while that
// happened ends cancelled without its work ever beginning. Every end is
// recorded exactly once: an end the queue cannot record (a full disk, a
// busy database) is kept and tried again every `retry` until it is, so a
// job never stays "running" after its work ended; a start it cannot record
// leaves the job queued, says why in its `waiting`, logs it once, and the
// scheduler waits `retry` before its next pass rather than spinning.
//
// Time. Every wait (the retry interval, the back-off, the idle wait) goes
// through the injected Clock, so unit tests run it on a FakeClock.
//
// Threads and locks. One scheduler thread (Start) runs the passes and owns
// the CacheOwner; each job runs on a thread of its own. Submit-side calls
// (Kick, Cancel, Snapshot, Describe, RunningJobOfPull, Totals, Stop) may
// come from any thread. `mu_` guards the running jobs, the waiting reasons,
// the cancels not yet started and the unrecorded ends; it is taken before a
// Job's own lock (Job::Cancel and Report are called holding it) and never
// held while the queue is written.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "daemon/base/clock.h"
#include "daemon/base/mutex.h"
#include "daemon/serve/cache_owner.h"
#include "daemon/serve/job.h"
#include "daemon/serve/job_store.h"
#include "format/status.h"

namespace exlr8 {

struct JobSchedulerOptions {
  // Jobs running at once (of different repos); 1 runs the queue strictly
  // in order. REQUIRES: >= 1.
  int max_running = 4;
  // Between tries of what failed: opening a locked cache (CacheOwner's),
  // recording a start or an end, reading the queue.
  std::chrono::milliseconds retry{2000};
  Clock* clock = &Clock::Real();
};

class JobScheduler {
 public:
  // Makes the Job for a queued job (job_kinds.h's MakeJob, or a test's).
  // Called on the scheduler's thread, holding mu_.
  using JobFactory = std::function<std::unique_ptr<Job>(const JobInfo&)>;

  // REQUIRES: `queue` and options.clock outlive the scheduler.
  JobScheduler(JobQueue& queue, std::unique_ptr<CacheOwner> cache, JobFactory make,
               JobSchedulerOptions options);
  ~JobScheduler();  // Stop()
  JobScheduler(const JobScheduler&) = delete;
  JobScheduler& operator=(const JobScheduler&) = delete;

  // Starts the scheduler thread. Call once.
  void Start() EXLR8_EXCLUDES(mu_);
  // The queue changed (a job was added): look at it again now.
  void Kick() EXLR8_EXCLUDES(mu_);
  // Queued: cancelled at once. Running: its work is cancelled, and the job
  // ends 'cancelled' shortly after (the snapshot says cancel_requested).
  // Being started: it ends cancelled and its work never begins.
  // FailedPrecondition for a finished job, NotFound for an unknown one.
  Result<JobSnapshot> Cancel(JobId id) EXLR8_EXCLUDES(mu_);
  Result<JobSnapshot> Snapshot(JobId id) const EXLR8_EXCLUDES(mu_);
  // The rows read from the queue, with what only this server knows.
  std::vector<JobSnapshot> Describe(std::vector<JobInfo> jobs) const EXLR8_EXCLUDES(mu_);
  // The job whose pull has cache row `pull`, if it runs here now.
  std::optional<JobId> RunningJobOfPull(std::int64_t pull) const EXLR8_EXCLUDES(mu_);
  // The totals of every job this scheduler ran; `running` gets the ids of
  // the jobs running now.
  RunnerTotals Totals(std::vector<JobId>* running) const EXLR8_EXCLUDES(mu_);
  int max_running() const { return opt_.max_running; }

  // Idempotent: cancels the running jobs (each is queued again, to resume
  // at the next start), joins the threads and releases the cache.
  void Stop() EXLR8_EXCLUDES(mu_);

 private:
  // A job this server runs now, on a thread of its own. `info` and `job`
  // are set before the thread starts and never change; `thread` is the
  // scheduler thread's. The flags are guarded by the scheduler's mu_ (the
  // analysis cannot name an outer lock here: every access is in a function
  // that REQUIRES mu_ or holds it).
  struct RunningJob {
    JobInfo info;
    std::unique_ptr<Job> job;
    std::thread thread;
    bool finished = false;          // its thread is done; the scheduler joins it
    bool cancel_requested = false;  // a client cancelled it
    // Its work returned: from here its pull is no longer running, though
    // the end may not be recorded yet (a client that reads the job as done
    // must not then cancel its pull).
    bool work_ended = false;
  };
  // How the first look of Cancel found the job.
  struct CancelFlag {
    bool asked_here = false;   // this request is the one that cancels a running job
    bool not_started = false;  // not running here: flagged in cancel_before_start_
    bool ended_here = false;   // its work ended; its thread is not reaped yet
  };

  void Loop() EXLR8_EXCLUDES(mu_);
  // One look at the queue: reaps, retries ends, opens the cache, starts
  // what may start, then waits for a kick. false once stopping.
  bool Pass() EXLR8_EXCLUDES(mu_);
  // Which of `queued` (oldest first) start now, given the running jobs and
  // max_running; the others get their reason in `why`.
  std::vector<JobInfo> Pick(const std::vector<JobInfo>& queued, std::map<JobId, std::string>& why) const
      EXLR8_REQUIRES(mu_);
  void StartJob(const JobInfo& info, Cache& cache) EXLR8_REQUIRES(mu_);
  // Joins the threads of jobs that ended.
  void Reap() EXLR8_EXCLUDES(mu_);
  // The job's thread: records the start, runs the work unless cancelled,
  // records the end.
  void RunJob(Cache& cache, RunningJob& rj) EXLR8_EXCLUDES(mu_);
  // How a job whose work ended with `outcome` is recorded: finished, or
  // queued again when the server stopped it.
  void RecordEnd(const RunningJob& rj, const JobOutcome& outcome) EXLR8_EXCLUDES(mu_);
  // Records a job's end by `write` (a Finish); one that fails is kept in
  // unrecorded_ends_ and tried again by the scheduler.
  void End(JobId job, std::function<Status()> write) EXLR8_EXCLUDES(mu_);
  // Tries the unrecorded ends again; true while some are left.
  bool RetryUnrecordedEnds() EXLR8_EXCLUDES(mu_);
  // The queue could not record `what` of a queued job: note it in
  // queue_trouble_ (logged when it changes) and make the scheduler back off.
  void NoteQueueTrouble(JobId job, const std::string& what, const Status& why) EXLR8_REQUIRES(mu_);
  // Waits until kicked, stopping, or `d` has passed on the clock.
  void WaitForKick(Clock::Duration d) EXLR8_REQUIRES(mu_);
  // Waits until stopping or `deadline` on the clock; kicks do not end it.
  void WaitUntilStopping(Clock::TimePoint deadline) EXLR8_REQUIRES(mu_);
  JobSnapshot SnapshotOf(JobInfo info) const EXLR8_REQUIRES(mu_);
  CancelFlag FlagForCancel(JobId id) EXLR8_EXCLUDES(mu_);
  // A job the first look did not find running, yet the queue says running:
  // OK when the scheduler started it in between (taking the flag along);
  // FailedPrecondition when its end is not recorded yet.
  Status StartedMeanwhile(JobId id) EXLR8_EXCLUDES(mu_);

  JobQueue& queue_;
  const std::unique_ptr<CacheOwner> cache_;  // the scheduler thread's alone
  const JobFactory make_;
  const JobSchedulerOptions opt_;
  Clock& clock_;
  std::thread thread_;

  mutable Mutex mu_;
  CondVar wake_;  // signalled, holding mu_, with kicked_ or stopping_ set
  bool stopping_ EXLR8_GUARDED_BY(mu_) = false;
  // Set by Kick, Cancel, Stop and every job that ends, cleared by the
  // scheduler when it looks at the queue again: a wake-up sent while it was
  // reading the queue is not lost.
  bool kicked_ EXLR8_GUARDED_BY(mu_) = false;
  std::map<JobId, std::unique_ptr<RunningJob>> running_ EXLR8_GUARDED_BY(mu_);
  // Queued job -> why it has not started.
  std::map<JobId, std::string> waiting_ EXLR8_GUARDED_BY(mu_);
  // Jobs a client cancelled while they were not running here: one the
  // scheduler starts meanwhile starts cancelled.
  std::set<JobId> cancel_before_start_ EXLR8_GUARDED_BY(mu_);
  // Ends the queue could not record, tried again on every pass until they
  // are.
  std::map<JobId, std::function<Status()>> unrecorded_ends_ EXLR8_GUARDED_BY(mu_);
  // Queued jobs whose start (or failure) the queue could not record: what
  // went wrong, logged once and shown as the job's `waiting`. While any is
  // here the scheduler waits `retry` between passes.
  std::map<JobId, std::string> queue_trouble_ EXLR8_GUARDED_BY(mu_);
  bool back_off_ EXLR8_GUARDED_BY(mu_) = false;         // the next pass waits `retry` first
  RunnerTotals finished_totals_ EXLR8_GUARDED_BY(mu_);  // of the jobs that ended
};

}  // namespace exlr8
