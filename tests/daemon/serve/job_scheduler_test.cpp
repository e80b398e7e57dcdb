// The scheduler of `exlr8d serve` (daemon/serve/job_scheduler.h) on a
// FakeClock, an in-memory queue that fails on command and jobs that do
// nothing but say what was asked of them: which jobs start, how a cancel
// racing a start ends, and the retries of a locked cache, of a start and of
// an end the queue could not record, all without waiting on real time.
#include "daemon/serve/job_scheduler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <memory>
#include <thread>

#include "tests/daemon/base/fake_clock.h"
#include "tests/daemon/cache_test_util.h"
#include "tests/daemon/serve/fake_job_queue.h"

namespace exlr8 {
namespace {

using ::exlr8::testing::FakeClock;
using ::exlr8::testing::FakeJobQueue;
using ::exlr8::testing::TempDir;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

constexpr std::chrono::milliseconds kRetry{2000};

// What a FakeJob was asked, shared with the test (the job itself is the
// scheduler's, destroyed when reaped).
struct Probe {
  Mutex mu;
  CondVar changed;
  bool ran EXLR8_GUARDED_BY(mu) = false;
  bool cancelled EXLR8_GUARDED_BY(mu) = false;
  bool released EXLR8_GUARDED_BY(mu) = false;

  bool Ran() {
    MutexLock l(&mu);
    return ran;
  }
  void Release() {
    MutexLock l(&mu);
    released = true;
    changed.SignalAll();
  }
  // Blocks until Run has begun; false after 10 s of real time.
  bool AwaitRun() {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    MutexLock l(&mu);
    while (!ran)
      if (!changed.WaitUntil(&mu, deadline) && !ran) return false;
    return true;
  }
};

// Runs until released (or at once when `block` is false) or cancelled.
class FakeJob final : public Job {
 public:
  FakeJob(std::shared_ptr<Probe> probe, bool block, PullId pull = 0)
      : probe_(std::move(probe)), block_(block), pull_(pull) {}
  JobOutcome Run(Cache&) override {
    MutexLock l(&probe_->mu);
    probe_->ran = true;
    probe_->changed.SignalAll();
    while (block_ && !probe_->released && !probe_->cancelled) probe_->changed.Wait(&probe_->mu);
    JobOutcome out;
    if (probe_->cancelled)
      out.status = CancelledError("cancelled");
    else
      out.result = R"({"fake":true})";
    return out;
  }
  void Cancel() override {
    MutexLock l(&probe_->mu);
    probe_->cancelled = true;
    probe_->changed.SignalAll();
  }
  // A pull's progress when the job was given a pull id, else nothing.
  JobReport Report() const override {
    JobReport r;
    if (pull_ != 0) {
      r.progress.emplace();
      r.progress->pull_id = pull_;
    }
    return r;
  }
  void AddTotals(RunnerTotals& t) const override { t.bytes_received += 1; }

 private:
  std::shared_ptr<Probe> probe_;
  const bool block_;
  const PullId pull_;
};

// Bounded by real time, for state the scheduler keeps in memory (a job's
// `waiting`, the clock's waiters): true once `done()`.
bool Eventually(const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

class JobSchedulerTest : public ::testing::Test {
 protected:
  // The scheduler, on a cache in a temp dir that the opener says is locked
  // by another process for its first `locked_tries` tries.
  void Start(int max_running = 4, bool block = false) {
    block_ = block;
    auto opener = [this]() -> Result<std::unique_ptr<Cache>> {
      const int n = ++opens_;
      if (n <= locked_tries_)
        return FailedPreconditionError("cache " + dir_.path().string() + " is locked by pid 42");
      return Cache::Open(dir_.path());
    };
    JobSchedulerOptions o;
    o.max_running = max_running;
    o.retry = kRetry;
    o.clock = &clock_;
    scheduler_ = std::make_unique<JobScheduler>(
        queue_, std::make_unique<CacheOwner>(opener, clock_, kRetry),
        [this](const JobInfo& info) -> std::unique_ptr<Job> {
          auto probe = std::make_shared<Probe>();
          {
            MutexLock l(&probes_mu_);
            probes_[info.id] = probe;
          }
          return std::make_unique<FakeJob>(probe, block_, pull_id_);
        },
        o);
    scheduler_->Start();
  }
  JobId Submit(const std::string& repo) {
    JobRequest r;
    r.repo = repo;
    r.manifest = "home";
    const JobId id = queue_.Add(r);
    scheduler_->Kick();
    return id;
  }
  std::shared_ptr<Probe> ProbeOf(JobId id) {
    MutexLock l(&probes_mu_);
    auto it = probes_.find(id);
    return it == probes_.end() ? nullptr : it->second;
  }
  std::string Waiting(JobId id) {
    auto s = scheduler_->Snapshot(id);
    return s.ok() ? s->waiting : "";
  }
  // True once the scheduler thread waits for `d` from now (the clock
  // stands still, so its deadline says which wait it is in).
  bool AwaitWaitOf(Clock::Duration d) {
    if (Eventually([&] { return clock_.NextDeadline() == clock_.Now() + d; })) return true;
    const auto next = clock_.NextDeadline();
    ADD_FAILURE()
        << "waiters " << clock_.waiters() << ", next deadline in "
        << (next ? std::chrono::duration_cast<std::chrono::milliseconds>(*next - clock_.Now()).count() : -1)
        << " ms; MarkRunning calls " << queue_.mark_calls() << ", Finish calls " << queue_.finish_calls();
    return false;
  }

  TempDir dir_;
  FakeClock clock_;
  FakeJobQueue queue_;
  int locked_tries_ = 0;
  std::atomic<int> opens_{0};
  bool block_ = false;
  PullId pull_id_ = 0;  // the pull id the jobs report (0: none)
  Mutex probes_mu_;
  std::map<JobId, std::shared_ptr<Probe>> probes_ EXLR8_GUARDED_BY(probes_mu_);
  std::unique_ptr<JobScheduler> scheduler_;  // declared last: stopped first
};

// The start recorded, then a cancel, then the scheduler would begin the
// work: the job ends cancelled, its work never begins, and its end is
// recorded once. (The cancel is made from inside MarkRunning, so the
// interleaving is the same in every run.)
TEST_F(JobSchedulerTest, AJobCancelledWhileItsStartIsRecordedEndsCancelledAndNeverRuns) {
  Result<JobSnapshot> cancelled = InternalError("not called");
  queue_.set_mark_hook([&](JobId id, bool after) {
    if (after) cancelled = scheduler_->Cancel(id);
  });
  Start();
  const JobId id = Submit("a/one");
  ASSERT_TRUE(queue_.AwaitState(id, JobState::kCancelled));
  ASSERT_TRUE(cancelled.ok()) << cancelled.status().ToString();
  EXPECT_TRUE(cancelled->cancel_requested);
  EXPECT_EQ(queue_.Row(id).error, "cancelled by a client before it started");
  scheduler_->Stop();
  EXPECT_EQ(queue_.ends_recorded(id), 1);
  EXPECT_EQ(queue_.finish_calls(), 1);
  ASSERT_NE(ProbeOf(id), nullptr);
  EXPECT_FALSE(ProbeOf(id)->Ran());
}

// The cancel comes first, while the start is being recorded: the queue
// says cancelled, the start is refused, the work never begins.
TEST_F(JobSchedulerTest, AJobCancelledJustBeforeItsStartIsRecordedEndsCancelledAndNeverRuns) {
  Result<JobSnapshot> cancelled = InternalError("not called");
  queue_.set_mark_hook([&](JobId id, bool after) {
    if (!after) cancelled = scheduler_->Cancel(id);
  });
  Start();
  const JobId id = Submit("a/one");
  ASSERT_TRUE(queue_.AwaitChange([&](const FakeJobQueue::View& v) { return v.mark_calls == 1; }));
  ASSERT_TRUE(queue_.AwaitState(id, JobState::kCancelled));
  scheduler_->Stop();
  ASSERT_TRUE(cancelled.ok()) << cancelled.status().ToString();
  EXPECT_TRUE(cancelled->cancel_requested);
  EXPECT_EQ(queue_.Row(id).error, "cancelled by a client before it started");
  EXPECT_EQ(queue_.ends_recorded(id), 1);
  EXPECT_EQ(queue_.finish_calls(), 0);
  EXPECT_EQ(queue_.Row(id).attempts, 0);
  EXPECT_FALSE(ProbeOf(id)->Ran());
}

// A running job cancelled by a client ends cancelled, once; a second
// cancel of the finished job is refused.
TEST_F(JobSchedulerTest, ARunningJobCancelledEndsCancelledOnce) {
  Start(4, /*block=*/true);
  const JobId id = Submit("a/one");
  ASSERT_TRUE(Eventually([&] { return ProbeOf(id) != nullptr; }));
  ASSERT_TRUE(ProbeOf(id)->AwaitRun());
  auto cancelled = scheduler_->Cancel(id);
  ASSERT_TRUE(cancelled.ok()) << cancelled.status().ToString();
  EXPECT_TRUE(cancelled->cancel_requested);
  ASSERT_TRUE(queue_.AwaitState(id, JobState::kCancelled));
  EXPECT_EQ(queue_.Row(id).error, "cancelled by a client");
  EXPECT_EQ(queue_.ends_recorded(id), 1);
  ASSERT_TRUE(Eventually([&] {
    auto again = scheduler_->Cancel(id);
    return !again.ok() && again.status().code() == StatusCode::kFailedPrecondition;
  }));
}

// While another process owns the cache the job waits and says why; the
// cache is tried again once per retry interval of the clock, not sooner,
// and the job runs once it opens.
TEST_F(JobSchedulerTest, ALockedCacheIsTriedAgainEveryRetryIntervalUntilItOpens) {
  locked_tries_ = 2;
  Start();
  const JobId id = Submit("a/one");
  ASSERT_TRUE(AwaitWaitOf(kRetry));
  EXPECT_EQ(opens_.load(), 1);
  EXPECT_EQ(Waiting(id), "waiting for the cache: cache " + dir_.path().string() +
                             " is locked by pid 42; retrying every 2000 ms");
  scheduler_->Kick();  // a submit does not cut the wait short
  clock_.Advance(kRetry - 1ms);
  ASSERT_TRUE(AwaitWaitOf(1ms));
  EXPECT_EQ(opens_.load(), 1);
  clock_.Advance(1ms);
  ASSERT_TRUE(Eventually([&] { return opens_.load() == 2; }));
  ASSERT_TRUE(AwaitWaitOf(kRetry));
  EXPECT_EQ(queue_.Row(id).state, JobState::kQueued);
  clock_.Advance(kRetry);
  ASSERT_TRUE(queue_.AwaitState(id, JobState::kDone));
  EXPECT_EQ(opens_.load(), 3);
  EXPECT_EQ(queue_.Row(id).result, R"({"fake":true})");
  EXPECT_EQ(Waiting(id), "");
}

// The queue cannot record a job's end: it is tried again once per retry
// interval until it is recorded, once; meanwhile a cancel says why the job
// cannot be cancelled.
TEST_F(JobSchedulerTest, AnEndTheQueueCannotRecordIsTriedAgainEachRetryAndRecordedOnce) {
  queue_.FailFinish(2);
  ::testing::internal::CaptureStderr();
  Start();
  const JobId id = Submit("a/one");
  // The job's own try and the scheduler's first retry fail; then it waits.
  ASSERT_TRUE(queue_.AwaitChange([](const FakeJobQueue::View& v) { return v.finish_calls == 2; }));
  ASSERT_TRUE(AwaitWaitOf(kRetry));
  EXPECT_EQ(queue_.Row(id).state, JobState::kRunning);
  auto cancel = scheduler_->Cancel(id);
  ASSERT_FALSE(cancel.ok());
  EXPECT_THAT(cancel.status().ToString(), HasSubstr("recording its end failed and is being retried"));
  EXPECT_EQ(queue_.finish_calls(), 2);
  clock_.Advance(kRetry);
  ASSERT_TRUE(queue_.AwaitState(id, JobState::kDone));
  scheduler_->Stop();
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(queue_.finish_calls(), 3);
  EXPECT_EQ(queue_.ends_recorded(id), 1);
  EXPECT_THAT(log, HasSubstr("job 1: could not record its end (retrying)"));
  EXPECT_THAT(log, HasSubstr("job 1: its end is recorded now"));
}

// A job whose work has ended is read as done by a client as soon as its
// end is recorded; from the moment the work returns, its pull must no
// longer be found running (a DELETE of the pull then answers 409, never
// cancels a job that is done).
TEST_F(JobSchedulerTest, APullWhoseWorkEndedIsNotRunningWhileItsEndIsRecorded) {
  pull_id_ = 7;
  Start();
  queue_.HoldFinish(true);
  const JobId id = Submit("a/one");
  ASSERT_TRUE(queue_.AwaitChange([](const FakeJobQueue::View& v) { return v.finish_calls == 1; }));
  EXPECT_EQ(scheduler_->RunningJobOfPull(7), std::nullopt);
  queue_.HoldFinish(false);
  ASSERT_TRUE(queue_.AwaitState(id, JobState::kDone));
  EXPECT_EQ(scheduler_->RunningJobOfPull(7), std::nullopt);
  scheduler_->Stop();
}

// The queue cannot record a job's start: the job stays queued and says
// why, the log says it once, and the scheduler tries again once per retry
// interval (not at once, not at full CPU) until it starts.
TEST_F(JobSchedulerTest, AStartTheQueueCannotRecordIsSaidOnceAndTriedAgainEachRetry) {
  queue_.FailMarkRunning(2);
  ::testing::internal::CaptureStderr();
  Start();
  const JobId id = Submit("a/one");
  ASSERT_TRUE(queue_.AwaitChange([](const FakeJobQueue::View& v) { return v.mark_calls == 1; }));
  ASSERT_TRUE(AwaitWaitOf(kRetry));
  EXPECT_EQ(queue_.Row(id).state, JobState::kQueued);
  EXPECT_THAT(Waiting(id), HasSubstr("the job queue could not record its start"));
  EXPECT_THAT(Waiting(id), HasSubstr("retrying every 2000 ms"));
  clock_.Advance(kRetry);
  ASSERT_TRUE(queue_.AwaitChange([](const FakeJobQueue::View& v) { return v.mark_calls == 2; }));
  ASSERT_TRUE(AwaitWaitOf(kRetry));
  EXPECT_EQ(queue_.mark_calls(), 2);
  clock_.Advance(kRetry);
  ASSERT_TRUE(queue_.AwaitState(id, JobState::kDone));
  scheduler_->Stop();
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(queue_.mark_calls(), 3);
  std::size_t said = 0;
  for (std::size_t at = 0; (at = log.find("could not record its start", at)) != std::string::npos; ++at)
    ++said;
  EXPECT_EQ(said, 1u) << log;
  EXPECT_THAT(log, HasSubstr("job 1: its start is recorded now"));
}

// max_running jobs of different repos at once; later jobs of a running
// repo wait for it, in order; each says why it waits.
TEST_F(JobSchedulerTest, RunsUpToMaxRunningJobsAndOneJobOfARepoAtATime) {
  Start(2, /*block=*/true);
  const JobId a = Submit("r/x");
  const JobId b = Submit("r/x");
  const JobId c = Submit("r/y");
  const JobId d = Submit("r/z");
  ASSERT_TRUE(queue_.AwaitState(a, JobState::kRunning));
  ASSERT_TRUE(queue_.AwaitState(c, JobState::kRunning));
  ASSERT_TRUE(Eventually([&] { return !Waiting(b).empty() && !Waiting(d).empty(); }));
  EXPECT_EQ(Waiting(b), "after job " + std::to_string(a) + " of the same repo");
  EXPECT_EQ(Waiting(d), "waiting for a free slot: 2 jobs running (--max-jobs)");
  std::vector<JobId> running;
  scheduler_->Totals(&running);
  EXPECT_EQ(running, (std::vector<JobId>{a, c}));
  ASSERT_TRUE(Eventually([&] { return ProbeOf(a) != nullptr; }));
  ProbeOf(a)->Release();
  ASSERT_TRUE(queue_.AwaitState(a, JobState::kDone));
  ASSERT_TRUE(queue_.AwaitState(b, JobState::kRunning));
  EXPECT_EQ(queue_.Row(d).state, JobState::kQueued);
}

// Stop cancels the running jobs and queues them again, to resume at the
// next start.
TEST_F(JobSchedulerTest, AStopQueuesTheRunningJobsAgain) {
  Start(4, /*block=*/true);
  const JobId id = Submit("a/one");
  ASSERT_TRUE(queue_.AwaitState(id, JobState::kRunning));
  ASSERT_TRUE(Eventually([&] { return ProbeOf(id) != nullptr; }));
  ASSERT_TRUE(ProbeOf(id)->AwaitRun());
  scheduler_->Stop();
  EXPECT_EQ(queue_.Row(id).state, JobState::kQueued);
  EXPECT_EQ(queue_.ends_recorded(id), 0);
  scheduler_->Stop();  // idempotent
}

}  // namespace
}  // namespace exlr8
