#include "daemon/hub/rate_limiter.h"

#include <algorithm>

namespace exlr8 {

RateLimiter::RateLimiter(std::uint64_t bytes_per_second, const ::exlr8::Clock& clock)
    : rate_(std::max<std::uint64_t>(bytes_per_second, 1)),
      burst_(std::max(static_cast<double>(rate_) / 20.0, 16384.0)),
      tokens_(burst_),
      last_(clock.Now()) {}

void RateLimiter::RefillLocked(Clock::time_point now) {
  if (now <= last_) return;  // another thread's later `now` came first
  const double elapsed = std::chrono::duration<double>(now - last_).count();
  tokens_ = std::min(burst_, tokens_ + elapsed * static_cast<double>(rate_));
  last_ = now;
}

bool RateLimiter::Exhausted(Clock::time_point now) {
  MutexLock lock(&mu_);
  RefillLocked(now);
  return tokens_ <= 0;
}

void RateLimiter::Consume(std::uint64_t bytes, Clock::time_point now) {
  MutexLock lock(&mu_);
  RefillLocked(now);
  tokens_ -= static_cast<double>(bytes);
}

}  // namespace exlr8
