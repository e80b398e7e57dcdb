// An annotated std::mutex wrapper, so that clang's -Wthread-safety can check
// which members a lock guards (GUARDED_BY) and which functions need it held.
// Under g++ the annotations compile to nothing.
#pragma once

#include <mutex>

#if defined(__clang__)
#define EXLR8_THREAD_ANNOTATION_(x) __attribute__((x))
#else
#define EXLR8_THREAD_ANNOTATION_(x)
#endif

#define EXLR8_CAPABILITY(x) EXLR8_THREAD_ANNOTATION_(capability(x))
#define EXLR8_SCOPED_CAPABILITY EXLR8_THREAD_ANNOTATION_(scoped_lockable)
#define EXLR8_GUARDED_BY(x) EXLR8_THREAD_ANNOTATION_(guarded_by(x))
#define EXLR8_REQUIRES(...) EXLR8_THREAD_ANNOTATION_(requires_capability(__VA_ARGS__))
#define EXLR8_EXCLUDES(...) EXLR8_THREAD_ANNOTATION_(locks_excluded(__VA_ARGS__))
#define EXLR8_ACQUIRED_AFTER(...) EXLR8_THREAD_ANNOTATION_(acquired_after(__VA_ARGS__))
#define EXLR8_ACQUIRE(...) EXLR8_THREAD_ANNOTATION_(acquire_capability(__VA_ARGS__))
#define EXLR8_RELEASE(...) EXLR8_THREAD_ANNOTATION_(release_capability(__VA_ARGS__))

namespace exlr8 {

class EXLR8_CAPABILITY("mutex") Mutex {
 public:
  void Lock() EXLR8_ACQUIRE() { mu_.lock(); }
  void Unlock() EXLR8_RELEASE() { mu_.unlock(); }

 private:
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

}  // namespace exlr8
