// OffloadConsumer: runs a RangeConsumer's per-byte work (pwrite into the
// cache, XXH64 / SHA-256 of every byte) on a worker thread, so the fetch
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
// Every call reaches the inner consumer in the order the fetcher made it,
// one at a time (NextRequest from the fetch thread under the same mutex as
// the worker's calls), so the inner consumer needs no locking of its own.
// Memory is bounded: at most `max_queued_bytes` of copied chunks wait for
// the worker (then OnData blocks: backpressure onto the sockets).
//
// A write error (disk full) found by the worker fails its request: the next
// OnData of that request returns the error (so the fetcher stops the
// transfer), or OnComplete's verdict is Fail if it already ended.
//
// Use: construct around the consumer, pass it to fetcher.Run, then call
// Drain() before reading anything the inner consumer produced.
#pragma once

#include <array>
#include <condition_variable>
#include <functional>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <span>
#include <thread>
#include <unordered_map>
#include <vector>

#include "daemon/hub/range_fetcher.h"
#include "format/status.h"

namespace exlr8 {

class OffloadConsumer final : public RangeConsumer {
 public:
  // REQUIRES: `inner` and `fetcher` outlive this object; `fetcher` is the
  // one this consumer is run by.
  // `urgent` (optional) picks the requests whose calls the worker handles
  // before all others (each request's calls stay in order: a request is
  // urgent or not for its whole life). `max_queued_bytes` applies to the
  // urgent and the other requests separately.
  OffloadConsumer(RangeConsumer& inner, RangeFetcher& fetcher, std::size_t max_queued_bytes = 32u << 20,
                  std::function<bool(std::uint64_t id)> urgent = {});
  ~OffloadConsumer() override;  // drains and joins the worker
  OffloadConsumer(const OffloadConsumer&) = delete;
  OffloadConsumer& operator=(const OffloadConsumer&) = delete;

  bool NextRequest(RangeRequest* out) override;
  bool MayHaveMore() override;
  // False while the request's lane is full (other than urgent requests,
  // which wait in OnData instead): the fetcher holds that transfer back
  // and keeps receiving the others.
  bool ReadyFor(std::uint64_t id, std::size_t bytes) override;
  Status OnData(std::uint64_t id, std::uint64_t offset, std::span<const std::byte> bytes) override;
  RangeVerdict OnComplete(std::uint64_t id) override;
  void OnReset(std::uint64_t id) override;
  void OnFailed(std::uint64_t id, const Status& status) override;

  // Waits until the worker has handled everything queued so far. After
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

  struct Lane {
    std::deque<Message> queue;
    std::size_t queued_bytes = 0;
  };
  enum : std::size_t { kNormal = 0, kUrgent = 1 };

  Lane& LaneOf(std::uint64_t id);  // REQUIRES: mu_ held
  void Push(Message m);
  void Loop();
  void Handle(Message& m);

  RangeConsumer& inner_;
  RangeFetcher& fetcher_;
  const std::size_t max_queued_bytes_;
  const std::function<bool(std::uint64_t)> urgent_;

  std::mutex inner_mu_;  // one call into inner_ at a time

  mutable std::mutex mu_;  // guards everything below
  std::condition_variable work_cv_;   // worker: something queued / stop
  std::condition_variable space_cv_;  // producers: bytes freed / drained
  std::array<Lane, 2> lanes_;
  std::vector<std::vector<std::byte>> spare_;  // recycled chunk buffers
  std::size_t peak_queued_bytes_ = 0;
  bool busy_ = false;         // the worker is handling a message
  bool worker_idle_ = false;  // the worker waits on work_cv_
  bool producer_waiting_ = false;  // OnData or Drain waits on space_cv_
  bool stop_ = false;
  // Requests whose data the worker could not take (e.g. disk full), with
  // the error; cleared when the worker sees the request end.
  std::unordered_map<std::uint64_t, Status> failed_;

  std::thread worker_;
};

}  // namespace exlr8
