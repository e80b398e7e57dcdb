// daemon/base/mutex.h: the lock excludes, the condition variable wakes and
// times out. The annotations themselves are checked by the clang build with
// -Wthread-safety (EXLR8_THREAD_SAFETY), which compiles this file too.
#include "daemon/base/mutex.h"

#include <gtest/gtest.h>

#include <chrono>
#include <deque>
#include <thread>
#include <vector>

namespace exlr8 {
namespace {

using std::chrono::milliseconds;

class Counter {
 public:
  void Add() EXLR8_EXCLUDES(mu_) {
    MutexLock l(&mu_);
    ++value_;
  }
  int value() EXLR8_EXCLUDES(mu_) {
    MutexLock l(&mu_);
    return value_;
  }

 private:
  Mutex mu_;
  int value_ EXLR8_GUARDED_BY(mu_) = 0;
};

TEST(MutexTest, MutexLockExcludesOtherThreads) {
  Counter counter;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) counter.Add();
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(counter.value(), 40000);
}

class Queue {
 public:
  void Push(int v) EXLR8_EXCLUDES(mu_) {
    MutexLock l(&mu_);
    items_.push_back(v);
    ready_.Signal();
  }
  int Pop() EXLR8_EXCLUDES(mu_) {
    MutexLock l(&mu_);
    while (items_.empty()) ready_.Wait(&mu_);
    const int v = items_.front();
    items_.pop_front();
    return v;
  }

 private:
  Mutex mu_;
  CondVar ready_;
  std::deque<int> items_ EXLR8_GUARDED_BY(mu_);
};

TEST(CondVarTest, WaitReturnsOnceSignalledWithTheMutexHeld) {
  Queue q;
  std::vector<int> got;
  std::thread consumer([&] {
    for (int i = 0; i < 1000; ++i) got.push_back(q.Pop());
  });
  for (int i = 0; i < 1000; ++i) q.Push(i);
  consumer.join();
  ASSERT_EQ(got.size(), 1000u);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(got[static_cast<std::size_t>(i)], i);
}

TEST(CondVarTest, TimedWaitsReturnFalseAfterTheirTimeWithoutASignal) {
  Mutex mu;
  CondVar cv;
  MutexLock l(&mu);
  const auto start = std::chrono::steady_clock::now();
  while (cv.WaitFor(&mu, milliseconds(30))) {
  }  // a spurious wake returns true; the loop waits again
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(30));
  EXPECT_FALSE(cv.WaitUntil(&mu, std::chrono::steady_clock::now() - milliseconds(1)));
}

TEST(CondVarTest, TimedWaitReturnsTrueWhenSignalled) {
  Mutex mu;
  CondVar cv;
  bool done = false;  // guarded by mu
  std::thread waker([&] {
    MutexLock l(&mu);
    done = true;
    cv.SignalAll();
  });
  {
    MutexLock l(&mu);
    // An hour: only the signal can end this wait within the test's timeout.
    while (!done) ASSERT_TRUE(cv.WaitFor(&mu, std::chrono::hours(1)));
  }
  waker.join();
}

}  // namespace
}  // namespace exlr8
