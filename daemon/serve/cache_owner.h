// CacheOwner: the cache as `exlr8d serve` holds it. The scheduler opens it
// (taking its lock) only while it has work and closes it when nothing is
// queued or running, so `exlr8d pull`, `gc`, `pin` and the systemd units
// still run between jobs. While another process owns the cache, Acquire
// fails with FailedPrecondition (naming the pid) and is not tried again
// before `retry` has passed on the injected Clock (retry_at), so the jobs
// wait without spinning and a test moves the time instead of sleeping.
//
// Thread: the scheduler's thread alone calls every method (no lock). The
// Cache it returns is shared by the running jobs (Cache is thread-safe) and
// stays open until Release, which the scheduler calls only once no job runs.
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include "daemon/base/clock.h"
#include "daemon/cache/cache.h"
#include "format/status.h"

namespace exlr8 {

class CacheOwner {
 public:
  // Opens the cache: Cache::Open, or a test's stand-in.
  using Opener = std::function<Result<std::unique_ptr<Cache>>()>;
  static Opener OpenerFor(std::filesystem::path dir, CacheOptions options);

  // REQUIRES: `clock` outlives the owner; retry > 0.
  CacheOwner(Opener open, Clock& clock, std::chrono::milliseconds retry);
  ~CacheOwner();
  CacheOwner(const CacheOwner&) = delete;
  CacheOwner& operator=(const CacheOwner&) = delete;

  // The open cache, opening it when closed. The error of the last try while
  // it is locked and retry_at() has not come yet (nothing tried). Another
  // process owns it: FailedPrecondition, and the next try waits until
  // retry_at(). Anything else: Cache::Open's error (tried again at once by
  // the next call).
  Result<Cache*> Acquire();
  bool is_open() const { return cache_ != nullptr; }
  // Closes the cache, letting other exlr8d commands take it.
  // REQUIRES: no job uses it any more.
  void Release() { cache_.reset(); }

  // When the next try may come after a locked cache; a time passed when
  // the last try did not find it locked.
  Clock::TimePoint retry_at() const { return retry_at_; }
  std::chrono::milliseconds retry() const { return retry_; }
  // What a queued job shows while the cache is locked (`locked`, the
  // error Acquire returned).
  std::string WaitingMessage(const Status& locked) const;

 private:
  Opener open_;
  Clock& clock_;
  const std::chrono::milliseconds retry_;
  std::unique_ptr<Cache> cache_;
  Status locked_;  // the last try's error while locked
  Clock::TimePoint retry_at_{};
};

}  // namespace exlr8
