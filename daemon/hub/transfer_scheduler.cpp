#include "daemon/hub/transfer_scheduler.h"

#include <algorithm>

namespace exlr8 {

using std::chrono::milliseconds;

TransferScheduler::TransferScheduler(Clock& clock, RetryPolicy policy, std::uint32_t seed)
    : clock_(clock), policy_(policy), rng_(seed) {}

void TransferScheduler::Clear() {
  for (auto& q : ready_) q.clear();
  while (!timers_.empty()) timers_.pop();
  resolves_not_before_ = TimePoint();
}

void TransferScheduler::MakeReady(std::uint32_t job, std::uint8_t priority) {
  ready_[std::min<std::size_t>(priority, kLevels - 1)].push_back(job);
}

bool TransferScheduler::HasReady() const {
  return std::any_of(ready_.begin(), ready_.end(), [](const auto& q) { return !q.empty(); });
}

std::deque<std::uint32_t>& TransferScheduler::Top() {
  for (std::size_t i = kLevels; i-- > 1;)
    if (!ready_[i].empty()) return ready_[i];
  return ready_[0];
}

const std::deque<std::uint32_t>& TransferScheduler::Top() const {
  return const_cast<TransferScheduler*>(this)->Top();
}

void TransferScheduler::RetryAt(std::uint32_t job, std::uint8_t priority, TimePoint when) {
  timers_.push(Timer{when, job, priority});
}

milliseconds TransferScheduler::Backoff(int attempt) {
  const int shift = std::clamp(attempt - 1, 0, 20);
  std::int64_t cap = policy_.retry_base.count();
  for (int i = 0; i < shift && cap < policy_.retry_cap.count(); ++i) cap *= 2;
  cap = std::max<std::int64_t>(1, std::min<std::int64_t>(cap, policy_.retry_cap.count()));
  std::uniform_int_distribution<std::int64_t> jitter(0, cap / 2);
  return milliseconds(cap - cap / 2 + jitter(rng_));
}

std::optional<TransferScheduler::TimePoint> TransferScheduler::AfterFailedTry(int attempts) {
  if (attempts >= policy_.max_attempts) return std::nullopt;
  return Now() + Backoff(attempts);
}

TransferScheduler::Throttle TransferScheduler::AfterThrottle(int throttled,
                                                             std::optional<milliseconds> wait) {
  Throttle t;
  if (wait && *wait > policy_.max_throttle_wait) {
    t.kind = Throttle::Kind::kWaitTooLong;
  } else if (throttled > policy_.max_throttled) {
    t.kind = Throttle::Kind::kTooOften;
  } else {
    t.when = Now() + (wait ? *wait : Backoff(throttled));
  }
  return t;
}

void TransferScheduler::PauseResolvesUntil(TimePoint until) {
  resolves_not_before_ = std::max(resolves_not_before_, until);
}

milliseconds TransferScheduler::PollTimeout(bool resolves_waiting, bool transfers_paused,
                                            milliseconds limit) const {
  const TimePoint now = Now();
  TimePoint next = now + limit;
  if (!timers_.empty()) next = std::min(next, timers_.top().when);
  if (resolves_waiting && resolves_not_before_ > now) next = std::min(next, resolves_not_before_);
  if (transfers_paused) next = std::min(next, now + milliseconds(2));
  const auto ms = std::chrono::duration_cast<milliseconds>(next - now).count();
  return milliseconds(std::clamp<std::int64_t>(ms, 0, limit.count()));
}

}  // namespace exlr8
