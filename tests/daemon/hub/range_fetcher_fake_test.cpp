// RangeFetcher on the in-memory hub of fake_transport.h and a FakeClock:
// no request leaves the process (the hub test server only answers the
// revision lookup of HubClient::Open), and every wait is fake time.
#include <gtest/gtest.h>

#include <chrono>

#include "daemon/hub/range_fetcher.h"
#include "tests/daemon/base/fake_clock.h"
#include "tests/daemon/hub/fake_transport.h"
#include "tests/daemon/hub_test_server.h"
#include "tests/daemon/test_consumer.h"

namespace exlr8 {
namespace {

using std::chrono::seconds;
using testing::FakeClock;
using testing::FakeHub;
using testing::FakeHubTransport;
using testing::MakeBlob;
using testing::OpenHub;
using testing::TestConsumer;

class RangeFetcherFakeTest : public ::testing::Test {
 protected:
  RangeFetcherFakeTest() : client_(OpenHub(hub_)) {
    std::string prefix = client_->ResolveUrl("x");
    prefix.pop_back();
    net_ = std::make_unique<FakeHubTransport>(prefix, client_->commit(), &clock_);
    net_->lfs_files["w/a.safetensors"] = MakeBlob(100'000, 1);
    net_->lfs_files["w/b.safetensors"] = MakeBlob(50'000, 2);
    net_->regular_files["config.json"] = MakeBlob(3'000, 3);
  }

  RangeFetcherOptions Options() {
    RangeFetcherOptions o = testing::FastOptions();
    o.transport = net_.get();
    o.clock = &clock_;
    o.max_parallel = 4;
    return o;
  }

  // A fresh in-memory hub holding w/a.safetensors alone, whose answers
  // come after `hub_wait` and `cdn_wait` (TransferEnd::answer_wait).
  void FreshHub(std::chrono::microseconds hub_wait, std::chrono::microseconds cdn_wait) {
    std::string prefix = client_->ResolveUrl("x");
    prefix.pop_back();
    net_ = std::make_unique<FakeHubTransport>(prefix, client_->commit(), &clock_);
    net_->lfs_files["w/a.safetensors"] = MakeBlob(100'000, 1);
    net_->hub_answer_wait = hub_wait;
    net_->cdn_answer_wait = cdn_wait;
  }

  // Ranges of `path` of `n` bytes each, covering it.
  void Split(TestConsumer& c, const std::string& path, std::uint64_t size, std::uint64_t n) {
    for (std::uint64_t off = 0; off < size; off += n) c.Add(path, off, std::min(n, size - off));
  }

  std::map<std::string, std::string> AllFiles() const {
    auto all = net_->lfs_files;
    all.insert(net_->regular_files.begin(), net_->regular_files.end());
    return all;
  }

  FakeHub hub_;
  std::unique_ptr<HubClient> client_;
  FakeClock clock_;
  std::unique_ptr<FakeHubTransport> net_;
};

TEST_F(RangeFetcherFakeTest, FetchesEveryRangeWithOneHeadPerLfsFile) {
  TestConsumer c;
  Split(c, "w/a.safetensors", 100'000, 30'000);
  Split(c, "w/b.safetensors", 50'000, 20'000);
  Split(c, "config.json", 3'000, 1'000);
  RangeFetcher f(*client_, Options());
  f.ExpectServedByHub("config.json", 3'000);
  const Status s = f.Run(c);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(c.violations, 0);
  EXPECT_EQ(c.accepted.size(), 10u);
  c.ExpectBytes(AllFiles());
  EXPECT_EQ(net_->CountCalls(/*head_only=*/true), 2);  // config.json needs none
  EXPECT_EQ(net_->CountCalls(/*head_only=*/false), 10);
  EXPECT_EQ(f.counters().retries, 0u);
}

TEST_F(RangeFetcherFakeTest, ResetOnTheNthCallIsRetried) {
  net_->FailCall(2, {});  // the first range GET: no answer
  TestConsumer c;
  Split(c, "w/a.safetensors", 100'000, 50'000);
  RangeFetcher f(*client_, Options());
  const Status s = f.Run(c);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(c.violations, 0);
  c.ExpectBytes(AllFiles());
  const FetchCounters k = f.counters();
  EXPECT_EQ(k.retries, 1u);
  EXPECT_EQ(k.transfers, 3u);
  EXPECT_EQ(k.resumes, 0u);
  EXPECT_EQ(net_->calls().size(), 4u);  // HEAD, reset GET, GET, retried GET
}

TEST_F(RangeFetcherFakeTest, ResetMidBodyResumesFromTheFirstMissingByte) {
  net_->chunk = 4'000;
  net_->FailCall(2, {0, {}, 10'000});  // the first range GET breaks after 10,000 bytes
  TestConsumer c;
  c.Add("w/a.safetensors", 20'000, 50'000);
  RangeFetcher f(*client_, Options());
  const Status s = f.Run(c);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(c.violations, 0);  // no byte delivered twice
  c.ExpectBytes(AllFiles());
  EXPECT_EQ(f.counters().resumes, 1u);
  ASSERT_EQ(net_->calls().size(), 3u);
  EXPECT_EQ(net_->calls()[2].range_first, 30'000u);
  EXPECT_EQ(net_->calls()[2].range_last, 69'999u);
}

TEST_F(RangeFetcherFakeTest, RetryAfterIsWaitedInFakeTime) {
  net_->FailCall(2, {429, {"Retry-After: 30"}});
  TestConsumer c;
  c.Add("w/a.safetensors", 0, 100'000);
  RangeFetcher f(*client_, Options());
  const Clock::TimePoint start = clock_.Now();
  const Status s = f.Run(c);
  ASSERT_TRUE(s.ok()) << s.ToString();
  c.ExpectBytes(AllFiles());
  ASSERT_EQ(net_->call_times().size(), 3u);
  EXPECT_GE(net_->call_times()[2] - net_->call_times()[1], seconds(30));
  EXPECT_LT(net_->call_times()[2] - start, seconds(31));
  EXPECT_EQ(f.counters().rate_limited, 1u);
}

TEST_F(RangeFetcherFakeTest, ThrottledResolveHoldsEveryResolveForTheHubsWait) {
  net_->FailCall(1, {503, {"Retry-After: 10"}});
  TestConsumer c;
  c.Add("w/a.safetensors", 0, 1'000);
  c.Add("w/b.safetensors", 0, 1'000);
  RangeFetcherOptions o = Options();
  o.max_parallel_resolves = 1;
  RangeFetcher f(*client_, o);
  const Status s = f.Run(c);
  ASSERT_TRUE(s.ok()) << s.ToString();
  const auto& calls = net_->calls();
  const auto& times = net_->call_times();
  for (std::size_t i = 1; i < calls.size(); ++i) {
    if (calls[i].head_only) {
      EXPECT_GE(times[i] - times[0], seconds(10)) << calls[i].url;
    }
  }
  EXPECT_EQ(net_->CountCalls(/*head_only=*/true), 3);
}

TEST_F(RangeFetcherFakeTest, CdnRefusalResolvesTheFileAgain) {
  net_->FailCall(2, {403, {}});
  TestConsumer c;
  Split(c, "w/b.safetensors", 50'000, 25'000);
  RangeFetcherOptions o = Options();
  o.max_parallel = 1;  // one transfer at a time: call 2 is the first range
  RangeFetcher f(*client_, o);
  const Status s = f.Run(c);
  ASSERT_TRUE(s.ok()) << s.ToString();
  c.ExpectBytes(AllFiles());
  EXPECT_EQ(net_->CountCalls(/*head_only=*/true), 2);
  EXPECT_EQ(f.counters().reresolves, 1u);
}

TEST_F(RangeFetcherFakeTest, MissingFileFailsItsRequestsAsNotFound) {
  TestConsumer c;
  c.Add("w/missing.safetensors", 0, 10, "L1 gate");
  c.Add("w/b.safetensors", 0, 10);
  RangeFetcher f(*client_, Options());
  const Status s = f.Run(c);
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
  ASSERT_EQ(c.failed.count(0), 1u);
  EXPECT_NE(c.failed[0].message().find("L1 gate"), std::string::npos) << c.failed[0].ToString();
  EXPECT_EQ(c.accepted.size(), 1u);
}

// A round-trip-bound path (each Perform takes 10 ms of fake time): with no
// fixed --jobs the transfers in flight grow from the initial limit towards
// the ceiling, and never pass it.
TEST_F(RangeFetcherFakeTest, AdaptiveLimitGrowsOnARoundTripBoundPathUpToItsCeiling) {
  net_->lfs_files["w/big.safetensors"] = MakeBlob(2'000'000, 4);
  net_->round_trip = std::chrono::milliseconds(10);
  TestConsumer c;
  Split(c, "w/big.safetensors", 2'000'000, 1'000);
  RangeFetcherOptions o = Options();
  o.adaptive = true;
  o.adaptive_initial = 4;
  o.adaptive_floor = 2;
  o.max_parallel = 32;
  o.max_queued = 64;
  RangeFetcher f(*client_, o);
  const Status s = f.Run(c);
  ASSERT_TRUE(s.ok()) << s.ToString();
  c.ExpectBytes(AllFiles());
  EXPECT_EQ(f.counters().concurrency_peak, 32u);
  EXPECT_GT(net_->max_live(), 4);
  EXPECT_LE(net_->max_live(), 32);
  EXPECT_EQ(f.counters().concurrency_backoffs, 0u);
}

// The same path with a fixed limit: exactly that many, never more.
TEST_F(RangeFetcherFakeTest, FixedLimitStaysFixed) {
  net_->lfs_files["w/big.safetensors"] = MakeBlob(500'000, 4);
  net_->round_trip = std::chrono::milliseconds(10);
  TestConsumer c;
  Split(c, "w/big.safetensors", 500'000, 1'000);
  RangeFetcherOptions o = Options();
  o.max_parallel = 6;
  RangeFetcher f(*client_, o);
  const Status s = f.Run(c);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(net_->max_live(), 6);
  EXPECT_EQ(f.counters().concurrency_limit, 6u);
  EXPECT_EQ(f.counters().concurrency_peak, 6u);
}

// A 429 burst halves the adaptive limit (and its Retry-After is still
// waited): the fetch backs off, then completes.
TEST_F(RangeFetcherFakeTest, AdaptiveLimitBacksOffOnA429Burst) {
  net_->round_trip = std::chrono::milliseconds(10);
  for (int call = 2; call <= 9; ++call) net_->FailCall(call, {429, {"Retry-After: 1"}});
  TestConsumer c;
  Split(c, "w/a.safetensors", 100'000, 1'000);
  RangeFetcherOptions o = Options();
  o.adaptive = true;
  o.adaptive_initial = 8;
  o.adaptive_floor = 2;
  o.max_parallel = 8;
  RangeFetcher f(*client_, o);
  const Status s = f.Run(c);
  ASSERT_TRUE(s.ok()) << s.ToString();
  c.ExpectBytes(AllFiles());
  EXPECT_EQ(f.counters().rate_limited, 8u);
  EXPECT_GE(f.counters().concurrency_backoffs, 1u);
  // Retry-After: 1 is honoured: the retried ranges went out a second later.
  ASSERT_GE(net_->call_times().size(), 10u);
  EXPECT_GE(net_->call_times().back() - net_->call_times()[1], seconds(1));
}

// With no --h2-streams on an adaptive pull, the streams per connection
// follow the path: a hub answering within 2 ms makes the first ranges go
// 16 to a connection; a CDN whose answers take a long round trip then
// spreads them 4 to a connection again.
TEST_F(RangeFetcherFakeTest, StreamsPerConnectionFollowThePathsRoundTrip) {
  struct Path {
    const char* name;
    std::chrono::microseconds hub, cdn;
    std::vector<int> told;
  };
  using std::chrono::microseconds;
  for (const Path& p : {Path{"short path", microseconds(300), microseconds(400), {16}},
                        Path{"short to the hub, long to the CDN", microseconds(300), microseconds(40'000), {16, 4}},
                        Path{"long path", microseconds(20'000), microseconds(40'000), {}},
                        Path{"long to the hub, short to the CDN", microseconds(20'000), microseconds(500), {16}},
                        Path{"not measured", microseconds(-1), microseconds(-1), {}}}) {
    SCOPED_TRACE(p.name);
    FreshHub(p.hub, p.cdn);
    TestConsumer c;
    Split(c, "w/a.safetensors", 100'000, 1'000);
    RangeFetcherOptions o = Options();
    o.adaptive = true;
    o.max_parallel = 32;
    o.h2_streams_by_path = true;
    RangeFetcher f(*client_, o);
    const Status s = f.Run(c);
    ASSERT_TRUE(s.ok()) << s.ToString();
    c.ExpectBytes(net_->lfs_files);
    EXPECT_EQ(net_->streams_set(), p.told);
    EXPECT_EQ(f.counters().h2_streams, static_cast<std::uint64_t>(p.told.empty() ? 4 : p.told.back()));
  }
}

// Ranges of bulk_range_bytes or more are sent as bulk transfers (on
// connections of their own, curl_transport.h); smaller ones and the
// resolves are not; 0 makes none bulk, and so does a path found short.
TEST_F(RangeFetcherFakeTest, RangesFromTheBulkSizeUpAreBulkTransfers) {
  struct Case {
    std::uint64_t bulk;
    std::chrono::microseconds answer_wait;  // both hub and CDN; with h2_streams_by_path
    bool by_path;
    bool expect_bulk;
  };
  using std::chrono::microseconds;
  for (const Case& k : {Case{30'000, microseconds(-1), false, true}, Case{0, microseconds(-1), false, false},
                        Case{30'000, microseconds(20'000), true, true}, Case{30'000, microseconds(300), true, false}}) {
    const std::uint64_t bulk = k.bulk;
    SCOPED_TRACE("bulk_range_bytes " + std::to_string(bulk) + ", answers after " +
                 std::to_string(k.answer_wait.count()) + " us" + (k.by_path ? ", by path" : ""));
    FreshHub(k.answer_wait, k.answer_wait);
    TestConsumer c;
    c.Add("w/a.safetensors", 0, 29'999);
    c.Add("w/a.safetensors", 29'999, 30'000);
    c.Add("w/a.safetensors", 59'999, 40'001);
    RangeFetcherOptions o = Options();
    o.bulk_range_bytes = bulk;
    o.adaptive = k.by_path;
    o.h2_streams_by_path = k.by_path;
    RangeFetcher f(*client_, o);
    ASSERT_TRUE(f.Run(c).ok());
    c.ExpectBytes(net_->lfs_files);
    std::map<std::uint64_t, bool> bulk_by_length;
    for (const HttpRequest& r : net_->calls()) {
      if (!r.has_range) {
        EXPECT_FALSE(r.bulk) << r.url;
        continue;
      }
      bulk_by_length[r.range_last - r.range_first + 1] = r.bulk;
    }
    EXPECT_EQ(bulk_by_length,
              (std::map<std::uint64_t, bool>{{29'999, false}, {30'000, k.expect_bulk}, {40'001, k.expect_bulk}}));
  }
}

// --h2-streams given (or a fixed --jobs): the streams stay as set, whatever
// the path.
TEST_F(RangeFetcherFakeTest, StreamsPerConnectionStayAsSetWithoutByPath) {
  net_->hub_answer_wait = std::chrono::microseconds(300);
  net_->cdn_answer_wait = std::chrono::microseconds(300);
  TestConsumer c;
  Split(c, "w/a.safetensors", 100'000, 1'000);
  RangeFetcherOptions o = Options();
  o.adaptive = true;
  o.h2_streams_per_connection = 2;
  RangeFetcher f(*client_, o);
  ASSERT_TRUE(f.Run(c).ok());
  EXPECT_TRUE(net_->streams_set().empty());
  EXPECT_EQ(f.counters().h2_streams, 2u);
}

}  // namespace
}  // namespace exlr8
