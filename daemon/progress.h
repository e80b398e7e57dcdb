// Progress display of a running pull: a one-line bar on a terminal (bytes,
// rate, ETA, ranges done), a log line every few seconds otherwise. Runs on
// its own thread, reading PullJob::Progress() (thread-safe).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include "daemon/pull/pull_job.h"

namespace exlr8 {

// The width of the terminal `out` is on, now (it may change while a long
// command runs); 80 when it does not say.
int TerminalColumns(std::FILE* out);

// True when HF_HUB_DISABLE_PROGRESS_BARS is set to a true value (1, ON,
// YES, TRUE in any case), as the Hugging Face tools read it: commands then
// behave as with --no-progress.
bool ProgressBarsDisabledByEnvironment();

class ProgressDisplay {
 public:
  // Starts the display thread. `out` is stderr normally.
  ProgressDisplay(const PullJob& job, std::FILE* out, bool enabled);
  ~ProgressDisplay();  // stops and joins; leaves the cursor on a fresh line
  void Stop();

 private:
  void Loop();
  void Draw(const PullProgress& p, bool final);

  const PullJob& job_;
  std::FILE* out_;
  bool tty_;
  bool enabled_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  double last_bytes_ = 0, last_time_ = 0, rate_ = 0;
  double last_log_ = -1e9;
  bool drew_ = false;
};

}  // namespace exlr8
