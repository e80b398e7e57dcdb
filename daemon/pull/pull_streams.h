// PullStreams: a pull's fetch session and everything that streams in it.
// The planner's steps (index files, manifest, headers) run in it as
// foreground steps, while the whole files (dense, vocab, config, other
// manifests) stream in the background from right after the listing, and
// the halves once planned. Each stream writes into the cache and hands
// what it verified to a CommitBatcher, which makes it durable and records
// it.
//
// The planner's own steps do not wait for their bytes to become durable:
// each step's batch commits in the background as the step ends
// (CommitBatcher::CommitSoon), while the planner goes on. Finish() flushes
// every batch at once: each waits for its own background commit, then
// syncs its files, so their fdatasyncs overlap (one after another, the last
// commit was ~15% of a pull on a 16-core machine).
//
// Thread rules: every method on the pull's Run() thread; one thread of its
// own reads back and hashes the prefixes of interrupted downloads, then
// submits them (StartResumes); it is joined by Finish() and the
// destructor. The consumers' callbacks run on the session's workers
// (consumers.h). The destructor first joins that thread, then aborts the
// session if it still runs, then destroys what the session fed.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "daemon/cache/cache.h"
#include "daemon/hub/range_fetcher.h"
#include "daemon/pull/commit_batcher.h"
#include "daemon/pull/consumers.h"
#include "daemon/pull/fetch_session.h"
#include "daemon/pull/pull_space.h"
#include "format/status.h"

namespace exlr8 {

class PullStreams {
 public:
  struct Env {
    Cache& cache;
    RangeFetcher& fetcher;
    JobCounters& counters;
    PullSpace& space;  // claims the whole files' bytes; counts what batches record
    const std::atomic<bool>* cancel;
    // Runs on a committer thread after each commit of the whole files or
    // the halves (the pull's progress report).
    std::function<void()> on_commit;
    std::chrono::milliseconds commit_interval{1000};  // PullOptions::commit_interval
    std::uint64_t commit_bytes = 16ull << 20;         // PullOptions::commit_bytes
    // PullOptions::background_jobs: 0 holds the whole files back until the
    // halves start.
    int background_jobs = -1;
    int max_parallel = 1;   // the fetcher's transfer slots
    int write_threads = 1;  // the session's write workers
  };

  // Starts the fetch session. REQUIRES: what Env refers to outlives this.
  explicit PullStreams(Env env);
  ~PullStreams();
  PullStreams(const PullStreams&) = delete;
  PullStreams& operator=(const PullStreams&) = delete;

  // One foreground step: its requests go first; waits until all ended (its
  // bytes are made durable later, by its batch). Cancelled after a cancel;
  // else the consumer's first error, else the session's.
  Status RunStep(RangeConsumer& consumer, const ConsumerBase& base);
  // A new batch for one planner step's bytes.
  CommitBatcher& NewStepBatch();

  // Starts the whole files in the background (claiming their bytes):
  // largest first; interrupted downloads only once StartResumes runs.
  Status StartFiles(std::vector<WholeFileTarget> targets);
  // Once the plan is made: submits the files held back (background_jobs 0)
  // and starts reading back the interrupted downloads' prefixes.
  void StartHeldBack();
  // The halves to fetch, on every slot the files leave. Their bytes are
  // claimed by the caller.
  void StartHalves(std::vector<FileWork> work);

  // Ends the transfers: waits for everything submitted, then for the fetch;
  // returns the fetch's status.
  Status EndTransfers();
  // Then: waits for the dense files' format checks and makes everything
  // verified durable and recorded; returns the first flush error.
  Status Flush();
  // Then: the first error of the streams (files, resumed prefixes, halves).
  Status StreamError() const;

 private:
  void StartResumes();
  int BackgroundCap() const {
    return env_.background_jobs > 0 ? env_.background_jobs : std::max(1, env_.max_parallel / 4);
  }
  std::unique_ptr<CommitBatcher> NewBatch(bool report);

  Env env_;
  // Declared before the session that feeds them, so that the session
  // (aborted if still running) ends before they are destroyed.
  std::unique_ptr<CommitBatcher> files_batch_;
  std::unique_ptr<WholeFileConsumer> files_;    // fetched from byte 0
  std::unique_ptr<WholeFileConsumer> resumed_;  // interrupted downloads, resumed
  Status prefix_status_;                        // prefix_hasher_'s outcome (read after join)
  std::vector<FileWork> work_;
  std::unique_ptr<CommitBatcher> halves_batch_;
  std::unique_ptr<HalfConsumer> halves_;
  std::vector<std::unique_ptr<CommitBatcher>> step_batches_;
  std::unique_ptr<FetchSession> session_;
  std::thread prefix_hasher_;  // hashes resumed_'s prefixes, then submits it
};

}  // namespace exlr8
