#include "daemon/serve/job_runner.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "format/json.h"

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

// A job this server runs now, on a thread of its own.
struct RunningJob {
  JobInfo job;
  std::thread thread;
  bool finished = false;         // its thread is done; the scheduler joins it (guarded by Rep::mu)
  bool cancel_requested = false;  // a client cancelled it (guarded by Rep::mu)
  std::unique_ptr<PullJob> pull;  // a pull's engine once created (guarded by Rep::mu)
  // A verify job's scrub: cancelled through the flag, watched through the
  // counters (read by Snapshot).
  std::atomic<bool> scrub_cancel{false};
  ScrubCounters scrub;
  bool verifying = false;  // a verify job, checking (guarded by Rep::mu)
  std::chrono::steady_clock::time_point verify_started;
};

}  // namespace

struct JobRunner::Rep {
  JobRunnerOptions opt;
  std::unique_ptr<JobStore> store;

  mutable std::mutex mu;
  std::condition_variable wake;
  bool stopping = false;                    // guarded by mu
  // Set (under mu) by Submit, Cancel, Stop and every job that ends, cleared
  // by the scheduler when it looks at the queue again: a wake-up sent while
  // it was reading the queue is not lost.
  bool kicked = false;
  std::map<JobId, std::unique_ptr<RunningJob>> running;  // guarded by mu
  std::map<JobId, std::string> waiting;  // queued job -> why it has not started (guarded by mu)
  // Jobs a client cancelled while they were not running here: one the
  // scheduler starts meanwhile starts cancelled (guarded by mu). Found by
  // review: a cancel racing the start was answered 202 and lost.
  std::set<JobId> cancel_before_start;
  // Ends of jobs the queue could not record (a full disk, descriptors used
  // up): tried again on every pass of the scheduler until recorded, so a
  // job never stays "running" after its work ended (found by review: it
  // did until the next start, and blocked its repo). Guarded by mu.
  std::map<JobId, std::function<Status()>> unrecorded_ends;
  // Queued jobs whose start (or failure) the queue could not record (a full
  // disk): what went wrong, said once in the log and shown as the job's
  // `waiting`. While any is here the scheduler waits `lock_retry` between
  // passes (found by review: the failed start woke it at once, and it spun
  // at full CPU starting the same job, or flooded the log). Guarded by mu.
  std::map<JobId, std::string> queue_trouble;
  bool back_off = false;  // the next pass waits lock_retry first (guarded by mu)
  RunnerTotals finished_totals;          // of the jobs that ended (guarded by mu)
  std::thread scheduler;

  void Loop();
  // Which of `queued` (oldest first) start now, given the running jobs and
  // max_running; the others get their reason in `why`. REQUIRES: mu held.
  std::vector<JobInfo> Pick(const std::vector<JobInfo>& queued, std::map<JobId, std::string>& why) const;
  // Joins the threads of jobs that ended.
  void Reap();
  // Runs one job to its end on the open cache and records how it ended
  // (done, failed, cancelled, or queued again when the server is stopping).
  void RunJob(Cache& cache, RunningJob& rj);
  void RunPull(Cache& cache, RunningJob& rj);
  void RunVerify(Cache& cache, RunningJob& rj);
  void RunEvict(Cache& cache, RunningJob& rj);
  // How a job whose work returned `status` ends: Finish or, when the server
  // stopped it, Requeue.
  void RecordEnd(const RunningJob& rj, const Status& status, const std::string& result);
  // Records a job's end by `write` (Finish or Requeue); one that fails is
  // kept in unrecorded_ends and tried again by the scheduler.
  void End(JobId job, std::function<Status()> write);
  // The queue could not record `what` of a queued job: note it in
  // queue_trouble (logged when it changes) and make the scheduler back off.
  // REQUIRES: mu held.
  void NoteQueueTrouble(JobId job, const std::string& what, const Status& why);
  // Tries the unrecorded ends again; true while some are left.
  bool RetryUnrecordedEnds();
  void Kick() {
    {
      std::lock_guard<std::mutex> l(mu);
      kicked = true;
    }
    wake.notify_all();
  }
  JobSnapshot SnapshotOf(JobInfo info) const;  // REQUIRES: mu held
};

namespace {

// The fileset a verify or evict job names: the commit its revision last
// resolved to in this cache.
Result<FilesetInfo> FindFileset(Cache& cache, const JobRequest& r) {
  auto commit = cache.LookupCommit(r.repo, r.revision);
  if (!commit.ok()) return NotFoundError(r.repo + "@" + r.revision + " was never pulled into " + cache.dir().string());
  EXLR8_ASSIGN_OR_RETURN(std::vector<FilesetInfo> sets, cache.ListFilesets());
  for (FilesetInfo& set : sets)
    if (set.repo == r.repo && set.commit == *commit) return std::move(set);
  return NotFoundError(r.repo + " commit " + *commit + " is not in " + cache.dir().string());
}

// What one job adds to the server's totals.
void AddTo(RunnerTotals& t, const RunningJob& rj) {
  if (rj.pull) {
    const PullProgress p = rj.pull->Progress();
    t.bytes_received += p.bytes_received;
    t.bytes_verified += p.bytes_verified;
    t.http_requests += p.fetch.transfers;
    t.http_retries += p.fetch.retries;
    t.hub_resolves += p.fetch.resolves;
    t.checksum_failures += p.checksum_failures;
  }
  t.scrub_bytes_checked += rj.scrub.bytes_checked.load(std::memory_order_relaxed);
  t.scrub_failures += rj.scrub.failures.load(std::memory_order_relaxed);
}

}  // namespace

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
  o.make_room = r.make_room;
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
  if (rep->opt.max_running < 1) return InvalidArgumentError("max_running must be at least 1");
  // One limit for every job at once, not one each.
  RangeFetcherOptions& fetch = rep->opt.pull.fetch;
  if (fetch.max_bytes_per_second > 0 && fetch.shared_rate == nullptr)
    fetch.shared_rate = std::make_shared<RateLimiter>(fetch.max_bytes_per_second);
  std::error_code ec;
  std::filesystem::create_directories(rep->opt.cache_dir, ec);
  if (ec) return IOError("create " + rep->opt.cache_dir.string() + ": " + ec.message());
  EXLR8_ASSIGN_OR_RETURN(rep->store, JobStore::Open(rep->opt.cache_dir / kJobDbName));
  EXLR8_ASSIGN_OR_RETURN(int requeued, rep->store->RequeueInterrupted());
  if (requeued > 0)
    std::fprintf(stderr, "exlr8d serve: %d job%s interrupted by a stop queued again; resuming\n", requeued,
                 requeued == 1 ? "" : "s");
  Rep* r = rep.get();
  rep->scheduler = std::thread([r] { r->Loop(); });
  return std::unique_ptr<JobRunner>(new JobRunner(std::move(rep)));
}

void JobRunner::Stop() {
  {
    std::lock_guard<std::mutex> l(rep_->mu);
    if (rep_->stopping && !rep_->scheduler.joinable()) return;
    rep_->stopping = true;
    rep_->kicked = true;
    for (auto& [id, rj] : rep_->running) {
      if (rj->pull) rj->pull->Cancel();
      rj->scrub_cancel.store(true);
    }
  }
  rep_->wake.notify_all();
  if (rep_->scheduler.joinable()) rep_->scheduler.join();
}

std::vector<JobInfo> JobRunner::Rep::Pick(const std::vector<JobInfo>& queued, std::map<JobId, std::string>& why) const {
  std::map<std::string, JobId> repo_busy;  // repo -> the job before which later ones of it wait
  for (const auto& [id, rj] : running) repo_busy.emplace(rj->job.request.repo, id);
  std::size_t slots = running.size() < static_cast<std::size_t>(opt.max_running)
                          ? static_cast<std::size_t>(opt.max_running) - running.size()
                          : 0;
  std::vector<JobInfo> start;
  for (const JobInfo& job : queued) {
    auto [busy, first_of_repo] = repo_busy.emplace(job.request.repo, job.id);
    if (!first_of_repo) {
      why[job.id] = "after job " + std::to_string(busy->second) + " of the same repo";
    } else if (slots == 0) {
      why[job.id] = "waiting for a free slot: " + std::to_string(opt.max_running) + " job" +
                    (opt.max_running == 1 ? "" : "s") + " running (--max-jobs)";
    } else {
      start.push_back(job);
      --slots;
    }
  }
  return start;
}

void JobRunner::Rep::Reap() {
  std::vector<std::unique_ptr<RunningJob>> ended;
  {
    std::lock_guard<std::mutex> l(mu);
    for (auto it = running.begin(); it != running.end();) {
      if (it->second->finished) {
        ended.push_back(std::move(it->second));
        it = running.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& rj : ended) rj->thread.join();
}

void JobRunner::Rep::Loop() {
  std::unique_ptr<Cache> cache;  // open only while there is work
  for (;;) {
    {
      std::unique_lock<std::mutex> l(mu);
      if (back_off) {
        back_off = false;
        wake.wait_for(l, opt.lock_retry, [this] { return stopping; });
      }
      if (stopping) break;
      kicked = false;
    }
    Reap();
    const bool ends_left = RetryUnrecordedEnds();
    auto queued = store->Queued();
    std::unique_lock<std::mutex> l(mu);
    if (!queued.ok()) {
      std::fprintf(stderr, "exlr8d serve: job queue: %s\n", queued.status().ToString().c_str());
      wake.wait_for(l, opt.lock_retry, [this] { return kicked || stopping; });
      continue;
    }
    if (queued->empty() && running.empty() && cache) {
      l.unlock();
      cache.reset();  // nothing to do: let other exlr8d commands have the cache
      l.lock();
    }
    std::map<JobId, std::string> why;
    std::vector<JobInfo> start = Pick(*queued, why);
    if (!start.empty() && !cache) {
      l.unlock();
      auto opened = Cache::Open(opt.cache_dir, opt.cache);
      if (!opened.ok()) {
        // Most often another exlr8d owns the cache (FailedPrecondition,
        // naming the pid): the jobs wait for it. Anything else fails the
        // jobs that would start, which a client can see, rather than
        // spinning.
        if (opened.status().code() != StatusCode::kFailedPrecondition) {
          for (const JobInfo& job : start) {
            const std::string error = "cannot open the cache: " + opened.status().ToString();
            const Status s = store->Finish(job.id, JobState::kFailed, error);
            if (s.ok() || s.code() == StatusCode::kFailedPrecondition) continue;  // recorded, or ended meanwhile
            std::lock_guard<std::mutex> g(mu);
            NoteQueueTrouble(job.id, "its failure (" + error + ")", s);
          }
          continue;
        }
        l.lock();
        const std::string message = "waiting for the cache: " + opened.status().message() + "; retrying every " +
                                    std::to_string(opt.lock_retry.count()) + " ms";
        waiting.clear();
        for (const JobInfo& job : *queued) waiting[job.id] = message;
        wake.wait_for(l, opt.lock_retry, [this] { return stopping; });
        continue;
      }
      cache = std::move(*opened);
      l.lock();
    }
    waiting = std::move(why);
    // Troubles of jobs no longer queued (recorded in the end) are over.
    std::erase_if(queue_trouble, [&](const auto& t) {
      return std::none_of(queued->begin(), queued->end(), [&](const JobInfo& j) { return j.id == t.first; });
    });
    for (const auto& [id, trouble] : queue_trouble) waiting[id] = trouble;
    if (stopping) break;
    for (const JobInfo& job : start) {
      auto rj = std::make_unique<RunningJob>();
      rj->job = job;
      rj->cancel_requested = cancel_before_start.erase(job.id) > 0;
      RunningJob* raw = rj.get();
      Cache* c = cache.get();
      raw->thread = std::thread([this, c, raw] { RunJob(*c, *raw); });
      running.emplace(job.id, std::move(rj));
    }
    // Woken by Submit, Cancel, Stop and every job that ends; the timeout
    // also retries a failing queue read.
    wake.wait_for(l, ends_left ? opt.lock_retry : std::chrono::milliseconds(60'000),
                  [this] { return kicked || stopping; });
  }
  // Stopping: Stop() cancelled the running jobs; wait for them to record
  // how they ended before the cache closes.
  std::vector<std::unique_ptr<RunningJob>> left;
  {
    std::lock_guard<std::mutex> l(mu);
    for (auto& [id, rj] : running) left.push_back(std::move(rj));
    running.clear();
  }
  for (auto& rj : left) rj->thread.join();
  // Not tried again here (a stop must not wait out busy timeouts): the
  // next start queues them again (RequeueInterrupted) and runs them again.
  {
    std::lock_guard<std::mutex> l(mu);
    if (!unrecorded_ends.empty())
      std::fprintf(stderr, "exlr8d serve: %zu job end(s) could not be recorded; they run again at the next start\n",
                   unrecorded_ends.size());
  }
  cache.reset();
}

void JobRunner::Rep::RunJob(Cache& cache, RunningJob& rj) {
  bool cancelled = false;  // asked for as it started (cancel_before_start)
  {
    std::lock_guard<std::mutex> l(mu);
    cancelled = rj.cancel_requested;
  }
  if (Status s = store->MarkRunning(rj.job.id); !s.ok()) {
    // FailedPrecondition: cancelled (or gone) while queued, nothing to do.
    // Anything else: the queue could not record the start; the job stays
    // queued and starts once it can.
    if (s.code() != StatusCode::kFailedPrecondition) {
      std::lock_guard<std::mutex> l(mu);
      NoteQueueTrouble(rj.job.id, "its start", s);
    }
  } else if (cancelled) {
    // Never started: an evict would not look at the flag, and must not run
    // after a client was told it is cancelled (found by review).
    JobStore* st = store.get();
    const JobId id = rj.job.id;
    End(id, [st, id] { return st->Finish(id, JobState::kCancelled, "cancelled by a client before it started"); });
  } else {
    {
      std::lock_guard<std::mutex> l(mu);
      if (queue_trouble.erase(rj.job.id) > 0)
        std::fprintf(stderr, "exlr8d serve: job %lld: its start is recorded now\n", static_cast<long long>(rj.job.id));
    }
    switch (rj.job.request.kind) {
      case JobKind::kPull: RunPull(cache, rj); break;
      case JobKind::kVerify: RunVerify(cache, rj); break;
      case JobKind::kEvict: RunEvict(cache, rj); break;
    }
  }
  {
    std::lock_guard<std::mutex> l(mu);
    AddTo(finished_totals, rj);
    rj.pull.reset();
    rj.verifying = false;
    rj.finished = true;
    kicked = true;
  }
  wake.notify_all();
}

void JobRunner::Rep::NoteQueueTrouble(JobId job, const std::string& what, const Status& why) {
  const std::string message = "the job queue could not record " + what + ": " + why.ToString() + "; retrying every " +
                              std::to_string(opt.lock_retry.count()) + " ms";
  std::string& noted = queue_trouble[job];
  if (noted != message)
    std::fprintf(stderr, "exlr8d serve: job %lld: %s\n", static_cast<long long>(job), message.c_str());
  noted = message;
  waiting[job] = message;
  back_off = true;
}

void JobRunner::Rep::End(JobId job, std::function<Status()> write) {
  Status s = write();
  if (s.ok() || s.code() == StatusCode::kFailedPrecondition) return;  // recorded, or ended before
  std::fprintf(stderr, "exlr8d serve: job %lld: could not record its end (retrying): %s\n",
               static_cast<long long>(job), s.ToString().c_str());
  std::lock_guard<std::mutex> l(mu);
  unrecorded_ends[job] = std::move(write);
}

bool JobRunner::Rep::RetryUnrecordedEnds() {
  // Copies: the ends stay listed while they are tried (Cancel looks), and a
  // few per pass (each may wait out SQLite's 5 s busy timeout), so the
  // scheduler still starts and reaps jobs meanwhile.
  constexpr std::size_t kPerPass = 4;
  std::vector<std::pair<JobId, std::function<Status()>>> ends;
  {
    std::lock_guard<std::mutex> l(mu);
    for (const auto& [id, write] : unrecorded_ends) {
      if (ends.size() == kPerPass) break;
      ends.emplace_back(id, write);
    }
  }
  std::vector<JobId> recorded;
  for (const auto& [id, write] : ends) {
    const Status s = write();
    if (s.ok() || s.code() == StatusCode::kFailedPrecondition) {
      std::fprintf(stderr, "exlr8d serve: job %lld: its end is recorded now\n", static_cast<long long>(id));
      recorded.push_back(id);
    }
  }
  std::lock_guard<std::mutex> l(mu);
  for (JobId id : recorded) unrecorded_ends.erase(id);
  return !unrecorded_ends.empty();
}

void JobRunner::Rep::RecordEnd(const RunningJob& rj, const Status& status, const std::string& result) {
  const JobInfo& job = rj.job;
  bool by_client = false, by_stop = false;
  {
    std::lock_guard<std::mutex> l(mu);
    by_client = rj.cancel_requested;
    by_stop = stopping && !by_client;
  }
  JobStore* st = store.get();
  const JobId id = job.id;
  if (status.ok()) {
    End(id, [st, id, result] { return st->Finish(id, JobState::kDone, "", result); });
  } else if (status.code() == StatusCode::kCancelled && by_stop) {
    // Resumes at the next start (which also requeues it if this fails).
    LogIfFailed(store->Requeue(id), id, "its stop");
  } else if (status.code() == StatusCode::kCancelled) {
    End(id, [st, id] { return st->Finish(id, JobState::kCancelled, "cancelled by a client"); });
  } else {
    const std::string error = status.ToString();
    End(id, [st, id, error] { return st->Finish(id, JobState::kFailed, error); });
  }
}

void JobRunner::Rep::RunPull(Cache& cache, RunningJob& rj) {
  const JobInfo& job = rj.job;
  PullOptions o = JobRunner::OptionsFor(opt.pull, job.request);
  const JobRequest& r = job.request;
  std::fprintf(stderr, "exlr8d serve: job %lld: pulling %s@%s, manifest %s, TP %d rank %d (attempt %d)\n",
               static_cast<long long>(job.id), r.repo.c_str(), r.revision.c_str(), r.manifest.c_str(), r.tp, r.rank,
               job.attempts + 1);
  {
    std::lock_guard<std::mutex> l(mu);
    rj.pull = std::make_unique<PullJob>(cache, o);
    if (rj.cancel_requested || stopping) rj.pull->Cancel();
  }
  // Links the attempt to its pull row as soon as the engine records it
  // (after planning), so GET /v1/jobs/{id} can point at /v1/pulls/{id}.
  std::atomic<bool> ran{false};
  std::thread linker([&] {
    std::unique_lock<std::mutex> l(mu);
    while (!ran.load()) {
      const PullId id = rj.pull->Progress().pull_id;
      if (id != 0) {
        l.unlock();
        LogIfFailed(store->SetPull(job.id, id), job.id, "its pull");
        return;
      }
      wake.wait_for(l, std::chrono::milliseconds(100));
    }
  });
  Result<PullSummary> result = rj.pull->Run();
  ran.store(true);
  wake.notify_all();
  linker.join();
  const PullId pull_id = rj.pull->Progress().pull_id;
  if (pull_id != 0) LogIfFailed(store->SetPull(job.id, pull_id), job.id, "its pull");

  if (result.ok()) {
    std::fprintf(stderr, "exlr8d serve: job %lld: %s; fetched %llu bytes, reused %llu, %.2f s\n",
                 static_cast<long long>(job.id), result->complete ? "done" : "incomplete",
                 static_cast<unsigned long long>(result->bytes_fetched),
                 static_cast<unsigned long long>(result->bytes_reused), result->elapsed_s);
    if (!result->hub_error.empty())
      std::fprintf(
          stderr,
          "exlr8d serve: job %lld: the hub could not be asked what %s is now (%s); served from the cache: "
          "commit %s, what %s last resolved to here, where the rank is complete\n",
          static_cast<long long>(job.id), result->revision.c_str(), result->hub_error.c_str(),
          result->commit.c_str(), result->revision.c_str());
    if (!result->evicted.empty())
      std::fprintf(stderr, "exlr8d serve: job %lld made room: evicted %zu fileset%s, %llu bytes\n",
                   static_cast<long long>(job.id), result->evicted.size(), result->evicted.size() == 1 ? "" : "s",
                   static_cast<unsigned long long>(result->bytes_evicted));
  } else {
    std::fprintf(stderr, "exlr8d serve: job %lld: %s\n", static_cast<long long>(job.id),
                 result.status().ToString().c_str());
  }
  JobStore* st = store.get();
  const JobId id = job.id;
  if (result.ok() && !result->complete) {
    End(id, [st, id] {
      return st->Finish(id, JobState::kFailed, "the pull ended without every byte of its plan verified");
    });
    return;
  }
  if (result.ok() && !job.request.pin.empty()) {
    auto set = cache.PutFileset(result->repo, result->revision, result->commit);
    Status pinned = set.ok() ? cache.Pin(*set, job.request.pin) : set.status();
    if (!pinned.ok()) {
      const std::string error = "pulled, but pinning failed: " + pinned.ToString();
      End(id, [st, id, error] { return st->Finish(id, JobState::kFailed, error); });
      return;
    }
  }
  // In the job's result: what make_room evicted, and a pull served from
  // the cache because the hub could not be asked (the commit and why).
  std::vector<JsonValue::Member> said;
  if (result.ok() && !result->evicted.empty()) {
    said.emplace_back("evicted_filesets", JsonValue::UInt(result->evicted.size()));
    said.emplace_back("bytes_evicted", JsonValue::UInt(result->bytes_evicted));
  }
  if (result.ok() && !result->hub_error.empty()) {
    said.emplace_back("served_from_cache", JsonValue::Bool(true));
    said.emplace_back("commit", JsonValue::String(result->commit));
    said.emplace_back("hub_error", JsonValue::String(result->hub_error));
  }
  RecordEnd(rj, result.status(), said.empty() ? std::string() : JsonValue::Object(std::move(said)).Dump());
}

void JobRunner::Rep::RunVerify(Cache& cache, RunningJob& rj) {
  const JobInfo& job = rj.job;
  const JobRequest& r = job.request;
  std::fprintf(stderr, "exlr8d serve: job %lld: verifying %s@%s (attempt %d)\n", static_cast<long long>(job.id),
               r.repo.c_str(), r.revision.c_str(), job.attempts + 1);
  {
    std::lock_guard<std::mutex> l(mu);
    rj.verifying = true;
    rj.verify_started = std::chrono::steady_clock::now();
    if (rj.cancel_requested || stopping) rj.scrub_cancel.store(true);
  }
  auto scrubbed = [&]() -> Result<ScrubReport> {
    EXLR8_ASSIGN_OR_RETURN(FilesetInfo set, FindFileset(cache, r));
    ScrubOptions o;
    o.repair = true;
    o.cancel = &rj.scrub_cancel;
    o.counters = &rj.scrub;
    return ScrubFileset(cache, set.id, o);
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
  RecordEnd(rj, scrubbed.status(), scrubbed.ok() ? ScrubReportJson(*scrubbed).Dump() : "");
}

void JobRunner::Rep::RunEvict(Cache& cache, RunningJob& rj) {
  const JobInfo& job = rj.job;
  const JobRequest& r = job.request;
  std::fprintf(stderr, "exlr8d serve: job %lld: evicting %s@%s\n", static_cast<long long>(job.id), r.repo.c_str(),
               r.revision.c_str());
  Result<JsonValue> evicted = [&]() -> Result<JsonValue> {
    FilesetInfo set;
    if (job.target_commit.empty()) {
      // The first attempt: the revision names a commit now; that one is
      // recorded before anything is evicted.
      EXLR8_ASSIGN_OR_RETURN(set, FindFileset(cache, r));
      EXLR8_RETURN_IF_ERROR(store->SetTargetCommit(job.id, set.commit));
    } else {
      // An attempt after a restart evicts what the first chose, never what
      // the revision names now (found by review: a pull between the two
      // had fetched another commit of it, which the retry evicted).
      EXLR8_ASSIGN_OR_RETURN(std::vector<FilesetInfo> sets, cache.ListFilesets());
      const auto it = std::find_if(sets.begin(), sets.end(), [&](const FilesetInfo& s) {
        return s.repo == r.repo && s.commit == job.target_commit;
      });
      if (it == sets.end()) {
        std::fprintf(stderr, "exlr8d serve: job %lld: %s commit %s was evicted by its earlier attempt\n",
                     static_cast<long long>(job.id), r.repo.c_str(), job.target_commit.c_str());
        EXLR8_ASSIGN_OR_RETURN(const std::uint64_t remaining, cache.RecordedBytes());
        return JsonValue::Object({{"repo", JsonValue::String(r.repo)},
                                  {"commit", JsonValue::String(job.target_commit)},
                                  {"bytes_freed", JsonValue::UInt(0)},
                                  {"bytes_remaining", JsonValue::UInt(remaining)},
                                  {"evicted_before_a_restart", JsonValue::Bool(true)}});
      }
      set = *it;
    }
    EXLR8_ASSIGN_OR_RETURN(GcResult gone, cache.Evict(set.id));
    std::fprintf(stderr, "exlr8d serve: job %lld: evicted %s commit %s, freed %llu bytes\n",
                 static_cast<long long>(job.id), set.repo.c_str(), set.commit.c_str(),
                 static_cast<unsigned long long>(gone.bytes_freed));
    return JsonValue::Object({{"repo", JsonValue::String(set.repo)},
                              {"commit", JsonValue::String(set.commit)},
                              {"bytes_freed", JsonValue::UInt(gone.bytes_freed)},
                              {"bytes_remaining", JsonValue::UInt(gone.bytes_remaining)}});
  }();
  if (!evicted.ok())
    std::fprintf(stderr, "exlr8d serve: job %lld: %s\n", static_cast<long long>(job.id),
                 evicted.status().ToString().c_str());
  RecordEnd(rj, evicted.status(), evicted.ok() ? evicted->Dump() : "");
}

JobSnapshot JobRunner::Rep::SnapshotOf(JobInfo info) const {
  JobSnapshot s;
  if (auto it = running.find(info.id); it != running.end()) {
    const RunningJob& rj = *it->second;
    if (rj.pull && info.state == JobState::kRunning) s.progress = rj.pull->Progress();
    if (rj.verifying && info.state == JobState::kRunning) {
      VerifyProgress v;
      v.bytes_total = rj.scrub.bytes_total.load(std::memory_order_relaxed);
      v.bytes_checked = rj.scrub.bytes_checked.load(std::memory_order_relaxed);
      v.failures = rj.scrub.failures.load(std::memory_order_relaxed);
      v.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - rj.verify_started).count();
      s.verify_progress = v;
    }
    s.cancel_requested = rj.cancel_requested;
  }
  if (info.state == JobState::kQueued) {
    if (auto w = waiting.find(info.id); w != waiting.end()) s.waiting = w->second;
  }
  s.info = std::move(info);
  return s;
}

Result<JobSnapshot> JobRunner::Submit(const JobRequest& request) {
  EXLR8_ASSIGN_OR_RETURN(JobId id, rep_->store->Add(request));
  rep_->Kick();
  return Snapshot(id);
}

Result<JobSnapshot> JobRunner::Cancel(JobId id) {
  bool asked_here = false;  // this request is the one that cancels a running job
  bool not_started = false;
  bool ended_here = false;  // its work ended; its thread is not reaped yet
  {
    std::lock_guard<std::mutex> l(rep_->mu);
    auto it = rep_->running.find(id);
    ended_here = it != rep_->running.end() && it->second->finished;
    if (it != rep_->running.end() && !it->second->finished) {
      RunningJob& rj = *it->second;
      asked_here = !rj.cancel_requested;
      rj.cancel_requested = true;
      if (rj.pull) rj.pull->Cancel();
      rj.scrub_cancel.store(true);
    } else if (it == rep_->running.end()) {
      // Not started here yet: if the scheduler starts it before the queue
      // below says cancelled, it starts cancelled.
      rep_->cancel_before_start.insert(id);
      not_started = true;
    }
  }
  // The flag for a job not started stays only where the queue says the job
  // started meanwhile (the scheduler took it along); every other way out
  // takes it back.
  bool keep_flag = false;
  struct Forget {
    JobRunner::Rep* rep;
    JobId id;
    const bool* keep;
    bool armed;
    ~Forget() {
      if (!armed || *keep) return;
      std::lock_guard<std::mutex> l(rep->mu);
      rep->cancel_before_start.erase(id);
    }
  } forget{rep_.get(), id, &keep_flag, not_started};
  EXLR8_ASSIGN_OR_RETURN(JobInfo info, rep_->store->Get(id));
  if (info.state == JobState::kQueued) {
    // Only while still queued: a job that started meanwhile is cancelled
    // by its flag (above), never marked cancelled while it runs on.
    Status s = rep_->store->CancelQueued(id, "cancelled by a client before it started");
    if (!s.ok() && s.code() != StatusCode::kFailedPrecondition) return s;
    keep_flag = !s.ok();  // it started: the flag went, or goes, with it
    asked_here = asked_here || s.ok() || not_started;
    rep_->Kick();  // jobs of its repo waited for it
  } else if (IsFinished(info.state)) {
    if (!asked_here) {
      return FailedPreconditionError("job " + std::to_string(id) + " has already finished (" +
                                     std::string(JobStateName(info.state)) + ")");
    }
  } else if (ended_here) {
    // Its work ended, yet the queue says running: its end is not recorded.
    return FailedPreconditionError("job " + std::to_string(id) +
                                   " has already ended; recording its end failed and is being retried");
  } else if (not_started) {
    // Running by the queue, yet it was not in `running` when looked: the
    // scheduler started it in between, taking the flag along (and it may
    // have ended since, quickly, because of it); or its work ended and its
    // end is not recorded yet.
    bool here = false, unrecorded = false;
    {
      std::lock_guard<std::mutex> l(rep_->mu);
      here = rep_->running.count(id) > 0;
      unrecorded = rep_->unrecorded_ends.count(id) > 0;
    }
    if (unrecorded)
      return FailedPreconditionError("job " + std::to_string(id) +
                                     " has already ended; recording its end failed and is being retried");
    if (!here) {
      EXLR8_ASSIGN_OR_RETURN(JobInfo now, rep_->store->Get(id));
      if (!IsFinished(now.state))
        return InternalError("job " + std::to_string(id) + " is running in the queue but not in this server");
    }
    asked_here = true;
  }
  // A running job may have ended between the flag and the read above (its
  // pull stops within milliseconds, most often because of this very
  // request): the request is answered as accepted, with the job as it is
  // now. A second request for the same job is refused once it has ended.
  EXLR8_ASSIGN_OR_RETURN(JobSnapshot snapshot, Snapshot(id));
  snapshot.cancel_requested = snapshot.cancel_requested || asked_here;
  return snapshot;
}

std::optional<JobId> JobRunner::RunningJobOfPull(std::int64_t pull) const {
  std::lock_guard<std::mutex> l(rep_->mu);
  for (const auto& [id, rj] : rep_->running)
    if (rj->pull && rj->pull->Progress().pull_id == pull) return id;
  return std::nullopt;
}

Result<JobSnapshot> JobRunner::Snapshot(JobId id) const {
  EXLR8_ASSIGN_OR_RETURN(JobInfo info, rep_->store->Get(id));
  std::lock_guard<std::mutex> l(rep_->mu);
  return rep_->SnapshotOf(std::move(info));
}

Result<std::vector<JobSnapshot>> JobRunner::List(std::size_t limit, std::optional<JobState> state) const {
  EXLR8_ASSIGN_OR_RETURN(std::vector<JobInfo> jobs, rep_->store->List(limit, state));
  std::lock_guard<std::mutex> l(rep_->mu);
  std::vector<JobSnapshot> out;
  for (auto& j : jobs) out.push_back(rep_->SnapshotOf(std::move(j)));
  return out;
}

Result<RunnerMetrics> JobRunner::Metrics() const {
  RunnerMetrics m;
  EXLR8_ASSIGN_OR_RETURN(m.jobs_by_state, rep_->store->CountByState());
  std::vector<JobId> ids;
  {
    std::lock_guard<std::mutex> l(rep_->mu);
    m.totals = rep_->finished_totals;
    m.max_running = rep_->opt.max_running;
    for (const auto& [id, rj] : rep_->running) {
      if (!rj->finished) AddTo(m.totals, *rj);
      ids.push_back(id);
    }
  }
  for (JobId id : ids) {
    auto s = Snapshot(id);
    if (s.ok() && s->info.state == JobState::kRunning) m.running.push_back(std::move(*s));
  }
  return m;
}

}  // namespace exlr8
