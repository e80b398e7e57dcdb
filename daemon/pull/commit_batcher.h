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
// step's end calls CommitSoon, so its last extents go at once: a planning
// step's index files and headers are durable before the pull goes on, and a
// kill -9 after the step costs none of them.
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
// thread or on the Flush caller. Time (the interval) is the injected
// Clock's.
#pragma once

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <thread>
#include <utility>
#include <vector>

#include "daemon/base/clock.h"
#include "daemon/base/mutex.h"
#include "daemon/cache/cache.h"
#include "format/status.h"

namespace exlr8 {

class CommitBatcher {
 public:
  // `on_commit` runs after each successful commit (e.g. to update the pull's
  // counters in the cache). `recorded`: see Space above; null = not counted.
  // `clock`: null = Clock::Real().
  // REQUIRES: `cache`, `recorded` and `clock` outlive the batcher.
  CommitBatcher(Cache& cache, std::chrono::milliseconds interval, std::uint64_t max_bytes,
                std::function<void()> on_commit = {}, std::atomic<std::uint64_t>* recorded = nullptr,
                Clock* clock = nullptr)
      : cache_(cache),
        clock_(clock != nullptr ? *clock : Clock::Real()),
        interval_(interval),
        max_bytes_(max_bytes),
        on_commit_(std::move(on_commit)),
        recorded_(recorded),
        last_(clock_.Now()) {}

  // Waits for a running background commit. Extents not yet flushed are not
  // recorded (call Flush first to keep them).
  ~CommitBatcher() {
    {
      MutexLock lock(&mu_);
      stop_ = true;
    }
    cv_.SignalAll();
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
  Status Add(const VerifiedExtent& extent, std::uint64_t claimed) EXLR8_EXCLUDES(producer_mu_, mu_) {
    MutexLock producer(&producer_mu_);
    pending_.push_back(extent);
    pending_bytes_ += extent.length;
    pending_claimed_ += claimed;
    return MaybeHandOver(/*may_wait=*/true);
  }

  // Hands everything queued to the committer now, without waiting for it to
  // be durable: the end of a step, whose last extents must not wait for
  // others that will not come. Queued while a commit runs, they go as soon
  // as it ends. Returns the error of an earlier background commit.
  Status CommitSoon() EXLR8_EXCLUDES(producer_mu_, mu_) {
    MutexLock producer(&producer_mu_);
    if (pending_.empty() && prefixes_.empty()) return BackgroundError();
    urgent_ = true;
    return MaybeHandOver(/*may_wait=*/true);
  }

  // Notes that [0, bytes) of `file` arrived in order (a whole-file download);
  // recorded as its durable prefix at the next commit, after the file's
  // fdatasync. The bytes count towards the batch size, so a long download
  // is made durable as it goes, not all at its end.
  Status NotePrefix(FileId file, std::uint64_t bytes) EXLR8_EXCLUDES(producer_mu_, mu_) {
    MutexLock producer(&producer_mu_);
    std::uint64_t& last = noted_[file];
    pending_bytes_ += bytes > last ? bytes - last : 0;
    last = bytes;
    prefixes_[file] = bytes;
    return MaybeHandOver(/*may_wait=*/true);
  }

  // Waits for a running background commit, then commits everything queued on
  // this thread. On failure nothing of the failing batch is recorded and the
  // batch is dropped (its bytes will be fetched again by a rerun).
  Status Flush() EXLR8_EXCLUDES(producer_mu_, mu_) {
    MutexLock producer(&producer_mu_);
    {
      MutexLock lock(&mu_);
      while (busy_) done_cv_.Wait(&mu_);
      queued_ = false;  // taken below
      if (!error_.ok()) return error_;
    }
    last_ = clock_.Now();
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
  // false.
  Status MaybeHandOver(bool may_wait) EXLR8_REQUIRES(producer_mu_) EXLR8_EXCLUDES(mu_) {
    if (pending_.empty() && prefixes_.empty()) return BackgroundError();
    const bool due = urgent_ || pending_bytes_ >= max_bytes_ || clock_.Now() - last_ >= interval_;
    bool wake = true;
    {
      MutexLock lock(&mu_);
      if (!error_.ok()) {  // sticky: nothing more is handed over
        flagged_ = queued_ = false;
        return error_;
      }
      StartWorker();
      if (!due || (busy_ && (!may_wait || pending_bytes_ < kMaxQueuedBatches * max_bytes_))) {
        // Not now: the committer hands it over once it is due, or once the
        // running commit ends, should no producer come back to do it.
        wake = !flagged_;
        flagged_ = true;
        queued_ = true;
      } else {
        while (busy_) done_cv_.Wait(&mu_);
        if (!error_.ok()) return error_;
        last_ = clock_.Now();
        handed_.swap(pending_);
        pending_.clear();
        handed_prefixes_ = TakePrefixes();
        handed_claimed_ = std::exchange(pending_claimed_, 0);
        pending_bytes_ = 0;
        flagged_ = false;
        urgent_ = false;
        queued_ = false;
        busy_ = true;
      }
    }
    if (wake) cv_.SignalAll();
    return Status::Ok();
  }

  void StartWorker() EXLR8_REQUIRES(mu_) {
    if (worker_.joinable() || stop_) return;
    worker_ = std::thread([this] {
      pthread_setname_np(pthread_self(), "exlr8-commit");
      Loop();
    });
  }

  // On the committer thread, holding no lock: hands over what is due, unless
  // a producer holds the producer lock (it then hands it over itself, or is
  // Flush, which commits it).
  void HandOverFromCommitter() EXLR8_EXCLUDES(producer_mu_, mu_) {
    if (!producer_mu_.TryLock()) return;
    (void)MaybeHandOver(/*may_wait=*/false);
    producer_mu_.Unlock();
  }

  // CommitVerified's on_recorded for a batch claimed with `claimed` bytes.
  std::function<void()> Recorded(std::uint64_t claimed) const {
    if (recorded_ == nullptr || claimed == 0) return {};
    return [recorded = recorded_, claimed] { recorded->fetch_add(claimed, std::memory_order_relaxed); };
  }

  std::vector<DurablePrefix> TakePrefixes() EXLR8_REQUIRES(producer_mu_) {
    std::vector<DurablePrefix> out;
    out.reserve(prefixes_.size());
    for (const auto& [file, bytes] : prefixes_) out.push_back({file, bytes});
    prefixes_.clear();
    return out;
  }

  Status BackgroundError() EXLR8_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    return error_;
  }

  void Loop() EXLR8_EXCLUDES(producer_mu_, mu_) {
    // At least 1 ms: an interval of 0 (every extent due) must not spin.
    const auto tick = std::max<std::chrono::milliseconds>(interval_, std::chrono::milliseconds(1));
    mu_.Lock();
    while (true) {
      while (!stop_ && !busy_ && !queued_) cv_.Wait(&mu_);
      if (!busy_ && !stop_) {
        // Extents queued, not due yet: due after one more interval at most.
        const Clock::TimePoint due = clock_.Deadline(tick);
        while (!stop_ && !busy_ && clock_.WaitUntil(&cv_, &mu_, due)) {
        }
        if (!stop_ && !busy_) {
          mu_.Unlock();
          HandOverFromCommitter();
          mu_.Lock();
          continue;
        }
      }
      if (!busy_) break;  // stop_ and nothing handed over
      std::vector<VerifiedExtent> batch;
      batch.swap(handed_);
      std::vector<DurablePrefix> prefixes;
      prefixes.swap(handed_prefixes_);
      const std::uint64_t claimed = std::exchange(handed_claimed_, 0);
      mu_.Unlock();
      Status s = cache_.CommitVerified(batch, prefixes, Recorded(claimed));
      if (s.ok() && on_commit_) on_commit_();
      mu_.Lock();
      if (!s.ok() && error_.ok()) error_ = std::move(s);
      busy_ = false;
      done_cv_.SignalAll();
      if (queued_ && !stop_) {  // what CommitSoon or a full batch left for now
        mu_.Unlock();
        HandOverFromCommitter();
        mu_.Lock();
      }
    }
    mu_.Unlock();
  }

  static constexpr std::uint64_t kMaxQueuedBatches = 4;

  Cache& cache_;
  Clock& clock_;
  std::chrono::milliseconds interval_;
  std::uint64_t max_bytes_;
  std::function<void()> on_commit_;
  std::atomic<std::uint64_t>* recorded_;
  // The producers' state.
  Mutex producer_mu_ EXLR8_ACQUIRED_BEFORE(mu_);
  Clock::TimePoint last_ EXLR8_GUARDED_BY(producer_mu_);
  std::vector<VerifiedExtent> pending_ EXLR8_GUARDED_BY(producer_mu_);
  // Noted since the last hand-over.
  std::map<FileId, std::uint64_t> prefixes_ EXLR8_GUARDED_BY(producer_mu_);
  // The last prefix noted per file.
  std::map<FileId, std::uint64_t> noted_ EXLR8_GUARDED_BY(producer_mu_);
  std::uint64_t pending_bytes_ EXLR8_GUARDED_BY(producer_mu_) = 0;
  std::uint64_t pending_claimed_ EXLR8_GUARDED_BY(producer_mu_) = 0;  // space claimed for pending_
  bool urgent_ EXLR8_GUARDED_BY(producer_mu_) = false;   // CommitSoon: due whatever its size and age
  bool flagged_ EXLR8_GUARDED_BY(producer_mu_) = false;  // queued_ was set for what is pending now
  // Shared with the committer thread.
  Mutex mu_;
  CondVar cv_;       // work handed over, or stop
  CondVar done_cv_;  // a background commit ended
  std::vector<VerifiedExtent> handed_ EXLR8_GUARDED_BY(mu_);
  std::vector<DurablePrefix> handed_prefixes_ EXLR8_GUARDED_BY(mu_);
  std::uint64_t handed_claimed_ EXLR8_GUARDED_BY(mu_) = 0;  // space claimed for handed_
  bool busy_ EXLR8_GUARDED_BY(mu_) = false;
  // Extents wait that were not handed over: the committer watches the clock.
  bool queued_ EXLR8_GUARDED_BY(mu_) = false;
  bool stop_ EXLR8_GUARDED_BY(mu_) = false;
  Status error_ EXLR8_GUARDED_BY(mu_);
  std::thread worker_ EXLR8_GUARDED_BY(mu_);
};

}  // namespace exlr8
