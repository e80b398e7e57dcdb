// Collects verified extents and makes them durable in batches: one
// Cache::CommitVerified (fdatasync of the touched files, then one SQLite
// transaction) per interval or per so many bytes, instead of one per half.
//
// Due batches are committed on a background thread, so the fetch loop keeps
// receiving while the disk flushes (a commit of a few hundred MB takes
// 0.1-0.5 s; on the fetch thread that was a stall of every transfer). At
// most one commit runs at a time; extents verified meanwhile wait for the
// next one. If the queued bytes reach 4 x `max_bytes` while a commit runs,
// Add waits for it, which bounds what a crash can lose (a slow disk then
// slows the download instead of the loss growing).
//
// Nothing queued waits much longer than `interval`, even when no more
// extents come (a stream that went quiet, a step of the planner that
// ended): the committer thread hands it over itself once it is due. A
// step's end calls CommitSoon, so its last extents go at once. (Both found
// by review: a pull's index files and headers, the last batch of their
// step, were recorded only when the whole pull ended, so every kill -9 cost
// all of them again.)
//
// Space. With `recorded`, each commit adds to it the space its extents
// were claimed with (Cache::SpaceClaim; Add's `claimed`) in the same step
// that records them (CommitVerified's on_recorded), so the claim's owner
// can count every byte as claimed or as recorded, never both.
//
// Thread rules: Add, NotePrefix, CommitSoon and Flush may be called from
// any thread (the write workers; one producer lock, taken before the
// committer's; the committer only ever tries the producer lock, so it never
// waits on a producer that waits on it); `on_commit` runs on the committer
// thread or on the Flush caller.
#pragma once

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "daemon/cache/cache.h"
#include "format/status.h"

namespace exlr8 {

class CommitBatcher {
 public:
  // `on_commit` runs after each successful commit (e.g. to update the pull's
  // counters in the cache). `recorded`: see Space above; null = not counted.
  // REQUIRES: `cache` and `recorded` outlive the batcher.
  CommitBatcher(Cache& cache, std::chrono::milliseconds interval, std::uint64_t max_bytes,
                std::function<void()> on_commit = {}, std::atomic<std::uint64_t>* recorded = nullptr)
      : cache_(cache),
        interval_(interval),
        max_bytes_(max_bytes),
        on_commit_(std::move(on_commit)),
        recorded_(recorded),
        last_(std::chrono::steady_clock::now()) {}

  // Waits for a running background commit. Extents not yet flushed are not
  // recorded (call Flush first to keep them).
  ~CommitBatcher() {
    {
      std::unique_lock lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (worker_.joinable()) worker_.join();
  }
  CommitBatcher(const CommitBatcher&) = delete;
  CommitBatcher& operator=(const CommitBatcher&) = delete;

  // Queues a verified extent; hands the batch to the committer when due.
  // Returns the error of an earlier background commit, if one failed (that
  // batch is then dropped; a rerun fetches its bytes again).
  // `claimed`: the space claimed for it (its length, but for the part of a
  // whole file resumed from an earlier run's prefix, which was not).
  Status Add(const VerifiedExtent& extent) { return Add(extent, extent.length); }
  Status Add(const VerifiedExtent& extent, std::uint64_t claimed) {
    std::lock_guard producer(producer_mu_);
    pending_.push_back(extent);
    pending_bytes_ += extent.length;
    pending_claimed_ += claimed;
    return MaybeHandOver(/*may_wait=*/true);
  }

  // Hands everything queued to the committer now, without waiting for it to
  // be durable: the end of a step, whose last extents must not wait for
  // others that will not come. Queued while a commit runs, they go as soon
  // as it ends. Returns the error of an earlier background commit.
  Status CommitSoon() {
    std::lock_guard producer(producer_mu_);
    if (pending_.empty() && prefixes_.empty()) return BackgroundError();
    urgent_ = true;
    return MaybeHandOver(/*may_wait=*/true);
  }

  // Notes that [0, bytes) of `file` arrived in order (a whole-file download);
  // recorded as its durable prefix at the next commit, after the file's
  // fdatasync. The bytes count towards the batch size, so a long download
  // is made durable as it goes, not all at its end.
  Status NotePrefix(FileId file, std::uint64_t bytes) {
    std::lock_guard producer(producer_mu_);
    std::uint64_t& last = noted_[file];
    pending_bytes_ += bytes > last ? bytes - last : 0;
    last = bytes;
    prefixes_[file] = bytes;
    return MaybeHandOver(/*may_wait=*/true);
  }

  // Waits for a running background commit, then commits everything queued on
  // this thread. On failure nothing of the failing batch is recorded and the
  // batch is dropped (its bytes will be fetched again by a rerun).
  Status Flush() {
    std::lock_guard producer(producer_mu_);
    {
      std::unique_lock lock(mu_);
      done_cv_.wait(lock, [&] { return !busy_; });
      queued_ = false;  // taken below
      if (!error_.ok()) return error_;
    }
    last_ = std::chrono::steady_clock::now();
    flagged_ = false;
    urgent_ = false;
    if (pending_.empty() && prefixes_.empty()) return Status::Ok();
    std::vector<VerifiedExtent> batch;
    batch.swap(pending_);
    const std::vector<DurablePrefix> prefixes = TakePrefixes();
    pending_bytes_ = 0;
    const std::uint64_t claimed = std::exchange(pending_claimed_, 0);
    EXLR8_RETURN_IF_ERROR(cache_.CommitVerified(batch, prefixes, Recorded(claimed)));
    if (on_commit_) on_commit_();
    return Status::Ok();
  }

 private:
  // Hands what is queued to the committer if it is due (by bytes, by time,
  // or CommitSoon). With `may_wait` (a producer), waits for a running
  // commit when 4 batches are queued behind it; the committer itself passes
  // false. REQUIRES: producer_mu_ held.
  Status MaybeHandOver(bool may_wait) {
    if (pending_.empty() && prefixes_.empty()) return BackgroundError();
    const bool due =
        urgent_ || pending_bytes_ >= max_bytes_ || std::chrono::steady_clock::now() - last_ >= interval_;
    std::unique_lock lock(mu_);
    if (!error_.ok()) {  // sticky: nothing more is handed over
      flagged_ = queued_ = false;
      return error_;
    }
    StartWorker();
    if (!due || (busy_ && (!may_wait || pending_bytes_ < kMaxQueuedBatches * max_bytes_))) {
      // Not now: the committer hands it over once it is due, or once the
      // running commit ends, should no producer come back to do it.
      const bool wake = !flagged_;
      flagged_ = true;
      queued_ = true;
      Status error = error_;
      lock.unlock();
      if (wake) cv_.notify_all();
      return error;
    }
    if (busy_) done_cv_.wait(lock, [&] { return !busy_; });
    if (!error_.ok()) return error_;
    last_ = std::chrono::steady_clock::now();
    handed_.swap(pending_);
    pending_.clear();
    handed_prefixes_ = TakePrefixes();
    handed_claimed_ = std::exchange(pending_claimed_, 0);
    pending_bytes_ = 0;
    flagged_ = false;
    urgent_ = false;
    queued_ = false;
    busy_ = true;
    lock.unlock();
    cv_.notify_all();
    return Status::Ok();
  }

  // REQUIRES: mu_ held.
  void StartWorker() {
    if (worker_.joinable() || stop_) return;
    worker_ = std::thread([this] {
      pthread_setname_np(pthread_self(), "exlr8-commit");
      Loop();
    });
  }

  // On the committer thread, holding no lock: hands over what is due, unless
  // a producer holds the producer lock (it then hands it over itself, or is
  // Flush, which commits it).
  void HandOverFromCommitter() {
    std::unique_lock producer(producer_mu_, std::try_to_lock);
    if (producer.owns_lock()) (void)MaybeHandOver(/*may_wait=*/false);
  }

  // CommitVerified's on_recorded for a batch claimed with `claimed` bytes.
  std::function<void()> Recorded(std::uint64_t claimed) const {
    if (recorded_ == nullptr || claimed == 0) return {};
    return [recorded = recorded_, claimed] { recorded->fetch_add(claimed, std::memory_order_relaxed); };
  }

  std::vector<DurablePrefix> TakePrefixes() {
    std::vector<DurablePrefix> out;
    out.reserve(prefixes_.size());
    for (const auto& [file, bytes] : prefixes_) out.push_back({file, bytes});
    prefixes_.clear();
    return out;
  }

  Status BackgroundError() {
    std::unique_lock lock(mu_);
    return error_;
  }

  void Loop() {
    // At least 1 ms: an interval of 0 (every extent due) must not spin.
    const auto tick = std::max<std::chrono::milliseconds>(interval_, std::chrono::milliseconds(1));
    std::unique_lock lock(mu_);
    while (true) {
      cv_.wait(lock, [&] { return stop_ || busy_ || queued_; });
      if (!busy_ && !stop_) {
        // Extents queued, not due yet: due after one more interval at most.
        if (!cv_.wait_for(lock, tick, [&] { return stop_ || busy_; })) {
          lock.unlock();
          HandOverFromCommitter();
          lock.lock();
          continue;
        }
      }
      if (!busy_) return;  // stop_ and nothing handed over
      std::vector<VerifiedExtent> batch;
      batch.swap(handed_);
      std::vector<DurablePrefix> prefixes;
      prefixes.swap(handed_prefixes_);
      const std::uint64_t claimed = std::exchange(handed_claimed_, 0);
      lock.unlock();
      Status s = cache_.CommitVerified(batch, prefixes, Recorded(claimed));
      if (s.ok() && on_commit_) on_commit_();
      lock.lock();
      if (!s.ok() && error_.ok()) error_ = std::move(s);
      busy_ = false;
      done_cv_.notify_all();
      if (queued_ && !stop_) {  // what CommitSoon or a full batch left for now
        lock.unlock();
        HandOverFromCommitter();
        lock.lock();
      }
    }
  }

  static constexpr std::uint64_t kMaxQueuedBatches = 4;

  Cache& cache_;
  std::chrono::milliseconds interval_;
  std::uint64_t max_bytes_;
  std::function<void()> on_commit_;
  std::atomic<std::uint64_t>* recorded_;
  // The producers' state, under producer_mu_.
  std::mutex producer_mu_;
  std::chrono::steady_clock::time_point last_;
  std::vector<VerifiedExtent> pending_;
  std::map<FileId, std::uint64_t> prefixes_;  // noted since the last hand-over
  std::map<FileId, std::uint64_t> noted_;     // last prefix noted per file
  std::uint64_t pending_bytes_ = 0;
  std::uint64_t pending_claimed_ = 0;  // space claimed for pending_
  bool urgent_ = false;   // CommitSoon: due whatever its size and age
  bool flagged_ = false;  // queued_ was set for what is pending now
  // Shared with the committer thread, under mu_.
  std::mutex mu_;
  std::condition_variable cv_;       // work handed over, or stop
  std::condition_variable done_cv_;  // a background commit ended
  std::vector<VerifiedExtent> handed_;
  std::vector<DurablePrefix> handed_prefixes_;
  std::uint64_t handed_claimed_ = 0;  // space claimed for handed_
  bool busy_ = false;
  bool queued_ = false;  // extents wait that were not handed over: the committer watches the clock
  bool stop_ = false;
  Status error_;
  std::thread worker_;
};

}  // namespace exlr8
