// RangeJobs alone: the live requests' table and endings, on a FakeClock,
// with a HubClient opened on the fake hub (no socket) for the names in
// messages.
#include "daemon/hub/range_jobs.h"

#include <gtest/gtest.h>

#include <thread>

#include "tests/daemon/base/fake_clock.h"
#include "tests/daemon/hub/fake_transport.h"
#include "tests/daemon/test_consumer.h"

namespace exlr8 {
namespace {

using testing::FakeClock;
using testing::FakeHubTransport;
using testing::TestConsumer;

constexpr char kCommit[] = "0123456789abcdef0123456789abcdef01234567";

class RangeJobsTest : public ::testing::Test {
 protected:
  RangeJobsTest()
      : net_("http://hub.test/org/model/resolve/" + std::string(kCommit) + "/", kCommit, &clock_) {
    net_.canned["http://hub.test/api/models/org/model/revision/main"] = {
        200, {}, std::string(R"({"sha": ")") + kCommit + R"("})"};
    HubOptions o;
    o.endpoint = "http://hub.test";
    o.token_from_environment = false;
    o.use_env_proxy = false;
    o.clock = &clock_;
    o.transport = &net_;
    auto c = HubClient::Open(o, "org/model", "main");
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    hub_ = std::move(c).value();
    RetryPolicy policy;
    policy.max_attempts = 2;
    sched_ = std::make_unique<TransferScheduler>(clock_, policy, /*seed=*/1);
    resolver_ = std::make_unique<FileResolver>(
        FileResolver::Naming{[this](std::string_view p) { return hub_->ResolveUrl(p); },
                             [this](std::string_view p) { return hub_->DescribeFile(p); }},
        *sched_, FileResolver::Options{});
  }

  std::unique_ptr<RangeJobs> Jobs(bool stop_on_failure = false) {
    return std::make_unique<RangeJobs>(*hub_, *sched_, *resolver_, counters_, /*max_refetches=*/1,
                                       stop_on_failure);
  }

  FakeClock clock_;
  FakeHubTransport net_;
  std::unique_ptr<HubClient> hub_;
  std::unique_ptr<TransferScheduler> sched_;
  std::unique_ptr<FileResolver> resolver_;
  FetchCounterCells counters_;
};

TEST_F(RangeJobsTest, PullsValidRequestsIntoTheReadyLineAndFailsBadOnes) {
  TestConsumer c;
  c.Add("a.bin", 0, 10, "good");
  c.Add("a.bin", 0, 0, "empty");
  c.Add("../x", 0, 10, "bad path");
  auto jobs = Jobs();
  jobs->StartRun(&c, 8);
  jobs->PullRequests();
  EXPECT_TRUE(jobs->source_done());
  ASSERT_TRUE(sched_->HasReady());
  EXPECT_EQ(jobs->job(sched_->FrontReady()).req.label, "good");
  ASSERT_EQ(c.failed.size(), 2u);
  EXPECT_EQ(c.failed[1].code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.failed[1].message().find("empty: bad range"), std::string::npos) << c.failed[1].ToString();
  EXPECT_EQ(c.failed[2].code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(counters_.Snapshot().requests_started, 3u);
  EXPECT_EQ(counters_.Snapshot().requests_failed, 2u);
  EXPECT_EQ(jobs->RunResult().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(jobs->RunResult().message().find("(2 request(s) failed)"), std::string::npos);
}

TEST_F(RangeJobsTest, PullsNoMoreThanItHasJobsFor) {
  TestConsumer c;
  for (int i = 0; i < 5; ++i) c.Add("a.bin", static_cast<std::uint64_t>(i) * 10, 10);
  auto jobs = Jobs();
  jobs->StartRun(&c, 3);
  jobs->PullRequests();
  EXPECT_EQ(c.next, 3u);
  EXPECT_FALSE(jobs->source_done());
  EXPECT_TRUE(jobs->AnyLive());
}

TEST_F(RangeJobsTest, RetryBacksOffThenFailsNamingTheRangeOnceAttemptsAreSpent) {
  TestConsumer c;
  c.Add("a.bin", 100, 50, "L1");
  auto jobs = Jobs();
  jobs->StartRun(&c, 4);
  jobs->PullRequests();
  const std::uint32_t ji = sched_->FrontReady();
  sched_->PopReady();
  jobs->Retry(ji, IOError("reset"));
  EXPECT_EQ(jobs->job(ji).state, RangeJobs::Job::State::kBackoff);
  EXPECT_EQ(counters_.Snapshot().retries, 1u);
  jobs->Retry(ji, IOError("reset again"));
  ASSERT_EQ(c.failed.count(0), 1u);
  EXPECT_EQ(c.failed[0].code(), StatusCode::kIOError);
  EXPECT_NE(
      c.failed[0].message().find("L1: org/model@0123456789ab file 'a.bin' bytes=100-149: failed after 2 "
                                 "attempts; last error: reset again"),
      std::string::npos)
      << c.failed[0].ToString();
  EXPECT_FALSE(jobs->AnyLive());
}

TEST_F(RangeJobsTest, RefetchResetsTheRequestThenFailsAsCorruptionPastTheBound) {
  TestConsumer c;
  c.Add("a.bin", 0, 10);
  c.verdict = [](std::uint64_t, const std::string&) {
    return RangeVerdict::Refetch(CorruptionError("bad sum"));
  };
  auto jobs = Jobs();
  jobs->StartRun(&c, 4);
  jobs->PullRequests();
  const std::uint32_t ji = sched_->FrontReady();
  sched_->PopReady();
  jobs->Complete(ji);
  EXPECT_EQ(c.resets[0], 1);
  EXPECT_EQ(jobs->job(ji).state, RangeJobs::Job::State::kReady);
  jobs->Complete(ji);
  ASSERT_EQ(c.failed.count(0), 1u);
  EXPECT_EQ(c.failed[0].code(), StatusCode::kCorruption);
  EXPECT_NE(c.failed[0].message().find("failed verification 2 times (bad sum)"), std::string::npos);
}

TEST_F(RangeJobsTest, PendingVerdictIsAppliedWhenDeliveredFromAnotherThread) {
  TestConsumer c;
  c.Add("a.bin", 0, 10);
  c.Add("a.bin", 10, 10);
  c.verdict = [](std::uint64_t, const std::string&) { return RangeVerdict::Pending(); };
  auto jobs = Jobs();
  jobs->StartRun(&c, 4);
  jobs->PullRequests();
  jobs->Complete(0);
  jobs->Complete(1);
  EXPECT_TRUE(jobs->AnyVerifying());
  // A cancel now ends neither: their verdicts are owed.
  jobs->FailAllLive(CancelledError("fetch cancelled"));
  EXPECT_TRUE(c.failed.empty());
  std::thread([&] {
    jobs->Deliver(0, RangeVerdict::Accept());
    jobs->Deliver(1, RangeVerdict::Refetch());
  }).join();
  const Status cancelled = CancelledError("fetch cancelled");
  jobs->ApplyDelivered(&cancelled);
  EXPECT_FALSE(jobs->AnyVerifying());
  EXPECT_EQ(counters_.Snapshot().requests_done, 1u);
  ASSERT_EQ(c.failed.count(1), 1u);  // a Refetch after the run ended
  EXPECT_EQ(c.failed[1].code(), StatusCode::kCancelled);
  EXPECT_FALSE(jobs->AnyLive());
}

TEST_F(RangeJobsTest, FirstFailureStopsTheRunWhenAskedTo) {
  TestConsumer c;
  c.Add("a.bin", 0, 0);
  c.Add("a.bin", 0, 10);
  auto jobs = Jobs(/*stop_on_failure=*/true);
  jobs->StartRun(&c, 4);
  jobs->PullRequests();
  EXPECT_TRUE(jobs->stopping());
  EXPECT_EQ(c.next, 1u);  // no request pulled after it
}

}  // namespace
}  // namespace exlr8
