// An in-memory JobQueue (daemon/serve/job_store.h) for the scheduler's unit
// tests: it keeps the rows JobStore would, refuses the same transitions
// (FailedPrecondition), fails the next N writes of a kind on command, calls
// a hook around MarkRunning, and lets a test wait for a change without
// sleeping.
//
// Thread-safe: every method may be called from any thread. The hooks run on
// the caller's thread without the queue's lock, so a hook may call back into
// the queue or into the scheduler.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "daemon/base/mutex.h"
#include "daemon/serve/job_store.h"

namespace exlr8::testing {

class FakeJobQueue final : public JobQueue {
 public:
  // Called by MarkRunning before (false) and after (true) it changes the row.
  using MarkHook = std::function<void(JobId, bool after)>;

  JobId Add(const JobRequest& request) {
    MutexLock l(&mu_);
    JobInfo info;
    info.id = next_id_++;
    info.request = request;
    jobs_[info.id] = info;
    changed_.SignalAll();
    return info.id;
  }
  void set_mark_hook(MarkHook hook) {
    MutexLock l(&mu_);
    mark_hook_ = std::move(hook);
  }
  // The next `n` MarkRunning (Finish) calls fail with an I/O error, as a
  // full disk or a database another process holds makes them.
  void FailMarkRunning(int n) {
    MutexLock l(&mu_);
    fail_mark_ = n;
  }
  void FailFinish(int n) {
    MutexLock l(&mu_);
    fail_finish_ = n;
  }
  // While held, Finish counts its call and then waits: a job's work has
  // ended but its end is not recorded yet.
  void HoldFinish(bool hold) {
    MutexLock l(&mu_);
    hold_finish_ = hold;
    changed_.SignalAll();
  }

  JobInfo Row(JobId id) const {
    MutexLock l(&mu_);
    auto it = jobs_.find(id);
    return it == jobs_.end() ? JobInfo() : it->second;
  }
  int mark_calls() const {
    MutexLock l(&mu_);
    return mark_calls_;
  }
  int finish_calls() const {
    MutexLock l(&mu_);
    return finish_calls_;
  }
  // Ends recorded: a Finish or CancelQueued that changed a row.
  int ends_recorded(JobId id) const {
    MutexLock l(&mu_);
    auto it = ends_.find(id);
    return it == ends_.end() ? 0 : it->second;
  }
  // What AwaitChange's predicate looks at.
  struct View {
    const std::map<JobId, JobInfo>& rows;
    int mark_calls;
    int finish_calls;
    JobState state(JobId id) const { return rows.at(id).state; }
  };
  // Blocks until `done(view)` is true; false after `limit` of real time.
  bool AwaitChange(const std::function<bool(const View&)>& done,
                   std::chrono::milliseconds limit = std::chrono::seconds(10)) const {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    MutexLock l(&mu_);
    for (;;) {
      if (done(View{jobs_, mark_calls_, finish_calls_})) return true;
      if (std::chrono::steady_clock::now() >= deadline) return false;
      changed_.WaitUntil(&mu_, deadline);
    }
  }
  bool AwaitState(JobId id, JobState state) const {
    return AwaitChange([&](const View& v) { return v.state(id) == state; });
  }

  Result<JobInfo> Get(JobId id) override {
    MutexLock l(&mu_);
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return NotFoundError("no job " + std::to_string(id));
    return it->second;
  }
  Result<std::vector<JobInfo>> Queued(std::size_t limit) override {
    MutexLock l(&mu_);
    std::vector<JobInfo> out;
    for (const auto& [id, j] : jobs_)
      if (j.state == JobState::kQueued && out.size() < limit) out.push_back(j);
    return out;
  }
  Status MarkRunning(JobId id) override {
    MarkHook hook;
    {
      MutexLock l(&mu_);
      ++mark_calls_;
      changed_.SignalAll();
      if (fail_mark_ > 0) {
        --fail_mark_;
        return IOError("disk full (fake)");
      }
      hook = mark_hook_;
    }
    if (hook) hook(id, false);
    {
      MutexLock l(&mu_);
      JobInfo& j = jobs_.at(id);
      if (j.state != JobState::kQueued) return FailedPreconditionError("job is not queued");
      j.state = JobState::kRunning;
      ++j.attempts;
      changed_.SignalAll();
    }
    if (hook) hook(id, true);
    return Status();
  }
  Status SetPull(JobId id, std::int64_t pull) override {
    MutexLock l(&mu_);
    jobs_.at(id).pull = pull;
    return Status();
  }
  Status SetTargetCommit(JobId id, std::string_view commit) override {
    MutexLock l(&mu_);
    jobs_.at(id).target_commit = std::string(commit);
    return Status();
  }
  Status Requeue(JobId id) override {
    MutexLock l(&mu_);
    JobInfo& j = jobs_.at(id);
    if (j.state != JobState::kRunning) return FailedPreconditionError("job is not running");
    j.state = JobState::kQueued;
    changed_.SignalAll();
    return Status();
  }
  Status Finish(JobId id, JobState state, std::string_view error, std::string_view result) override {
    MutexLock l(&mu_);
    ++finish_calls_;
    changed_.SignalAll();
    while (hold_finish_) changed_.Wait(&mu_);
    if (fail_finish_ > 0) {
      --fail_finish_;
      return IOError("database is locked (fake)");
    }
    JobInfo& j = jobs_.at(id);
    if (IsFinished(j.state)) return FailedPreconditionError("job has already finished");
    j.state = state;
    j.error = std::string(error);
    j.result = std::string(result);
    ++ends_[id];
    changed_.SignalAll();
    return Status();
  }
  Status CancelQueued(JobId id, std::string_view error) override {
    MutexLock l(&mu_);
    JobInfo& j = jobs_.at(id);
    if (j.state != JobState::kQueued) return FailedPreconditionError("job is not queued");
    j.state = JobState::kCancelled;
    j.error = std::string(error);
    ++ends_[id];
    changed_.SignalAll();
    return Status();
  }

 private:
  mutable Mutex mu_;
  mutable CondVar changed_;  // signalled on every call that changes or fails
  JobId next_id_ EXLR8_GUARDED_BY(mu_) = 1;
  std::map<JobId, JobInfo> jobs_ EXLR8_GUARDED_BY(mu_);
  std::map<JobId, int> ends_ EXLR8_GUARDED_BY(mu_);
  MarkHook mark_hook_ EXLR8_GUARDED_BY(mu_);
  int fail_mark_ EXLR8_GUARDED_BY(mu_) = 0;
  int fail_finish_ EXLR8_GUARDED_BY(mu_) = 0;
  bool hold_finish_ EXLR8_GUARDED_BY(mu_) = false;
  int mark_calls_ EXLR8_GUARDED_BY(mu_) = 0;
  int finish_calls_ EXLR8_GUARDED_BY(mu_) = 0;
};

}  // namespace exlr8::testing
