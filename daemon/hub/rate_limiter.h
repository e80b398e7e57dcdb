// RateLimiter: a byte rate that one or several range fetchers share.
//
// A token bucket: it fills at `bytes_per_second` up to a burst of 50 ms
// worth (at least 16 KiB) and starts full. A fetcher asks Exhausted before it
// takes a chunk from libcurl and pauses the transfer while it is (TCP flow
// control then slows the sender); Consume takes what was received, which
// may drive the bucket below zero by one chunk. An idle stretch earns no
// more than the burst, so a pull that spent a minute planning does not then
// run at full speed for a minute.
//
// Shared, it caps the total: `exlr8d serve --limit-rate` hands one limiter
// to every job, so two pulls at once get the limit between them, not each.
//
// Thread-safe: `mu_` guards the bucket.
#pragma once

#include <chrono>
#include <cstdint>

#include "daemon/base/clock.h"
#include "daemon/base/mutex.h"

namespace exlr8 {

class RateLimiter {
 public:
  using Clock = std::chrono::steady_clock;

  // The bucket starts full at `clock`'s now. REQUIRES: bytes_per_second >
  // 0; every `now` given later is that clock's.
  explicit RateLimiter(std::uint64_t bytes_per_second, const ::exlr8::Clock& clock = ::exlr8::Clock::Real());
  RateLimiter(const RateLimiter&) = delete;
  RateLimiter& operator=(const RateLimiter&) = delete;

  std::uint64_t bytes_per_second() const { return rate_; }

  // True while the bucket is empty (or in debt) at `now`.
  bool Exhausted(Clock::time_point now);
  // Takes `bytes` received at `now`.
  void Consume(std::uint64_t bytes, Clock::time_point now);

 private:
  void RefillLocked(Clock::time_point now) EXLR8_REQUIRES(mu_);

  const std::uint64_t rate_;
  const double burst_;
  Mutex mu_;
  double tokens_ EXLR8_GUARDED_BY(mu_);  // negative = debt
  Clock::time_point last_ EXLR8_GUARDED_BY(mu_);
};

}  // namespace exlr8
