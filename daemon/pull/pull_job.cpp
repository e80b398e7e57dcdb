// PullJob's run loop: resolve and list, plan, stream, commit, summarize.
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
#include "daemon/pull/pull_progress.h"
#include "daemon/pull/pull_space.h"
#include "daemon/pull/pull_streams.h"
#include "format/layout.h"
#include "format/manifest.h"
#include "format/planner_input.h"

namespace exlr8 {

namespace {

// The pull's row is written at most this often: each write is a SQLite
// transaction with its own WAL fsync, and commits come as often as every
// 16 MiB.
constexpr std::chrono::milliseconds kProgressInterval{500};

// What the planner made of the release for this rank.
struct RankPlan {
  Plan plan;
  std::string manifest_path;  // in the release (or the local file's path)
  bool manifest_is_local = false;
  std::vector<std::string> whole;  // fetched whole whatever the plan
  // The width files the rank reads from, and where their halves lie: what
  // their headers are checked against.
  std::vector<std::string> width_paths;
  std::map<std::string, WidthFileSpan> spans;
};

}  // namespace

// The state of one job.
//
// Thread rules: everything not said otherwise is the Run() thread's, unlocked.
// Cancel() and Progress() read `cancel`, `counters`, `phases`, `progress`
// and the fetcher through `fetcher_mu`; the commit threads report progress
// (`progress`, CacheCounters()).
struct PullJob::Rep {
  Rep(Cache& c, PullOptions o)
      : cache(c),
        opt(std::move(o)),
        clock(opt.clock != nullptr ? *opt.clock : Clock::Real()),
        phases(clock),
        progress(clock, kProgressInterval,
                 [this](PullId id) { (void)cache.UpdatePull(id, CacheCounters()); }),
        space(cache, opt.make_room, counters.bytes_written_verified),
        files(cache, counters) {}

  Cache& cache;
  PullOptions opt;
  Clock& clock;
  std::atomic<bool> cancel{false};
  JobCounters counters;
  PhaseTimer phases;
  ProgressReporter progress;
  PullSpace space;  // declared after `counters`, which it reads

  std::unique_ptr<HubClient> hub;
  std::unique_ptr<RangeFetcher> fetcher;  // created after the hub; lives as long as the job
  // The fetcher, for Cancel() and Progress() and the commit threads.
  mutable Mutex fetcher_mu;
  RangeFetcher* shared_fetcher EXLR8_GUARDED_BY(fetcher_mu) = nullptr;
  std::optional<Status> hub_error;  // the hub could not be asked: served from the cache

  FilesetId fileset = 0;
  std::string commit;
  PullFiles files;  // the fileset's files, as the cache holds them
  std::optional<PullId> pull_id;
  PullStreams* streams = nullptr;  // while Run's body runs; null offline

  FetchCounters FetcherCounters() const EXLR8_EXCLUDES(fetcher_mu) {
    MutexLock lock(&fetcher_mu);
    return shared_fetcher != nullptr ? shared_fetcher->counters() : FetchCounters{};
  }
  int WriteThreads() const {
    if (opt.write_threads > 0) return opt.write_threads;
    return std::clamp(static_cast<int>(std::thread::hardware_concurrency()) / 4, 1, 4);
  }

  Status ResolveAndList();
  // The planner's whole files (index files, manifest) verified: fetched
  // as a step when missing; readable by the planner as it ends.
  Status EnsureWholeFiles(const std::vector<std::string>& paths, std::uint64_t* reused);
  // The metadata and plan phases: the manifest and index files, then the
  // plan of the halves (headers deferred). Starts the whole files.
  Result<RankPlan> PlanRank(std::uint64_t* reused);
  // The headers phase: completes the plan with the width files' headers.
  Status AddHeaders(RankPlan& rp, std::uint64_t* reused);
  Status FetchHalves(const Plan& plan, std::uint64_t* reused);
  // Waits for the files and halves, makes the last of them durable and
  // records them.
  Status FinishStreams();
  PullCounters CacheCounters() const;
  Result<PullSummary> RunBody();
  // RunBody without a manifest: every file of the revision, whole.
  Result<PullSummary> RunFileset(PullSummary sum);
  // Records how the run ended in the pull's row; fills the summary.
  Result<PullSummary> End(Result<PullSummary> result);
};

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
  fetcher = std::make_unique<RangeFetcher>(*hub, opt.fetch);
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

Status PullJob::Rep::EnsureWholeFiles(const std::vector<std::string>& paths, std::uint64_t* reused) {
  EXLR8_ASSIGN_OR_RETURN(std::vector<WholeFileTarget> targets,
                         files.MissingWholeFiles(paths, opt.offline, reused));
  if (targets.empty()) return Status::Ok();
  std::uint64_t missing_bytes = 0;  // a resumed prefix is on disk already
  for (const WholeFileTarget& t : targets) missing_bytes += t.size - t.resume_from;
  if (opt.offline)
    return FailedPreconditionError("offline mode: " + std::to_string(targets.size()) + " files (" +
                                   std::to_string(missing_bytes) + " bytes, first " + targets[0].path +
                                   ") are not in the cache");
  EXLR8_RETURN_IF_ERROR(space.CheckAndClaim(missing_bytes));
  if (streams == nullptr) return InternalError("fetch step without a fetch session");
  CommitBatcher& batch = streams->NewStepBatch();
  WholeFileConsumer consumer(*fetcher, cache, batch, counters, std::move(targets));
  Status s = streams->RunStep(consumer, consumer);
  consumer.DrainChecks();
  if (s.ok()) s = consumer.first_error();
  // Readable by the planner now; recorded (and flagged verified) as soon as
  // durable: the step's batch commits now, while the planner goes on.
  files.MarkChecked(consumer.verified());
  const Status committing = batch.CommitSoon();
  return s.ok() ? committing : s;
}

Result<RankPlan> PullJob::Rep::PlanRank(std::uint64_t* reused) {
  phases.Set(PullPhase::kMetadata);
  RankPlan rp;
  // The manifest: a name, a repo path, or else a local JSON file (a custom
  // width mix that is not part of the release).
  rp.manifest_path = IsManifestName(opt.manifest) ? ManifestPath(opt.manifest) : opt.manifest;
  std::optional<std::string> local_manifest;
  if (!files.all().contains(rp.manifest_path)) {
    std::error_code ec;
    if (!opt.allow_local_manifest)
      return NotFoundError("manifest '" + opt.manifest + "' is not in " + opt.repo + "@" + commit + " (no " +
                           rp.manifest_path + ")");
    if (IsManifestName(opt.manifest) || !std::filesystem::is_regular_file(opt.manifest, ec))
      return NotFoundError("manifest '" + opt.manifest + "' is neither in " + opt.repo + "@" + commit +
                           " (no " + rp.manifest_path + ") nor a local file");
    EXLR8_ASSIGN_OR_RETURN(local_manifest, ReadSmallFile(opt.manifest, kMaxManifestBytes));
  }
  rp.manifest_is_local = local_manifest.has_value();
  std::vector<ReleaseFile> release_files;
  std::vector<std::string> metadata;  // the whole files the planner reads
  if (!local_manifest) metadata.push_back(rp.manifest_path);
  for (const auto& [path, f] : files.all()) {
    release_files.push_back({f.path, f.size, f.sha256, f.git_sha1});
    if (ClassifyReleasePath(path).kind == ReleaseFileKind::kExpertIndex) metadata.push_back(path);
  }
  // Every other file is fetched whole, whatever the plan: start those now.
  for (const auto& [path, f] : files.all())
    if (ClassifyReleasePath(path).kind != ReleaseFileKind::kExpertWidth &&
        std::find(metadata.begin(), metadata.end(), path) == metadata.end())
      rp.whole.push_back(path);
  if (!opt.dry_run && !opt.offline) {
    EXLR8_ASSIGN_OR_RETURN(std::vector<WholeFileTarget> targets,
                           files.MissingWholeFiles(rp.whole, opt.offline, reused));
    EXLR8_RETURN_IF_ERROR(streams->StartFiles(std::move(targets)));
  }
  EXLR8_RETURN_IF_ERROR(EnsureWholeFiles(metadata, reused));
  PlannerSources sources;
  sources.open_index = [this](const ReleaseFile& rf) -> Result<std::unique_ptr<ByteSource>> {
    EXLR8_ASSIGN_OR_RETURN(const FileInfo* f, files.File(rf.path));
    return files.OpenForPlanning(*f);
  };
  sources.manifest_name = opt.manifest;
  sources.manifest_text = [&]() -> Result<std::string> {
    if (local_manifest) return std::move(*local_manifest);
    return files.ReadText(rp.manifest_path);
  };
  EXLR8_ASSIGN_OR_RETURN(PlannerInput input, AssemblePlannerInput(std::move(release_files), sources));
  files.SetIndexSources(std::move(input.index_sources));

  // plan: the halves, located by the index files alone (absolute offsets)
  phases.Set(PullPhase::kPlan);
  PlanOptions plan_options{opt.tp, opt.rank, opt.coalesce_gap, /*defer_headers=*/true};
  EXLR8_ASSIGN_OR_RETURN(rp.plan, MakePlan(input.release, *input.manifest, plan_options));
  counters.bytes_planned.store(rp.plan.totals.needed_bytes);
  // What the width files' headers are checked against: where their halves
  // lie. The index tables themselves are dropped here (66 MB at GLM-5.3
  // scale, a third of the pull's peak heap): the halves carry their own
  // checksums and tails, and the tails are read from index_sources.
  for (const PlanFile& pf : rp.plan.files) {
    if (pf.whole) continue;
    const ReleasePath path = ClassifyReleasePath(pf.path);
    auto ix = input.release.indexes.find(path.layer);
    if (ix == input.release.indexes.end())
      return CorruptionError(pf.path + ": no index file for layer " + std::to_string(path.layer));
    Result<WidthFileSpan> span = ix->second.SpanOfWidth(path.k);
    if (!span.ok()) return span.status().WithContext(pf.index_path);
    rp.spans.emplace(pf.path, std::move(*span));
    rp.width_paths.push_back(pf.path);
  }
  return rp;
}

Status PullJob::Rep::AddHeaders(RankPlan& rp, std::uint64_t* reused) {
  phases.Set(PullPhase::kHeaders);
  std::vector<const FileInfo*> width_files;
  for (const std::string& path : rp.width_paths) {
    EXLR8_ASSIGN_OR_RETURN(const FileInfo* f, files.File(path));
    width_files.push_back(f);
  }
  HeaderStep::Env env{cache, counters, space, fetcher.get()};
  env.offline = opt.offline;
  env.max_refetches = opt.fetch.max_refetches;
  env.max_header_bytes = opt.max_header_bytes;
  env.run_round = [this](HeaderConsumer& consumer) -> Status {
    if (streams == nullptr) return InternalError("fetch step without a fetch session");
    return streams->RunStep(consumer, consumer);
  };
  env.new_batch = [this]() -> CommitBatcher& { return streams->NewStepBatch(); };
  HeaderStep step(std::move(env), rp.spans);
  EXLR8_RETURN_IF_ERROR(step.Run(width_files, reused));
  EXLR8_RETURN_IF_ERROR(AddWidthHeaders(rp.plan, step.TakeHeaderBytes()));
  counters.bytes_planned.store(rp.plan.totals.needed_bytes);
  counters.bytes_reused.store(*reused);
  return Status::Ok();
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
  spec.plan_summary_json = "{\"half_bytes\":" + std::to_string(rp.plan.totals.half_bytes) +
                           ",\"routed_halves\":" + std::to_string(rp.plan.totals.routed_halves) +
                           ",\"shared_halves\":" + std::to_string(rp.plan.totals.shared_halves) + "}";
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
  spec.plan_summary_json = "{\"files\":" + std::to_string(plan.files.size()) + "}";
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
