#include "daemon/pull/pull_job.h"

#include <pthread.h>

#include <algorithm>
#include <array>
#include <map>
#include <fstream>
#include <future>
#include <iterator>
#include <set>
#include <thread>

#include "daemon/base/posix.h"
#include "daemon/cache/cache_paths.h"
#include "daemon/cache/cached_rank.h"
#include "daemon/cache/extent_set.h"
#include "daemon/pull/commit_batcher.h"
#include "daemon/pull/consumers.h"
#include "daemon/pull/fetch_session.h"
#include "format/layout.h"
#include "format/manifest.h"
#include "format/planner_input.h"
#include "format/safetensors.h"

namespace exlr8 {

namespace {

constexpr std::array<std::string_view, kPullPhaseCount> kPhaseNames = {
    "starting", "resolve", "list", "metadata", "plan", "headers", "halves", "commit", "done", "failed"};

// First bytes fetched from each width file whose index locates no half in
// it; with halves, up to the lowest one (the header ends there), at most:
constexpr std::uint64_t kHeaderProbeBytes = 64 * 1024;
constexpr std::uint64_t kMaxHeaderFirstRound = 4ull << 20;
constexpr std::size_t kEmptyFilesPerCommit = 64;  // empty files marked verified per commit

// The first resolve of a revision the cache knows: at most this many tries,
// each connecting for at most this long, before the cache is asked whether
// it holds the rank. With the hub down that is about a second (refused) or
// 16 s (a host that never answers) instead of ~6 s or ~60 s; the
// extra tries bridge a blip (a reset, a restarting gateway) of about a
// second. A rank the cache cannot serve gets the usual tries after these.
constexpr int kProbeAttempts = 3;
constexpr std::chrono::milliseconds kProbeConnectTimeout{5000};

}  // namespace

bool IsValidRepoId(std::string_view repo) {
  const auto slash = repo.find('/');
  if (slash == std::string_view::npos || slash == 0 || slash + 1 == repo.size() ||
      repo.find('/', slash + 1) != std::string_view::npos)
    return false;
  return std::all_of(repo.begin(), repo.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
           c == '.' || c == '/';
  });
}

std::string_view PullPhaseName(PullPhase p) { return kPhaseNames[static_cast<std::size_t>(p)]; }

// What streams while the planner works: the whole files (dense, vocab,
// config, other manifests) from right after the listing, and the halves
// once planned. Declared before the FetchSession that feeds them, so the
// session (aborted on early returns) ends before they are destroyed.
struct Streams {
  std::unique_ptr<CommitBatcher> files_batch;
  std::unique_ptr<WholeFileConsumer> files;    // fetched from byte 0
  std::unique_ptr<WholeFileConsumer> resumed;  // interrupted downloads, resumed
  std::thread prefix_hasher;  // hashes `resumed`'s prefixes, then submits it
  Status prefix_status;       // its outcome (read after join)
  std::uint64_t file_bytes = 0;  // bytes of the files still to fetch
  std::vector<FileWork> work;
  std::unique_ptr<CommitBatcher> halves_batch;
  std::unique_ptr<HalfConsumer> halves;
  // The planner's own steps (index files, manifest, headers) do not wait for
  // their bytes to become durable: each step's batch commits in the
  // background as the step ends (CommitBatcher::CommitSoon), while the
  // planner goes on.
  std::vector<std::unique_ptr<CommitBatcher>> step_batches;
};

struct PullJob::Rep {
  Cache& cache;
  PullOptions opt;
  std::atomic<bool> cancel{false};
  std::atomic<int> phase{static_cast<int>(PullPhase::kStarting)};
  JobCounters counters;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();

  std::unique_ptr<HubClient> hub;
  std::unique_ptr<RangeFetcher> fetcher;  // created after the hub; read by Progress()
  mutable std::mutex fetcher_mu;          // guards the fetcher pointer for Progress()

  // state of one run
  FilesetId fileset = 0;
  std::string commit;
  std::map<std::string, FileInfo> files;  // by repo path
  std::map<std::string, std::unique_ptr<ByteSource>> index_sources;
  std::optional<PullId> pull_id;
  // The same id once the row exists (0 before), for the commit threads:
  // commits of the files or the halves write the counters there, so
  // `exlr8d list` and the REST API see progress about every second. At most
  // one such write per half second: each is a SQLite transaction with its
  // own WAL fsync, and commits come as often as every 16 MiB.
  std::atomic<PullId> progress_pull{0};
  std::atomic<std::int64_t> last_report_ms{0};
  void ReportProgress(bool always = false) {
    const PullId id = progress_pull.load();
    if (id == 0) return;
    const std::int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                                 std::chrono::steady_clock::now().time_since_epoch()).count();
    std::int64_t last = last_report_ms.load();
    if (!always && (now - last < 500 || !last_report_ms.compare_exchange_strong(last, now))) return;
    last_report_ms.store(now);
    (void)cache.UpdatePull(id, CacheCounters());
  }
  FetchSession* session = nullptr;  // the run's fetch; null offline
  Streams* streams = nullptr;       // set while Run's body runs
  std::set<FileId> checked_here;    // whole files this run checked by hash (maybe not yet recorded)

  Rep(Cache& c, PullOptions o) : cache(c), opt(std::move(o)) {}

  // The space this pull claimed in the Cache, so that other pulls running
  // on it at once count it as taken: every byte it checked space for.
  // Every byte it writes is claimed once, so at the end `claimed` equals
  // the bytes written. Those written and verified since (counters) need no
  // more free space; those recorded since count as the cache's own bytes,
  // and `recorded` grows under the cache's index lock as they are recorded
  // (the batches' commits), so no check counts a byte both as recorded and
  // as claimed, nor as neither.
  std::atomic<std::uint64_t> claimed{0};
  std::atomic<std::uint64_t> recorded{0};
  std::unique_ptr<Cache::SpaceClaim> space_claim;  // while Run runs; declared after `counters`
  Cache::ClaimedBytes Outstanding() const {
    const std::uint64_t c = claimed.load(std::memory_order_relaxed);
    const std::uint64_t w = counters.bytes_written_verified.load(std::memory_order_relaxed);
    const std::uint64_t r = recorded.load(std::memory_order_relaxed);
    return {c - std::min(c, w), c - std::min(c, r)};
  }
  // Claims `adds` more bytes, then checks that all this pull claimed and
  // has not recorded fits besides what other pulls claimed (the cache's
  // sums: the claim is never read apart from the recorded bytes). A
  // shortfall takes the bytes back. With make_room, a shortfall first
  // evicts what gc would (never this fileset: the claim names it), then is
  // checked again.
  Status CheckAndClaimSpace(std::uint64_t adds) {
    if (!space_claim) return cache.CheckSpace(adds);  // a dry run writes nothing
    claimed.fetch_add(adds, std::memory_order_relaxed);
    Status fits = cache.CheckSpace(0, space_claim.get());
    if (!fits.ok() && fits.code() == StatusCode::kResourceExhausted && opt.make_room) {
      Result<GcResult> gone = cache.MakeRoom(0, space_claim.get());
      if (gone.ok()) {
        evicted.insert(evicted.end(), gone->evicted.begin(), gone->evicted.end());
        bytes_evicted += gone->bytes_freed;
        fits = cache.CheckSpace(0, space_claim.get());
        if (!fits.ok())
          fits = fits.WithContext("after evicting " + std::to_string(gone->evicted.size()) +
                                  " unpinned fileset" + (gone->evicted.size() == 1 ? "" : "s") +
                                  " (--make-room)");
      } else {
        fits = gone.status();
      }
    }
    if (!fits.ok()) claimed.fetch_sub(adds, std::memory_order_relaxed);
    return fits;
  }
  std::vector<FilesetId> evicted;  // by make_room, on the Run() thread
  std::uint64_t bytes_evicted = 0;
  std::uint64_t bytes_lost = 0;    // see PullSummary::bytes_lost

  // Time spent per phase, accumulated on the Run() thread only.
  std::array<double, kPullPhaseCount> phase_s{};
  std::chrono::steady_clock::time_point phase_start = start;

  void SetPhase(PullPhase p) {
    const auto now = std::chrono::steady_clock::now();
    phase_s[phase.load()] += std::chrono::duration<double>(now - phase_start).count();
    phase_start = now;
    phase.store(static_cast<int>(p));
  }
  double Elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

  Status ResolveAndList();
  // Sets `hub`, or hub_error and opt.offline (see PullJob::Run).
  Status OpenHub();
  // What the cache lacks of the rank at the commit the revision last
  // resolved to, for a message; "" when it holds the rank complete.
  Result<std::string> CachedRankLacks();
  std::optional<Status> hub_error;  // the hub could not be asked: served from the cache
  Status RefreshFiles();
  Result<const FileInfo*> File(const std::string& path) const;
  Result<std::vector<WholeFileTarget>> MissingWholeFiles(const std::vector<std::string>& paths,
                                                         std::uint64_t* reused);
  Status EnsureWholeFiles(const std::vector<std::string>& paths, std::uint64_t* reused);
  // `spans`: for each width file in `paths`, where its halves lie.
  Status EnsureHeaders(const std::vector<std::string>& paths, std::map<std::string, std::uint64_t>* header_bytes,
                       const std::map<std::string, WidthFileSpan>& spans, std::uint64_t* reused);
  Result<std::vector<FileWork>> MissingHalves(const Plan& plan, std::uint64_t* reused);
  Status StartFiles(const std::vector<std::string>& whole, std::uint64_t* reused, Streams& streams);
  void StartResumes(Streams& streams);
  // Transfer slots the background files may hold while the planner works.
  int BackgroundCap() const {
    return opt.background_jobs > 0 ? opt.background_jobs : std::max(1, opt.fetch.max_parallel / 4);
  }
  int WriteThreads() const {
    if (opt.write_threads > 0) return opt.write_threads;
    return std::clamp(static_cast<int>(std::thread::hardware_concurrency()) / 4, 1, 4);
  }
  Status FetchHalves(const Plan& plan, std::uint64_t* reused, Streams& streams);
  Status FinishStreams(Streams& streams);
  Status RunStep(RangeConsumer& consumer, const ConsumerBase& base);
  CommitBatcher& StepBatch();
  // Makes what every batch of `st` holds durable and recorded.
  Status FlushBatches(Streams& st);
  Result<std::unique_ptr<ByteSource>> OpenForPlanning(const FileInfo& f);
  Result<std::string> ReadCachedText(const std::string& path);
  PullCounters CacheCounters() const;
  // What of the plan the cache does not hold verified: bytes, and the
  // plan's requests (ranges, whole files) that still have some missing.
  Status CountMissing(const Plan& plan, PullSummary* sum);
};

PullJob::PullJob(Cache& cache, PullOptions options) : rep_(std::make_unique<Rep>(cache, std::move(options))) {}
PullJob::~PullJob() = default;

void PullJob::Cancel() {
  rep_->cancel.store(true);
  std::lock_guard<std::mutex> lock(rep_->fetcher_mu);
  if (rep_->fetcher) rep_->fetcher->Cancel();
}

PullProgress PullJob::Progress() const {
  PullProgress p;
  p.phase = static_cast<PullPhase>(rep_->phase.load());
  p.bytes_planned = rep_->counters.bytes_planned.load();
  p.bytes_reused = rep_->counters.bytes_reused.load();
  p.bytes_verified = rep_->counters.bytes_verified.load();
  p.ranges_total = rep_->counters.ranges_total.load();
  p.ranges_done = rep_->counters.ranges_done.load();
  p.checksum_failures = rep_->counters.checksum_failures.load();
  {
    std::lock_guard<std::mutex> lock(rep_->fetcher_mu);
    if (rep_->fetcher) p.fetch = rep_->fetcher->counters();
  }
  p.bytes_received = p.fetch.bytes_received;
  p.elapsed_s = rep_->Elapsed();
  p.pull_id = rep_->progress_pull.load();
  return p;
}

Status CheckPullOptions(const PullOptions& opt) {
  if (!IsValidRepoId(opt.repo)) return InvalidArgumentError("--repo must be ORG/NAME, got '" + opt.repo + "'");
  if (opt.revision.empty()) return InvalidArgumentError("--revision must not be empty");
  if (opt.manifest.empty()) return InvalidArgumentError("missing --manifest");
  if (opt.tp < 1) return InvalidArgumentError("--tp must be >= 1");
  if (opt.rank < 0 || opt.rank >= opt.tp)
    return InvalidArgumentError("--rank must be in [0, " + std::to_string(opt.tp - 1) + "]");
  return Status::Ok();
}

Status PullJob::Rep::RefreshFiles() {
  if (files.empty()) {  // the first listing of this run: what it reuses must at least be there
    EXLR8_ASSIGN_OR_RETURN(std::uint64_t lost, cache.ForgetLostBytes(fileset));
    bytes_lost += lost;
  }
  EXLR8_ASSIGN_OR_RETURN(std::vector<FileInfo> list, cache.ListFiles(fileset));
  files.clear();
  for (auto& f : list) files.emplace(f.path, std::move(f));
  return Status::Ok();
}

Result<const FileInfo*> PullJob::Rep::File(const std::string& path) const {
  auto it = files.find(path);
  if (it == files.end()) return NotFoundError(opt.repo + "@" + commit + " has no file " + path);
  return &it->second;
}

Result<std::string> PullJob::Rep::CachedRankLacks() {
  Result<RankStatus> st = CheckRankStatus(cache, opt.repo, opt.revision, opt.manifest, opt.tp, opt.rank);
  // A manifest the release does not have may be a local file, as for the
  // pull itself (and `exlr8d status`).
  std::error_code ec;
  if (!st.ok() && st.status().code() == StatusCode::kNotFound && opt.allow_local_manifest &&
      !IsManifestName(opt.manifest) && std::filesystem::is_regular_file(opt.manifest, ec)) {
    EXLR8_ASSIGN_OR_RETURN(std::string text, ReadSmallFile(opt.manifest, kMaxManifestBytes));
    st = CheckRankStatus(cache, opt.repo, opt.revision, opt.manifest, opt.tp, opt.rank, &text);
  }
  EXLR8_RETURN_IF_ERROR(st.status());
  if (st->complete()) return std::string();
  const auto of = [](std::uint64_t have, std::uint64_t all, const char* what) {
    return std::to_string(have) + " of " + std::to_string(all) + " " + what;
  };
  std::string lacks = "TP " + std::to_string(opt.tp) + " rank " + std::to_string(opt.rank) + " of manifest " +
                      opt.manifest + " is not complete there";
  if (st->planned)
    lacks += " (" + of(st->files_verified, st->files, "whole files") + ", " +
             of(st->headers_verified, st->headers, "headers") + ", " +
             of(st->halves_verified, st->halves, "halves") + " verified)";
  return lacks + ": " + st->first_missing;
}

Status PullJob::Rep::OpenHub() {
  HubOptions hub_options = opt.hub;
  hub_options.cancel = &cancel;  // a cancel also ends the API calls (their waits too)
  const Result<std::string> cached = cache.LookupCommit(opt.repo, opt.revision);
  if (!cached.ok()) {  // nothing to serve without the hub
    EXLR8_ASSIGN_OR_RETURN(hub, HubClient::Open(hub_options, opt.repo, opt.revision));
    return Status::Ok();
  }
  HubOptions probe = hub_options;  // the resolve tries less; the client, once open, as usual
  probe.resolve_max_attempts = std::min(probe.max_attempts, kProbeAttempts);
  probe.resolve_connect_timeout = std::min<std::chrono::milliseconds>(probe.connect_timeout, kProbeConnectTimeout);
  HubOutage outage = HubOutage::kNone;
  Result<std::unique_ptr<HubClient>> opened = HubClient::Open(probe, opt.repo, opt.revision, &outage);
  if (opened.ok()) {
    hub = std::move(opened).value();
    return Status::Ok();
  }
  std::string note;  // why the cache cannot serve the rank instead
  if (outage != HubOutage::kNone) {
    Result<std::string> lacks = CachedRankLacks();
    if (lacks.ok() && lacks->empty()) {
      hub_error = opened.status();
      opt.offline = true;
      return Status::Ok();
    }
    note =
        "not served from the cache: it holds commit " + *cached + " for " + opt.revision + ", but " +
        (lacks.ok() ? *lacks : "cannot tell whether it holds the rank (" + lacks.status().ToString() + ")");
  } else if (opened.status().code() != StatusCode::kIOError &&
             opened.status().code() != StatusCode::kUnavailable) {
    return opened.status();  // an answer another try would not change (401, 404, ...), or a cancel
  }
  // The hub is needed: the usual tries.
  opened = HubClient::Open(hub_options, opt.repo, opt.revision, &outage);
  if (!opened.ok()) {
    if (note.empty() || outage == HubOutage::kNone) return opened.status();
    return Status(opened.status().code(), opened.status().message() + "; " + note);
  }
  hub = std::move(opened).value();
  return Status::Ok();
}

Status PullJob::Rep::ResolveAndList() {
  SetPhase(PullPhase::kResolve);
  if (!opt.offline) EXLR8_RETURN_IF_ERROR(OpenHub());
  if (opt.offline) {  // asked for, or the hub could not be asked (OpenHub)
    auto c = cache.LookupCommit(opt.repo, opt.revision);
    if (!c.ok())
      return FailedPreconditionError("offline mode (--offline or HF_HUB_OFFLINE): " + opt.repo + "@" + opt.revision +
                                     " was never pulled into this cache (" + c.status().message() + ")");
    commit = *c;
    EXLR8_ASSIGN_OR_RETURN(fileset, cache.PutFileset(opt.repo, opt.revision, commit));
    SetPhase(PullPhase::kList);
    return RefreshFiles();
  }
  commit = hub->commit();
  {
    std::lock_guard<std::mutex> lock(fetcher_mu);
    fetcher = std::make_unique<RangeFetcher>(*hub, opt.fetch);
  }
  EXLR8_ASSIGN_OR_RETURN(fileset, cache.PutFileset(opt.repo, opt.revision, commit));
  // From here no eviction (another pull's make_room, /v1/evict) takes the
  // fileset this run writes, though its 'running' row comes only later.
  if (space_claim) space_claim->SetFileset(fileset);
  SetPhase(PullPhase::kList);
  EXLR8_ASSIGN_OR_RETURN(std::vector<HubFile> listing, hub->ListFiles());
  std::vector<NewFile> declared;
  declared.reserve(listing.size());
  for (const HubFile& f : listing) {
    NewFile nf{f.path, f.size, std::nullopt, std::nullopt};
    if (!f.lfs_sha256.empty()) nf.sha256 = f.lfs_sha256;
    else if (!f.blob_id.empty()) nf.git_sha1 = f.blob_id;
    declared.push_back(std::move(nf));
    // Small regular files come from the hub itself: one GET each, no HEAD.
    if (f.lfs_sha256.empty()) fetcher->ExpectServedByHub(f.path, f.size);
  }
  EXLR8_RETURN_IF_ERROR(cache.PutFiles(fileset, declared).status());
  return RefreshFiles();
}

// One foreground step: its requests go first; waits until all ended (its
// bytes are made durable later, by its batch; see Streams).
Status PullJob::Rep::RunStep(RangeConsumer& consumer, const ConsumerBase& base) {
  if (session == nullptr) return InternalError("fetch step without a fetch session");
  Status s = session->Wait(session->Submit(consumer, FetchSession::kStep));
  if (cancel.load()) return CancelledError("pull cancelled");
  if (!base.first_error().ok()) return base.first_error();
  return s;
}

CommitBatcher& PullJob::Rep::StepBatch() {
  streams->step_batches.push_back(
      std::make_unique<CommitBatcher>(cache, opt.commit_interval, opt.commit_bytes, nullptr, &recorded));
  return *streams->step_batches.back();
}

// A whole file the planner reads: recorded in the cache, or checked by hash
// in this run and not yet recorded.
Result<std::unique_ptr<ByteSource>> PullJob::Rep::OpenForPlanning(const FileInfo& f) {
  if (checked_here.contains(f.id)) return cache.OpenCheckedByCaller(f.id);
  return cache.OpenVerified(f.id);
}

// The files of `paths` not yet verified in the cache (adds the others'
// sizes to *reused). Empty files are checked and marked here.
Result<std::vector<WholeFileTarget>> PullJob::Rep::MissingWholeFiles(const std::vector<std::string>& paths,
                                                                     std::uint64_t* reused) {
  std::vector<WholeFileTarget> targets;
  std::vector<FileId> empty;  // marked in batches: one commit each, not one per file
  auto mark_empty = [&]() -> Status {
    Status s = cache.MarkWholeFilesVerified(empty);
    empty.clear();
    return s;
  };
  for (const auto& path : paths) {
    EXLR8_ASSIGN_OR_RETURN(const FileInfo* f, File(path));
    if (f->whole_verified) {
      *reused += f->size;
      continue;
    }
    if (!f->sha256 && !f->git_sha1)
      return CorruptionError(path + ": the hub lists no sha256 or git blob id, so it cannot be verified");
    WholeFileTarget t{f->id, f->path, f->size, f->sha256.value_or(""), f->git_sha1.value_or("")};
    const ReleaseFileKind kind = ClassifyReleasePath(path).kind;
    t.check_dense = kind == ReleaseFileKind::kDense || kind == ReleaseFileKind::kVocab;
    const bool recorded_unflagged = f->bytes_cached > 0;
    if (recorded_unflagged && !opt.offline) {
      // Bytes recorded without the flag (an exlr8d before the flag was set
      // with them, killed between the two) are about to be written again:
      // un-recorded first, so no crash or bad answer leaves them recorded
      // over unchecked bytes. The file is fetched from its start.
      EXLR8_RETURN_IF_ERROR(cache.ForgetExtents(std::vector<VerifiedExtent>{{f->id, 0, f->size}}).status());
    } else if (f->durable_prefix > 0 && f->size > 0 && !opt.offline) {
      // An interrupted download: resume (at least the last byte is fetched,
      // so the request is never empty).
      t.resume_from = std::min(f->durable_prefix, f->size - 1);
      counters.bytes_resumed.fetch_add(t.resume_from, std::memory_order_relaxed);
    }
    if (t.size == 0) {  // nothing to fetch; the empty content must still match
      auto d = StreamDigest::Create(t.sha256.empty() ? StreamDigest::Kind::kGitBlobSha1 : StreamDigest::Kind::kSha256, 0);
      if (!d.ok()) return d.status();
      if (d->FinishHex() != (t.sha256.empty() ? t.git_sha1 : t.sha256))
        return CorruptionError(path + ": empty file whose listed hash is not the empty content's");
      if (t.check_dense) return CorruptionError(path + ": 0 bytes, too short for a dense file (spec 10)");
      empty.push_back(t.file);
      // A batch holds a descriptor per file until its commit.
      if (empty.size() >= kEmptyFilesPerCommit) EXLR8_RETURN_IF_ERROR(mark_empty());
      continue;
    }
    targets.push_back(std::move(t));
  }
  EXLR8_RETURN_IF_ERROR(mark_empty());
  return targets;
}

Status PullJob::Rep::EnsureWholeFiles(const std::vector<std::string>& paths, std::uint64_t* reused) {
  EXLR8_ASSIGN_OR_RETURN(std::vector<WholeFileTarget> targets, MissingWholeFiles(paths, reused));
  if (targets.empty()) return Status::Ok();
  std::uint64_t missing_bytes = 0;  // a resumed prefix is on disk already
  for (const WholeFileTarget& t : targets) missing_bytes += t.size - t.resume_from;
  if (opt.offline)
    return FailedPreconditionError("offline mode: " + std::to_string(targets.size()) + " files (" +
                                   std::to_string(missing_bytes) + " bytes, first " + targets[0].path +
                                   ") are not in the cache");
  EXLR8_RETURN_IF_ERROR(CheckAndClaimSpace(missing_bytes));
  CommitBatcher& batch = StepBatch();
  WholeFileConsumer consumer(*fetcher, cache, batch, counters, std::move(targets));
  Status s = RunStep(consumer, consumer);
  consumer.DrainChecks();
  if (s.ok()) s = consumer.first_error();
  // Readable by the planner now; recorded (and flagged verified) as soon as
  // durable: the step's batch commits now, while the planner goes on.
  for (FileId id : consumer.verified()) checked_here.insert(id);
  const Status committing = batch.CommitSoon();
  return s.ok() ? committing : s;
}

Result<std::string> PullJob::Rep::ReadCachedText(const std::string& path) {
  EXLR8_ASSIGN_OR_RETURN(const FileInfo* f, File(path));
  if (f->size > kMaxManifestBytes) return ResourceExhaustedError(path + ": " + std::to_string(f->size) + " bytes is too large");
  EXLR8_ASSIGN_OR_RETURN(auto src, OpenForPlanning(*f));
  std::string text(f->size, '\0');
  EXLR8_RETURN_IF_ERROR(src->ReadAt(0, std::as_writable_bytes(std::span(text))));
  return text;
}

// Headers are validated, written and freed one at a time, as soon as each
// is complete: at GLM-5.3 scale they are ~1.3 MB each, 225 of them, and
// holding all of them at once was most of the pull's peak memory.
Status PullJob::Rep::EnsureHeaders(const std::vector<std::string>& paths,
                                   std::map<std::string, std::uint64_t>* header_bytes,
                                   const std::map<std::string, WidthFileSpan>& spans, std::uint64_t* reused) {
  std::mutex header_bytes_mu;  // headers are finished on several write workers at once
  auto validate = [&](const std::string& path, std::span<const std::byte> bytes, std::uint64_t size) -> Status {
    EXLR8_ASSIGN_OR_RETURN(SafetensorsHeader header, ParseSafetensorsHeader(bytes, size, path));
    auto span = spans.find(path);
    if (span == spans.end()) return InternalError(path + ": no span of its halves");
    EXLR8_RETURN_IF_ERROR(span->second.Validate(header, size, path));
    std::lock_guard<std::mutex> lock(header_bytes_mu);
    (*header_bytes)[path] = header.data_start();
    return Status::Ok();
  };
  std::vector<HeaderTarget> targets;
  for (const auto& path : paths) {
    EXLR8_ASSIGN_OR_RETURN(const FileInfo* f, File(path));
    // Already verified in the cache?
    std::array<std::byte, 8> first{};
    if (f->size >= 8) {
      EXLR8_ASSIGN_OR_RETURN(auto src, cache.OpenVerified(f->id));
      if (src->ReadAt(0, first).ok()) {
        auto n = SafetensorsHeaderSize(first, f->size, path);
        if (n.ok()) {
          std::vector<std::byte> bytes(*n);
          if (src->ReadAt(0, bytes).ok()) {
            EXLR8_RETURN_IF_ERROR(validate(path, bytes, f->size));
            *reused += bytes.size();
            continue;
          }
        }
      }
    }
    HeaderTarget t;
    t.file = f->id;
    t.path = path;
    t.size = f->size;
    // The header ends at or before the file's lowest half (checked once it
    // is here), so one request up to there usually brings all of it.
    t.first_round = kHeaderProbeBytes;
    if (auto span = spans.find(path); span != spans.end() && !span->second.empty)
      t.first_round = std::clamp<std::uint64_t>(span->second.lowest_offset, 8, kMaxHeaderFirstRound);
    t.first_round = std::min(t.first_round, f->size);
    t.wanted = t.first_round;
    targets.push_back(std::move(t));
  }
  if (targets.empty()) return Status::Ok();
  if (opt.offline)
    return FailedPreconditionError("offline mode: the header of " + targets[0].path + " is not in the cache");
  // A header's size is known only once its first bytes are here: claimed as
  // the first round's bytes (a header ends at or before its lowest half),
  // then set to what was written once every header is.
  std::uint64_t header_claim = 0;
  for (const HeaderTarget& t : targets) header_claim += t.first_round;
  EXLR8_RETURN_IF_ERROR(CheckAndClaimSpace(header_claim));
  std::atomic<std::uint64_t> header_written{0};

  CommitBatcher& batch = StepBatch();
  std::vector<int> refetches(targets.size(), 0);
  // Once a fetch agreed with an earlier one: fetched again from byte 0.
  auto fetch_again = [&](HeaderTarget& t) {
    std::vector<std::byte>().swap(t.bytes);
    t.header_bytes.reset();
    t.wanted = t.first_round;
  };
  // A complete header: check it against the index; then, since no checksum
  // covers headers (spec 5.3) and a byte damaged on the way may still parse
  // (in a tensor name, say), it is recorded only when two fetches agree:
  // any two, not just the last two, so that a good fetch after a damaged
  // one is not wasted (with damage at rate p, a header then fails when at
  // most one of its max_refetches + 2 fetches is good, about 4p^3 at the
  // default 2, near the 3p^3 of a half's three tries; comparing with the
  // last fetch only failed at about 3p^2: seen in CI's fault sweep).
  // Then write it, queue it for commit, free it. A fetch that agrees with
  // an earlier one is not parsed again: those bytes passed the checks (a
  // digest is kept only then), and the parse is most of a header's CPU
  // (225 headers of ~1.3 MB in GLM-5.3's rank plan).
  auto finish = [&](HeaderTarget& t) -> Status {
    const std::uint64_t n = *t.header_bytes;
    std::span<const std::byte> header(t.bytes.data(), n);
    Xxh64 digest;
    digest.Update(header);
    const std::uint64_t d = digest.Digest();
    if (std::find(t.earlier_digests.begin(), t.earlier_digests.end(), d) == t.earlier_digests.end()) {
      EXLR8_RETURN_IF_ERROR(validate(t.path, header, t.size));
      t.earlier_digests.push_back(d);
      if (t.earlier_digests.size() > 1)  // all but one of these fetches were damaged: retry_or_fail counts it
        return CorruptionError(t.path + ": no two of the " + std::to_string(t.earlier_digests.size()) +
                               " fetches of its header that parsed agree");
      fetch_again(t);  // the first valid fetch: a second must agree
      return Status::Ok();
    }
    EXLR8_RETURN_IF_ERROR(cache.WriteAt(t.file, 0, header));
    EXLR8_RETURN_IF_ERROR(batch.Add({t.file, 0, n}));
    counters.bytes_verified.fetch_add(n, std::memory_order_relaxed);
    counters.bytes_written_verified.fetch_add(n, std::memory_order_relaxed);
    header_written.fetch_add(n, std::memory_order_relaxed);
    t.done = true;
    std::vector<std::byte>().swap(t.bytes);
    return Status::Ok();
  };
  // A header that does not parse or validate may have been damaged on the
  // way (there is no checksum for it): it is fetched again from byte 0, at
  // most max_refetches times, like a half whose checksum fails. What a
  // release really gets wrong fails after the last try, with its message.
  auto retry_or_fail = [&](HeaderTarget& t, Status bad) -> Status {
    if (bad.code() != StatusCode::kCorruption) return bad;
    counters.checksum_failures.fetch_add(1, std::memory_order_relaxed);
    if (++refetches[static_cast<std::size_t>(&t - targets.data())] > opt.fetch.max_refetches)
      return CorruptionError(bad.message() + " (the header failed verification " +
                             std::to_string(opt.fetch.max_refetches + 1) + " times)");
    fetch_again(t);
    return Status::Ok();
  };
  // Learns a header's size from its first 8 bytes, and finishes it if all
  // of it is there.
  auto advance = [&](HeaderTarget& t) -> Status {
    if (t.done) return Status::Ok();
    if (!t.header_bytes) {
      if (t.size < 8) return CorruptionError(t.path + ": " + std::to_string(t.size) + " bytes, too short");
      if (t.bytes.size() < 8) return Status::Ok();  // not fetched yet
      Result<std::uint64_t> n = SafetensorsHeaderSize(std::span(t.bytes).first(8), t.size, t.path);
      if (n.ok() && *n > opt.max_header_bytes)
        n = CorruptionError(t.path + ": header of " + std::to_string(*n) + " bytes exceeds the limit");
      if (!n.ok()) return retry_or_fail(t, n.status());
      t.header_bytes = *n;
      t.wanted = std::max<std::uint64_t>(t.bytes.size(), *n);
    }
    if (t.bytes.size() < *t.header_bytes) return Status::Ok();
    Status s = finish(t);
    return s.ok() ? s : retry_or_fail(t, std::move(s));
  };

  // Rounds: the first fetches each file up to its lowest half, which gives
  // the header's size and usually all of it; the next the rest of any
  // longer ones; any later round refetches damaged ones. Each is finished
  // as soon as its request ends (on the fetch session's worker), so memory
  // stays about one header per transfer.
  auto on_complete = [&](HeaderTarget& t) -> Status { return advance(t); };
  Status fetched;
  while (fetched.ok() &&
         std::any_of(targets.begin(), targets.end(), [](const HeaderTarget& t) { return !t.done; })) {
    HeaderConsumer consumer(*fetcher, targets, on_complete);
    fetched = RunStep(consumer, consumer);
    for (auto& t : targets)
      if (fetched.ok()) fetched = advance(t);
  }
  // Recorded as soon as durable, not at the pull's end (also the headers
  // done when another failed).
  const Status committing = batch.CommitSoon();
  EXLR8_RETURN_IF_ERROR(fetched);
  // Modulo 2^64, so this also adds what headers longer than their first
  // round wrote beyond the claim.
  claimed.fetch_add(header_written.load() - header_claim, std::memory_order_relaxed);
  return committing;
}

// The plan's halves not yet verified in the cache, grouped into requests
// (adds the others' sizes to *reused; sets ranges_total and bytes_reused).
Result<std::vector<FileWork>> PullJob::Rep::MissingHalves(const Plan& plan, std::uint64_t* reused) {
  std::vector<FileWork> work;
  std::uint64_t ranges = 0;
  for (const PlanFile& pf : plan.files) {
    if (pf.whole) continue;
    EXLR8_ASSIGN_OR_RETURN(const FileInfo* f, File(pf.path));
    auto ix = index_sources.find(pf.index_path);
    if (ix == index_sources.end()) return InternalError(pf.index_path + " not loaded");
    FileWork fw;
    fw.file = f->id;
    fw.path = pf.path;
    fw.index = ix->second.get();
    EXLR8_ASSIGN_OR_RETURN(std::vector<Extent> have, cache.VerifiedExtents(f->id));
    auto covered = [&](std::uint64_t off, std::uint64_t len) {
      auto it = std::upper_bound(have.begin(), have.end(), off,
                                 [](std::uint64_t o, const Extent& e) { return o < e.offset; });
      if (it == have.begin()) return false;
      --it;
      return it->offset <= off && off + len <= it->end();
    };
    for (const PlanRange& r : pf.ranges) {
      if (r.kind != PlanRange::Kind::kHalf) continue;
      if (covered(r.offset, r.length)) {
        *reused += r.length;
        continue;
      }
      fw.halves.push_back({r.offset, r.length, r.xxh64, r.checksum_tail, r.tag});
    }
    if (fw.halves.empty()) continue;
    BuildRequests(fw, opt.coalesce_gap);
    ranges += fw.halves.size();
    work.push_back(std::move(fw));
  }
  counters.ranges_total.store(ranges);
  counters.bytes_reused.store(*reused);
  return work;
}

// Starts the whole files in the background, right after the listing: they
// depend on nothing the planner computes, and are the largest (dense
// layers, vocab). They get a quarter of the transfer slots (at most while
// the planner's steps run, so those never wait for a slot; at least while
// the halves stream, so they end with them). A whole file is flagged
// verified by the commit that makes it durable and records it (at most
// about a commit interval after its last byte, see CommitBatcher); a dense
// or vocab file only once it has also passed the format's checks.
Status PullJob::Rep::StartFiles(const std::vector<std::string>& whole, std::uint64_t* reused, Streams& st) {
  EXLR8_ASSIGN_OR_RETURN(std::vector<WholeFileTarget> targets, MissingWholeFiles(whole, reused));
  if (targets.empty()) return Status::Ok();
  std::vector<WholeFileTarget> fresh, resumed;
  // Largest first: a big file started last would be the pull's tail, one
  // transfer streaming alone after everything else has ended.
  std::stable_sort(targets.begin(), targets.end(),
                   [](const WholeFileTarget& a, const WholeFileTarget& b) { return a.size > b.size; });
  for (WholeFileTarget& t : targets) {
    st.file_bytes += t.size - t.resume_from;
    (t.resume_from > 0 ? resumed : fresh).push_back(std::move(t));
  }
  EXLR8_RETURN_IF_ERROR(CheckAndClaimSpace(st.file_bytes));
  st.files_batch = std::make_unique<CommitBatcher>(
      cache, opt.commit_interval, opt.commit_bytes, [this] { ReportProgress(); }, &recorded);
  const int cap = BackgroundCap();
  st.files = std::make_unique<WholeFileConsumer>(*fetcher, cache, *st.files_batch, counters, std::move(fresh));
  if (opt.background_jobs != 0) session->Submit(*st.files, FetchSession::kBackground, cap);
  // Interrupted downloads resume once the plan is made (StartResumes): reading
  // their prefixes back competes for the disk with the planner's reads.
  if (!resumed.empty())
    st.resumed = std::make_unique<WholeFileConsumer>(*fetcher, cache, *st.files_batch, counters, std::move(resumed));
  return Status::Ok();
}

// The prefixes of interrupted downloads are read back and hashed on a
// thread of their own (gigabytes at GLM scale), then those files join the
// background.
void PullJob::Rep::StartResumes(Streams& st) {
  if (!st.resumed || st.prefix_hasher.joinable()) return;
  const int cap = BackgroundCap();
  st.prefix_hasher = std::thread([this, &st, cap] {
    pthread_setname_np(pthread_self(), "exlr8-resume");
    st.prefix_status = st.resumed->HashPrefixes();
    if (st.prefix_status.ok()) session->Submit(*st.resumed, FetchSession::kBackground, cap);
  });
}

// The plan's halves not yet in the cache, on every slot the files leave.
Status PullJob::Rep::FetchHalves(const Plan& plan, std::uint64_t* reused, Streams& st) {
  if (st.files && opt.background_jobs == 0)  // held back until now
    session->Submit(*st.files, FetchSession::kBackground, opt.fetch.max_parallel);
  StartResumes(st);
  EXLR8_ASSIGN_OR_RETURN(st.work, MissingHalves(plan, reused));
  if (st.work.empty()) return Status::Ok();
  std::uint64_t half_bytes = 0, halves = 0;
  for (const FileWork& fw : st.work) {
    halves += fw.halves.size();
    for (const HalfWork& h : fw.halves) half_bytes += h.length;
  }
  if (opt.offline)
    return FailedPreconditionError("offline mode: " + std::to_string(halves) + " halves (" +
                                   std::to_string(half_bytes) + " bytes) of this plan are not in the cache");
  // (What the files streaming meanwhile still write is this pull's own
  // outstanding claim, counted with the halves.)
  EXLR8_RETURN_IF_ERROR(CheckAndClaimSpace(half_bytes));
  st.halves_batch = std::make_unique<CommitBatcher>(
      cache, opt.commit_interval, opt.commit_bytes, [this] { ReportProgress(); }, &recorded);
  st.halves = std::make_unique<HalfConsumer>(*fetcher, cache, *st.halves_batch, counters, st.work);
  session->Submit(*st.halves, FetchSession::kForeground);
  return Status::Ok();
}

// Waits for the files and halves, makes the last of them durable and
// records them.
// Every batch flushes at once: each waits for its own background commit,
// then syncs its files, and their fdatasyncs overlap (one after another,
// the last commit was ~15% of a pull on a 16-core machine).
Status PullJob::Rep::FlushBatches(Streams& st) {
  std::vector<CommitBatcher*> batches;
  if (st.halves_batch) batches.push_back(st.halves_batch.get());
  if (st.files_batch) batches.push_back(st.files_batch.get());
  for (auto& b : st.step_batches) batches.push_back(b.get());
  std::vector<std::future<Status>> flushes;
  for (CommitBatcher* b : batches) flushes.push_back(std::async(std::launch::async, [b] { return b->Flush(); }));
  Status flushed;
  for (auto& f : flushes) {
    Status r = f.get();
    if (flushed.ok()) flushed = std::move(r);
  }
  return flushed;
}

Status PullJob::Rep::FinishStreams(Streams& st) {
  StartResumes(st);  // a dry run never started them; nor will it have any
  if (st.prefix_hasher.joinable()) st.prefix_hasher.join();  // it may still submit
  Status s = session->Finish();
  SetPhase(PullPhase::kCommit);
  // The dense files' format checks run on threads of their own; what passes
  // joins the files' batch.
  if (st.files) st.files->DrainChecks();
  if (st.resumed) st.resumed->DrainChecks();
  const Status flushed = FlushBatches(st);
  // (Whole files were flagged verified by the commits that recorded them.)
  if (cancel.load()) return CancelledError("pull cancelled");
  if (st.files && !st.files->first_error().ok()) return st.files->first_error();
  if (st.resumed && !st.prefix_status.ok()) return st.prefix_status;
  if (st.resumed && !st.resumed->first_error().ok()) return st.resumed->first_error();
  if (st.halves && !st.halves->first_error().ok()) return st.halves->first_error();
  EXLR8_RETURN_IF_ERROR(s);
  EXLR8_RETURN_IF_ERROR(flushed);
  return RefreshFiles();
}

PullCounters PullJob::Rep::CacheCounters() const {
  PullCounters c;
  c.bytes_planned = counters.bytes_planned.load();
  c.bytes_reused = counters.bytes_reused.load();
  FetchCounters f;
  if (fetcher) f = fetcher->counters();
  c.bytes_fetched = f.bytes_received;
  c.requests = f.transfers;
  c.retries = f.retries;
  c.checksum_failures = counters.checksum_failures.load();
  return c;
}

Status PullJob::Rep::CountMissing(const Plan& plan, PullSummary* sum) {
  EXLR8_RETURN_IF_ERROR(RefreshFiles());
  sum->bytes_missing = 0;
  sum->ranges_missing = 0;
  for (const PlanFile& pf : plan.files) {
    EXLR8_ASSIGN_OR_RETURN(const FileInfo* f, File(pf.path));
    if (pf.whole) {
      if (!f->whole_verified) {
        sum->bytes_missing += f->size;
        ++sum->ranges_missing;
      }
      continue;
    }
    // One query per file, not two per range (230,000 ranges at full scale).
    EXLR8_ASSIGN_OR_RETURN(std::vector<Extent> have, cache.VerifiedExtents(f->id));
    for (const PlanRange& r : pf.ranges) {
      const std::vector<Extent> gaps = MissingExtents(have, {r.offset, r.length});
      for (const Extent& g : gaps) sum->bytes_missing += g.length;
      if (!gaps.empty()) ++sum->ranges_missing;
    }
  }
  sum->complete = sum->bytes_missing == 0 && sum->ranges_missing == 0;
  return Status::Ok();
}

Result<PullSummary> PullJob::Run() {
  Rep& r = *rep_;
  // Claimed for this run only: a pull that ended (or failed) claims nothing.
  struct Unclaim {
    Rep& r;
    ~Unclaim() { r.space_claim.reset(); }
  } unclaim{r};
  if (!r.opt.dry_run) r.space_claim = r.cache.ClaimSpace([&r] { return r.Outstanding(); });
  auto body = [&]() -> Result<PullSummary> {
    EXLR8_RETURN_IF_ERROR(CheckPullOptions(r.opt));
    EXLR8_RETURN_IF_ERROR(r.ResolveAndList());
    EXLR8_RETURN_IF_ERROR(r.cache.Touch(r.fileset));
    // Order matters: `streams` outlives `fetch`, which is aborted (if still
    // running) before anything it feeds is destroyed.
    Streams streams;
    std::unique_ptr<FetchSession> fetch;
    struct Unset {  // destroyed before `fetch`
      Rep& r;
      Streams& st;
      ~Unset() {
        if (st.prefix_hasher.joinable()) st.prefix_hasher.join();  // it submits to `fetch`
        r.session = nullptr;
        r.streams = nullptr;
      }
    } unset{r, streams};
    r.streams = &streams;
    if (!r.opt.offline) {
      fetch = std::make_unique<FetchSession>(*r.fetcher, &r.cancel, r.WriteThreads());
      r.session = fetch.get();
    }
    PullSummary sum;
    sum.repo = r.opt.repo;
    sum.revision = r.opt.revision;
    sum.commit = r.commit;
    std::uint64_t reused = 0;

    // metadata: index files and the manifest
    r.SetPhase(PullPhase::kMetadata);
    // The manifest: a name, a repo path, or else a local JSON file (a custom
    // width mix that is not part of the release).
    const std::string manifest_path = IsManifestName(r.opt.manifest) ? ManifestPath(r.opt.manifest) : r.opt.manifest;
    std::optional<std::string> local_manifest;
    if (!r.files.contains(manifest_path)) {
      std::error_code ec;
      if (!r.opt.allow_local_manifest)
        return NotFoundError("manifest '" + r.opt.manifest + "' is not in " + r.opt.repo + "@" + r.commit + " (no " +
                             manifest_path + ")");
      if (IsManifestName(r.opt.manifest) || !std::filesystem::is_regular_file(r.opt.manifest, ec))
        return NotFoundError("manifest '" + r.opt.manifest + "' is neither in " + r.opt.repo + "@" + r.commit +
                             " (no " + manifest_path + ") nor a local file");
      EXLR8_ASSIGN_OR_RETURN(local_manifest, ReadSmallFile(r.opt.manifest, kMaxManifestBytes));
    }
    const bool manifest_is_local = local_manifest.has_value();
    std::vector<ReleaseFile> release_files;
    std::vector<std::string> metadata;
    if (!local_manifest) metadata.push_back(manifest_path);
    for (const auto& [path, f] : r.files) {
      release_files.push_back({f.path, f.size, f.sha256, f.git_sha1});
      if (ClassifyReleasePath(path).kind == ReleaseFileKind::kExpertIndex) metadata.push_back(path);
    }
    // Every other file is fetched whole, whatever the plan: start those now.
    std::vector<std::string> whole;
    for (const auto& [path, f] : r.files)
      if (ClassifyReleasePath(path).kind != ReleaseFileKind::kExpertWidth &&
          std::find(metadata.begin(), metadata.end(), path) == metadata.end())
        whole.push_back(path);
    if (!r.opt.dry_run && !r.opt.offline) EXLR8_RETURN_IF_ERROR(r.StartFiles(whole, &reused, streams));
    EXLR8_RETURN_IF_ERROR(r.EnsureWholeFiles(metadata, &reused));
    PlannerSources sources;
    sources.open_index = [&r](const ReleaseFile& rf) -> Result<std::unique_ptr<ByteSource>> {
      EXLR8_ASSIGN_OR_RETURN(const FileInfo* f, r.File(rf.path));
      return r.OpenForPlanning(*f);
    };
    sources.manifest_name = r.opt.manifest;
    sources.manifest_text = [&]() -> Result<std::string> {
      if (local_manifest) return std::move(*local_manifest);
      return r.ReadCachedText(manifest_path);
    };
    EXLR8_ASSIGN_OR_RETURN(PlannerInput planner_input, AssemblePlannerInput(std::move(release_files), sources));
    r.index_sources = std::move(planner_input.index_sources);
    ReleaseInputs& inputs = planner_input.release;
    const Manifest& manifest = *planner_input.manifest;

    // plan: the halves, located by the index files alone (absolute offsets)
    r.SetPhase(PullPhase::kPlan);
    PlanOptions plan_options{r.opt.tp, r.opt.rank, r.opt.coalesce_gap, /*defer_headers=*/true};
    EXLR8_ASSIGN_OR_RETURN(Plan plan, MakePlan(inputs, manifest, plan_options));
    r.counters.bytes_planned.store(plan.totals.needed_bytes);
    sum.root = r.cache.dir() / FilesetDir(r.opt.repo, r.commit);
    // What the width files' headers are checked against: where their halves
    // lie. The index tables themselves are dropped here (66 MB at GLM-5.3
    // scale, a third of the pull's peak heap): the halves carry their own
    // checksums and tails, and the tails are read from index_sources.
    std::vector<std::string> width_paths;
    std::map<std::string, WidthFileSpan> spans;
    for (const PlanFile& pf : plan.files) {
      if (pf.whole) continue;
      const ReleasePath rp = ClassifyReleasePath(pf.path);
      auto ix = inputs.indexes.find(rp.layer);
      if (ix == inputs.indexes.end())
        return CorruptionError(pf.path + ": no index file for layer " + std::to_string(rp.layer));
      Result<WidthFileSpan> span = ix->second.SpanOfWidth(rp.k);
      if (!span.ok()) return span.status().WithContext(pf.index_path);
      spans.emplace(pf.path, std::move(*span));
      width_paths.push_back(pf.path);
    }
    std::map<int, ExpertIndex>().swap(inputs.indexes);
    // headers of the width files this rank reads from: while the halves
    // stream (a dry run has no halves), as the planner's last step
    auto add_headers = [&]() -> Status {
      r.SetPhase(PullPhase::kHeaders);
      EXLR8_RETURN_IF_ERROR(r.EnsureHeaders(width_paths, &inputs.width_header_bytes, spans, &reused));
      EXLR8_RETURN_IF_ERROR(AddWidthHeaders(plan, inputs.width_header_bytes));
      r.counters.bytes_planned.store(plan.totals.needed_bytes);
      r.counters.bytes_reused.store(reused);
      return Status::Ok();
    };
    if (r.opt.dry_run) {
      EXLR8_RETURN_IF_ERROR(add_headers());
      if (fetch) EXLR8_RETURN_IF_ERROR(r.FinishStreams(streams));  // records what planning fetched
      EXLR8_RETURN_IF_ERROR(r.CountMissing(plan, &sum));  // what a pull would fetch now
      sum.plan = std::move(plan);
      return sum;
    }
    PullSpec spec;
    spec.fileset = r.fileset;
    spec.manifest = manifest_is_local ? "local:" + r.opt.manifest : manifest_path;
    spec.tp = r.opt.tp;
    spec.rank = r.opt.rank;
    spec.started_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch()).count() -
                      static_cast<std::int64_t>(r.Elapsed() * 1000);
    // (The plan's total bytes, headers included, are the pull's bytes_planned counter.)
    spec.plan_summary_json = "{\"half_bytes\":" + std::to_string(plan.totals.half_bytes) +
                             ",\"routed_halves\":" + std::to_string(plan.totals.routed_halves) +
                             ",\"shared_halves\":" + std::to_string(plan.totals.shared_halves) + "}";
    EXLR8_ASSIGN_OR_RETURN(r.pull_id, r.cache.StartPull(spec));
    r.progress_pull.store(*r.pull_id);
    r.ReportProgress(/*always=*/true);  // the plan's size, before the first commit

    if (r.opt.offline) {
      EXLR8_ASSIGN_OR_RETURN(std::vector<WholeFileTarget> missing, r.MissingWholeFiles(whole, &reused));
      if (!missing.empty()) {
        std::uint64_t bytes = 0;
        for (const WholeFileTarget& t : missing) bytes += t.size;
        return FailedPreconditionError("offline mode: " + std::to_string(missing.size()) + " files (" +
                                       std::to_string(bytes) + " bytes, first " + missing[0].path +
                                       ") are not in the cache");
      }
    }
    // the halves, while the whole files finish and the headers arrive
    EXLR8_RETURN_IF_ERROR(r.FetchHalves(plan, &reused, streams));
    EXLR8_RETURN_IF_ERROR(add_headers());
    r.SetPhase(PullPhase::kHalves);
    if (fetch) EXLR8_RETURN_IF_ERROR(r.FinishStreams(streams));

    EXLR8_RETURN_IF_ERROR(r.CountMissing(plan, &sum));
    sum.plan = std::move(plan);
    return sum;
  };

  Result<PullSummary> result = body();
  if (!result.ok() && r.hub_error && result.status().code() != StatusCode::kCancelled)
    result = result.status().WithContext("the hub could not be asked what " + r.opt.revision + " is now (" +
                                         r.hub_error->message() + "), and serving commit " + r.commit +
                                         " from the cache failed");
  const FetchCounters fc = r.fetcher ? r.fetcher->counters() : FetchCounters{};
  if (r.pull_id) {
    (void)r.cache.UpdatePull(*r.pull_id, r.CacheCounters());
    if (result.ok() && result->complete) (void)r.cache.FinishPull(*r.pull_id, PullState::kDone);
    else if (!result.ok() && result.status().code() == StatusCode::kCancelled)
      (void)r.cache.FinishPull(*r.pull_id, PullState::kCancelled, result.status().message());
    else
      (void)r.cache.FinishPull(*r.pull_id, PullState::kFailed,
                               result.ok() ? "plan not fully verified" : result.status().message());
  }
  if (!result.ok()) {
    r.SetPhase(PullPhase::kFailed);
    return result;
  }
  r.SetPhase(PullPhase::kDone);
  PullSummary& s = *result;
  s.bytes_planned = r.counters.bytes_planned.load();
  s.bytes_reused = r.counters.bytes_reused.load();
  s.bytes_fetched = fc.bytes_received;
  s.requests = fc.transfers;
  s.retries = fc.retries;
  s.refetches = fc.refetches;
  s.resolves = fc.resolves;
  s.checksum_failures = r.counters.checksum_failures.load();
  s.bytes_resumed = r.counters.bytes_resumed.load();
  s.bytes_written = r.counters.bytes_written_verified.load();
  s.bytes_claimed = r.claimed.load();
  s.evicted = r.evicted;
  s.bytes_evicted = r.bytes_evicted;
  s.bytes_lost = r.bytes_lost;
  s.served_from_cache = r.opt.offline;
  if (r.hub_error) s.hub_error = r.hub_error->message();
  s.elapsed_s = r.Elapsed();
  s.phase_s = r.phase_s;
  return result;
}

}  // namespace exlr8
