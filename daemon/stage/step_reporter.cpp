#include "daemon/stage/step_reporter.h"

#include "format/units.h"

namespace exlr8 {

StepReporter::StepReporter(std::unique_ptr<StageStateWriter> state, std::FILE* out, std::chrono::milliseconds every,
                           std::chrono::milliseconds print_every)
    : state_(std::move(state)), out_(out), every_(every), print_every_(print_every), thread_([this] { Run(); }) {}

StepReporter::~StepReporter() {
  {
    MutexLock l(&mu_);
    stop_ = true;
  }
  cv_.SignalAll();
  thread_.join();
}

void StepReporter::Step(std::string_view name, StateMembers members, const std::atomic<std::uint64_t>* done,
                        const std::atomic<std::uint64_t>* total) {
  MutexLock l(&mu_);
  name_ = name;
  members_ = std::move(members);
  done_ = done;
  total_ = total;
  last_done_ = 0;
  step_start_ = last_print_ = std::chrono::steady_clock::now();
  WriteLocked(done != nullptr ? done->load() : 0, total != nullptr ? total->load() : 0);
}

void StepReporter::WriteLocked(std::uint64_t done, std::uint64_t total) {
  if (!state_) return;
  StateMembers members = members_;
  if (done_ != nullptr) {
    members.Add("done_bytes", done);
    if (total > 0) members.Add("total_bytes", total);
  }
  if (Status s = state_->Set(name_, members); !s.ok())
    std::fprintf(stderr, "exlr8d-stage: warning: %s\n", s.ToString().c_str());
}

void StepReporter::Run() {
  MutexLock l(&mu_);
  while (!stop_) {
    const auto next = std::chrono::steady_clock::now() + every_;
    while (!stop_ && cv_.WaitUntil(&mu_, next)) {
    }
    if (stop_ || done_ == nullptr) continue;
    const std::uint64_t done = done_->load(std::memory_order_relaxed);
    const std::uint64_t total = total_ != nullptr ? total_->load(std::memory_order_relaxed) : 0;
    if (done != last_done_) {
      last_done_ = done;
      WriteLocked(done, total);
    }
    const auto now = std::chrono::steady_clock::now();
    if (out_ != nullptr && now - last_print_ >= print_every_) {
      last_print_ = now;
      const double seconds = std::chrono::duration<double>(now - step_start_).count();
      std::string of = total > 0 ? " of " + HumanBytes(total) : "";
      std::fprintf(out_, "%s: %s%s done, %s/s\n", name_.c_str(), HumanBytes(done).c_str(), of.c_str(),
                   HumanBytes(static_cast<std::uint64_t>(seconds > 0 ? static_cast<double>(done) / seconds : 0))
                       .c_str());
      std::fflush(out_);
    }
  }
}

}  // namespace exlr8
