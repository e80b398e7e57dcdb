// RangeFetcher against a fake hub (127.0.0.1) and fake CDN (127.0.0.2) on
// real loopback sockets, with faults injected per request.
#include "daemon/hub/range_fetcher.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "tests/daemon/hub_test_server.h"
#include "tests/daemon/test_consumer.h"

namespace exlr8 {
namespace {

using ::testing::HasSubstr;
using testing::FakeHub;
using testing::MakeBlob;
using testing::ServeBlobRange;
using testing::TestRequest;
using testing::TestResponse;
using testing::FastOptions;
using testing::OpenHub;
using testing::TestConsumer;
using testing::TestHubOptions;

// Splits [0, size) into `n` near-equal ranges of `path`.
void AddSplit(TestConsumer& c, const std::string& path, std::uint64_t size, int n) {
  std::uint64_t off = 0;
  for (int i = 0; i < n; ++i) {
    const std::uint64_t len = size / n + (static_cast<std::uint64_t>(i) < size % n ? 1 : 0);
    c.Add(path, off, len);
    off += len;
  }
}

TEST(RangeFetcherTest, ManyRangesOneResolvePerFileTokenOnlyToHub) {
  FakeHub hub;
  hub.required_token = "hf_tok_abc";
  hub.lfs_files["experts/a.k3.safetensors"] = MakeBlob(700'001, 1);
  hub.lfs_files["experts/b.k4.safetensors"] = MakeBlob(300'000, 2);
  HubOptions ho = TestHubOptions(hub);
  ho.token = "hf_tok_abc";
  auto client = OpenHub(hub, ho);
  ASSERT_NE(client, nullptr);
  TestConsumer c;
  AddSplit(c, "experts/a.k3.safetensors", 700'001, 150);
  AddSplit(c, "experts/b.k4.safetensors", 300'000, 70);
  RangeFetcher f(*client, FastOptions());
  Status s = f.Run(c);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(c.violations, 0);
  EXPECT_EQ(c.accepted.size(), 220u);
  c.ExpectBytes(hub.lfs_files);
  EXPECT_EQ(hub.CountHub("HEAD", "/resolve/"), 2);
  EXPECT_EQ(hub.CountHub("GET", "/resolve/"), 0);
  EXPECT_EQ(hub.cdn().request_count(), 220u);
  for (const TestRequest& r : hub.cdn().requests()) {
    EXPECT_FALSE(r.HasHeader("authorization"));
    EXPECT_EQ(r.Header("accept-encoding"), "identity");
    EXPECT_THAT(r.Header("range"), ::testing::StartsWith("bytes="));
    EXPECT_THAT(r.Header("range"), ::testing::Not(HasSubstr(",")));
    EXPECT_THAT(r.Header("user-agent"), HasSubstr("exlr8d/"));
  }
  for (const TestRequest& r : hub.hub().requests()) EXPECT_EQ(r.Header("authorization"), "Bearer hf_tok_abc");
  const FetchCounters k = f.counters();
  EXPECT_EQ(k.resolves, 2u);
  EXPECT_EQ(k.reresolves, 0u);
  EXPECT_EQ(k.requests_done, 220u);
  EXPECT_EQ(k.bytes_received, 1'000'001u);
  EXPECT_EQ(k.retries, 0u);
  EXPECT_EQ(k.active_transfers, 0u);
  // Connections are reused: one per transfer slot, never set up again (the
  // hub's connections for the resolves have room of their own beside them).
  std::printf("%d CDN connections for 220 requests\n", hub.cdn().connections());
  EXPECT_LE(hub.cdn().connections(), 16);
  EXPECT_LE(hub.cdn().max_concurrent_connections(), 16);
}

// A resolve goes to the hub, another host than the CDN: it must not take
// the connection of a CDN transfer slot from the pool, which the next range
// would then set up again (a TCP and TLS handshake over a real path). Each
// of the 24 files here is resolved while the other slots stream the
// previous file's ranges.
TEST(RangeFetcherTest, ResolvesNeverCostACdnConnection) {
  FakeHub hub;
  hub.cdn_override = [](const TestRequest&) -> std::optional<TestResponse> {
    std::this_thread::sleep_for(std::chrono::milliseconds(4));  // keeps every CDN slot busy
    return std::nullopt;
  };
  TestConsumer c;
  for (int i = 0; i < 24; ++i) {
    const std::string path = "experts/f" + std::to_string(i) + ".k3.safetensors";
    hub.lfs_files[path] = MakeBlob(64'000, static_cast<std::uint64_t>(i) + 1);
    AddSplit(c, path, 64'000, 20);
  }
  auto client = OpenHub(hub, TestHubOptions(hub));
  ASSERT_NE(client, nullptr);
  RangeFetcherOptions o = FastOptions();
  o.max_parallel = 16;
  RangeFetcher f(*client, o);
  ASSERT_TRUE(f.Run(c).ok());
  c.ExpectBytes(hub.lfs_files);
  EXPECT_EQ(f.counters().resolves, 24u);
  std::printf("%d CDN connections for %zu requests, %d at most at once\n", hub.cdn().connections(),
              hub.cdn().request_count(), hub.cdn().max_concurrent_connections());
  EXPECT_LE(hub.cdn().connections(), 16) << "CDN connections closed for the hub's and set up again";
}

TEST(RangeFetcherTest, RegularFileRangesGoToTheHubWithToken) {
  FakeHub hub;
  hub.required_token = "hf_t";
  hub.regular_files["tokenizer.json"] = MakeBlob(10'000, 5);
  HubOptions ho = TestHubOptions(hub);
  ho.token = "hf_t";
  auto client = OpenHub(hub, ho);
  ASSERT_NE(client, nullptr);
  TestConsumer c;
  AddSplit(c, "tokenizer.json", 10'000, 5);
  RangeFetcher f(*client, FastOptions());
  ASSERT_TRUE(f.Run(c).ok());
  c.ExpectBytes(hub.regular_files);
  EXPECT_EQ(hub.CountHub("HEAD", "/resolve/"), 1);
  EXPECT_EQ(hub.CountHub("GET", "/resolve/"), 5);
  EXPECT_EQ(hub.cdn().request_count(), 0u);
  EXPECT_EQ(f.counters().resolves, 6u);  // every /resolve/ request the hub saw
}

// A file the listing shows as a regular git file needs no HEAD: its ranges
// go to /resolve/ directly, one hub request each.
TEST(RangeFetcherTest, FileExpectedOnTheHubSkipsTheHead) {
  FakeHub hub;
  hub.required_token = "hf_t";
  hub.regular_files["tokenizer.json"] = MakeBlob(10'000, 5);
  hub.regular_files["config.json"] = MakeBlob(300, 6);
  HubOptions ho = TestHubOptions(hub);
  ho.token = "hf_t";
  auto client = OpenHub(hub, ho);
  ASSERT_NE(client, nullptr);
  TestConsumer c;
  AddSplit(c, "tokenizer.json", 10'000, 5);
  c.Add("config.json", 0, 300);
  RangeFetcher f(*client, FastOptions());
  f.ExpectServedByHub("tokenizer.json", 10'000);
  f.ExpectServedByHub("config.json", 300);
  Status s = f.Run(c);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(c.violations, 0);
  c.ExpectBytes(hub.regular_files);
  EXPECT_EQ(hub.CountHub("HEAD", "/resolve/"), 0);
  EXPECT_EQ(hub.CountHub("GET", "/resolve/"), 6);
  for (const TestRequest& r : hub.hub().requests()) EXPECT_EQ(r.Header("authorization"), "Bearer hf_t");
  EXPECT_EQ(f.counters().resolves, 6u);
  EXPECT_EQ(f.counters().retries, 0u);
}

// The listing is only a hint: a hub that redirects such a file anyway gets
// the usual HEAD, and the ranges then go to the CDN, without using up tries.
TEST(RangeFetcherTest, FileExpectedOnTheHubThatRedirectsIsResolved) {
  FakeHub hub;
  hub.lfs_files["big.bin"] = MakeBlob(100'000, 7);
  auto client = OpenHub(hub, TestHubOptions(hub));
  ASSERT_NE(client, nullptr);
  TestConsumer c;
  AddSplit(c, "big.bin", 100'000, 20);
  RangeFetcherOptions o = FastOptions();
  o.max_attempts = 1;  // a redirect must not count as a failed try
  RangeFetcher f(*client, o);
  f.ExpectServedByHub("big.bin", 100'000);
  Status s = f.Run(c);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(c.violations, 0);
  c.ExpectBytes(hub.lfs_files);
  EXPECT_EQ(hub.CountHub("HEAD", "/resolve/"), 1);
  const int redirected_gets = hub.CountHub("GET", "/resolve/");
  EXPECT_GE(redirected_gets, 1);
  EXPECT_LE(redirected_gets, o.max_parallel);  // only those already started
  EXPECT_EQ(hub.CountCdn("/"), 20);
  EXPECT_EQ(f.counters().retries, 0u);
}

// The URL pins the commit; a hub answering for another one is broken.
TEST(RangeFetcherTest, HubAnsweringForAnotherCommitIsCorruption) {
  FakeHub hub;
  hub.regular_files["config.json"] = MakeBlob(500, 8);
  auto client = OpenHub(hub, TestHubOptions(hub));
  ASSERT_NE(client, nullptr);
  hub.hub_override = [&](const TestRequest& r) -> std::optional<TestResponse> {
    if (r.target.find("/resolve/") == std::string::npos) return std::nullopt;
    TestResponse resp = ServeBlobRange(hub.regular_files["config.json"], r);
    resp.headers.emplace_back("X-Repo-Commit", std::string(40, 'f'));
    return resp;
  };
  TestConsumer c;
  c.Add("config.json", 0, 500, "config");
  RangeFetcher f(*client, FastOptions());
  f.ExpectServedByHub("config.json", 500);
  Status s = f.Run(c);
  EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
  ASSERT_EQ(c.failed.size(), 1u);
  EXPECT_THAT(c.failed[0].message(), HasSubstr("answered for commit"));
  EXPECT_THAT(c.failed[0].message(), HasSubstr("config"));
  EXPECT_TRUE(c.accepted.empty());
}

TEST(RangeFetcherTest, Cdn403TriggersOneReresolve) {
  FakeHub hub;
  hub.lfs_files["a.bin"] = MakeBlob(200'000, 3);
  auto client = OpenHub(hub, TestHubOptions(hub));
  ASSERT_NE(client, nullptr);
  std::atomic<int> served{0};
  hub.cdn_override = [&](const TestRequest&) -> std::optional<TestResponse> {
    if (++served == 10) ++hub.signature;  // every URL handed out so far expires
    return std::nullopt;
  };
  TestConsumer c;
  AddSplit(c, "a.bin", 200'000, 40);
  RangeFetcherOptions o = FastOptions();
  o.max_parallel = 4;
  RangeFetcher f(*client, o);
  Status s = f.Run(c);
  ASSERT_TRUE(s.ok()) << s.ToString();
  c.ExpectBytes(hub.lfs_files);
  EXPECT_EQ(c.violations, 0);
  EXPECT_EQ(hub.CountHub("HEAD", "/resolve/"), 2);
  EXPECT_EQ(f.counters().reresolves, 1u);
}

// The token never goes to the CDN, so a CDN that keeps refusing freshly
// signed URLs is not the token's fault: Unavailable, not "fix HF_TOKEN"
// (exit 5), and the re-resolves back off rather than come back to back.
TEST(RangeFetcherTest, PersistentCdn403FailsAsUnavailableAfterBackedOffReresolves) {
  FakeHub hub;
  hub.lfs_files["a.bin"] = MakeBlob(1000, 3);
  auto client = OpenHub(hub, TestHubOptions(hub));
  ASSERT_NE(client, nullptr);
  hub.cdn_override = [&](const TestRequest&) -> std::optional<TestResponse> {
    TestResponse r;
    r.status = 403;
    return r;
  };
  TestConsumer c;
  c.Add("a.bin", 0, 1000, "L1 e2 up h0 K3");
  RangeFetcherOptions o = FastOptions();
  o.max_reresolves_per_file = 3;
  o.retry_base = std::chrono::milliseconds(100);
  o.retry_cap = std::chrono::milliseconds(1000);
  RangeFetcher f(*client, o);
  const auto t0 = std::chrono::steady_clock::now();
  Status s = f.Run(c);
  // Backoffs of 50-100 and 100-200 ms (jittered) before the 2nd and 3rd
  // re-resolve; the first, for an expired URL, waits for nothing.
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(150));
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  ASSERT_EQ(c.failed.size(), 1u);
  EXPECT_EQ(c.failed[0].code(), StatusCode::kUnavailable);
  EXPECT_THAT(c.failed[0].message(), HasSubstr("L1 e2 up h0 K3"));
  EXPECT_THAT(c.failed[0].message(), HasSubstr("the token is never sent to the CDN"));
  EXPECT_EQ(hub.CountHub("HEAD", "/resolve/"), 4);  // first + 3 re-resolves
}

TEST(RangeFetcherTest, RateLimitWaitsAsRetryAfterSays) {
  FakeHub hub;
  hub.lfs_files["a.bin"] = MakeBlob(5000, 4);
  auto client = OpenHub(hub, TestHubOptions(hub));
  ASSERT_NE(client, nullptr);
  std::atomic<int> calls{0};
  hub.cdn_override = [&](const TestRequest&) -> std::optional<TestResponse> {
    if (calls++ > 0) return std::nullopt;
    TestResponse r;
    r.status = 429;
    r.headers.emplace_back("Retry-After", "1");
    return r;
  };
  TestConsumer c;
  c.Add("a.bin", 100, 4000);
  RangeFetcher f(*client, FastOptions());
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(f.Run(c).ok());
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(950));
  c.ExpectBytes(hub.lfs_files);
  EXPECT_EQ(f.counters().rate_limited, 1u);
}

// A range that fails because the server asks to wait longer than allowed
// fails at once and says so, not only "(throttled 1 times)".
TEST(RangeFetcherTest, AWaitPastTheCapFailsAtOnceSayingSo) {
  FakeHub hub;
  hub.lfs_files["a.bin"] = MakeBlob(5000, 4);
  auto client = OpenHub(hub, TestHubOptions(hub));
  ASSERT_NE(client, nullptr);
  hub.cdn_override = [&](const TestRequest&) -> std::optional<TestResponse> {
    TestResponse r;
    r.status = 429;
    r.headers.emplace_back("Retry-After", "600");
    return r;
  };
  TestConsumer c;
  c.Add("a.bin", 100, 4000);
  RangeFetcherOptions o = FastOptions();
  o.max_throttle_wait = std::chrono::seconds(30);
  RangeFetcher f(*client, o);
  const auto t0 = std::chrono::steady_clock::now();
  Status s = f.Run(c);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr("server asks to wait 600 s, more than the 30 s allowed"));
  EXPECT_EQ(hub.cdn().request_count(), 1u);
}

TEST(RangeFetcherTest, ResolveRateLimitHonoursRateLimitHeader) {
  FakeHub hub;
  hub.lfs_files["a.bin"] = MakeBlob(5000, 4);
  auto client = OpenHub(hub, TestHubOptions(hub));
  ASSERT_NE(client, nullptr);
  std::atomic<int> calls{0};
  hub.hub_override = [&](const TestRequest& r) -> std::optional<TestResponse> {
    if (r.method != "HEAD" || calls++ > 0) return std::nullopt;
    TestResponse resp;
    resp.status = 429;
    resp.headers.emplace_back("RateLimit", "\"resolvers\";r=0;t=1");
    return resp;
  };
  TestConsumer c;
  c.Add("a.bin", 0, 5000);
  RangeFetcher f(*client, FastOptions());
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(f.Run(c).ok());
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(950));
  EXPECT_EQ(f.counters().rate_limited, 1u);
  EXPECT_EQ(client->stats().rate_limited, 1u);
}

TEST(RangeFetcherTest, IgnoredRangeSkipsToOffsetAndCutsTheRest) {
  FakeHub hub;
  hub.lfs_files["a.bin"] = MakeBlob(4 << 20, 5);
  auto client = OpenHub(hub, TestHubOptions(hub));
  ASSERT_NE(client, nullptr);
  hub.cdn_override = [&](const TestRequest&) -> std::optional<TestResponse> {
    TestResponse r;
    r.status = 200;  // ignores Range
    r.body = hub.lfs_files["a.bin"];
    return r;
  };
  TestConsumer c;
  c.Add("a.bin", 1'000'000, 1000);
  c.Add("a.bin", 0, 777);
  c.Add("a.bin", (4 << 20) - 10, 10);
  RangeFetcher f(*client, FastOptions());
  Status s = f.Run(c);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(c.violations, 0);
  c.ExpectBytes(hub.lfs_files);
  EXPECT_EQ(f.counters().ignored_range, 3u);
  EXPECT_EQ(f.counters().bytes_received, 1787u);
}

TEST(RangeFetcherTest, CutBodyResumesFromTheRightOffset) {
  FakeHub hub;
  hub.lfs_files["a.bin"] = MakeBlob(1 << 20, 6);
  auto client = OpenHub(hub, TestHubOptions(hub));
  ASSERT_NE(client, nullptr);
  std::mutex mu;
  std::vector<std::string> ranges;
  std::atomic<int> calls{0};
  hub.cdn_override = [&](const TestRequest& r) -> std::optional<TestResponse> {
    {
      std::lock_guard<std::mutex> lock(mu);
      ranges.push_back(r.Header("range"));
    }
    const int n = calls++;
    TestResponse resp = ServeBlobRange(hub.lfs_files["a.bin"], r);
    if (n == 0) resp.send_only = 100'003;  // reset mid-body
    if (n == 1) {                          // clean but short answer
      resp.body.resize(50'000);
      resp.headers.clear();
      std::uint64_t first = 0;
      std::optional<std::uint64_t> last;
      testing::ParseRangeHeader(r.Header("range"), &first, &last);
      resp.headers.emplace_back("Content-Range", "bytes " + std::to_string(first) + "-" + std::to_string(*last) +
                                                     "/" + std::to_string(1 << 20));
    }
    return resp;
  };
  TestConsumer c;
  c.Add("a.bin", 10, 500'000, "L40 e7 gate h3 K3");
  RangeFetcher f(*client, FastOptions());
  Status s = f.Run(c);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(c.violations, 0);
  c.ExpectBytes(hub.lfs_files);
  ASSERT_EQ(ranges.size(), 3u);
  EXPECT_EQ(ranges[0], "bytes=10-500009");
  EXPECT_EQ(ranges[1], "bytes=100013-500009");
  EXPECT_EQ(ranges[2], "bytes=150013-500009");
  EXPECT_EQ(f.counters().resumes, 2u);
  EXPECT_EQ(c.resets.size(), 0u);
}

TEST(RangeFetcherTest, WrongContentRangeIsRejectedAndRetried) {
  FakeHub hub;
  hub.lfs_files["a.bin"] = MakeBlob(10'000, 7);
  auto client = OpenHub(hub, TestHubOptions(hub));
  ASSERT_NE(client, nullptr);
  std::atomic<int> calls{0};
  hub.cdn_override = [&](const TestRequest& r) -> std::optional<TestResponse> {
    if (calls++ > 0) return std::nullopt;
    // Shifted by one byte: same length, wrong place.
    TestResponse resp;
    resp.status = 206;
    resp.headers.emplace_back("Content-Range", "bytes 101-200/10000");
    resp.body = hub.lfs_files["a.bin"].substr(101, 100);
    (void)r;
    return resp;
  };
  TestConsumer c;
  c.Add("a.bin", 100, 100);
  RangeFetcher f(*client, FastOptions());
  ASSERT_TRUE(f.Run(c).ok());
  c.ExpectBytes(hub.lfs_files);
  EXPECT_EQ(c.violations, 0);
  EXPECT_EQ(f.counters().bad_answers, 1u);
  EXPECT_EQ(c.got[0].size(), 100u);
}

TEST(RangeFetcherTest, AlwaysWrongContentRangeFailsWithLabel) {
  FakeHub hub;
  hub.lfs_files["a.bin"] = MakeBlob(10'000, 7);
  auto client = OpenHub(hub, TestHubOptions(hub));
  ASSERT_NE(client, nullptr);
  hub.cdn_override = [&](const TestRequest&) -> std::optional<TestResponse> {
    TestResponse resp;
    resp.status = 206;
    resp.headers.emplace_back("Content-Range", "bytes 0-99/10000");
    resp.body = hub.lfs_files["a.bin"].substr(0, 100);
    return resp;
  };
  TestConsumer c;
  c.Add("a.bin", 100, 100, "L40 e7 gate h3 K3");
  RangeFetcher f(*client, FastOptions());
  Status s = f.Run(c);
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  ASSERT_EQ(c.failed.count(0), 1u);
  EXPECT_THAT(c.failed[0].message(), HasSubstr("L40 e7 gate h3 K3"));
  EXPECT_THAT(c.failed[0].message(), HasSubstr("Content-Range"));
  EXPECT_EQ(c.got[0].size(), 0u);  // nothing from a wrong answer reached the consumer
  EXPECT_EQ(hub.cdn().request_count(), 4u);
}

// A Content-Range whose total disagrees with the file's size is rejected at
// once, though the bytes would be hash-checked later all the same.
TEST(RangeFetcherTest, ContentRangeTotalOtherThanTheFileSizeIsRejected) {
  FakeHub hub;
  hub.lfs_files["a.bin"] = MakeBlob(10'000, 7);
  auto client = OpenHub(hub, TestHubOptions(hub));
  ASSERT_NE(client, nullptr);
  std::atomic<int> calls{0};
  hub.cdn_override = [&](const TestRequest&) -> std::optional<TestResponse> {
    if (calls++ > 0) return std::nullopt;
    TestResponse resp;
    resp.status = 206;
    resp.headers.emplace_back("Content-Range", "bytes 100-199/20000");
    resp.body = hub.lfs_files["a.bin"].substr(100, 100);
    return resp;
  };
  TestConsumer c;
  c.Add("a.bin", 100, 100);
  RangeFetcher f(*client, FastOptions());
  Status s = f.Run(c);
  ASSERT_TRUE(s.ok()) << s.ToString();
  c.ExpectBytes(hub.lfs_files);
  EXPECT_EQ(c.violations, 0);
  EXPECT_EQ(f.counters().bad_answers, 1u);
  EXPECT_EQ(calls.load(), 2);
}

// A server that compresses despite Accept-Encoding: identity is rejected
// naming the encoding, not reported as a "short body".
TEST(RangeFetcherTest, ACompressedAnswerIsRejectedByItsEncoding) {
  FakeHub hub;
  hub.lfs_files["a.bin"] = MakeBlob(10'000, 7);
  auto client = OpenHub(hub, TestHubOptions(hub));
  ASSERT_NE(client, nullptr);
  hub.cdn_override = [&](const TestRequest& r) -> std::optional<TestResponse> {
    EXPECT_EQ(r.Header("accept-encoding"), "identity");
    TestResponse resp;
    resp.status = 206;
    resp.headers.emplace_back("Content-Range", "bytes 100-199/10000");
    resp.headers.emplace_back("Content-Encoding", "GZip");
    resp.body = std::string(30, 'z');  // shorter than the range, as a compressed body is
    return resp;
  };
  TestConsumer c;
  c.Add("a.bin", 100, 100, "L3 e1 up h2 K4");
  RangeFetcher f(*client, FastOptions());
  Status s = f.Run(c);
  EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
  ASSERT_EQ(c.failed.count(0), 1u);
  EXPECT_THAT(c.failed[0].message(), HasSubstr("L3 e1 up h2 K4"));
  EXPECT_THAT(c.failed[0].message(), HasSubstr("Content-Encoding 'gzip'"));
  EXPECT_EQ(c.got[0].size(), 0u);
}

TEST(RangeFetcherTest, TooLongBodyIsCut) {
  FakeHub hub;
  hub.lfs_files["a.bin"] = MakeBlob(1 << 20, 8);
  auto client = OpenHub(hub, TestHubOptions(hub));
  ASSERT_NE(client, nullptr);
  hub.cdn_override = [&](const TestRequest& r) -> std::optional<TestResponse> {
    TestResponse resp = ServeBlobRange(hub.lfs_files["a.bin"], r);
    resp.body += MakeBlob(300'000, 99);  // garbage beyond the range
    return resp;
  };
  TestConsumer c;
  c.Add("a.bin", 1000, 2000);
  c.Add("a.bin", 5000, 100'000);
  RangeFetcher f(*client, FastOptions());
  Status s = f.Run(c);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(c.violations, 0);
  c.ExpectBytes(hub.lfs_files);
  EXPECT_EQ(f.counters().overlong_bodies, 2u);
  EXPECT_EQ(f.counters().bytes_received, 102'000u);
}

// A 206 without a Content-Length on a connection the server keeps open
// ends when its range is complete, not at the stall timeout (which would
// cost the whole timeout per range).
TEST(RangeFetcherTest, AnUnsized206EndsWithItsRange) {
  FakeHub hub;
  hub.lfs_files["a.bin"] = MakeBlob(100'000, 8);
  HubOptions ho = TestHubOptions(hub);
  ho.stall_timeout = std::chrono::seconds(20);
  auto client = OpenHub(hub, ho);
  ASSERT_NE(client, nullptr);
  hub.cdn_override = [&](const TestRequest& r) -> std::optional<TestResponse> {
    TestResponse resp = ServeBlobRange(hub.lfs_files["a.bin"], r);
    resp.no_content_length = true;  // and the connection stays open
    return resp;
  };
  TestConsumer c;
  for (std::uint64_t off = 0; off < 100'000; off += 10'000) c.Add("a.bin", off, 10'000);
  const auto t0 = std::chrono::steady_clock::now();
  RangeFetcher f(*client, FastOptions());
  Status s = f.Run(c);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  c.ExpectBytes(hub.lfs_files);
  EXPECT_EQ(c.violations, 0);
  EXPECT_EQ(c.accepted.size(), 10u);
}

TEST(RangeFetcherTest, BoundedRetriesEndInAClearError) {
  FakeHub hub;
  hub.lfs_files["experts/exlr8-layer-040.k3.safetensors"] = MakeBlob(10'000, 9);
  hub.lfs_files["ok.bin"] = MakeBlob(1000, 1);
  auto client = OpenHub(hub, TestHubOptions(hub));
  ASSERT_NE(client, nullptr);
  hub.cdn_override = [&](const TestRequest& r) -> std::optional<TestResponse> {
    if (r.target.find("layer-040") == std::string::npos) return std::nullopt;
    TestResponse resp = ServeBlobRange(hub.lfs_files["experts/exlr8-layer-040.k3.safetensors"], r);
    resp.send_only = 10;  // always dies after 10 bytes
    return resp;
  };
  TestConsumer c;
  c.Add("experts/exlr8-layer-040.k3.safetensors", 1000, 500, "L40 e7 gate h3 K3");
  c.Add("ok.bin", 0, 1000);
  RangeFetcher f(*client, FastOptions());
  Status s = f.Run(c);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("1 request(s) failed"));
  ASSERT_EQ(c.failed.count(0), 1u);
  const std::string& m = c.failed[0].message();
  EXPECT_THAT(m, HasSubstr("L40 e7 gate h3 K3"));
  EXPECT_THAT(m, HasSubstr("exlr8-layer-040.k3.safetensors"));
  EXPECT_THAT(m, HasSubstr("bytes=1000-1499"));
  EXPECT_THAT(m, HasSubstr("4 attempts"));
  EXPECT_THAT(m, ::testing::Not(HasSubstr("sig=")));  // no signed URL in messages
  EXPECT_EQ(c.failed[0].code(), StatusCode::kIOError);
  EXPECT_EQ(hub.CountCdn("layer-040"), 4);
  EXPECT_EQ(c.got[0].size(), 40u);  // 4 tries x 10 bytes, each resumed
  EXPECT_EQ(c.violations, 0);
  EXPECT_EQ(c.accepted.count(1), 1u);
}

TEST(RangeFetcherTest, RefetchVerdictRestartsTheRange) {
  FakeHub hub;
  hub.lfs_files["a.bin"] = MakeBlob(100'000, 10);
  auto client = OpenHub(hub, TestHubOptions(hub));
  ASSERT_NE(client, nullptr);
  TestConsumer c;
  c.Add("a.bin", 0, 30'000);
  c.Add("a.bin", 30'000, 30'000, "always bad");
  std::map<std::uint64_t, int> seen;
  c.verdict = [&](std::uint64_t id, const std::string&) {
    ++seen[id];
    if (id == 0 && seen[id] == 1) return RangeVerdict::Refetch(CorruptionError("xxh64 mismatch"));
    if (id == 1) return RangeVerdict::Refetch(CorruptionError("xxh64 mismatch"));
    return RangeVerdict::Accept();
  };
  RangeFetcherOptions o = FastOptions();
  o.max_refetches = 2;
  RangeFetcher f(*client, o);
  Status s = f.Run(c);
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_EQ(c.violations, 0);
  EXPECT_EQ(c.accepted.count(0), 1u);
  EXPECT_EQ(c.resets[0], 1);
  EXPECT_EQ(c.completes[0], 2);
  c.ExpectBytes(hub.lfs_files);
  EXPECT_EQ(c.completes[1], 3);  // first try + 2 refetches
  EXPECT_EQ(c.resets[1], 2);
  ASSERT_EQ(c.failed.count(1), 1u);
  EXPECT_THAT(c.failed[1].message(), HasSubstr("always bad"));
  EXPECT_THAT(c.failed[1].message(), HasSubstr("xxh64 mismatch"));
  EXPECT_EQ(f.counters().refetches, 3u);
}

TEST(RangeFetcherTest, FailVerdictAndConsumerErrorsEndTheRequest) {
  FakeHub hub;
  hub.lfs_files["a.bin"] = MakeBlob(300'000, 10);
  auto client = OpenHub(hub, TestHubOptions(hub));
  ASSERT_NE(client, nullptr);
  TestConsumer c;
  c.Add("a.bin", 0, 1000);
  c.Add("a.bin", 1000, 200'000);
  c.verdict = [](std::uint64_t id, const std::string&) {
    return id == 0 ? RangeVerdict::Fail(CorruptionError("bad tile")) : RangeVerdict::Accept();
  };
  c.data_hook = [](std::uint64_t id, std::uint64_t have) {
    return id == 1 && have > 0 ? ResourceExhaustedError("disk full") : Status::Ok();
  };
  RangeFetcher f(*client, FastOptions());
  Status s = f.Run(c);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(c.failed[0].code(), StatusCode::kCorruption);
  EXPECT_EQ(c.failed[1].code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(hub.cdn().request_count(), 2u);  // neither was retried
  EXPECT_EQ(c.violations, 0);
}

TEST(RangeFetcherTest, NotFoundAndBadRequestsFailWithoutRetry) {
  FakeHub hub;
  hub.lfs_files["a.bin"] = MakeBlob(1000, 10);
  auto client = OpenHub(hub, TestHubOptions(hub));
  ASSERT_NE(client, nullptr);
  TestConsumer c;
  c.Add("missing.bin", 0, 10, "gone");
  c.Add("../etc/passwd", 0, 10, "evil");
  c.Add("a.bin", 900, 200, "past end");
  c.Add("a.bin", 0, 0, "empty");
  c.Add("a.bin", 0, 1000);
  RangeFetcher f(*client, FastOptions());
  Status s = f.Run(c);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(c.failed[0].code(), StatusCode::kNotFound);
  EXPECT_THAT(c.failed[0].message(), HasSubstr("EntryNotFound"));
  EXPECT_EQ(c.failed[1].code(), StatusCode::kInvalidArgument);
  // Past the size the resolve answered: that answer disagrees with the
  // listing a plan comes from (Corruption, exit 3; not a usage error).
  EXPECT_EQ(c.failed[2].code(), StatusCode::kCorruption);
  EXPECT_THAT(c.failed[2].message(),
              HasSubstr("range ends at 1100, past the file size 1000 that its resolve answered"));
  EXPECT_EQ(c.failed[3].code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c.accepted.count(4), 1u);
  EXPECT_EQ(hub.CountHub("HEAD", "missing.bin"), 1);
  EXPECT_EQ(hub.CountHub("HEAD", "passwd"), 0);
}

// Serves `path` from the CDN slowly (`hold` per request), counting the
// requests the CDN is answering at once.
struct InFlightCounter {
  std::atomic<int> now{0};
  std::atomic<int> max{0};
  void ServeSlowly(FakeHub& hub, const std::string& path, std::chrono::milliseconds hold) {
    hub.cdn_override = [this, &hub, path, hold](const TestRequest& r) -> std::optional<TestResponse> {
      const int n = ++now;
      int prev = max.load();
      while (prev < n && !max.compare_exchange_weak(prev, n)) {
      }
      std::this_thread::sleep_for(hold);
      --now;
      return ServeBlobRange(hub.lfs_files.at(path), r);
    };
  }
};

TEST(RangeFetcherTest, ParallelismBoundIsRespected) {
  FakeHub hub;
  hub.lfs_files["a.bin"] = MakeBlob(100'000, 11);
  auto client = OpenHub(hub, TestHubOptions(hub));
  ASSERT_NE(client, nullptr);
  InFlightCounter in_flight;
  in_flight.ServeSlowly(hub, "a.bin", std::chrono::milliseconds(20));
  TestConsumer c;
  AddSplit(c, "a.bin", 100'000, 40);
  RangeFetcherOptions o = FastOptions();
  o.max_parallel = 4;
  o.max_queued = 8;
  RangeFetcher f(*client, o);
  ASSERT_TRUE(f.Run(c).ok());
  c.ExpectBytes(hub.lfs_files);
  EXPECT_LE(hub.cdn().max_concurrent_connections(), 4);
  EXPECT_LE(in_flight.max.load(), 4);
  EXPECT_GE(in_flight.max.load(), 2);  // it does run in parallel
  EXPECT_LE(c.max_outstanding, 12);    // requests are pulled lazily
}

// Capping HTTP/2 streams per connection also caps the connections per host
// (RangeFetcherOptions::h2_streams_per_connection); an HTTP/1.1 server
// needs a connection per transfer, so its answers lift that cap.
TEST(RangeFetcherTest, CappedHttp2StreamsDoNotHoldBackAnHttp1Server) {
  FakeHub hub;
  hub.lfs_files["a.bin"] = MakeBlob(100'000, 14);
  auto client = OpenHub(hub, TestHubOptions(hub));
  ASSERT_NE(client, nullptr);
  InFlightCounter in_flight;
  in_flight.ServeSlowly(hub, "a.bin", std::chrono::milliseconds(20));
  TestConsumer c;
  AddSplit(c, "a.bin", 100'000, 40);
  RangeFetcherOptions o = FastOptions();
  o.max_parallel = 8;
  o.h2_streams_per_connection = 4;  // 2 connections per host, were it HTTP/2
  RangeFetcher f(*client, o);
  ASSERT_TRUE(f.Run(c).ok());
  c.ExpectBytes(hub.lfs_files);
  EXPECT_GE(in_flight.max.load(), 4) << "HTTP/1.1 transfers were held to the HTTP/2 connection count";
  EXPECT_LE(in_flight.max.load(), 8);
}

TEST(RangeFetcherTest, RequestsArePulledLazily) {
  FakeHub hub;
  hub.lfs_files["a.bin"] = MakeBlob(20'000, 12);
  auto client = OpenHub(hub, TestHubOptions(hub));
  ASSERT_NE(client, nullptr);
  TestConsumer c;
  for (int i = 0; i < 5000; ++i) c.Add("a.bin", static_cast<std::uint64_t>(i) * 4, 4);
  RangeFetcherOptions o = FastOptions();
  o.max_parallel = 8;
  o.max_queued = 16;
  RangeFetcher f(*client, o);
  ASSERT_TRUE(f.Run(c).ok());
  EXPECT_EQ(c.accepted.size(), 5000u);
  EXPECT_LE(c.max_outstanding, 24);
  c.ExpectBytes(hub.lfs_files);
}

TEST(RangeFetcherTest, BandwidthLimitIsRoughlyRespected) {
  FakeHub hub;
  hub.lfs_files["a.bin"] = MakeBlob(3 << 20, 13);
  auto client = OpenHub(hub, TestHubOptions(hub));
  ASSERT_NE(client, nullptr);
  TestConsumer c;
  AddSplit(c, "a.bin", 3 << 20, 24);
  RangeFetcherOptions o = FastOptions();
  o.max_bytes_per_second = 4 << 20;  // 3 MiB at 4 MiB/s: ~0.75 s
  RangeFetcher f(*client, o);
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(f.Run(c).ok());
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  c.ExpectBytes(hub.lfs_files);
  EXPECT_GE(secs, 0.6);
  EXPECT_LE(secs, 3.0);
}

TEST(RateLimiterTest, FillsAtItsRateUpToABurstOf50Ms) {
  RateLimiter limit(1'000'000);  // burst: 50,000 bytes
  const auto t0 = RateLimiter::Clock::now() + std::chrono::seconds(1);
  EXPECT_FALSE(limit.Exhausted(t0));  // starts full
  limit.Consume(49'000, t0);
  EXPECT_FALSE(limit.Exhausted(t0));
  limit.Consume(16'384, t0);  // one chunk past it: in debt
  EXPECT_TRUE(limit.Exhausted(t0));
  EXPECT_TRUE(limit.Exhausted(t0 + std::chrono::milliseconds(15)));  // 15,000 of 15,384 repaid
  EXPECT_FALSE(limit.Exhausted(t0 + std::chrono::milliseconds(16)));
  // A minute idle earns the burst, not a minute's worth.
  const auto t1 = t0 + std::chrono::seconds(60);
  limit.Consume(50'000, t1);
  EXPECT_TRUE(limit.Exhausted(t1));
  // An earlier time than one already seen (another thread's) takes nothing back.
  EXPECT_TRUE(limit.Exhausted(t0));
}

// One limiter shared by two fetchers running at once caps their total, as
// `exlr8d serve --limit-rate` does for the jobs it runs side by side.
TEST(RangeFetcherTest, ASharedLimitCapsTheTotalOfSeveralFetchers) {
  FakeHub hub;
  hub.lfs_files["a.bin"] = MakeBlob(2 << 20, 15);
  hub.lfs_files["b.bin"] = MakeBlob(2 << 20, 16);
  auto client_a = OpenHub(hub, TestHubOptions(hub));
  auto client_b = OpenHub(hub, TestHubOptions(hub));
  ASSERT_NE(client_a, nullptr);
  ASSERT_NE(client_b, nullptr);
  TestConsumer ca, cb;
  AddSplit(ca, "a.bin", 2 << 20, 16);
  AddSplit(cb, "b.bin", 2 << 20, 16);
  RangeFetcherOptions o = FastOptions();
  o.max_bytes_per_second = 64 << 20;  // ignored: the shared limit wins
  o.shared_rate = std::make_shared<RateLimiter>(4 << 20);  // 4 MiB in all: ~1 s; 0.5 s each alone
  RangeFetcher fa(*client_a, o), fb(*client_b, o);
  const auto t0 = std::chrono::steady_clock::now();
  Status sa, sb;
  std::thread ta([&] { sa = fa.Run(ca); });
  std::thread tb([&] { sb = fb.Run(cb); });
  ta.join();
  tb.join();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(sa.ok()) << sa.ToString();
  ASSERT_TRUE(sb.ok()) << sb.ToString();
  EXPECT_EQ(ca.accepted.size(), 16u);
  EXPECT_EQ(cb.accepted.size(), 16u);
  ca.ExpectBytes(hub.lfs_files);
  cb.ExpectBytes(hub.lfs_files);
  EXPECT_GE(secs, 0.85);
  EXPECT_LE(secs, 4.0);
}

TEST(RangeFetcherTest, StalledTransferIsRetried) {
  FakeHub hub;
  hub.lfs_files["a.bin"] = MakeBlob(10'000, 14);
  HubOptions ho = TestHubOptions(hub);
  ho.stall_timeout = std::chrono::seconds(1);
  auto client = OpenHub(hub, ho);
  ASSERT_NE(client, nullptr);
  std::atomic<int> calls{0};
  hub.cdn_override = [&](const TestRequest& r) -> std::optional<TestResponse> {
    if (calls++ > 0) return std::nullopt;
    TestResponse resp = ServeBlobRange(hub.lfs_files["a.bin"], r);
    resp.body.resize(600);  // then silence on an open connection: a stall
    resp.content_length = 5000;
    return resp;
  };
  TestConsumer c;
  c.Add("a.bin", 0, 5000);
  RangeFetcher f(*client, FastOptions());
  Status s = f.Run(c);
  ASSERT_TRUE(s.ok()) << s.ToString();
  c.ExpectBytes(hub.lfs_files);
  EXPECT_EQ(c.violations, 0);
  EXPECT_GE(f.counters().retries, 1u);
}

// A consumer that verifies on another thread: OnComplete answers Pending
// and a verifier thread delivers the verdict `decide` picks.
class AsyncVerdictConsumer : public TestConsumer {
 public:
  explicit AsyncVerdictConsumer(RangeFetcher*& fetcher) : fetcher_(fetcher) {
    verifier_ = std::thread([this] { Verify(); });
  }
  ~AsyncVerdictConsumer() override { Stop(); }
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (verifier_.joinable()) verifier_.join();
  }
  std::function<RangeVerdict(std::uint64_t id, int try_no)> decide;
  bool hold = false;  // deliver nothing until Release()
  void Release() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      hold = false;
    }
    cv_.notify_all();
  }
  std::map<std::uint64_t, int> tries;  // verifier thread; read after Stop

  RangeVerdict OnComplete(std::uint64_t id) override {
    ++completes[id];
    if (got[id].size() != wants[id].length) ++violations;
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(id);
    }
    cv_.notify_all();
    return RangeVerdict::Pending();
  }

 private:
  void Verify() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait(lock, [&] { return stop_ || (!queue_.empty() && !hold); });
      if (stop_) return;
      const std::uint64_t id = queue_.front();
      queue_.erase(queue_.begin());
      const int t = ++tries[id];
      lock.unlock();
      fetcher_->Deliver(id, decide(id, t));
      lock.lock();
    }
  }
  RangeFetcher*& fetcher_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::uint64_t> queue_;
  bool stop_ = false;
  std::thread verifier_;
};

TEST(RangeFetcherTest, PendingVerdictsDeliveredFromAnotherThread) {
  FakeHub hub;
  hub.lfs_files["a.bin"] = MakeBlob(400'000, 21);
  auto client = OpenHub(hub, TestHubOptions(hub));
  ASSERT_NE(client, nullptr);
  RangeFetcher* fp = nullptr;
  AsyncVerdictConsumer c(fp);
  AddSplit(c, "a.bin", 400'000, 40);
  c.decide = [](std::uint64_t id, int try_no) {
    if (id == 7) return RangeVerdict::Fail(CorruptionError("bad tile in req 7"));
    if (id % 3 == 0 && try_no == 1) return RangeVerdict::Refetch(CorruptionError("xxh64 mismatch"));
    return RangeVerdict::Accept();
  };
  RangeFetcherOptions o = FastOptions();
  o.max_parallel = 4;
  RangeFetcher f(*client, o);
  fp = &f;
  Status s = f.Run(c);
  c.Stop();
  EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
  EXPECT_EQ(c.violations, 0);
  ASSERT_EQ(c.failed.size(), 1u);
  EXPECT_THAT(c.failed[7].message(), HasSubstr("bad tile in req 7"));
  for (std::uint64_t id = 0; id < 40; ++id) {
    if (id == 7) continue;
    const bool refetched = id % 3 == 0;
    EXPECT_EQ(c.completes[id], refetched ? 2 : 1) << id;
    EXPECT_EQ(c.resets[id], refetched ? 1 : 0) << id;
    const auto& w = c.wants[id];
    EXPECT_TRUE(c.got[id] == hub.lfs_files["a.bin"].substr(w.offset, w.length)) << id;
  }
  const FetchCounters fc = f.counters();
  EXPECT_EQ(fc.requests_done, 39u);
  EXPECT_EQ(fc.requests_failed, 1u);
  EXPECT_EQ(fc.refetches, 14u);  // ids 0, 3, ..., 39 except none of them is 7
}

TEST(RangeFetcherTest, CancelEndsRequestsWhoseVerdictIsPending) {
  FakeHub hub;
  hub.lfs_files["a.bin"] = MakeBlob(100'000, 22);
  auto client = OpenHub(hub, TestHubOptions(hub));
  ASSERT_NE(client, nullptr);
  RangeFetcher* fp = nullptr;
  AsyncVerdictConsumer c(fp);
  AddSplit(c, "a.bin", 100'000, 10);
  c.hold = true;  // verdicts come only after the cancel
  c.decide = [](std::uint64_t id, int) {
    return id % 2 ? RangeVerdict::Accept() : RangeVerdict::Refetch(CorruptionError("xxh64 mismatch"));
  };
  RangeFetcher f(*client, FastOptions());
  fp = &f;
  std::atomic<bool> cancel{false};
  std::thread t([&] {
    while (f.counters().requests_started < 10 || f.counters().active_transfers > 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    cancel.store(true);
    f.Wake();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    c.Release();  // Run waits for the verdicts it was promised
  });
  Status s = f.Run(c, &cancel);
  t.join();
  EXPECT_EQ(s.code(), StatusCode::kCancelled);
  // Each request ended exactly once: the accepted ones stay accepted (their
  // bytes were good), the ones to refetch end as cancelled.
  EXPECT_EQ(f.counters().requests_done, 5u);
  EXPECT_EQ(c.failed.size(), 5u);
  for (const auto& [id, st] : c.failed) {
    EXPECT_EQ(id % 2, 0u) << id;
    EXPECT_EQ(st.code(), StatusCode::kCancelled) << st.ToString();
  }
  EXPECT_EQ(c.violations, 0);
  // A verdict delivered after the run is ignored by the next run.
  f.Deliver(3, RangeVerdict::Fail(InternalError("stale")));
  TestConsumer next;
  next.Add("a.bin", 0, 1000);
  Status s2 = f.Run(next);
  EXPECT_TRUE(s2.ok()) << s2.ToString();
  EXPECT_EQ(next.accepted.size(), 1u);
  c.Stop();
}

// A consumer that is not ready for one request holds back only that
// transfer: the others go on, and the held one resumes once it is ready.
class HoldingConsumer : public TestConsumer {
 public:
  std::atomic<bool> release{false};
  std::atomic<int> refused{0};
  bool ReadyFor(std::uint64_t id, std::size_t) override {
    if (id == 0 && !release.load()) {
      ++refused;
      return false;
    }
    return true;
  }
};

TEST(RangeFetcherTest, ConsumerNotReadyHoldsBackOnlyThatTransfer) {
  FakeHub hub;
  hub.lfs_files["a.bin"] = MakeBlob(400'000, 23);
  auto client = OpenHub(hub, TestHubOptions(hub));
  ASSERT_NE(client, nullptr);
  // The other ranges are answered only after request 0 was held back once,
  // so they always complete while it is held (on a busy machine its answer
  // could otherwise come last, and nothing would be held at all).
  HoldingConsumer c;
  hub.cdn_override = [&](const TestRequest& r) -> std::optional<TestResponse> {
    if (r.Header("range").rfind("bytes=0-", 0) != 0)
      for (int i = 0; i < 5000 && c.refused.load() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return std::nullopt;
  };
  c.Add("a.bin", 0, 200'000);
  for (int i = 0; i < 10; ++i) c.Add("a.bin", 200'000 + i * 20'000, 20'000);
  RangeFetcher f(*client, FastOptions());
  std::thread releaser([&] {
    // Release request 0 once every other request is done.
    while (f.counters().requests_done < 10) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    c.release.store(true);
  });
  Status s = f.Run(c);
  releaser.join();
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_GT(c.refused.load(), 0);
  EXPECT_EQ(c.accepted.size(), 11u);
  EXPECT_EQ(c.violations, 0);
  EXPECT_EQ(f.counters().retries, 0u);  // held back, not failed and retried
  c.ExpectBytes(hub.lfs_files);
}

TEST(RangeFetcherTest, CancelFromAnotherThread) {
  FakeHub hub;
  hub.lfs_files["a.bin"] = MakeBlob(100'000, 15);
  auto client = OpenHub(hub, TestHubOptions(hub));
  ASSERT_NE(client, nullptr);
  hub.cdn_override = [&](const TestRequest& r) -> std::optional<TestResponse> {
    TestResponse resp = ServeBlobRange(hub.lfs_files["a.bin"], r);
    resp.delay = std::chrono::milliseconds(30);
    return resp;
  };
  TestConsumer c;
  for (int i = 0; i < 2000; ++i) c.Add("a.bin", static_cast<std::uint64_t>(i), 10);
  RangeFetcherOptions o = FastOptions();
  o.max_parallel = 2;
  RangeFetcher f(*client, o);
  std::atomic<bool> cancel{false};
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    cancel.store(true);
  });
  const auto t0 = std::chrono::steady_clock::now();
  Status s = f.Run(c, &cancel);
  t.join();
  EXPECT_EQ(s.code(), StatusCode::kCancelled);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  EXPECT_LT(c.next, 2000u);
  EXPECT_EQ(c.outstanding, 0);  // every handed-out request ended
  EXPECT_EQ(c.violations, 0);
}

// A consumer that meets a failure no request can get past aborts the run
// with it as the reason: every other open request (a planner step's, say,
// beside a background file's) ends with that cause, not "fetch cancelled",
// so a step reports the real error (a certificate, say) even when a
// background file met it. A Cancel made before is still a cancel.
TEST(RangeFetcherTest, AbortEndsEveryOpenRequestWithItsReason) {
  for (const bool cancel_too : {false, true}) {
    SCOPED_TRACE(cancel_too ? "abort and cancel" : "abort");
    FakeHub hub;
    hub.lfs_files["a.bin"] = MakeBlob(100'000, 16);
    auto client = OpenHub(hub, TestHubOptions(hub));
    ASSERT_NE(client, nullptr);
    hub.cdn_override = [&](const TestRequest& r) -> std::optional<TestResponse> {
      TestResponse resp = ServeBlobRange(hub.lfs_files["a.bin"], r);
      resp.delay = std::chrono::milliseconds(30);
      return resp;
    };
    TestConsumer c;
    for (int i = 0; i < 2000; ++i) c.Add("a.bin", static_cast<std::uint64_t>(i), 10);
    RangeFetcherOptions o = FastOptions();
    o.max_parallel = 4;
    RangeFetcher f(*client, o);
    std::thread t([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      if (cancel_too) f.Cancel();  // the caller's stop, before the failure
      f.Abort(ResourceExhaustedError("the disk is full"));
      f.Abort(IOError("a later failure"));  // the first reason wins
    });
    Status s = f.Run(c);
    t.join();
    EXPECT_EQ(c.outstanding, 0);  // every handed-out request ended
    EXPECT_EQ(c.violations, 0);
    ASSERT_FALSE(c.failed.empty());
    if (cancel_too) {
      EXPECT_EQ(s.code(), StatusCode::kCancelled) << s.ToString();
      continue;
    }
    EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
    EXPECT_THAT(s.message(), HasSubstr("stopped after another request failed: the disk is full"));
    for (const auto& [id, st] : c.failed) {
      EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.ToString();
      EXPECT_THAT(st.message(), HasSubstr("the disk is full")) << id;
    }
  }
}

}  // namespace
}  // namespace exlr8
