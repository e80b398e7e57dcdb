// OffloadConsumer: runs a RangeConsumer's per-byte work (pwrite into the
// cache, XXH64 / SHA-256 of every byte) on worker threads, so the fetch
// thread only receives and copies.
//
// Why: measured on the pull benchmark (docs/BENCHMARKS.md), one thread that
// receives, writes and hashes every byte was the bottleneck: it ran at 100%
// of a core while the machine had the better part of another core idle.
// With the work split in two, receiving and writing/hashing overlap.
//
//   fetch thread (RangeFetcher::Run)        worker thread
//   ------------------------------          -------------
//   OnData: copy the chunk into a buffer,   inner.OnData (pwrite + hash)
//           queue it                        ...
//   OnComplete: queue, return Pending       inner.OnComplete -> verdict
//   (acts on the verdict when delivered) <- fetcher.Deliver(id, verdict)
//   OnReset / OnFailed: queued, in order    inner.OnReset / inner.OnFailed
//
// With several workers (measured on a 16-core machine: one worker writing
// and hashing every byte was the pull's bottleneck, at ~1 GB/s), each
// request belongs to one worker: its calls reach the inner consumer in the
// order the fetcher made them, one at a time, while calls for different
// requests run concurrently on different workers, and NextRequest (fetch
// thread) concurrently with both. With one worker, every call is made one
// at a time (NextRequest under the same mutex as the worker's calls), so
// the inner consumer needs no locking of its own.
// A request's chunks are gathered into its own open message on the fetch
// thread, without a lock, and queued once 256 KiB are there or the request
// ends: one lock and one wake-up per message, not per 16 KiB chunk.
// Memory is bounded: at most `max_queued_bytes` of messages wait for the
// worker per lane (then OnData blocks: backpressure onto the sockets), plus
// one open message per transfer.
//
// A write error (disk full) found by the worker fails its request: the next
// OnData of that request returns the error (so the fetcher stops the
// transfer), or OnComplete's verdict is Fail if it already ended.
//
// Use: construct around the consumer, pass it to fetcher.Run, then call
// Drain() before reading anything the inner consumer produced.
#pragma once

#include <array>
#include <atomic>
#include <functional>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <thread>
#include <unordered_map>
#include <vector>

#include "daemon/base/mutex.h"
#include "daemon/hub/range_fetcher.h"
#include "format/status.h"

namespace exlr8 {

class OffloadConsumer final : public RangeConsumer {
 public:
  // REQUIRES: `inner` and `fetcher` outlive this object; `fetcher` is the
  // one this consumer is run by.
  // `lane` (optional) sorts requests into lanes 0..kLanes-1 (0 when not
  // given); the worker handles the calls of the highest non-empty lane
  // first (each request's calls stay in order: a request keeps its lane for
  // its whole life). Lane 0 is the only one whose transfers are held back
  // when full (ReadyFor); the others wait in OnData, and so do lane 0's
  // multiplexed (HTTP/2) transfers, which the fetcher never holds back.
  // `max_queued_bytes` applies to each lane separately.
  // `workers` >= 1 threads (see above for what more than one asks of
  // `inner`).
  static constexpr int kLanes = 3;
  OffloadConsumer(RangeConsumer& inner, RangeFetcher& fetcher, std::size_t max_queued_bytes = 32u << 20,
                  std::function<int(std::uint64_t id)> lane = {}, int workers = 1);
  ~OffloadConsumer() override;  // drains and joins the workers
  OffloadConsumer(const OffloadConsumer&) = delete;
  OffloadConsumer& operator=(const OffloadConsumer&) = delete;

  bool NextRequest(RangeRequest* out) override;
  bool MayHaveMore() override;
  // False while lane 0 is full, for its requests (the other lanes wait in
  // OnData instead), or when the inner consumer says so for them: the
  // fetcher holds that transfer back and keeps receiving the others. The
  // inner consumer's ReadyFor is called on the fetch thread, concurrently
  // with its other calls on the worker: it must be thread-safe.
  bool ReadyFor(std::uint64_t id, std::size_t bytes) override;
  Status OnData(std::uint64_t id, std::uint64_t offset, std::span<const std::byte> bytes) override;
  RangeVerdict OnComplete(std::uint64_t id) override;
  void OnReset(std::uint64_t id) override;
  void OnFailed(std::uint64_t id, const Status& status) override;

  // Waits until the workers have handled everything queued so far. After
  // fetcher.Run returned and Drain returned, the inner consumer is idle and
  // its state may be read from this thread.
  void Drain();

  // The most bytes that waited for the worker at once (tests, diagnostics).
  std::size_t peak_queued_bytes() const;

 private:
  enum class Op : std::uint8_t { kData, kComplete, kReset, kFailed };
  struct Message {
    Op op;
    std::uint64_t id = 0;
    std::uint64_t offset = 0;
    std::vector<std::byte> bytes;  // kData
    Status status;                 // kFailed
  };

  // A worker thread and its queues, one per lane. Every field but `thread`
  // is read and written under the OffloadConsumer's mu_ (the analysis
  // cannot name an enclosing object's lock; the functions that touch them
  // REQUIRE mu_).
  struct Worker {
    std::array<std::deque<Message>, kLanes> lanes;
    CondVar cv;          // something queued / stop
    bool idle = false;   // waits on cv
    bool busy = false;   // handling a message
    std::thread thread;
    bool Empty() const {
      return std::all_of(lanes.begin(), lanes.end(), [](const auto& q) { return q.empty(); });
    }
  };
  std::size_t LaneIndex(std::uint64_t id) const;
  Worker& WorkerOf(std::uint64_t id) { return *workers_[(id * 0x9E3779B97F4A7C15ull >> 32) % workers_.size()]; }
  bool Idle() const EXLR8_REQUIRES(mu_);  // every queue empty, no worker busy
  void Push(Message m) EXLR8_EXCLUDES(mu_);
  // Queues the open message of `id` (if any bytes), waiting for room in its
  // lane; leaves `open` empty, with a recycled buffer if `refill`.
  void PushData(std::uint64_t id, std::vector<std::byte>& open, std::uint64_t open_offset, bool refill)
      EXLR8_EXCLUDES(mu_);
  void Loop(Worker& w) EXLR8_EXCLUDES(mu_);
  void Handle(Message& m) EXLR8_EXCLUDES(mu_);
  // The error the worker met earlier for request `id`, if any.
  std::optional<Status> FailureOf(std::uint64_t id) EXLR8_EXCLUDES(mu_);
  // Runs `call` into inner_, under inner_mu_ when serialize_.
  template <typename Call>
  auto CallInner(Call call);

  RangeConsumer& inner_;
  RangeFetcher& fetcher_;
  const std::size_t max_queued_bytes_;
  const std::function<int(std::uint64_t)> lane_;

  // One worker: every call into inner_ is made under inner_mu_, so inner_
  // sees one call at a time (NextRequest and MayHaveMore, from the fetch
  // thread, take it always).
  const bool serialize_;
  Mutex inner_mu_;

  mutable Mutex mu_;
  CondVar space_cv_;  // producers: bytes freed / drained
  // Made in the constructor, then only read (the Workers' fields: mu_).
  std::vector<std::unique_ptr<Worker>> workers_;
  // Bytes queued per lane over all workers: written under mu_, read without
  // it by ReadyFor (a hint).
  std::array<std::atomic<std::size_t>, kLanes> queued_bytes_{};
  std::vector<std::vector<std::byte>> spare_ EXLR8_GUARDED_BY(mu_);  // recycled chunk buffers
  std::size_t peak_queued_bytes_ EXLR8_GUARDED_BY(mu_) = 0;
  bool producer_waiting_ EXLR8_GUARDED_BY(mu_) = false;  // OnData or Drain waits on space_cv_
  bool stop_ EXLR8_GUARDED_BY(mu_) = false;
  // Requests whose data the worker could not take (e.g. disk full), with
  // the error; cleared when the worker sees the request end.
  std::unordered_map<std::uint64_t, Status> failed_ EXLR8_GUARDED_BY(mu_);
  std::atomic<std::size_t> failed_count_{0};  // failed_.size(), read without mu_

  // The fetch thread's open message per request in flight (fetch thread only).
  struct Open {
    std::uint64_t offset = 0;
    std::vector<std::byte> bytes;
  };
  std::unordered_map<std::uint64_t, Open> open_;
};

}  // namespace exlr8
