// An annotated std::mutex wrapper and its condition variable, so that
// clang's -Wthread-safety can check which members a lock guards
// (GUARDED_BY) and which functions need it held (REQUIRES). Under g++ the
// annotations compile to nothing. The macros are clang's thread-safety
// attributes (https://clang.llvm.org/docs/ThreadSafetyAnalysis.html), named
// as LevelDB's port/thread_annotations.h names them.
//
//   class Queue {
//    public:
//     void Push(int v) EXLR8_EXCLUDES(mu_) {
//       MutexLock l(&mu_);
//       items_.push_back(v);
//       ready_.Signal();
//     }
//     int Pop() EXLR8_EXCLUDES(mu_) {
//       MutexLock l(&mu_);
//       while (items_.empty()) ready_.Wait(&mu_);
//       ...
//     }
//    private:
//     Mutex mu_;
//     CondVar ready_;  // signalled when items_ gains one
//     std::deque<int> items_ EXLR8_GUARDED_BY(mu_);
//   };
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define EXLR8_THREAD_ANNOTATION_(x) __attribute__((x))
#else
#define EXLR8_THREAD_ANNOTATION_(x)
#endif

// A type that is a lock (Mutex).
#define EXLR8_CAPABILITY(x) EXLR8_THREAD_ANNOTATION_(capability(x))
// An RAII type that holds a lock for its lifetime (MutexLock).
#define EXLR8_SCOPED_CAPABILITY EXLR8_THREAD_ANNOTATION_(scoped_lockable)
// A member read or written only with lock `x` held.
#define EXLR8_GUARDED_BY(x) EXLR8_THREAD_ANNOTATION_(guarded_by(x))
// A pointer member whose pointee (not the pointer) is guarded by lock `x`.
#define EXLR8_PT_GUARDED_BY(x) EXLR8_THREAD_ANNOTATION_(pt_guarded_by(x))
// A function that must be called with the locks held.
#define EXLR8_REQUIRES(...) EXLR8_THREAD_ANNOTATION_(requires_capability(__VA_ARGS__))
// A function that must be called without the locks held (it takes them).
#define EXLR8_EXCLUDES(...) EXLR8_THREAD_ANNOTATION_(locks_excluded(__VA_ARGS__))
// Lock order: this lock is taken only after (before) the named ones.
#define EXLR8_ACQUIRED_AFTER(...) EXLR8_THREAD_ANNOTATION_(acquired_after(__VA_ARGS__))
#define EXLR8_ACQUIRED_BEFORE(...) EXLR8_THREAD_ANNOTATION_(acquired_before(__VA_ARGS__))
// A function that takes (releases) the locks and returns holding (not
// holding) them.
#define EXLR8_ACQUIRE(...) EXLR8_THREAD_ANNOTATION_(acquire_capability(__VA_ARGS__))
#define EXLR8_RELEASE(...) EXLR8_THREAD_ANNOTATION_(release_capability(__VA_ARGS__))
// A function that takes the locks only when it returns the first argument
// (a try-lock): EXLR8_TRY_ACQUIRE(true) on a Mutex's own method.
#define EXLR8_TRY_ACQUIRE(...) EXLR8_THREAD_ANNOTATION_(try_acquire_capability(__VA_ARGS__))
// A function that checks at run time that the lock is held; the analysis
// then takes it as held.
#define EXLR8_ASSERT_CAPABILITY(x) EXLR8_THREAD_ANNOTATION_(assert_capability(x))
// A function that returns (a pointer to) lock `x`, so that a caller's
// REQUIRES(obj->mutex()) means obj's `x`.
#define EXLR8_RETURN_CAPABILITY(x) EXLR8_THREAD_ANNOTATION_(lock_returned(x))
// Turns the analysis off for one function. Only for code whose locking the
// analysis cannot follow (a lock handed between functions); say why next to
// each use.
#define EXLR8_NO_THREAD_SAFETY_ANALYSIS EXLR8_THREAD_ANNOTATION_(no_thread_safety_analysis)

namespace exlr8 {

class CondVar;

// A non-recursive mutex. Not copyable or movable.
class EXLR8_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() EXLR8_ACQUIRE() { mu_.lock(); }
  void Unlock() EXLR8_RELEASE() { mu_.unlock(); }
  // Takes the lock if it is free; true when it did.
  bool TryLock() EXLR8_TRY_ACQUIRE(true) { return mu_.try_lock(); }
  // Tells the analysis the caller holds the lock (for code reached through a
  // callback it cannot follow). Checks nothing at run time.
  void AssertHeld() EXLR8_ASSERT_CAPABILITY(this) {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds `mu` for the scope.
class EXLR8_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) EXLR8_ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() EXLR8_RELEASE() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* mu_;
};

// A condition variable used with a Mutex (std::condition_variable over the
// Mutex's std::mutex). Every wait releases `mu` while blocked and holds it
// again on return; any wait may return spuriously, so callers wait in a loop
// on the condition they need:
//   while (!ready_) cv_.Wait(&mu_);
// REQUIRES (every wait): the caller holds `mu`, and all waits on one
// CondVar use the same Mutex. Signal/SignalAll may be called with or without
// it held; a waker changes the condition under `mu` first, else a waiter
// that checked it just before may miss the wake.
// Waits measure real (steady) time; code that runs on an injected Clock
// waits through Clock::WaitUntil (daemon/base/clock.h) instead.
class CondVar {
 public:
  CondVar() = default;
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  void Wait(Mutex* mu) EXLR8_REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();  // `mu` stays held, as the annotation says
  }
  // false once `timeout` (`deadline`) has passed without a wake; true on a
  // wake, which may be spurious.
  template <class Rep, class Period>
  bool WaitFor(Mutex* mu, std::chrono::duration<Rep, Period> timeout) EXLR8_REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    const std::cv_status s = cv_.wait_for(lock, timeout);
    lock.release();
    return s == std::cv_status::no_timeout;
  }
  bool WaitUntil(Mutex* mu, std::chrono::steady_clock::time_point deadline) EXLR8_REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    const std::cv_status s = cv_.wait_until(lock, deadline);
    lock.release();
    return s == std::cv_status::no_timeout;
  }

  // Wakes one waiter (Signal) or all of them (SignalAll), if any.
  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace exlr8
