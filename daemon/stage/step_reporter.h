// StepReporter: what exlr8d-stage says of its steps while it runs: to
// state.json (StageStateWriter, when it has a --state-dir) each step as it
// begins, and, while a step that moves the rank's bytes runs (reading:
// every half's XXH64; staging: the upload), how many of them it has done:
// in state.json every `every` (so GET /v1/stages/{id} shows a stage of
// 80 GB moving), and on stdout every `print_every` (logs of a unit).
//
// The progress is read from counters the step's worker threads count up
// (RankRequest::progress, UploadOptions::bytes_uploaded); the reporter
// never writes a step older than the last one set: a step and a progress
// report are written under one lock, and progress only while its step is
// the current one.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "daemon/base/mutex.h"
#include "daemon/stage/stage_state.h"

namespace exlr8 {

class StepReporter {
 public:
  // `state` may be null (no --state-dir): progress then goes to `out` only.
  // `out` may be null (no lines printed).
  StepReporter(std::unique_ptr<StageStateWriter> state, std::FILE* out,
               std::chrono::milliseconds every = std::chrono::seconds(1),
               std::chrono::milliseconds print_every = std::chrono::seconds(10));
  ~StepReporter();  // stops its thread; writes nothing more
  StepReporter(const StepReporter&) = delete;
  StepReporter& operator=(const StepReporter&) = delete;

  // A new step: state.json gets {"state":name, ...members} now. With
  // `done`, until the next step, the record is
  // rewritten with "done_bytes" (and "total_bytes" once *total is not 0)
  // as those counters move. Errors writing state.json are warnings on
  // stderr, never a reason to stop staging.
  void Step(std::string_view name, StateMembers members = {}, const std::atomic<std::uint64_t>* done = nullptr,
            const std::atomic<std::uint64_t>* total = nullptr);

 private:
  void Run() EXLR8_EXCLUDES(mu_);
  void WriteLocked(std::uint64_t done, std::uint64_t total) EXLR8_REQUIRES(mu_);

  std::unique_ptr<StageStateWriter> state_ EXLR8_GUARDED_BY(mu_);
  std::FILE* out_;
  const std::chrono::milliseconds every_, print_every_;
  Mutex mu_;
  CondVar cv_;  // stop
  bool stop_ EXLR8_GUARDED_BY(mu_) = false;
  std::string name_ EXLR8_GUARDED_BY(mu_);
  StateMembers members_ EXLR8_GUARDED_BY(mu_);
  const std::atomic<std::uint64_t>* done_ EXLR8_GUARDED_BY(mu_) = nullptr;
  const std::atomic<std::uint64_t>* total_ EXLR8_GUARDED_BY(mu_) = nullptr;
  std::uint64_t last_done_ EXLR8_GUARDED_BY(mu_) = 0;  // written last (a step's first write: none)
  std::chrono::steady_clock::time_point step_start_ EXLR8_GUARDED_BY(mu_);
  std::chrono::steady_clock::time_point last_print_ EXLR8_GUARDED_BY(mu_);
  std::thread thread_;  // last: starts once the rest is ready
};

}  // namespace exlr8
