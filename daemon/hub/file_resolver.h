// FileResolver: where each repo file's ranges go, and when to ask again.
//
// Per file, RangeFetcher HEADs `{endpoint}/{repo}/resolve/{commit}/{path}`
// once (no automatic redirects) and sends every range of the file to the
// URL the answer names (a signed CDN URL for LFS files, the hub URL for
// regular files). This class owns that per-file state, across Runs:
//  - the file's state: unresolved, queued for a resolve, resolving, ready
//    (with its URL, size, expiry and a generation bumped on every resolve,
//    so an answer about an older URL does not discard a newer one), or
//    failed (until the next Run);
//  - the requests (the caller's job indices) waiting for it to be ready;
//  - the resolve queue and how many resolves run, at most
//    max_parallel_resolves at once;
//  - the bounds: max_attempts failed resolves in a row, relative redirect
//    hops, and max_reresolves_per_file re-resolves (a CDN refusing the URL,
//    or the URL's expiry) per Run.
// Files the hub's listing names as regular git files (ExpectServedByHub)
// start ready at their /resolve/ URL without a HEAD ("presumed"); a
// redirect there sends them through the usual resolve (Unpresume).
//
// It sends nothing itself: the fetcher starts the HEAD that StartNextResolve
// names and reports its answer. A failed resolve pauses every resolve
// through the TransferScheduler (the hub rate-limits /resolve/ as a whole).
//
// Thread rules: not thread-safe; RangeFetcher's Run thread (and, between
// Runs, its owner for ExpectServedByHub) alone calls it.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "daemon/base/clock.h"
#include "daemon/hub/hub_client.h"
#include "daemon/hub/transfer_scheduler.h"
#include "format/status.h"

namespace exlr8 {

class FileResolver {
 public:
  struct Options {
    int max_parallel_resolves = 4;
    int max_attempts = 8;             // failed resolves of one file in a row
    int max_reresolves_per_file = 8;  // per Run
    std::chrono::milliseconds max_throttle_wait{std::chrono::minutes(5)};
  };

  // How files are named: HubClient::ResolveUrl and HubClient::DescribeFile
  // in the fetcher, plain functions in tests.
  struct Naming {
    std::function<std::string(std::string_view path)> resolve_url;
    std::function<std::string(std::string_view path)> describe;
  };

  struct File {
    enum class State : std::uint8_t { kUnresolved, kQueued, kResolving, kReady, kFailed };
    std::string path;
    State state = State::kUnresolved;
    std::string url;  // where ranges go (kReady)
    bool on_hub = false;
    bool presumed = false;  // kReady at the /resolve/ URL without a HEAD
    std::optional<std::uint64_t> size;
    Clock::TimePoint expires;
    std::uint32_t generation = 0;  // bumped on each resolve
    Status failure;                // kFailed
    // Internal bookkeeping, read by tests.
    bool ever_resolved = false;
    int reresolves_this_run = 0;  // successful resolves after the first, this Run
    int failed_tries = 0;         // failed resolves in a row
    int hops = 0;                 // relative redirects in the current resolve
    std::string next_url;         // where the next resolve HEAD goes
    std::vector<std::uint32_t> waiters;
  };

  // What a resolve's end means for the requests that waited on it.
  struct Outcome {
    std::vector<std::uint32_t> ready;   // may start now
    std::vector<std::uint32_t> failed;  // fail with `failure` (in their context)
    Status failure;
  };

  // REQUIRES: `sched` outlives the resolver.
  FileResolver(Naming naming, TransferScheduler& sched, Options options);

  // The index of `path`'s file, created unresolved on first use.
  std::uint32_t FileFor(const std::string& path);
  const File& file(std::uint32_t fi) const { return files_[fi]; }

  // See RangeFetcher::ExpectServedByHub. Ignored for a bad path (its
  // requests fail with the reason) or a file already resolved.
  void ExpectServedByHub(const std::string& path, std::uint64_t size);

  // A new Run: per-Run counts start over, failed files may be tried again,
  // nothing is queued.
  void StartRun();
  // The Run was cancelled: every resolve queued or running is dropped (the
  // caller removed the running transfers), and nobody waits any more.
  void CancelRun();

  // ---- requests
  // If `fi` is ready but its URL expired at `now`, it is to be resolved
  // again. False when that was one re-resolve too many: the file failed.
  bool ExpireIfDue(std::uint32_t fi, Clock::TimePoint now);
  // `job` waits for `fi` (unresolved, queued or resolving); an unresolved
  // file is queued for a resolve.
  void Wait(std::uint32_t fi, std::uint32_t job);
  // The URL stopped working (the CDN answered `why`) or expired: resolve
  // again (a second refusal right after a fresh resolve pauses resolves
  // for a backoff). False, and the file failed, past max_reresolves_per_file.
  // A file not ready is left alone (true).
  bool Invalidate(std::uint32_t fi, std::string_view why);
  // The hub redirected a presumed file's range GET: resolve it with a HEAD.
  void Unpresume(std::uint32_t fi);

  // ---- resolves
  bool HasQueued() const { return !queue_.empty(); }
  // A queued resolve may start now (under the concurrency bound, resolves
  // not paused).
  bool CanStartResolve() const;
  // Takes the next queued file that somebody still waits for and marks it
  // resolving; its HEAD goes to file(fi).next_url. nullopt: none left.
  std::optional<std::uint32_t> StartNextResolve();
  // The resolve of `fi` ended: the hub's answer, or (step.status, not
  // retryable when `permanent`) a transport failure.
  Outcome OnResolveEnd(std::uint32_t fi, HubClient::ResolveStep step);
  int running() const { return running_; }

 private:
  static constexpr int kMaxResolveHops = 6;
  struct StringHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  Outcome Fail(std::uint32_t fi, Status status);
  void Queue(std::uint32_t fi);

  const Naming naming_;
  TransferScheduler& sched_;
  const Options opts_;
  std::vector<File> files_;
  std::unordered_map<std::string, std::uint32_t, StringHash, std::equal_to<>> index_;
  std::deque<std::uint32_t> queue_;
  int running_ = 0;
};

}  // namespace exlr8
