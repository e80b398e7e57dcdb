// RangeJobs: the RangeFetcher's live requests, each from NextRequest to its
// one ending (an Accept verdict or OnFailed), and the fetcher's counters.
//
// What it owns: the job table (one job per live request, at most
// max_parallel + max_queued) and its free list, the state of each job, the
// requests whose verdict is pending and the verdicts other threads
// Deliver, the run's failure tally, and whether the first failure stops
// the run (stop_on_failure). Every call to the consumer about a request's
// ending (OnComplete, OnReset, OnFailed) and every NextRequest comes from
// here. What it leaves to others: when a job's next try starts
// (TransferScheduler, which it hands ready and backed-off jobs to), which
// URL a file's ranges go to (FileResolver), and the transfers themselves
// (RangeFetcher's driver, which moves a job to kRunning and back).
//
// Thread rules: Deliver and the counters' reads from any thread
// (`verdict_mu_` guards the delivered verdicts; counters are atomic);
// everything else on the thread inside RangeFetcher::Run.
#pragma once

#include <atomic>
#include <cstdint>
#include <limits>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "daemon/base/mutex.h"
#include "daemon/hub/file_resolver.h"
#include "daemon/hub/range_fetcher.h"
#include "daemon/hub/transfer_scheduler.h"
#include "format/status.h"

namespace exlr8 {

// RangeFetcher::counters(), as atomics updated by its pieces.
struct FetchCounterCells {
  std::atomic<std::uint64_t> requests_started{0}, requests_done{0}, requests_failed{0}, transfers{0},
      retries{0}, resumes{0}, bytes_received{0}, bytes_discarded{0}, resolves{0}, reresolves{0},
      rate_limited{0}, unavailable{0}, ignored_range{0}, bad_answers{0}, overlong_bodies{0}, refetches{0},
      active_transfers{0}, concurrency_limit{0}, concurrency_peak{0}, concurrency_backoffs{0},
      h2_streams{0};

  static void Inc(std::atomic<std::uint64_t>& c, std::uint64_t n = 1) {
    c.fetch_add(n, std::memory_order_relaxed);
  }
  // A relaxed snapshot.
  FetchCounters Snapshot() const;
};

class RangeJobs {
 public:
  static constexpr std::uint32_t kNoFile = std::numeric_limits<std::uint32_t>::max();

  struct Job {
    enum class State : std::uint8_t { kFree, kReady, kWaitFile, kBackoff, kRunning, kVerifying };
    State state = State::kFree;
    RangeRequest req;
    std::uint32_t file = kNoFile;
    std::uint64_t delivered = 0;  // bytes of this try given to OnData
    int attempts = 0;             // failed tries
    int refetches = 0;
    int throttled = 0;
  };

  // REQUIRES: every argument outlives the jobs.
  RangeJobs(const HubClient& hub, TransferScheduler& sched, FileResolver& resolver,
            FetchCounterCells& counters, int max_refetches, bool stop_on_failure);

  // ---- a run ----
  // Empties the table (`capacity` jobs, all free) for a run with `consumer`.
  void StartRun(RangeConsumer* consumer, std::size_t capacity);
  // OK when every request of the run was accepted, else the first failure
  // with the count of failed requests appended.
  Status RunResult() const;
  void EndRun() { consumer_ = nullptr; }

  Job& job(std::uint32_t ji) { return jobs_[ji]; }
  const Job& job(std::uint32_t ji) const { return jobs_[ji]; }
  // "label: org/repo@abc file 'path' bytes=a-b", for messages.
  std::string Describe(std::uint32_t ji) const;
  bool AnyLive() const { return free_.size() < jobs_.size(); }
  bool AnyVerifying() const { return !verifying_.empty(); }
  // The consumer has no more requests for this run.
  bool source_done() const { return source_done_; }
  // A request failed and the options say that stops the run.
  bool stopping() const { return stopping_; }

  // Takes requests from the consumer while there are free jobs: a valid one
  // is made ready; a bad one (range, path) fails at once.
  void PullRequests();

  // ---- moving a job along ----
  void MakeReady(std::uint32_t ji);
  // Moves the backed-off jobs whose time has come to the ready line.
  void PromoteDue();
  // A failed try: backs off for the next, or fails the job once its
  // attempts are spent (the message names the job and `error`).
  void Retry(std::uint32_t ji, const Status& error);
  // Backs off until `when` (a throttled try: no attempt used).
  void RetryAt(std::uint32_t ji, Clock::TimePoint when);
  // Every byte arrived: asks the consumer's verdict and acts on it (or
  // waits for it, when pending).
  void Complete(std::uint32_t ji);
  // Ends the job with `status` (OnFailed).
  void Fail(std::uint32_t ji, const Status& status);

  // ---- verdicts from other threads ----
  // Any thread: the verdict for request `id` (see RangeFetcher::Deliver).
  void Deliver(std::uint64_t id, RangeVerdict verdict);
  // Acts on the verdicts delivered since the last call. `cancelled`: the
  // run is over; a Refetch verdict ends its job with it instead.
  void ApplyDelivered(const Status* cancelled = nullptr);
  // Ends every live job but those whose verdict is pending with `why`
  // (they keep it: the consumer may already have accepted them).
  void FailAllLive(const Status& why);

 private:
  void Release(std::uint32_t ji);
  void ApplyVerdict(std::uint32_t ji, RangeVerdict v);

  const HubClient& hub_;
  TransferScheduler& sched_;
  FileResolver& resolver_;
  FetchCounterCells& counters_;
  const int max_refetches_;
  const bool stop_on_failure_;

  RangeConsumer* consumer_ = nullptr;
  std::vector<Job> jobs_;
  std::vector<std::uint32_t> free_;
  // Jobs whose verdict is pending, by request id.
  std::unordered_map<std::uint64_t, std::uint32_t> verifying_;
  bool source_done_ = false;
  bool stopping_ = false;
  std::uint64_t failed_this_run_ = 0;
  Status first_failure_;

  Mutex verdict_mu_;
  std::vector<std::pair<std::uint64_t, RangeVerdict>> delivered_ EXLR8_GUARDED_BY(verdict_mu_);
};

}  // namespace exlr8
