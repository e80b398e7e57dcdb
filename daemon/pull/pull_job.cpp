// PullJob's run loop: resolve and list, plan (pull_plan.cpp), stream,
// commit, summarize; the job's state is PullJob::Rep (pull_job_rep.h).
// The pieces it drives own their state (see each header's thread rules):
//   pull_hub.h       whether the hub or the cache answers (hub outages)
//   pull_streams.h   the fetch session and everything streaming in it
//   header_step.h    the width files' headers (the planner's last step)
//   pull_space.h     the space claim and --make-room
//   pull_files.h     what the cache holds of the fileset, and what of the plan
//   pull_progress.h  the phase timer and the throttled progress report
//   format/planner_input.h  the planner's input, from the fetched files
#include "daemon/pull/pull_job.h"

#include <algorithm>
#include <array>
#include <map>
#include <set>
#include <thread>

#include "daemon/base/clock.h"
#include "daemon/base/mutex.h"
#include "daemon/base/posix.h"
#include "daemon/cache/cache_paths.h"
#include "daemon/cache/extent_set.h"
#include "daemon/pull/consumers.h"
#include "daemon/pull/header_step.h"
#include "daemon/pull/pull_files.h"
#include "daemon/pull/pull_hub.h"
#include "daemon/pull/pull_job_rep.h"
#include "daemon/pull/pull_progress.h"
#include "daemon/pull/pull_space.h"
#include "daemon/pull/pull_streams.h"
#include "format/json_writer.h"
#include "format/layout.h"
#include "format/manifest.h"
#include "format/planner_input.h"

namespace exlr8 {

PullJob::PullJob(Cache& cache, PullOptions options)
    : rep_(std::make_unique<Rep>(cache, std::move(options))) {}
PullJob::~PullJob() = default;

void PullJob::Cancel() {
  rep_->cancel.store(true);
  MutexLock lock(&rep_->fetcher_mu);
  if (rep_->shared_fetcher != nullptr) rep_->shared_fetcher->Cancel();
}

PullProgress PullJob::Progress() const {
  PullProgress p;
  p.phase = rep_->phases.phase();
  p.bytes_planned = rep_->counters.bytes_planned.load();
  p.bytes_reused = rep_->counters.bytes_reused.load();
  p.bytes_verified = rep_->counters.bytes_verified.load();
  p.ranges_total = rep_->counters.ranges_total.load();
  p.ranges_done = rep_->counters.ranges_done.load();
  p.checksum_failures = rep_->counters.checksum_failures.load();
  p.fetch = rep_->FetcherCounters();
  p.bytes_received = p.fetch.bytes_received;
  p.elapsed_s = rep_->phases.Elapsed();
  p.pull_id = rep_->progress.pull_id();
  return p;
}

Status PullJob::Rep::ResolveAndList() {
  phases.Set(PullPhase::kResolve);
  if (!opt.offline) {
    EXLR8_ASSIGN_OR_RETURN(PullHub opened, OpenPullHub(cache, opt, &cancel));
    hub = std::move(opened.hub);
    if (opened.hub_error) {  // served from the cache (PullJob::Run)
      hub_error = std::move(opened.hub_error);
      opt.offline = true;
    }
  }
  if (opt.offline) {  // asked for, or the hub could not be asked
    auto c = cache.LookupCommit(opt.repo, opt.revision);
    if (!c.ok())
      return FailedPreconditionError("offline mode (--offline or HF_HUB_OFFLINE): " + opt.repo + "@" +
                                     opt.revision + " was never pulled into this cache (" +
                                     c.status().message() + ")");
    commit = *c;
    EXLR8_ASSIGN_OR_RETURN(fileset, cache.PutFileset(opt.repo, opt.revision, commit));
    files.SetFileset(fileset, opt.repo + "@" + commit);
    phases.Set(PullPhase::kList);
    return files.Refresh();
  }
  commit = hub->commit();
  RangeFetcherOptions fetch = opt.fetch;
  if (fetch.clock == nullptr) fetch.clock = &clock;  // one time line for the whole pull
  fetcher = std::make_unique<RangeFetcher>(*hub, fetch);
  {
    MutexLock lock(&fetcher_mu);
    shared_fetcher = fetcher.get();
  }
  EXLR8_ASSIGN_OR_RETURN(fileset, cache.PutFileset(opt.repo, opt.revision, commit));
  files.SetFileset(fileset, opt.repo + "@" + commit);
  // From here no eviction (another pull's make_room, /v1/evict) takes the
  // fileset this run writes, though its 'running' row comes only later.
  space.SetFileset(fileset);
  phases.Set(PullPhase::kList);
  EXLR8_ASSIGN_OR_RETURN(std::vector<HubFile> listing, hub->ListFiles());
  std::vector<NewFile> declared;
  declared.reserve(listing.size());
  for (const HubFile& f : listing) {
    NewFile nf{f.path, f.size, std::nullopt, std::nullopt};
    if (!f.lfs_sha256.empty())
      nf.sha256 = f.lfs_sha256;
    else if (!f.blob_id.empty())
      nf.git_sha1 = f.blob_id;
    declared.push_back(std::move(nf));
    // Small regular files come from the hub itself: one GET each, no HEAD.
    if (f.lfs_sha256.empty()) fetcher->ExpectServedByHub(f.path, f.size);
  }
  EXLR8_RETURN_IF_ERROR(cache.PutFiles(fileset, declared).status());
  return files.Refresh();
}

// The plan's halves not yet in the cache, on every slot the files leave.
Status PullJob::Rep::FetchHalves(const Plan& plan, std::uint64_t* reused) {
  if (streams != nullptr) streams->StartHeldBack();
  EXLR8_ASSIGN_OR_RETURN(std::vector<FileWork> work, files.MissingHalves(plan, opt.coalesce_gap, reused));
  if (work.empty()) return Status::Ok();
  std::uint64_t half_bytes = 0, halves = 0;
  for (const FileWork& fw : work) {
    halves += fw.halves.size();
    for (const HalfWork& h : fw.halves) half_bytes += h.length;
  }
  if (opt.offline)
    return FailedPreconditionError("offline mode: " + std::to_string(halves) + " halves (" +
                                   std::to_string(half_bytes) + " bytes) of this plan are not in the cache");
  // (What the files streaming meanwhile still write is this pull's own
  // outstanding claim, counted with the halves.)
  EXLR8_RETURN_IF_ERROR(space.CheckAndClaim(half_bytes));
  if (streams == nullptr) return InternalError("fetch step without a fetch session");
  streams->StartHalves(std::move(work));
  return Status::Ok();
}

Status PullJob::Rep::FinishStreams() {
  const Status s = streams->EndTransfers();
  phases.Set(PullPhase::kCommit);
  const Status flushed = streams->Flush();
  if (cancel.load()) return CancelledError("pull cancelled");
  EXLR8_RETURN_IF_ERROR(streams->StreamError());
  EXLR8_RETURN_IF_ERROR(s);
  EXLR8_RETURN_IF_ERROR(flushed);
  return files.Refresh();
}

PullCounters PullJob::Rep::CacheCounters() const {
  PullCounters c;
  c.bytes_planned = counters.bytes_planned.load();
  c.bytes_reused = counters.bytes_reused.load();
  const FetchCounters f = FetcherCounters();
  c.bytes_fetched = f.bytes_received;
  c.requests = f.transfers;
  c.retries = f.retries;
  c.checksum_failures = counters.checksum_failures.load();
  return c;
}

Result<PullSummary> PullJob::Rep::RunBody() {
  EXLR8_RETURN_IF_ERROR(CheckPullOptions(opt));
  EXLR8_RETURN_IF_ERROR(ResolveAndList());
  EXLR8_RETURN_IF_ERROR(cache.Touch(fileset));
  std::unique_ptr<PullStreams> fetch;
  struct Unset {  // `streams` points into `fetch` only while it lives
    Rep& r;
    ~Unset() { r.streams = nullptr; }
  } unset{*this};
  if (!opt.offline) {
    PullStreams::Env env{cache, *fetcher, counters, space, &cancel};
    env.on_commit = [this] { progress.Report(); };
    env.commit_interval = opt.commit_interval;
    env.commit_bytes = opt.commit_bytes;
    env.background_jobs = opt.background_jobs;
    // An adaptive fetch sizes the background share as the old default of
    // 16 did, so the whole files get what they got before.
    env.max_parallel = opt.fetch.adaptive ? std::min(16, opt.fetch.adaptive_initial) : opt.fetch.max_parallel;
    env.write_threads = WriteThreads();
    fetch = std::make_unique<PullStreams>(std::move(env));
    streams = fetch.get();
  }
  PullSummary sum;
  sum.repo = opt.repo;
  sum.revision = opt.revision;
  sum.commit = commit;
  if (opt.manifest.empty()) return RunFileset(std::move(sum));
  std::uint64_t reused = 0;

  EXLR8_ASSIGN_OR_RETURN(RankPlan rp, PlanRank(&reused));
  sum.root = cache.dir() / FilesetDir(opt.repo, commit);
  // headers of the width files this rank reads from: while the halves
  // stream (a dry run has no halves), as the planner's last step
  if (opt.dry_run) {
    EXLR8_RETURN_IF_ERROR(AddHeaders(rp, &reused));
    if (fetch) EXLR8_RETURN_IF_ERROR(FinishStreams());         // records what planning fetched
    EXLR8_RETURN_IF_ERROR(files.CountMissing(rp.plan, &sum));  // what a pull would fetch now
    sum.plan = std::move(rp.plan);
    return sum;
  }
  PullSpec spec;
  spec.fileset = fileset;
  spec.manifest = rp.manifest_is_local ? "local:" + opt.manifest : rp.manifest_path;
  spec.tp = opt.tp;
  spec.rank = opt.rank;
  spec.started_ms = phases.StartedUnixMs();
  // (The plan's total bytes, headers included, are the pull's bytes_planned counter.)
  JsonWriter summary;
  summary.BeginObject()
      .Field("half_bytes", rp.plan.totals.half_bytes)
      .Field("routed_halves", rp.plan.totals.routed_halves)
      .Field("shared_halves", rp.plan.totals.shared_halves)
      .EndObject();
  spec.plan_summary_json = std::move(summary).Take();
  EXLR8_ASSIGN_OR_RETURN(pull_id, cache.StartPull(spec));
  progress.Start(*pull_id);
  progress.ReportNow();  // the plan's size, before the first commit

  if (opt.offline) {
    EXLR8_ASSIGN_OR_RETURN(std::vector<WholeFileTarget> missing,
                           files.MissingWholeFiles(rp.whole, opt.offline, &reused));
    if (!missing.empty()) {
      std::uint64_t bytes = 0;
      for (const WholeFileTarget& t : missing) bytes += t.size;
      return FailedPreconditionError("offline mode: " + std::to_string(missing.size()) + " files (" +
                                     std::to_string(bytes) + " bytes, first " + missing[0].path +
                                     ") are not in the cache");
    }
  }
  // the halves, while the whole files finish and the headers arrive
  EXLR8_RETURN_IF_ERROR(FetchHalves(rp.plan, &reused));
  EXLR8_RETURN_IF_ERROR(AddHeaders(rp, &reused));
  phases.Set(PullPhase::kHalves);
  if (fetch) EXLR8_RETURN_IF_ERROR(FinishStreams());

  EXLR8_RETURN_IF_ERROR(files.CountMissing(rp.plan, &sum));
  sum.plan = std::move(rp.plan);
  return sum;
}

// The whole fileset: a plan of every listed file, whole. Each is verified
// by the hub's SHA-256 (LFS) or git blob SHA-1 while it streams, and an
// LVQ5 file also by its structure before it is recorded (WholeFileConsumer);
// an interrupted download resumes from its durable prefix.
Result<PullSummary> PullJob::Rep::RunFileset(PullSummary sum) {
  files.CheckLvq5Files();
  sum.root = cache.dir() / FilesetDir(opt.repo, commit);
  Plan plan;
  std::vector<std::string> paths;
  for (const auto& [path, f] : files.all()) {
    plan.files.push_back(WholePlanFile(path, f.size, f.sha256, f.git_sha1));
    plan.totals.whole_file_bytes += f.size;
    plan.totals.release_bytes += f.size;
    plan.totals.requests += plan.files.back().requests.size();
    paths.push_back(path);
  }
  plan.totals.bytes = plan.totals.needed_bytes = plan.totals.whole_file_bytes;
  counters.bytes_planned.store(plan.totals.needed_bytes);
  if (opt.dry_run) {
    EXLR8_RETURN_IF_ERROR(files.CountMissing(plan, &sum));
    sum.plan = std::move(plan);
    return sum;
  }
  PullSpec spec;
  spec.fileset = fileset;
  spec.manifest = "";  // the whole fileset
  spec.tp = 1;
  spec.rank = 0;
  spec.started_ms = phases.StartedUnixMs();
  JsonWriter summary;
  summary.BeginObject().Field("files", plan.files.size()).EndObject();
  spec.plan_summary_json = std::move(summary).Take();
  EXLR8_ASSIGN_OR_RETURN(pull_id, cache.StartPull(spec));
  progress.Start(*pull_id);
  progress.ReportNow();
  // (The transfer reports as the halves phase: the bulk of the bytes.)
  phases.Set(PullPhase::kHalves);
  std::uint64_t reused = 0;
  const Status fetched = EnsureWholeFiles(paths, &reused);
  counters.bytes_reused.store(reused);
  if (streams != nullptr) {
    const Status finished = FinishStreams();
    EXLR8_RETURN_IF_ERROR(fetched);
    EXLR8_RETURN_IF_ERROR(finished);
  } else {
    EXLR8_RETURN_IF_ERROR(fetched);
  }
  EXLR8_RETURN_IF_ERROR(files.CountMissing(plan, &sum));
  sum.plan = std::move(plan);
  return sum;
}

Result<PullSummary> PullJob::Rep::End(Result<PullSummary> result) {
  if (!result.ok() && hub_error && result.status().code() != StatusCode::kCancelled)
    result = result.status().WithContext("the hub could not be asked what " + opt.revision + " is now (" +
                                         hub_error->message() + "), and serving commit " + commit +
                                         " from the cache failed");
  const FetchCounters fc = fetcher ? fetcher->counters() : FetchCounters{};
  if (pull_id) {
    (void)cache.UpdatePull(*pull_id, CacheCounters());
    if (result.ok() && result->complete)
      (void)cache.FinishPull(*pull_id, PullState::kDone);
    else if (!result.ok() && result.status().code() == StatusCode::kCancelled)
      (void)cache.FinishPull(*pull_id, PullState::kCancelled, result.status().message());
    else
      (void)cache.FinishPull(*pull_id, PullState::kFailed,
                             result.ok() ? "plan not fully verified" : result.status().message());
  }
  if (!result.ok()) {
    phases.Set(PullPhase::kFailed);
    return result;
  }
  phases.Set(PullPhase::kDone);
  PullSummary& s = *result;
  s.bytes_planned = counters.bytes_planned.load();
  s.bytes_reused = counters.bytes_reused.load();
  s.bytes_fetched = fc.bytes_received;
  s.requests = fc.transfers;
  s.retries = fc.retries;
  s.refetches = fc.refetches;
  s.resolves = fc.resolves;
  s.jobs_adaptive = opt.fetch.adaptive;
  s.jobs_limit = fc.concurrency_limit;
  s.jobs_peak = fc.concurrency_peak;
  s.jobs_backoffs = fc.concurrency_backoffs;
  s.h2_streams = fc.h2_streams;
  s.checksum_failures = counters.checksum_failures.load();
  s.bytes_resumed = counters.bytes_resumed.load();
  s.bytes_written = counters.bytes_written_verified.load();
  s.bytes_claimed = space.claimed();
  s.evicted = space.evicted();
  s.bytes_evicted = space.bytes_evicted();
  s.bytes_lost = files.bytes_lost();
  s.served_from_cache = opt.offline;
  if (hub_error) s.hub_error = hub_error->message();
  s.elapsed_s = phases.Elapsed();
  s.phase_s = phases.phase_seconds();
  return result;
}

Result<PullSummary> PullJob::Run() {
  Rep& r = *rep_;
  // Claimed for this run only: a pull that ended (or failed) claims nothing.
  struct Unclaim {
    PullSpace& space;
    ~Unclaim() { space.Close(); }
  } unclaim{r.space};
  if (!r.opt.dry_run) r.space.Open();
  return r.End(r.RunBody());
}

}  // namespace exlr8
