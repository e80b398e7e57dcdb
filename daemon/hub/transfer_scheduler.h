// TransferScheduler: which range request starts next, and when a failed or
// throttled one may try again, in the time of an injected Clock.
//
// RangeFetcher owns one; it holds the fetch's waiting lines:
//  - the ready line: requests that may start now, the highest
//    RangeRequest::priority first, in arrival order within one priority;
//  - the retry timers: requests waiting out a backoff or a server's
//    Retry-After, moved to the ready line once the clock passes their time
//    (PromoteDue);
//  - the resolve pause: after a resolve was throttled or failed, no resolve
//    of any file starts until the clock passes it (the hub rate-limits
//    /resolve/ as a whole, so one file's 429 speaks for every file).
// and the retry policy: exponential backoff with jitter, capped; how many
// tries and throttles a request gets; how long a server may ask to wait.
//
// Requests are named by the caller's index (a job slot); the scheduler
// knows nothing of HTTP, files or consumers, and it never sleeps: the
// caller asks PollTimeout how long it may wait for the network.
//
// Thread rules: not thread-safe; RangeFetcher::Run's thread alone calls it.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <queue>
#include <random>
#include <utility>
#include <vector>

#include "daemon/base/clock.h"

namespace exlr8 {

struct RetryPolicy {
  int max_attempts = 8;    // failed tries per request before it fails
  int max_throttled = 32;  // 429/503 answers per request tolerated
  // Backoff before try n+1 after n failures: base * 2^(n-1), capped, the
  // upper half of it random jitter.
  std::chrono::milliseconds retry_base{200};
  std::chrono::milliseconds retry_cap{std::chrono::seconds(20)};
  // A server-requested wait above this fails the request instead.
  std::chrono::milliseconds max_throttle_wait{std::chrono::minutes(5)};
};

class TransferScheduler {
 public:
  using TimePoint = Clock::TimePoint;

  // What to do after a 429/503 answer.
  struct Throttle {
    enum class Kind : std::uint8_t {
      kRetryAt,      // try again at `when`
      kWaitTooLong,  // the server asks for more than max_throttle_wait: fail
      kTooOften,     // throttled more than max_throttled times: fail
    };
    Kind kind = Kind::kRetryAt;
    TimePoint when;
  };

  // REQUIRES: `clock` outlives the scheduler. `seed` seeds the jitter.
  TransferScheduler(Clock& clock, RetryPolicy policy, std::uint32_t seed = std::random_device{}());

  TimePoint Now() const { return clock_.Now(); }
  const RetryPolicy& policy() const { return policy_; }

  // Empties the ready line and the timers and lifts the resolve pause (a
  // new Run, or a cancelled one).
  void Clear();

  // ---- the ready line
  void MakeReady(std::uint32_t job, std::uint8_t priority);
  bool HasReady() const;
  // REQUIRES: HasReady().
  std::uint32_t FrontReady() const { return Top().front(); }
  void PopReady() { Top().pop_front(); }

  // ---- retry timers
  // `job` waits until `when`, then joins the ready line at `priority`.
  void RetryAt(std::uint32_t job, std::uint8_t priority, TimePoint when);
  // Moves every timer that is due to the ready line, for which
  // `still_waiting(job)` is true (a job that ended meanwhile is dropped).
  template <typename StillWaiting>
  void PromoteDue(StillWaiting still_waiting) {
    const TimePoint now = Now();
    while (!timers_.empty() && timers_.top().when <= now) {
      const Timer t = timers_.top();
      timers_.pop();
      if (still_waiting(t.job)) MakeReady(t.job, t.priority);
    }
  }

  // ---- policy
  // A random backoff for try `attempt` + 1 (attempt >= 1).
  std::chrono::milliseconds Backoff(int attempt);
  // A try failed; `attempts` counts the failed tries including this one.
  // When to try again, or nullopt when the tries are used up.
  std::optional<TimePoint> AfterFailedTry(int attempts);
  // A 429/503; `throttled` counts them for this request including this one;
  // `wait` is the server's (Retry-After or RateLimit), if it named one.
  Throttle AfterThrottle(int throttled, std::optional<std::chrono::milliseconds> wait);

  // ---- the resolve pause
  // No resolve starts before `until` (a later pause never shortens one).
  void PauseResolvesUntil(TimePoint until);
  bool ResolvesPaused() const { return Now() < resolves_not_before_; }

  // How long the caller may wait for the network before the scheduler has
  // something to do, at most `limit`: until the next timer, the end of the
  // resolve pause (if `resolves_waiting`), or 2 ms (if `transfers_paused`,
  // held back by the bandwidth limit or their consumer).
  std::chrono::milliseconds PollTimeout(
      bool resolves_waiting, bool transfers_paused,
      std::chrono::milliseconds limit = std::chrono::milliseconds(100)) const;

 private:
  static constexpr std::size_t kLevels = 4;  // RangeRequest::priority 0-3
  struct Timer {
    TimePoint when;
    std::uint32_t job;
    std::uint8_t priority;
    bool operator>(const Timer& o) const { return when > o.when || (when == o.when && job > o.job); }
  };
  std::deque<std::uint32_t>& Top();
  const std::deque<std::uint32_t>& Top() const;

  Clock& clock_;
  const RetryPolicy policy_;
  std::minstd_rand rng_;
  std::array<std::deque<std::uint32_t>, kLevels> ready_;
  std::priority_queue<Timer, std::vector<Timer>, std::greater<>> timers_;
  TimePoint resolves_not_before_{};
};

}  // namespace exlr8
