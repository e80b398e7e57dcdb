#include "tests/daemon/base/fake_clock.h"

#include <algorithm>

namespace exlr8::testing {
namespace {

// How often a thread blocked in WaitUntil looks whether an Advance reached
// its deadline, for the one case the signal cannot reach it: the Advance
// came after it registered but before it blocked on its CondVar.
constexpr std::chrono::milliseconds kRecheck{2};

}  // namespace

FakeClock::FakeClock(std::int64_t unix_ms)
    : now_(std::chrono::hours(1)), unix_(std::chrono::milliseconds(unix_ms)) {}

Clock::TimePoint FakeClock::Now() const {
  MutexLock l(&mu_);
  return now_;
}

std::int64_t FakeClock::NowUnixMs() const {
  MutexLock l(&mu_);
  return std::chrono::duration_cast<std::chrono::milliseconds>(unix_).count();
}

void FakeClock::SleepUntil(TimePoint deadline) {
  MutexLock l(&mu_);
  if (now_ >= deadline) return;
  Waiter w{deadline, nullptr};
  AddWaiter(&w);
  while (now_ < deadline) changed_.Wait(&mu_);
  RemoveWaiter(&w);
}

bool FakeClock::WaitUntil(CondVar* cv, Mutex* mu, TimePoint deadline) {
  Waiter w{deadline, cv};
  {
    MutexLock l(&mu_);
    if (now_ >= deadline) return false;
    AddWaiter(&w);
  }
  // One timed wait, then back to the caller, as a spurious wake when
  // nothing happened: a signal that coincides with the recheck's timeout
  // may be reported as a timeout, and only the caller's own condition
  // (which its signaller set) tells that it came.
  bool reached = false;
  {
    MutexLock l(&mu_);
    reached = w.reached;
  }
  if (!reached) cv->WaitFor(mu, kRecheck);  // signalled (by the caller's code or by Advance), or timed out
  MutexLock l(&mu_);
  RemoveWaiter(&w);
  return now_ < deadline;
}

void FakeClock::Advance(Duration d) {
  MutexLock l(&mu_);
  now_ += d;
  unix_ += d;
  for (Waiter* w : waiters_) {
    if (w->reached || now_ < w->deadline) continue;
    w->reached = true;
    // Without the caller's mutex: taking it here could deadlock with a
    // caller that holds it while calling Now(). kRecheck covers the wake
    // this can miss.
    if (w->cv != nullptr) w->cv->SignalAll();
  }
  changed_.SignalAll();
}

void FakeClock::SetUnixMs(std::int64_t unix_ms) {
  MutexLock l(&mu_);
  unix_ = std::chrono::milliseconds(unix_ms);
}

std::size_t FakeClock::waiters() const {
  MutexLock l(&mu_);
  return waiters_.size();
}

std::optional<Clock::TimePoint> FakeClock::NextDeadline() const {
  MutexLock l(&mu_);
  std::optional<TimePoint> next;
  for (const Waiter* w : waiters_)
    if (!next || w->deadline < *next) next = w->deadline;
  return next;
}

bool FakeClock::AwaitWaiters(std::size_t n, std::chrono::milliseconds real_limit) const {
  const auto give_up = std::chrono::steady_clock::now() + real_limit;
  MutexLock l(&mu_);
  while (waiters_.size() < n)
    if (!changed_.WaitUntil(&mu_, give_up)) return waiters_.size() >= n;
  return true;
}

void FakeClock::AddWaiter(Waiter* w) {
  waiters_.push_back(w);
  changed_.SignalAll();
}

void FakeClock::RemoveWaiter(Waiter* w) {
  waiters_.erase(std::find(waiters_.begin(), waiters_.end(), w));
  changed_.SignalAll();
}

}  // namespace exlr8::testing
