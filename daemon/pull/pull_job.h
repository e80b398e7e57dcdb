// PullJob: fetch exactly the bytes one TP rank needs from a Hugging Face
// compatible hub into the verified local cache. The engine behind
// `exlr8d pull`, and later behind each pull of `exlr8d serve`.
//
// Phases of the planner, in order:
//   resolve   revision -> commit (once; every later request is pinned to it)
//   list      the commit's files with sizes, LFS sha256 and git blob ids;
//             every other whole file (dense, vocab, config, other
//             manifests) starts streaming now, in the background, on up to
//             a quarter of the transfer slots (FetchSession)
//   metadata  whole files the planner needs: expert index files and the
//             manifest (each verified by SHA-256 or git blob SHA-1); their
//             commit starts as the step ends, while the planner goes on
//   plan      format/plan.h: files, ranges, checksums. The index files
//             locate every half (absolute offsets), so the halves are
//             planned before the width files' headers are known
//             (PlanOptions::defer_headers) and start streaming now
//   headers   meanwhile, the safetensors header of every width file the rank
//             reads from (parsed; every indexed half checked to lie inside
//             it; AddWidthHeaders completes the plan). A bad header fails
//             the pull; halves already verified by their checksums stay
//   halves    the rest of the rank's expert halves: single-range requests,
//             each half hashed while it streams in (XXH64 + its index-file
//             tail, spec 5.3); a mismatch discards and refetches (bounded)
//   commit    waiting for the last verified bytes to be made durable and
//             recorded
//   done      every byte of the plan is recorded as verified
//
// Crash safety: bytes are written where they belong (pwrite), and an extent
// is recorded only after it is verified AND the file is fdatasync'ed
// (Cache::CommitVerified), in batches (commit_interval / commit_bytes; the
// last batch of each planner step as the step ends). A kill at any moment
// loses at most the unrecorded batch and what was in flight; a rerun
// fetches only what is not recorded. A dense or vocab file is verified by
// its SHA-256 and by the format's own checks (format/dense.h
// CheckDenseFile: structure and every block checksum). Bytes already verified
// in the cache (another rank, another manifest, an earlier run) are reused.
//
// Thread rules: Run() on one thread; Cancel() and Progress() from any thread.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "daemon/base/clock.h"
#include "daemon/cache/cache.h"
#include "daemon/hub/hub_client.h"
#include "daemon/hub/range_fetcher.h"
#include "format/plan.h"
#include "format/status.h"

namespace exlr8 {

struct PullOptions {
  std::string repo;               // "org/name"
  std::string revision = "main";  // branch, tag or commit
  std::string manifest;           // name ("home") or a repo path ("manifests/x.json")
  // Whether `manifest` may also name a local JSON file (a custom width mix).
  // `exlr8d serve` turns it off: an API client must not make the daemon
  // read files of its choosing.
  bool allow_local_manifest = true;
  int tp = 1;
  int rank = 0;
  std::uint64_t coalesce_gap = 0;
  bool dry_run = false;  // fetch only what planning needs, then stop
  bool offline = false;  // serve from the cache only (HF_HUB_OFFLINE=1)
  // (Online, a hub that cannot be asked what the revision is now still
  // lets a rank the cache holds complete be served: see PullJob::Run.)
  // When the bytes still to fetch do not fit (disk or budget), evict what
  // `exlr8d gc` would (unpinned, unheld filesets without a pull running,
  // least recently used first), only as much as they need, instead of
  // failing (Cache::MakeRoom). Never this pull's own fileset.
  bool make_room = false;
  HubOptions hub;
  RangeFetcherOptions fetch;
  // Verified extents are made durable and recorded at least this often.
  std::chrono::milliseconds commit_interval{1000};
  // ... and every this many bytes: small enough that the last commit of a
  // pull (which the pull waits for) has little left to flush.
  std::uint64_t commit_bytes = 16ull << 20;
  // Transfers the whole files (dense, vocab, ...) may hold while the planner
  // fetches index files and headers: -1 = a quarter of fetch.max_parallel;
  // 0 = they start with the halves instead.
  int background_jobs = -1;
  // Threads that write and hash what arrives: 0 = a quarter of the cores,
  // 1 to 4 (one thread wrote and hashed ~1 GB/s at most).
  int write_threads = 0;
  // Largest whole file fetched into memory-free streaming is unbounded; the
  // largest width-file header accepted:
  std::uint64_t max_header_bytes = 100'000'000;
  // What the pull's phases and progress reports are timed by, and the
  // fetcher's clock unless fetch.clock names another; null = Clock::Real().
  // REQUIRES: outlives the job.
  Clock* clock = nullptr;
};

enum class PullPhase : int {
  kStarting, kResolve, kList, kMetadata, kPlan, kHeaders, kHalves, kCommit, kDone, kFailed
};
inline constexpr int kPullPhaseCount = static_cast<int>(PullPhase::kFailed) + 1;
std::string_view PullPhaseName(PullPhase phase);

// "org/name": two non-empty parts of letters, digits, '-', '_' and '.'.
bool IsValidRepoId(std::string_view repo);

// A consistent-enough snapshot for progress displays and the REST API.
struct PullProgress {
  PullPhase phase = PullPhase::kStarting;
  std::uint64_t bytes_planned = 0;   // the plan's bytes (0 until planned)
  std::uint64_t bytes_reused = 0;    // already verified in the cache
  std::uint64_t bytes_verified = 0;  // fetched and verified by this job
  std::uint64_t bytes_received = 0;  // off the network (includes refetches)
  std::uint64_t ranges_total = 0;    // half ranges to fetch
  std::uint64_t ranges_done = 0;
  std::uint64_t checksum_failures = 0;
  FetchCounters fetch;               // the fetcher's counters
  double elapsed_s = 0;
  PullId pull_id = 0;                // the cache's pull row; 0 until recorded
};

struct PullSummary {
  std::string repo, revision, commit;
  std::filesystem::path root;  // <cache>/<org>/<name>/<commit>: the partial mirror
  Plan plan;                   // files and totals (dry run: the full plan)
  bool complete = false;       // every byte of the plan verified in the cache
  // What of the plan is not verified in the cache as the run ends: bytes,
  // and the plan's requests (ranges, whole files) with any of them. After
  // a dry run, what a pull would fetch now.
  std::uint64_t bytes_missing = 0, ranges_missing = 0;
  std::uint64_t bytes_planned = 0, bytes_fetched = 0, bytes_reused = 0;
  // Durable prefixes of interrupted whole-file downloads, read back from the
  // cache (and hashed with the rest) instead of fetched again.
  std::uint64_t bytes_resumed = 0;
  // Bytes this run wrote into the cache and verified, and the space it
  // claimed for them against other pulls and the budget: equal when the
  // accounting is right (a failed run may have claimed more).
  std::uint64_t bytes_written = 0, bytes_claimed = 0;
  std::uint64_t requests = 0, retries = 0, checksum_failures = 0, resolves = 0, refetches = 0;
  // Transfers in flight: whether the limit adapted (no --jobs), where it
  // ended, the highest it reached and how often it backed off.
  bool jobs_adaptive = false;
  std::uint64_t jobs_limit = 0, jobs_peak = 0, jobs_backoffs = 0;
  // HTTP/2 streams per connection at the end (chosen by the path's round
  // trip when adaptive and not set).
  std::uint64_t h2_streams = 0;
  // What PullOptions::make_room evicted: the filesets' ids and verified bytes.
  std::vector<FilesetId> evicted;
  std::uint64_t bytes_evicted = 0;
  // Recorded bytes no longer in the cache directory (files deleted or cut
  // short behind the cache's back): un-recorded first, then fetched again.
  std::uint64_t bytes_lost = 0;
  // Served from the cache only, the commit included: offline, or the hub
  // could not be asked (hub_error).
  bool served_from_cache = false;
  // Why the hub was not asked, when it could not be (PullJob::Run): the
  // network error of resolving the revision. Empty otherwise.
  std::string hub_error;
  double elapsed_s = 0;
  // Wall time spent in each phase (indexed by PullPhase): where a slow pull
  // spends its time.
  std::array<double, kPullPhaseCount> phase_s{};
};

// InvalidArgument naming the option for a request no pull could serve: a
// repo that is not ORG/NAME, an empty revision or manifest, tp < 1, rank
// outside [0, tp). PullJob::Run checks it first; a command line checks it
// before it opens the cache, so that a typo costs nothing.
Status CheckPullOptions(const PullOptions& options);

class PullJob {
 public:
  // REQUIRES: `cache` outlives the job and is used by no other thread while
  // Run() runs.
  PullJob(Cache& cache, PullOptions options);
  ~PullJob();
  PullJob(const PullJob&) = delete;
  PullJob& operator=(const PullJob&) = delete;

  // Runs the pull to the end. OK with complete = true when every byte of the
  // plan is verified in the cache (or, dry run, when the plan is made).
  // Errors: InvalidArgument (options), NotFound/PermissionDenied (hub),
  // Corruption (bad release data, checksums failing past the refetch bound),
  // ResourceExhausted (disk or budget), FailedPrecondition (offline and
  // missing bytes), Unavailable/IOError (network), Cancelled.
  //
  // Hub outages: when resolving the revision fails because the hub cannot
  // be reached or answers 5xx/429 on every try (HubOutage), and the cache
  // holds the rank complete (CheckRankStatus, as `exlr8d status`) at the
  // commit the revision last resolved to here (Cache::LookupCommit), the
  // run goes on as offline: OK, with served_from_cache and hub_error set.
  // A revision resolved here before is first asked with fewer, shorter
  // tries (kProbe* in pull_hub.cpp), so that a hub that is down costs about
  // a second; where the cache cannot serve the rank, the usual tries
  // follow and their error says what the cache lacks. A hub that answers
  // no (401/403/404) is never worked around.
  Result<PullSummary> Run();

  void Cancel();
  PullProgress Progress() const;

 private:
  struct Rep;
  std::unique_ptr<Rep> rep_;
};

}  // namespace exlr8
