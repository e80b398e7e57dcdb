// PullJob::Rep, the state of one pull, shared by the files that run it:
// pull_job.cpp (resolve and list, stream, commit, summarize) and
// pull_plan.cpp (the planner's steps). Internal to daemon/pull/.
#pragma once

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "daemon/base/clock.h"
#include "daemon/base/mutex.h"
#include "daemon/pull/pull_files.h"
#include "daemon/pull/pull_job.h"
#include "daemon/pull/pull_progress.h"
#include "daemon/pull/pull_space.h"
#include "daemon/pull/pull_streams.h"
#include "format/layout.h"
#include "format/plan.h"

namespace exlr8 {

// The pull's row is written at most this often: each write is a SQLite
// transaction with its own WAL fsync, and commits come as often as every
// 16 MiB.
inline constexpr std::chrono::milliseconds kProgressInterval{500};

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

}  // namespace exlr8
