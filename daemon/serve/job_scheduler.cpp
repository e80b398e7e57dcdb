#include "daemon/serve/job_scheduler.h"

#include <algorithm>
#include <cstdio>
#include <utility>

namespace exlr8 {

namespace {

// How long an idle scheduler waits for a kick before it reads the queue
// again anyway.
constexpr std::chrono::milliseconds kIdleWait{60'000};

// Ends a queue may refuse as already recorded.
bool Recorded(const Status& s) { return s.ok() || s.code() == StatusCode::kFailedPrecondition; }

}  // namespace

JobScheduler::JobScheduler(JobQueue& queue, std::unique_ptr<CacheOwner> cache, JobFactory make,
                           JobSchedulerOptions options)
    : queue_(queue),
      cache_(std::move(cache)),
      make_(std::move(make)),
      opt_(options),
      clock_(*options.clock) {}

JobScheduler::~JobScheduler() { Stop(); }

void JobScheduler::Start() {
  thread_ = std::thread([this] { Loop(); });
}

// Every signal of wake_ is sent holding mu_: a waiter then is inside its
// wait (or has not checked its condition yet) and cannot miss it, whatever
// the Clock's wait does between its own timed waits.
void JobScheduler::Kick() {
  MutexLock l(&mu_);
  kicked_ = true;
  wake_.SignalAll();
}

void JobScheduler::Stop() {
  {
    MutexLock l(&mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
    kicked_ = true;
    for (auto& [id, rj] : running_) rj->job->Cancel();
    wake_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
}

void JobScheduler::WaitForKick(Clock::Duration d) {
  const Clock::TimePoint deadline = clock_.Deadline(d);
  while (!kicked_ && !stopping_)
    if (!clock_.WaitUntil(&wake_, &mu_, deadline)) break;
}

void JobScheduler::WaitUntilStopping(Clock::TimePoint deadline) {
  while (!stopping_ && clock_.Now() < deadline)
    if (!clock_.WaitUntil(&wake_, &mu_, deadline)) break;
}

std::vector<JobInfo> JobScheduler::Pick(const std::vector<JobInfo>& queued,
                                        std::map<JobId, std::string>& why) const {
  std::map<std::string, JobId> repo_busy;  // repo -> the job before which later ones of it wait
  for (const auto& [id, rj] : running_) repo_busy.emplace(rj->info.request.repo, id);
  const auto max = static_cast<std::size_t>(opt_.max_running);
  std::size_t slots = running_.size() < max ? max - running_.size() : 0;
  std::vector<JobInfo> start;
  for (const JobInfo& job : queued) {
    auto [busy, first_of_repo] = repo_busy.emplace(job.request.repo, job.id);
    if (!first_of_repo) {
      why[job.id] = "after job " + std::to_string(busy->second) + " of the same repo";
    } else if (slots == 0) {
      why[job.id] = "waiting for a free slot: " + std::to_string(opt_.max_running) + " job" +
                    (opt_.max_running == 1 ? "" : "s") + " running (--max-jobs)";
    } else {
      start.push_back(job);
      --slots;
    }
  }
  return start;
}

void JobScheduler::Reap() {
  std::vector<std::unique_ptr<RunningJob>> ended;
  {
    MutexLock l(&mu_);
    for (auto it = running_.begin(); it != running_.end();) {
      if (it->second->finished) {
        ended.push_back(std::move(it->second));
        it = running_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& rj : ended) rj->thread.join();
}

void JobScheduler::Loop() {
  for (;;) {
    {
      MutexLock l(&mu_);
      if (back_off_) {
        back_off_ = false;
        WaitUntilStopping(clock_.Deadline(opt_.retry));
      }
      if (stopping_) break;
      kicked_ = false;
    }
    if (!Pass()) break;
  }
  // Stopping: Stop() cancelled the running jobs; wait for them to record
  // how they ended before the cache closes.
  std::vector<std::unique_ptr<RunningJob>> left;
  {
    MutexLock l(&mu_);
    for (auto& [id, rj] : running_) left.push_back(std::move(rj));
    running_.clear();
  }
  for (auto& rj : left) rj->thread.join();
  // Not tried again here (a stop must not wait out busy timeouts): the
  // next start queues them again (RequeueInterrupted) and runs them again.
  {
    MutexLock l(&mu_);
    if (!unrecorded_ends_.empty())
      std::fprintf(stderr,
                   "exlr8d serve: %zu job end(s) could not be recorded; they run again at the next start\n",
                   unrecorded_ends_.size());
  }
  cache_->Release();
}

bool JobScheduler::Pass() {
  Reap();
  const bool ends_left = RetryUnrecordedEnds();
  auto queued = queue_.Queued();
  if (!queued.ok()) {
    std::fprintf(stderr, "exlr8d serve: job queue: %s\n", queued.status().ToString().c_str());
    MutexLock l(&mu_);
    WaitForKick(opt_.retry);
    return true;
  }
  bool idle = false;
  {
    MutexLock l(&mu_);
    idle = queued->empty() && running_.empty();
  }
  if (idle && cache_->is_open())
    cache_->Release();  // nothing to do: let other exlr8d commands have the cache
  std::map<JobId, std::string> why;
  std::vector<JobInfo> start;
  {
    MutexLock l(&mu_);
    start = Pick(*queued, why);
  }
  Cache* cache = nullptr;
  if (!start.empty()) {
    Result<Cache*> opened = cache_->Acquire();
    if (!opened.ok() && opened.status().code() != StatusCode::kFailedPrecondition) {
      // Not a lock another exlr8d holds (FailedPrecondition, naming the
      // pid): fail the jobs that would start, which a client can see,
      // rather than spinning.
      const std::string error = "cannot open the cache: " + opened.status().ToString();
      for (const JobInfo& job : start) {
        const Status s = queue_.Finish(job.id, JobState::kFailed, error);
        if (Recorded(s)) continue;  // recorded, or ended meanwhile
        MutexLock l(&mu_);
        NoteQueueTrouble(job.id, "its failure (" + error + ")", s);
      }
      return true;
    }
    if (!opened.ok()) {
      // Another process owns the cache: the jobs wait for it.
      MutexLock l(&mu_);
      waiting_.clear();
      for (const JobInfo& job : *queued) waiting_[job.id] = cache_->WaitingMessage(opened.status());
      WaitUntilStopping(cache_->retry_at());
      return true;
    }
    cache = *opened;
  }
  MutexLock l(&mu_);
  waiting_ = std::move(why);
  // Troubles of jobs no longer queued (recorded in the end) are over.
  std::erase_if(queue_trouble_, [&](const auto& t) {
    return std::none_of(queued->begin(), queued->end(), [&](const JobInfo& j) { return j.id == t.first; });
  });
  for (const auto& [id, trouble] : queue_trouble_) waiting_[id] = trouble;
  if (stopping_) return false;
  for (const JobInfo& job : start) StartJob(job, *cache);
  // Woken by Kick, Cancel, Stop and every job that ends; the timeout also
  // retries the unrecorded ends.
  WaitForKick(ends_left ? Clock::Duration(opt_.retry) : Clock::Duration(kIdleWait));
  return true;
}

void JobScheduler::StartJob(const JobInfo& info, Cache& cache) {
  auto rj = std::make_unique<RunningJob>();
  rj->info = info;
  rj->job = make_(info);
  rj->cancel_requested = cancel_before_start_.erase(info.id) > 0;
  RunningJob* raw = rj.get();
  Cache* c = &cache;
  raw->thread = std::thread([this, c, raw] { RunJob(*c, *raw); });
  running_.emplace(info.id, std::move(rj));
}

void JobScheduler::RunJob(Cache& cache, RunningJob& rj) {
  const JobId id = rj.info.id;
  const Status marked = queue_.MarkRunning(id);
  // Read once the start is recorded: a cancel that came before or while
  // the queue recorded it sees the job still not begun, and the work must
  // then never begin (an evict does not look at Job::Cancel).
  bool cancelled = false;
  if (marked.ok()) {
    MutexLock l(&mu_);
    cancelled = rj.cancel_requested;
    if (!cancelled && queue_trouble_.erase(id) > 0)
      std::fprintf(stderr, "exlr8d serve: job %lld: its start is recorded now\n", static_cast<long long>(id));
  }
  if (!marked.ok()) {
    // FailedPrecondition: cancelled (or gone) while queued, nothing to do.
    // Anything else: the queue could not record the start; the job stays
    // queued and starts once it can.
    if (marked.code() != StatusCode::kFailedPrecondition) {
      MutexLock l(&mu_);
      NoteQueueTrouble(id, "its start", marked);
    }
  } else if (cancelled) {
    JobQueue* q = &queue_;
    End(id,
        [q, id] { return q->Finish(id, JobState::kCancelled, "cancelled by a client before it started"); });
  } else {
    const JobOutcome outcome = rj.job->Run(cache);
    {
      MutexLock l(&mu_);
      rj.work_ended = true;
    }
    RecordEnd(rj, outcome);
  }
  {
    MutexLock l(&mu_);
    rj.job->AddTotals(finished_totals_);
    rj.finished = true;
    kicked_ = true;
    wake_.SignalAll();
  }
}

void JobScheduler::NoteQueueTrouble(JobId job, const std::string& what, const Status& why) {
  const std::string message = "the job queue could not record " + what + ": " + why.ToString() +
                              "; retrying every " + std::to_string(opt_.retry.count()) + " ms";
  std::string& noted = queue_trouble_[job];
  if (noted != message)
    std::fprintf(stderr, "exlr8d serve: job %lld: %s\n", static_cast<long long>(job), message.c_str());
  noted = message;
  waiting_[job] = message;
  back_off_ = true;
}

void JobScheduler::End(JobId job, std::function<Status()> write) {
  const Status s = write();
  if (Recorded(s)) return;  // recorded, or ended before
  std::fprintf(stderr, "exlr8d serve: job %lld: could not record its end (retrying): %s\n",
               static_cast<long long>(job), s.ToString().c_str());
  MutexLock l(&mu_);
  unrecorded_ends_[job] = std::move(write);
}

bool JobScheduler::RetryUnrecordedEnds() {
  // Copies: the ends stay listed while they are tried (Cancel looks), and a
  // few per pass (each may wait out SQLite's 5 s busy timeout), so the
  // scheduler still starts and reaps jobs meanwhile.
  constexpr std::size_t kPerPass = 4;
  std::vector<std::pair<JobId, std::function<Status()>>> ends;
  {
    MutexLock l(&mu_);
    for (const auto& [id, write] : unrecorded_ends_) {
      if (ends.size() == kPerPass) break;
      ends.emplace_back(id, write);
    }
  }
  std::vector<JobId> recorded;
  for (const auto& [id, write] : ends) {
    if (Recorded(write())) {
      std::fprintf(stderr, "exlr8d serve: job %lld: its end is recorded now\n", static_cast<long long>(id));
      recorded.push_back(id);
    }
  }
  MutexLock l(&mu_);
  for (JobId id : recorded) unrecorded_ends_.erase(id);
  return !unrecorded_ends_.empty();
}

void JobScheduler::RecordEnd(const RunningJob& rj, const JobOutcome& outcome) {
  bool by_client = false, by_stop = false;
  {
    MutexLock l(&mu_);
    by_client = rj.cancel_requested;
    by_stop = stopping_ && !by_client;
  }
  JobQueue* q = &queue_;
  const JobId id = rj.info.id;
  const Status& status = outcome.status;
  if (outcome.failure) {
    const std::string error = *outcome.failure;
    End(id, [q, id, error] { return q->Finish(id, JobState::kFailed, error); });
  } else if (status.ok()) {
    const std::string result = outcome.result;
    End(id, [q, id, result] { return q->Finish(id, JobState::kDone, "", result); });
  } else if (status.code() == StatusCode::kCancelled && by_stop) {
    // Resumes at the next start (which also requeues it if this fails).
    LogIfUnrecorded(queue_.Requeue(id), id, "its stop");
  } else if (status.code() == StatusCode::kCancelled) {
    End(id, [q, id] { return q->Finish(id, JobState::kCancelled, "cancelled by a client"); });
  } else {
    const std::string error = status.ToString();
    End(id, [q, id, error] { return q->Finish(id, JobState::kFailed, error); });
  }
}

JobSnapshot JobScheduler::SnapshotOf(JobInfo info) const {
  JobSnapshot s;
  if (auto it = running_.find(info.id); it != running_.end()) {
    const RunningJob& rj = *it->second;
    if (!rj.finished && info.state == JobState::kRunning) {
      JobReport r = rj.job->Report();
      s.progress = std::move(r.progress);
      s.verify_progress = std::move(r.verify_progress);
    }
    s.cancel_requested = rj.cancel_requested;
  }
  if (info.state == JobState::kQueued) {
    if (auto w = waiting_.find(info.id); w != waiting_.end()) s.waiting = w->second;
  }
  s.info = std::move(info);
  return s;
}

Result<JobSnapshot> JobScheduler::Snapshot(JobId id) const {
  EXLR8_ASSIGN_OR_RETURN(JobInfo info, queue_.Get(id));
  MutexLock l(&mu_);
  return SnapshotOf(std::move(info));
}

std::vector<JobSnapshot> JobScheduler::Describe(std::vector<JobInfo> jobs) const {
  MutexLock l(&mu_);
  std::vector<JobSnapshot> out;
  out.reserve(jobs.size());
  for (JobInfo& j : jobs) out.push_back(SnapshotOf(std::move(j)));
  return out;
}

std::optional<JobId> JobScheduler::RunningJobOfPull(std::int64_t pull) const {
  MutexLock l(&mu_);
  for (const auto& [id, rj] : running_) {
    if (rj->finished || rj->work_ended) continue;
    const JobReport r = rj->job->Report();
    if (r.progress && r.progress->pull_id == pull) return id;
  }
  return std::nullopt;
}

RunnerTotals JobScheduler::Totals(std::vector<JobId>* running) const {
  MutexLock l(&mu_);
  RunnerTotals t = finished_totals_;
  for (const auto& [id, rj] : running_) {
    if (!rj->finished) rj->job->AddTotals(t);
    if (running != nullptr) running->push_back(id);
  }
  return t;
}

JobScheduler::CancelFlag JobScheduler::FlagForCancel(JobId id) {
  CancelFlag f;
  MutexLock l(&mu_);
  auto it = running_.find(id);
  if (it == running_.end()) {
    // Not started here yet: if the scheduler starts it before the queue
    // says cancelled, it starts cancelled.
    cancel_before_start_.insert(id);
    f.not_started = true;
  } else if (it->second->finished) {
    f.ended_here = true;
  } else {
    RunningJob& rj = *it->second;
    f.asked_here = !rj.cancel_requested;
    rj.cancel_requested = true;
    rj.job->Cancel();
  }
  return f;
}

Status JobScheduler::StartedMeanwhile(JobId id) {
  bool here = false, unrecorded = false;
  {
    MutexLock l(&mu_);
    here = running_.count(id) > 0;
    unrecorded = unrecorded_ends_.count(id) > 0;
  }
  if (unrecorded)
    return FailedPreconditionError("job " + std::to_string(id) +
                                   " has already ended; recording its end failed and is being retried");
  if (!here) {
    EXLR8_ASSIGN_OR_RETURN(JobInfo now, queue_.Get(id));
    if (!IsFinished(now.state))
      return InternalError("job " + std::to_string(id) + " is running in the queue but not in this server");
  }
  return Status();
}

Result<JobSnapshot> JobScheduler::Cancel(JobId id) {
  const CancelFlag flag = FlagForCancel(id);
  bool asked_here = flag.asked_here;
  // The flag for a job not started stays only where the queue says the job
  // started meanwhile (the scheduler took it along); every other way out
  // takes it back.
  bool keep_flag = false;
  struct Forget {
    JobScheduler* s;
    JobId id;
    const bool* keep;
    bool armed;
    ~Forget() {
      if (!armed || *keep) return;
      MutexLock l(&s->mu_);
      s->cancel_before_start_.erase(id);
    }
  } forget{this, id, &keep_flag, flag.not_started};
  EXLR8_ASSIGN_OR_RETURN(JobInfo info, queue_.Get(id));
  if (info.state == JobState::kQueued) {
    // Only while still queued: a job that started meanwhile is cancelled
    // by its flag (above), never marked cancelled while it runs on.
    const Status s = queue_.CancelQueued(id, "cancelled by a client before it started");
    if (!s.ok() && s.code() != StatusCode::kFailedPrecondition) return s;
    keep_flag = !s.ok();  // it started: the flag went, or goes, with it
    asked_here = asked_here || s.ok() || flag.not_started;
    Kick();  // jobs of its repo waited for it
  } else if (IsFinished(info.state)) {
    if (!asked_here)
      return FailedPreconditionError("job " + std::to_string(id) + " has already finished (" +
                                     std::string(JobStateName(info.state)) + ")");
  } else if (flag.ended_here) {
    // Its work ended, yet the queue says running: its end is not recorded.
    return FailedPreconditionError("job " + std::to_string(id) +
                                   " has already ended; recording its end failed and is being retried");
  } else if (flag.not_started) {
    // Running by the queue, yet not in running_ at the first look: the
    // scheduler started it in between, taking the flag along (and it may
    // have ended since, quickly, because of it); or its work ended and its
    // end is not recorded yet.
    EXLR8_RETURN_IF_ERROR(StartedMeanwhile(id));
    asked_here = true;
  }
  // A running job may have ended between the flag and the read above (its
  // work stops within milliseconds, most often because of this very
  // request): the request is answered as accepted, with the job as it is
  // now. A second request for the same job is refused once it has ended.
  EXLR8_ASSIGN_OR_RETURN(JobSnapshot snapshot, Snapshot(id));
  snapshot.cancel_requested = snapshot.cancel_requested || asked_here;
  return snapshot;
}

}  // namespace exlr8
