// FetchSession: one fetcher run fed while it runs, against a fake hub and
// CDN on loopback: foreground steps go first and finish while background
// work streams on a bounded number of slots; Abort ends everything once.
#include "daemon/pull/fetch_session.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>

#include "tests/daemon/hub_test_server.h"
#include "tests/daemon/test_consumer.h"

namespace exlr8 {
namespace {

using testing::FakeHub;
using testing::MakeBlob;
using testing::ServeBlobRange;
using testing::OpenHub;
using testing::TestConsumer;
using testing::TestRequest;
using testing::TestResponse;

// Counts its requests in flight with atomics the test thread may read.
class CountingConsumer : public TestConsumer {
 public:
  std::atomic<int> in_flight{0};
  std::atomic<int> peak{0};
  std::atomic<int> ended{0};
  bool NextRequest(RangeRequest* out) override {
    if (!TestConsumer::NextRequest(out)) return false;
    const int now = ++in_flight;
    int p = peak.load();
    while (now > p && !peak.compare_exchange_weak(p, now)) {
    }
    return true;
  }
  RangeVerdict OnComplete(std::uint64_t id) override {
    RangeVerdict v = TestConsumer::OnComplete(id);
    if (v.kind == RangeVerdict::Kind::kAccept) End();
    return v;
  }
  void OnFailed(std::uint64_t id, const Status& status) override {
    TestConsumer::OnFailed(id, status);
    End();
  }

 private:
  void End() {
    --in_flight;
    ++ended;
  }
};

struct Fixture {
  FakeHub hub;
  std::unique_ptr<HubClient> client;
  Fixture() {
    hub.lfs_files["dense.bin"] = MakeBlob(2'000'000, 41);
    hub.lfs_files["index.bin"] = MakeBlob(200'000, 42);
    // The background file is slow (2 MB/s per range), the foreground fast.
    hub.cdn_override = [this](const TestRequest& r) -> std::optional<TestResponse> {
      if (r.target.find("dense.bin") == std::string::npos) return std::nullopt;
      TestResponse resp = ServeBlobRange(hub.lfs_files["dense.bin"], r);
      resp.bytes_per_second = 2'000'000;
      return resp;
    };
    client = OpenHub(hub);
  }
};

TEST(FetchSessionTest, ForegroundStepsFinishWhileBackgroundStreamsOnCappedSlots) {
  Fixture fx;
  ASSERT_NE(fx.client, nullptr);
  RangeFetcherOptions o;
  o.max_parallel = 8;
  RangeFetcher fetcher(*fx.client, o);
  CountingConsumer background, step1, step2;
  for (int i = 0; i < 10; ++i) background.Add("dense.bin", i * 200'000, 200'000);  // 0.1 s each
  for (int i = 0; i < 20; ++i) step1.Add("index.bin", i * 10'000, 10'000);
  for (int i = 0; i < 20; ++i) step2.Add("index.bin", i * 10'000 + 5, 9'000);
  FetchSession session(fetcher, nullptr);
  session.Submit(background, FetchSession::kBackground, 2);
  ASSERT_TRUE(session.Wait(session.Submit(step1, FetchSession::kForeground)).ok());
  ASSERT_TRUE(session.Wait(session.Submit(step2, FetchSession::kForeground)).ok());
  // The steps did not wait for the background, which needs at least 0.5 s
  // (10 ranges paced at 0.1 s each, on 2 slots).
  EXPECT_LT(background.ended.load(), 10);
  EXPECT_LE(background.peak.load(), 2);  // capped while the session is open
  EXPECT_EQ(step1.accepted.size(), 20u);
  EXPECT_EQ(step2.accepted.size(), 20u);
  ASSERT_TRUE(session.Finish().ok());
  EXPECT_EQ(background.accepted.size(), 10u);
  for (const TestConsumer* c : {static_cast<TestConsumer*>(&background), static_cast<TestConsumer*>(&step1),
                                static_cast<TestConsumer*>(&step2)}) {
    EXPECT_EQ(c->violations, 0);
    c->ExpectBytes(fx.hub.lfs_files);
  }
}

// Records when its first and last requests were accepted.
class TimedConsumer : public TestConsumer {
 public:
  std::atomic<std::int64_t> first_ns{0}, last_ns{0};
  RangeVerdict OnComplete(std::uint64_t id) override {
    RangeVerdict v = TestConsumer::OnComplete(id);
    if (v.kind == RangeVerdict::Kind::kAccept) {
      const std::int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
      std::int64_t zero = 0;
      first_ns.compare_exchange_strong(zero, now);
      last_ns.store(now);
    }
    return v;
  }
};

// While a planner step has requests in flight, background transfers
// receive nothing (the step gets the link) — but for at most max_hold, so a
// long step never leaves them stalled into libcurl's stall timeout.
TEST(FetchSessionTest, AStepHoldsTheBackgroundBackForAtMostMaxHold) {
  for (const auto max_hold : {std::chrono::milliseconds(10'000), std::chrono::milliseconds(100)}) {
    FakeHub hub;
    hub.lfs_files["step.bin"] = MakeBlob(1'500'000, 43);
    hub.lfs_files["bg.bin"] = MakeBlob(1'000'000, 44);
    hub.cdn_override = [&hub](const TestRequest& r) -> std::optional<TestResponse> {
      if (r.target.find("step.bin") == std::string::npos) return std::nullopt;
      TestResponse resp = ServeBlobRange(hub.lfs_files["step.bin"], r);
      resp.bytes_per_second = 1'000'000;  // the step takes 1.5 s
      return resp;
    };
    auto client = OpenHub(hub);
    ASSERT_NE(client, nullptr);
    RangeFetcher fetcher(*client, RangeFetcherOptions{});
    TimedConsumer step, background;
    step.Add("step.bin", 0, 1'500'000);
    for (int i = 0; i < 4; ++i) background.Add("bg.bin", i * 250'000, 250'000);
    FetchSession session(fetcher, nullptr, 1, max_hold);
    const FetchSession::Ticket t = session.Submit(step, FetchSession::kStep);
    session.Submit(background, FetchSession::kBackground, 2);
    ASSERT_TRUE(session.Wait(t).ok());
    ASSERT_TRUE(session.Finish().ok());
    EXPECT_EQ(step.accepted.size(), 1u);
    ASSERT_EQ(background.accepted.size(), 4u);
    if (max_hold > std::chrono::seconds(1)) {
      // held for the whole step: nothing of the background arrived before it ended
      EXPECT_GT(background.first_ns.load(), step.last_ns.load());
    } else {
      // held 0.1 s, then the background (fast) ended long before the step (1.5 s)
      EXPECT_LT(background.last_ns.load(), step.last_ns.load());
    }
    for (const TestConsumer* c : {static_cast<TestConsumer*>(&step), static_cast<TestConsumer*>(&background)}) {
      EXPECT_EQ(c->violations, 0);
      c->ExpectBytes(hub.lfs_files);
    }
  }
}

TEST(FetchSessionTest, CapIsLiftedOnceNothingElseCanCome) {
  Fixture fx;
  ASSERT_NE(fx.client, nullptr);
  RangeFetcherOptions o;
  o.max_parallel = 8;
  RangeFetcher fetcher(*fx.client, o);
  CountingConsumer background;
  for (int i = 0; i < 10; ++i) background.Add("dense.bin", i * 200'000, 200'000);
  FetchSession session(fetcher, nullptr);
  session.Submit(background, FetchSession::kBackground, 1);
  ASSERT_TRUE(session.Finish().ok());  // closed: the background may use every slot
  EXPECT_GT(background.peak.load(), 1);
  EXPECT_EQ(background.accepted.size(), 10u);
}

TEST(FetchSessionTest, AbortEndsEveryRequestOnceAndWaitSaysWhy) {
  Fixture fx;
  ASSERT_NE(fx.client, nullptr);
  RangeFetcher fetcher(*fx.client, RangeFetcherOptions{});
  CountingConsumer background, step;
  for (int i = 0; i < 10; ++i) background.Add("dense.bin", i * 200'000, 200'000);
  for (int i = 0; i < 10; ++i) step.Add("dense.bin", i * 1000, 1000);
  FetchSession session(fetcher, nullptr);
  session.Submit(background, FetchSession::kBackground, 2);
  const FetchSession::Ticket t = session.Submit(step, FetchSession::kForeground);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  session.Abort();
  Status s = session.Wait(t);
  // Either every request of the step ended first (accepted, or failed as
  // cancelled: Wait is OK and the consumer holds the failures), or the fetch
  // ended first and Wait says why.
  if (!s.ok()) {
    EXPECT_EQ(s.code(), StatusCode::kCancelled) << s.ToString();
  }
  EXPECT_EQ(step.accepted.size() + step.failed.size(), step.next);
  for (const auto& [id, st] : step.failed) {
    EXPECT_EQ(st.code(), StatusCode::kCancelled) << id << ": " << st.ToString();
  }
  EXPECT_EQ(background.in_flight.load(), 0);  // every handed-out request ended
  EXPECT_EQ(step.in_flight.load(), 0);
  EXPECT_EQ(background.violations, 0);
  EXPECT_EQ(step.violations, 0);
  EXPECT_LT(background.accepted.size(), 10u);
  // A step submitted after the end is answered at once.
  CountingConsumer late;
  late.Add("index.bin", 0, 10);
  EXPECT_FALSE(session.Wait(session.Submit(late, FetchSession::kForeground)).ok());
}

TEST(FetchSessionTest, EmptyStepsAndManySubmissions) {
  Fixture fx;
  ASSERT_NE(fx.client, nullptr);
  RangeFetcher fetcher(*fx.client, RangeFetcherOptions{});
  FetchSession session(fetcher, nullptr);
  std::vector<std::unique_ptr<CountingConsumer>> steps;
  for (int i = 0; i < 40; ++i) {
    steps.push_back(std::make_unique<CountingConsumer>());
    if (i % 2) steps.back()->Add("index.bin", i * 100, 100);
    EXPECT_TRUE(session.Wait(session.Submit(*steps.back(), FetchSession::kForeground)).ok()) << i;
  }
  EXPECT_TRUE(session.Finish().ok());
  int accepted = 0;
  for (const auto& c : steps) accepted += static_cast<int>(c->accepted.size());
  EXPECT_EQ(accepted, 20);
}

}  // namespace
}  // namespace exlr8
