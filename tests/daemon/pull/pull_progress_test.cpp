#include "daemon/pull/pull_progress.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "tests/daemon/base/fake_clock.h"

namespace exlr8 {
namespace {

using exlr8::testing::FakeClock;
using std::chrono::milliseconds;

double Seconds(const PhaseTimer& t, PullPhase p) { return t.phase_seconds()[static_cast<std::size_t>(p)]; }

TEST(PullProgressTest, PhaseTimerSumsTheTimeOfEachPhaseOnItsClock) {
  FakeClock clock;
  PhaseTimer timer(clock);
  EXPECT_EQ(timer.phase(), PullPhase::kStarting);
  clock.Advance(milliseconds(250));
  timer.Set(PullPhase::kResolve);
  clock.Advance(milliseconds(1000));
  timer.Set(PullPhase::kList);
  clock.Advance(milliseconds(500));
  timer.Set(PullPhase::kResolve);  // a phase entered twice sums both stays
  clock.Advance(milliseconds(2000));
  timer.Set(PullPhase::kDone);
  EXPECT_EQ(timer.phase(), PullPhase::kDone);
  EXPECT_DOUBLE_EQ(Seconds(timer, PullPhase::kStarting), 0.25);
  EXPECT_DOUBLE_EQ(Seconds(timer, PullPhase::kResolve), 3.0);
  EXPECT_DOUBLE_EQ(Seconds(timer, PullPhase::kList), 0.5);
  EXPECT_DOUBLE_EQ(Seconds(timer, PullPhase::kDone), 0.0);  // still running
  EXPECT_DOUBLE_EQ(timer.Elapsed(), 3.75);
  // The start, in wall time: now less what has elapsed.
  EXPECT_EQ(timer.StartedUnixMs(), FakeClock::kDefaultUnixMs);
}

struct Writes {
  std::atomic<int> count{0};
  std::atomic<PullId> last_id{0};
};

TEST(PullProgressTest, ReporterWritesNothingBeforeTheRowExists) {
  FakeClock clock;
  Writes w;
  ProgressReporter reporter(clock, milliseconds(500), [&](PullId id) {
    ++w.count;
    w.last_id = id;
  });
  EXPECT_EQ(reporter.pull_id(), 0);
  reporter.Report();
  reporter.ReportNow();
  EXPECT_EQ(w.count.load(), 0);
  reporter.Start(42);
  EXPECT_EQ(reporter.pull_id(), 42);
  reporter.Report();  // the first report writes
  EXPECT_EQ(w.count.load(), 1);
  EXPECT_EQ(w.last_id.load(), 42);
}

TEST(PullProgressTest, ReporterWritesAtMostOncePerIntervalUnlessAskedNow) {
  FakeClock clock;
  Writes w;
  ProgressReporter reporter(clock, milliseconds(500), [&](PullId) { ++w.count; });
  reporter.Start(7);
  reporter.ReportNow();
  EXPECT_EQ(w.count.load(), 1);
  reporter.Report();  // 0 ms after the last write
  clock.Advance(milliseconds(499));
  reporter.Report();
  EXPECT_EQ(w.count.load(), 1);
  clock.Advance(milliseconds(1));
  reporter.Report();  // 500 ms: writes, and the interval starts again
  EXPECT_EQ(w.count.load(), 2);
  clock.Advance(milliseconds(100));
  reporter.Report();
  EXPECT_EQ(w.count.load(), 2);
  reporter.ReportNow();  // not throttled, and it restarts the interval
  EXPECT_EQ(w.count.load(), 3);
  clock.Advance(milliseconds(499));
  reporter.Report();
  EXPECT_EQ(w.count.load(), 3);
}

TEST(PullProgressTest, ReportersOnManyThreadsWriteOncePerInterval) {
  FakeClock clock;
  Writes w;
  ProgressReporter reporter(clock, milliseconds(500), [&](PullId) { ++w.count; });
  reporter.Start(1);
  for (int round = 1; round <= 3; ++round) {
    std::vector<std::thread> threads;
    for (int i = 0; i < 8; ++i)
      threads.emplace_back([&] {
        for (int j = 0; j < 100; ++j) reporter.Report();
      });
    for (auto& t : threads) t.join();
    EXPECT_EQ(w.count.load(), round);
    clock.Advance(milliseconds(500));
  }
}

TEST(PullProgressTest, ReporterWritesOutsideItsLock) {
  // The write (a SQLite transaction) may take long and may itself ask for
  // a report: it runs on the reporting thread without the reporter's lock.
  FakeClock clock;
  int writes = 0;
  ProgressReporter* self = nullptr;
  ProgressReporter reporter(clock, milliseconds(500), [&](PullId) {
    ++writes;
    self->Report();  // throttled: returns without writing
  });
  self = &reporter;
  reporter.Start(3);
  reporter.ReportNow();
  EXPECT_EQ(writes, 1);
}

}  // namespace
}  // namespace exlr8
