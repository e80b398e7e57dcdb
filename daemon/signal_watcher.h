// SIGINT/SIGTERM for a command that runs long work (pull, verify, stage):
// the signals are blocked in every thread and taken with sigwait on a thread
// of their own, which calls `on_signal` with the signal's number (not from a
// signal handler, so it may lock and log). The destructor wakes that thread
// with SIGUSR1 aimed at it alone, so the command exits as soon as its work
// ends. Construct it before starting any other thread, so they all inherit
// the blocked mask. The destructor unblocks the signals again, unless told
// to keep them blocked (a program about to exit that has reported its end
// must not then die of a signal that came after).
#pragma once

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <functional>
#include <thread>
#include <utility>

namespace exlr8 {

class SignalWatcher {
 public:
  enum class AtEnd { kUnblock, kKeepBlocked };
  explicit SignalWatcher(std::function<void(int)> on_signal, AtEnd at_end = AtEnd::kUnblock)
      : on_signal_(std::move(on_signal)), at_end_(at_end) {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    sigaddset(&set_, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &set_, nullptr);
    thread_ = std::thread([this] {
      for (;;) {
        int sig = 0;
        if (sigwait(&set_, &sig) != 0) continue;
        if (stop_.load()) return;
        if (sig == SIGINT || sig == SIGTERM) {
          signalled_.store(true);
          on_signal_(sig);
        }
      }
    });
  }
  ~SignalWatcher() {
    stop_.store(true);
    pthread_kill(thread_.native_handle(), SIGUSR1);
    thread_.join();
    if (at_end_ == AtEnd::kUnblock) pthread_sigmask(SIG_UNBLOCK, &set_, nullptr);
  }
  SignalWatcher(const SignalWatcher&) = delete;
  SignalWatcher& operator=(const SignalWatcher&) = delete;

  bool signalled() const { return signalled_.load(); }

 private:
  std::function<void(int)> on_signal_;
  AtEnd at_end_;
  sigset_t set_;
  std::atomic<bool> stop_{false}, signalled_{false};
  std::thread thread_;
};

}  // namespace exlr8
