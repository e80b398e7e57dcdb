#include "daemon/pull/pull_space.h"

#include <algorithm>
#include <string>

namespace exlr8 {

PullSpace::PullSpace(Cache& cache, bool make_room, const std::atomic<std::uint64_t>& written)
    : cache_(cache), make_room_(make_room), written_(written) {}

PullSpace::~PullSpace() { Close(); }

void PullSpace::Open() {
  if (!claim_) claim_ = cache_.ClaimSpace([this] { return Outstanding(); });
}

void PullSpace::Close() { claim_.reset(); }

void PullSpace::SetFileset(FilesetId fileset) {
  if (claim_) claim_->SetFileset(fileset);
}

Cache::ClaimedBytes PullSpace::Outstanding() const {
  const std::uint64_t c = claimed_.load(std::memory_order_relaxed);
  const std::uint64_t w = written_.load(std::memory_order_relaxed);
  const std::uint64_t r = recorded_.load(std::memory_order_relaxed);
  return {c - std::min(c, w), c - std::min(c, r)};
}

Status PullSpace::CheckAndClaim(std::uint64_t adds) {
  if (!claim_) return cache_.CheckSpace(adds);
  claimed_.fetch_add(adds, std::memory_order_relaxed);
  Status fits = cache_.CheckSpace(0, claim_.get());
  if (!fits.ok() && fits.code() == StatusCode::kResourceExhausted && make_room_) {
    Result<GcResult> gone = cache_.MakeRoom(0, claim_.get());
    if (gone.ok()) {
      evicted_.insert(evicted_.end(), gone->evicted.begin(), gone->evicted.end());
      bytes_evicted_ += gone->bytes_freed;
      fits = cache_.CheckSpace(0, claim_.get());
      if (!fits.ok())
        fits =
            fits.WithContext("after evicting " + std::to_string(gone->evicted.size()) + " unpinned fileset" +
                             (gone->evicted.size() == 1 ? "" : "s") + " (--make-room)");
    } else {
      fits = gone.status();
    }
  }
  if (!fits.ok()) claimed_.fetch_sub(adds, std::memory_order_relaxed);
  return fits;
}

}  // namespace exlr8
