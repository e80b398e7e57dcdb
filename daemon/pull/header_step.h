// HeaderStep: the planner's last step, the safetensors header of every
// width file a rank reads from. Each header is found verified in the cache,
// or fetched, parsed and checked against where the index file says its
// halves lie (WidthFileSpan::Validate); no checksum covers a header (spec
// 5.3), so a fetched one is recorded only once two fetches agree, and one
// that fails its checks is fetched again, at most max_refetches times.
//
// Headers are validated, written and freed one at a time, as soon as each
// is complete: at GLM-5.3 scale they are ~1.3 MB each, 225 of them, and
// holding all of them at once would be most of a pull's peak memory.
//
// Thread rules: one step, run once: the constructor and Run() on the
// pull's Run() thread. During Run, each target (and its refetch count) is
// advanced by the fetch session's write worker that finished its request,
// one request per target at a time, and by the Run() thread between
// rounds, when no request is in flight. `mu_` guards the header lengths
// found so far (several workers finish headers at once).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "daemon/base/mutex.h"
#include "daemon/cache/cache.h"
#include "daemon/pull/commit_batcher.h"
#include "daemon/pull/consumers.h"
#include "daemon/pull/pull_space.h"
#include "format/expert_index.h"
#include "format/status.h"

namespace exlr8 {

class HeaderStep {
 public:
  struct Env {
    Cache& cache;
    JobCounters& counters;
    PullSpace& space;                    // claims the bytes the headers take
    RangeFetcher* fetcher;               // null offline
    bool offline = false;                // FailedPrecondition for a header not in the cache
    int max_refetches = 2;               // RangeFetcherOptions::max_refetches
    std::uint64_t max_header_bytes = 0;  // PullOptions::max_header_bytes
    // Runs one round's requests as a foreground step of the pull and waits
    // for them to end (their bytes are made durable later, by the batch).
    std::function<Status(HeaderConsumer&)> run_round;
    // The step's CommitBatcher; it commits in the background as the step
    // ends (CommitSoon).
    std::function<CommitBatcher&()> new_batch;
  };

  // `spans`: for each width file, where its halves lie. REQUIRES: what Env
  // refers to and `spans` outlive the step.
  HeaderStep(Env env, const std::map<std::string, WidthFileSpan>& spans);
  HeaderStep(const HeaderStep&) = delete;
  HeaderStep& operator=(const HeaderStep&) = delete;

  // Makes the header of every file of `files` verified in the cache (adds
  // what was already there to *reused). Errors: Corruption (a header that
  // fails its checks past the refetch bound, or that is bad in the cache),
  // FailedPrecondition (offline), ResourceExhausted (space), the fetch's.
  // Headers done when another failed are still recorded.
  Status Run(const std::vector<const FileInfo*>& files, std::uint64_t* reused) EXLR8_EXCLUDES(mu_);

  // Each header's length (8 + N) by path: all of them once Run returned OK.
  std::map<std::string, std::uint64_t> TakeHeaderBytes() EXLR8_EXCLUDES(mu_);

 private:
  // Parses a header and checks it against its file's span; notes its length.
  Status Validate(const std::string& path, std::span<const std::byte> bytes, std::uint64_t size)
      EXLR8_EXCLUDES(mu_);
  // A target fetched up to its full header: checked, then written when two
  // fetches agree.
  Status Finish(HeaderTarget& t) EXLR8_EXCLUDES(mu_);
  Status RetryOrFail(HeaderTarget& t, Status bad);
  Status Advance(HeaderTarget& t) EXLR8_EXCLUDES(mu_);
  void FetchAgain(HeaderTarget& t);

  Env env_;
  const std::map<std::string, WidthFileSpan>& spans_;
  std::vector<HeaderTarget> targets_;
  std::vector<int> refetches_;             // by target
  CommitBatcher* batch_ = nullptr;         // set by Run before the first round
  std::atomic<std::uint64_t> written_{0};  // header bytes this step wrote
  Mutex mu_;
  std::map<std::string, std::uint64_t> header_bytes_ EXLR8_GUARDED_BY(mu_);
};

}  // namespace exlr8
