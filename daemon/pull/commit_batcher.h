// Collects verified extents and makes them durable in batches: one
// Cache::CommitVerified (fdatasync of the touched files, then one SQLite
// transaction) per interval or per so many bytes, instead of one per half.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

#include "daemon/cache/cache.h"
#include "format/status.h"

namespace exlr8 {

class CommitBatcher {
 public:
  // `on_commit` runs after each successful commit (e.g. to update the pull's
  // counters in the cache). REQUIRES: `cache` outlives the batcher.
  CommitBatcher(Cache& cache, std::chrono::milliseconds interval, std::uint64_t max_bytes,
                std::function<void()> on_commit = {})
      : cache_(cache), interval_(interval), max_bytes_(max_bytes), on_commit_(std::move(on_commit)),
        last_(std::chrono::steady_clock::now()) {}

  // Queues a verified extent; commits if the batch is due.
  Status Add(const VerifiedExtent& extent) {
    pending_.push_back(extent);
    pending_bytes_ += extent.length;
    if (pending_bytes_ >= max_bytes_ || std::chrono::steady_clock::now() - last_ >= interval_) return Flush();
    return Status::Ok();
  }

  // Commits everything queued. On failure nothing of the batch is recorded
  // and the batch is dropped (its bytes will be fetched again by a rerun).
  Status Flush() {
    last_ = std::chrono::steady_clock::now();
    if (pending_.empty()) return Status::Ok();
    std::vector<VerifiedExtent> batch;
    batch.swap(pending_);
    pending_bytes_ = 0;
    EXLR8_RETURN_IF_ERROR(cache_.CommitVerified(batch));
    if (on_commit_) on_commit_();
    return Status::Ok();
  }

 private:
  Cache& cache_;
  std::chrono::milliseconds interval_;
  std::uint64_t max_bytes_;
  std::function<void()> on_commit_;
  std::chrono::steady_clock::time_point last_;
  std::vector<VerifiedExtent> pending_;
  std::uint64_t pending_bytes_ = 0;
};

}  // namespace exlr8
