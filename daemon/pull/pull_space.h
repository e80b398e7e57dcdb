// PullSpace: the space one pull claims in the Cache, so that other pulls
// running on it at once count it as taken, and what --make-room evicted to
// find it.
//
// Every byte the pull writes is claimed once, before it is fetched, so at
// the end claimed() equals the bytes written. Those written and verified
// since (`written`, the job's counter) need no more free space; those
// recorded since count as the cache's own bytes, and recorded() grows under
// the cache's index lock as they are recorded (the CommitBatchers' commits),
// so no check counts a byte both as recorded and as claimed, nor as
// neither.
//
// Thread rules: Open(), Close(), SetFileset(), CheckAndClaim(), Adjust() and
// the eviction accessors on the pull's Run() thread only (`evicted_` and
// `bytes_evicted_` are that thread's, unlocked). The cache calls
// Outstanding() from any thread, under its own lock; the commit threads add
// to *recorded_counter(). Both read only atomics.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "daemon/cache/cache.h"
#include "format/status.h"

namespace exlr8 {

class PullSpace {
 public:
  // `written`: the pull's bytes written and verified so far. `make_room`:
  // PullOptions::make_room. REQUIRES: `cache` and `written` outlive this.
  PullSpace(Cache& cache, bool make_room, const std::atomic<std::uint64_t>& written);
  ~PullSpace();
  PullSpace(const PullSpace&) = delete;
  PullSpace& operator=(const PullSpace&) = delete;

  // Registers the claim with the cache (a dry run, which writes nothing,
  // never opens one). Close() takes it back: a pull that ended (or failed)
  // claims nothing.
  void Open();
  void Close();
  // The fileset the pull writes: no eviction takes it while the claim is
  // open (Cache::SpaceClaim::SetFileset). Nothing when not open.
  void SetFileset(FilesetId fileset);

  // Claims `adds` more bytes, then checks that all this pull claimed and
  // has not recorded fits besides what other pulls claimed (the cache's
  // sums: the claim is never read apart from the recorded bytes). A
  // shortfall takes the bytes back: ResourceExhausted. With make_room, a
  // shortfall first evicts what gc would (never this fileset: the claim
  // names it), then is checked again. Not open: only checks that `adds`
  // fits (Cache::CheckSpace).
  Status CheckAndClaim(std::uint64_t adds);
  // Adds `delta` (modulo 2^64, so it may take bytes back) to the claim,
  // without a check: what a step wrote beyond (or short of) its estimate.
  void Adjust(std::uint64_t delta) { claimed_.fetch_add(delta, std::memory_order_relaxed); }

  // What the cache counts as taken by this pull (SpaceClaim's `remaining`).
  Cache::ClaimedBytes Outstanding() const;
  // For the CommitBatchers: the bytes they recorded.
  std::atomic<std::uint64_t>* recorded_counter() { return &recorded_; }

  std::uint64_t claimed() const { return claimed_.load(); }
  const std::vector<FilesetId>& evicted() const { return evicted_; }
  std::uint64_t bytes_evicted() const { return bytes_evicted_; }

 private:
  Cache& cache_;
  const bool make_room_;
  const std::atomic<std::uint64_t>& written_;
  std::atomic<std::uint64_t> claimed_{0};
  std::atomic<std::uint64_t> recorded_{0};
  std::unique_ptr<Cache::SpaceClaim> claim_;  // while open
  std::vector<FilesetId> evicted_;            // Run() thread
  std::uint64_t bytes_evicted_ = 0;           // Run() thread
};

}  // namespace exlr8
