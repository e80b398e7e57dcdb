#include "daemon/serve/job_runner.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

namespace exlr8 {

namespace {

constexpr const char* kJobDbName = "exlr8d.jobs.db";

// "https://hub.example/" and "https://hub.example" are one endpoint.
std::string NormalizedEndpoint(std::string e) {
  if (e.empty()) {
    const char* env = std::getenv("HF_ENDPOINT");
    e = env != nullptr && *env ? env : "https://huggingface.co";
  }
  while (!e.empty() && e.back() == '/') e.pop_back();
  return e;
}

// The queue could not record a step (a full disk, a damaged file): the job
// keeps its last recorded state, which the next start sorts out
// (RequeueInterrupted); say so in the log rather than nowhere.
void LogIfFailed(const Status& s, JobId job, const char* step) {
  if (!s.ok())
    std::fprintf(stderr, "exlr8d serve: job %lld: could not record %s: %s\n", static_cast<long long>(job), step,
                 s.ToString().c_str());
}

}  // namespace

struct JobRunner::Rep {
  JobRunnerOptions opt;
  std::unique_ptr<JobStore> store;

  mutable std::mutex mu;
  std::condition_variable wake;
  bool stopping = false;                    // guarded by mu
  // Set (under mu) by Submit and Stop, cleared by the runner when it looks
  // at the queue again: a wake-up sent while the runner was reading the
  // queue is not lost.
  bool kicked = false;
  JobId current = 0;                        // the job being started or run; 0 = none
  std::unique_ptr<PullJob> pull;            // its pull once created
  // A verify job's scrub: cancelled through the flag, watched through the
  // counters (reset when a job starts; read by Snapshot).
  std::atomic<bool> scrub_cancel{false};
  ScrubCounters scrub;
  bool verifying = false;                   // `current` is a verify job, running
  std::chrono::steady_clock::time_point verify_started;
  bool cancel_current = false;              // a client cancelled `current`
  std::string waiting;                      // why the head of the queue waits
  std::thread thread;

  void Loop();
  // Runs one job to its end on the open cache and records how it ended
  // (done, failed, cancelled, or queued again when the server is stopping).
  void RunJob(Cache& cache, const JobInfo& job);
  void RunPull(Cache& cache, const JobInfo& job);
  void RunVerify(Cache& cache, const JobInfo& job);
  // How a job whose work returned `status` ends: Finish or, when the server
  // stopped it, Requeue.
  void RecordEnd(const JobInfo& job, const Status& status, const std::string& result);
  JobSnapshot SnapshotOf(JobInfo info) const;  // REQUIRES: mu held
};

JobRunner::JobRunner(std::unique_ptr<Rep> rep) : rep_(std::move(rep)) {}
JobRunner::~JobRunner() { Stop(); }

PullOptions JobRunner::OptionsFor(const PullOptions& defaults, const JobRequest& r) {
  PullOptions o = defaults;
  o.repo = r.repo;
  o.revision = r.revision;
  o.manifest = r.manifest;
  o.tp = r.tp;
  o.rank = r.rank;
  o.dry_run = false;
  o.allow_local_manifest = false;
  if (!r.endpoint.empty() && NormalizedEndpoint(r.endpoint) != NormalizedEndpoint(defaults.hub.endpoint)) {
    o.hub.endpoint = r.endpoint;
    o.hub.token = std::string();  // anonymous: never the server's token to another host
    o.hub.token_file.clear();
    o.hub.token_from_environment = false;
  }
  return o;
}

Result<std::unique_ptr<JobRunner>> JobRunner::Start(JobRunnerOptions options) {
  auto rep = std::make_unique<Rep>();
  rep->opt = std::move(options);
  std::error_code ec;
  std::filesystem::create_directories(rep->opt.cache_dir, ec);
  if (ec) return IOError("create " + rep->opt.cache_dir.string() + ": " + ec.message());
  EXLR8_ASSIGN_OR_RETURN(rep->store, JobStore::Open(rep->opt.cache_dir / kJobDbName));
  EXLR8_ASSIGN_OR_RETURN(int requeued, rep->store->RequeueInterrupted());
  if (requeued > 0)
    std::fprintf(stderr, "exlr8d serve: %d job%s interrupted by a stop queued again; resuming\n", requeued,
                 requeued == 1 ? "" : "s");
  Rep* r = rep.get();
  rep->thread = std::thread([r] { r->Loop(); });
  return std::unique_ptr<JobRunner>(new JobRunner(std::move(rep)));
}

void JobRunner::Stop() {
  {
    std::lock_guard<std::mutex> l(rep_->mu);
    if (rep_->stopping && !rep_->thread.joinable()) return;
    rep_->stopping = true;
    rep_->kicked = true;
    if (rep_->pull) rep_->pull->Cancel();
    rep_->scrub_cancel.store(true);
  }
  rep_->wake.notify_all();
  if (rep_->thread.joinable()) rep_->thread.join();
}

void JobRunner::Rep::Loop() {
  std::unique_ptr<Cache> cache;  // open only while there is work
  for (;;) {
    {
      std::lock_guard<std::mutex> l(mu);
      if (stopping) break;
      kicked = false;
    }
    auto next = store->NextQueued();
    if (!next.ok() || !next->has_value()) {
      if (!next.ok()) std::fprintf(stderr, "exlr8d serve: job queue: %s\n", next.status().ToString().c_str());
      cache.reset();  // nothing to do: let other exlr8d commands have the cache
      std::unique_lock<std::mutex> l(mu);
      waiting.clear();
      // Woken by Submit/Stop; the timeout also retries a failing queue read.
      wake.wait_for(l, next.ok() ? std::chrono::milliseconds(60'000) : opt.lock_retry,
                    [this] { return kicked || stopping; });
      continue;
    }
    const JobInfo& job = **next;
    if (!cache) {
      auto opened = Cache::Open(opt.cache_dir, opt.cache);
      if (!opened.ok()) {
        // Most often another exlr8d owns the cache (FailedPrecondition,
        // naming the pid): the job waits for it. Anything else fails the
        // job, which a client can see, rather than spinning.
        if (opened.status().code() != StatusCode::kFailedPrecondition) {
          LogIfFailed(store->Finish(job.id, JobState::kFailed, "cannot open the cache: " + opened.status().ToString()),
                      job.id, "its failure");
          continue;
        }
        std::unique_lock<std::mutex> l(mu);
        waiting = "waiting for the cache: " + opened.status().message() + "; retrying every " +
                  std::to_string(opt.lock_retry.count()) + " ms";
        wake.wait_for(l, opt.lock_retry, [this] { return stopping; });
        continue;
      }
      cache = std::move(*opened);
    }
    RunJob(*cache, job);
  }
  cache.reset();
}

void JobRunner::Rep::RunJob(Cache& cache, const JobInfo& job) {
  {
    std::lock_guard<std::mutex> l(mu);
    if (stopping) return;
    waiting.clear();
    current = job.id;
    cancel_current = false;
    scrub_cancel.store(false);
  }
  if (Status s = store->MarkRunning(job.id); s.ok()) {  // not cancelled meanwhile
    if (job.request.kind == JobKind::kVerify) {
      RunVerify(cache, job);
    } else {
      RunPull(cache, job);
    }
  }
  std::lock_guard<std::mutex> l(mu);
  current = 0;
  pull.reset();
  verifying = false;
}

void JobRunner::Rep::RecordEnd(const JobInfo& job, const Status& status, const std::string& result) {
  bool by_client = false, by_stop = false;
  {
    std::lock_guard<std::mutex> l(mu);
    by_client = cancel_current;
    by_stop = stopping && !by_client;
  }
  if (status.ok()) {
    LogIfFailed(store->Finish(job.id, JobState::kDone, "", result), job.id, "its end");
  } else if (status.code() == StatusCode::kCancelled && by_stop) {
    LogIfFailed(store->Requeue(job.id), job.id, "its stop");  // resumes at the next start
  } else if (status.code() == StatusCode::kCancelled) {
    LogIfFailed(store->Finish(job.id, JobState::kCancelled, "cancelled by a client"), job.id, "its end");
  } else {
    LogIfFailed(store->Finish(job.id, JobState::kFailed, status.ToString()), job.id, "its end");
  }
}

void JobRunner::Rep::RunPull(Cache& cache, const JobInfo& job) {
  PullOptions o = JobRunner::OptionsFor(opt.pull, job.request);
  const JobRequest& r = job.request;
  std::fprintf(stderr, "exlr8d serve: job %lld: pulling %s@%s, manifest %s, TP %d rank %d (attempt %d)\n",
               static_cast<long long>(job.id), r.repo.c_str(), r.revision.c_str(), r.manifest.c_str(), r.tp, r.rank,
               job.attempts + 1);
  {
    std::lock_guard<std::mutex> l(mu);
    pull = std::make_unique<PullJob>(cache, o);
    if (cancel_current || stopping) pull->Cancel();
  }
  // Links the attempt to its pull row as soon as the engine records it
  // (after planning), so GET /v1/jobs/{id} can point at /v1/pulls/{id}.
  std::atomic<bool> ran{false};
  std::thread linker([&] {
    std::unique_lock<std::mutex> l(mu);
    while (!ran.load()) {
      const PullId id = pull->Progress().pull_id;
      if (id != 0) {
        l.unlock();
        LogIfFailed(store->SetPull(job.id, id), job.id, "its pull");
        return;
      }
      wake.wait_for(l, std::chrono::milliseconds(100));
    }
  });
  Result<PullSummary> result = pull->Run();
  ran.store(true);
  wake.notify_all();
  linker.join();
  const PullId pull_id = pull->Progress().pull_id;
  if (pull_id != 0) LogIfFailed(store->SetPull(job.id, pull_id), job.id, "its pull");

  if (result.ok()) {
    std::fprintf(stderr, "exlr8d serve: job %lld: %s; fetched %llu bytes, reused %llu, %.2f s\n",
                 static_cast<long long>(job.id), result->complete ? "done" : "incomplete",
                 static_cast<unsigned long long>(result->bytes_fetched),
                 static_cast<unsigned long long>(result->bytes_reused), result->elapsed_s);
  } else {
    std::fprintf(stderr, "exlr8d serve: job %lld: %s\n", static_cast<long long>(job.id),
                 result.status().ToString().c_str());
  }
  if (result.ok() && !result->complete) {
    LogIfFailed(store->Finish(job.id, JobState::kFailed, "the pull ended without every byte of its plan verified"),
                job.id, "its end");
    return;
  }
  if (result.ok() && !job.request.pin.empty()) {
    auto set = cache.PutFileset(result->repo, result->revision, result->commit);
    Status pinned = set.ok() ? cache.Pin(*set, job.request.pin) : set.status();
    if (!pinned.ok()) {
      LogIfFailed(store->Finish(job.id, JobState::kFailed, "pulled, but pinning failed: " + pinned.ToString()),
                  job.id, "its end");
      return;
    }
  }
  RecordEnd(job, result.status(), "");
}

void JobRunner::Rep::RunVerify(Cache& cache, const JobInfo& job) {
  const JobRequest& r = job.request;
  std::fprintf(stderr, "exlr8d serve: job %lld: verifying %s@%s (attempt %d)\n", static_cast<long long>(job.id),
               r.repo.c_str(), r.revision.c_str(), job.attempts + 1);
  {
    std::lock_guard<std::mutex> l(mu);
    scrub.bytes_total = scrub.bytes_checked = scrub.failures = 0;
    verifying = true;
    verify_started = std::chrono::steady_clock::now();
    if (cancel_current || stopping) scrub_cancel.store(true);
  }
  auto scrubbed = [&]() -> Result<ScrubReport> {
    auto commit = cache.LookupCommit(r.repo, r.revision);
    if (!commit.ok())
      return NotFoundError(r.repo + "@" + r.revision + " was never pulled into " + cache.dir().string());
    EXLR8_ASSIGN_OR_RETURN(std::vector<FilesetInfo> sets, cache.ListFilesets());
    for (const FilesetInfo& set : sets) {
      if (set.repo != r.repo || set.commit != *commit) continue;
      ScrubOptions o;
      o.repair = true;
      o.cancel = &scrub_cancel;
      o.counters = &scrub;
      return ScrubFileset(cache, set.id, o);
    }
    return NotFoundError(r.repo + " commit " + *commit + " is not in " + cache.dir().string());
  }();
  if (scrubbed.ok()) {
    std::fprintf(stderr, "exlr8d serve: job %lld: checked %llu bytes in %.2f s, %zu failed, forgot %llu bytes\n",
                 static_cast<long long>(job.id), static_cast<unsigned long long>(scrubbed->bytes_checked),
                 scrubbed->seconds, static_cast<std::size_t>(scrubbed->checks_failed),
                 static_cast<unsigned long long>(scrubbed->bytes_forgotten));
  } else {
    std::fprintf(stderr, "exlr8d serve: job %lld: %s\n", static_cast<long long>(job.id),
                 scrubbed.status().ToString().c_str());
  }
  RecordEnd(job, scrubbed.status(), scrubbed.ok() ? ScrubReportJson(*scrubbed).Dump() : "");
}

JobSnapshot JobRunner::Rep::SnapshotOf(JobInfo info) const {
  JobSnapshot s;
  if (info.id == current && pull && info.state == JobState::kRunning) s.progress = pull->Progress();
  if (info.id == current && verifying && info.state == JobState::kRunning) {
    VerifyProgress v;
    v.bytes_total = scrub.bytes_total.load(std::memory_order_relaxed);
    v.bytes_checked = scrub.bytes_checked.load(std::memory_order_relaxed);
    v.failures = scrub.failures.load(std::memory_order_relaxed);
    v.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - verify_started).count();
    s.verify_progress = v;
  }
  if (info.id == current) s.cancel_requested = cancel_current;
  s.info = std::move(info);
  return s;
}

Result<JobSnapshot> JobRunner::Submit(const JobRequest& request) {
  EXLR8_ASSIGN_OR_RETURN(JobId id, rep_->store->Add(request));
  {
    std::lock_guard<std::mutex> l(rep_->mu);
    rep_->kicked = true;
  }
  rep_->wake.notify_all();
  return Snapshot(id);
}

Result<JobSnapshot> JobRunner::Cancel(JobId id) {
  {
    std::lock_guard<std::mutex> l(rep_->mu);
    if (rep_->current == id) {
      rep_->cancel_current = true;
      if (rep_->pull) rep_->pull->Cancel();
      rep_->scrub_cancel.store(true);
    }
  }
  EXLR8_ASSIGN_OR_RETURN(JobInfo info, rep_->store->Get(id));
  if (info.state == JobState::kQueued) {
    Status s = rep_->store->Finish(id, JobState::kCancelled, "cancelled by a client before it started");
    // Lost a race with the runner starting it: it is running now, and the
    // flag set above cancels it.
    if (!s.ok() && s.code() != StatusCode::kFailedPrecondition) return s;
  } else if (IsFinished(info.state)) {
    return FailedPreconditionError("job " + std::to_string(id) + " has already finished (" +
                                   std::string(JobStateName(info.state)) + ")");
  }
  return Snapshot(id);
}

std::optional<JobId> JobRunner::RunningJobOfPull(std::int64_t pull) const {
  std::lock_guard<std::mutex> l(rep_->mu);
  if (rep_->current != 0 && rep_->pull && rep_->pull->Progress().pull_id == pull) return rep_->current;
  return std::nullopt;
}

Result<JobSnapshot> JobRunner::Snapshot(JobId id) const {
  EXLR8_ASSIGN_OR_RETURN(JobInfo info, rep_->store->Get(id));
  std::lock_guard<std::mutex> l(rep_->mu);
  JobSnapshot s = rep_->SnapshotOf(std::move(info));
  if (s.info.state == JobState::kQueued) s.waiting = rep_->waiting;
  return s;
}

Result<std::vector<JobSnapshot>> JobRunner::List(std::size_t limit) const {
  EXLR8_ASSIGN_OR_RETURN(std::vector<JobInfo> jobs, rep_->store->List(limit));
  std::lock_guard<std::mutex> l(rep_->mu);
  std::vector<JobSnapshot> out;
  for (auto& j : jobs) {
    JobSnapshot s = rep_->SnapshotOf(std::move(j));
    if (s.info.state == JobState::kQueued) s.waiting = rep_->waiting;
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace exlr8
