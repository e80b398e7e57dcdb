// HubClient on the in-memory hub of fake_transport.h and a FakeClock: the
// revision, tree, resolve and whole-file requests, their retries, 429 waits,
// redirects and auth errors, with no socket and no real sleep. The retry
// waits block on the FakeClock; a driver thread moves it to each deadline,
// so a 30 s Retry-After takes microseconds and shows as 30 s on the clock.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>

#include "daemon/hub/hub_client.h"
#include "tests/daemon/base/fake_clock.h"
#include "tests/daemon/hub/fake_transport.h"

namespace exlr8 {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::FakeClock;
using testing::FakeHubTransport;

constexpr char kEndpoint[] = "http://hub.test";
constexpr char kCommit[] = "0123456789abcdef0123456789abcdef01234567";
constexpr char kToken[] = "hf_SecretTokenValue123";
const std::string kRevisionUrl = std::string(kEndpoint) + "/api/models/org/model/revision/main";
const std::string kResolvePrefix = std::string(kEndpoint) + "/org/model/resolve/" + kCommit + "/";
const std::string kTreeUrl =
    std::string(kEndpoint) + "/api/models/org/model/tree/" + kCommit + "?recursive=true";

// Moves the clock to the earliest deadline a thread waits for, until
// stopped: every wait ends at once, and the clock shows how long it was.
class ClockDriver {
 public:
  explicit ClockDriver(FakeClock* clock)
      : thread_([this, clock] {
          while (!stop_.load()) {
            if (!clock->AwaitWaiters(1, milliseconds(5))) continue;
            if (auto d = clock->NextDeadline()) {
              clock->Advance(std::max(Clock::Duration::zero(), *d - clock->Now()));
              if (on_wait) on_wait();
            }
          }
        }) {}
  ~ClockDriver() {
    stop_.store(true);
    thread_.join();
  }
  // Called after each advance, on the driver's thread, until it stops: what
  // it touches must outlive the driver. Set before the first wait.
  std::function<void()> on_wait;

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

class HubClientFakeTest : public ::testing::Test {
 protected:
  HubClientFakeTest() : net_(kResolvePrefix, kCommit, &clock_) {
    net_.canned[kRevisionUrl] = {200, {}, std::string(R"({"sha": ")") + kCommit + R"("})"};
    net_.lfs_files["w/a.safetensors"] = std::string(10'000, 'a');
    net_.regular_files["config.json"] = R"({"x": 1})";
    net_.chunk = 1'000;
  }

  HubOptions Options() {
    HubOptions o;
    o.endpoint = kEndpoint;
    o.token = kToken;
    o.token_from_environment = false;
    o.use_env_proxy = false;
    o.clock = &clock_;
    o.transport = &net_;
    return o;
  }

  Result<std::unique_ptr<HubClient>> Open(HubOutage* outage = nullptr) {
    return HubClient::Open(Options(), "org/model", "main", outage);
  }

  // Time between the starts of calls `a` and `b` (1-based).
  Clock::Duration Between(int a, int b) const {
    return net_.call_times().at(static_cast<std::size_t>(b - 1)) -
           net_.call_times().at(static_cast<std::size_t>(a - 1));
  }

  FakeClock clock_;
  FakeHubTransport net_;
  std::atomic<bool> cancel_{false};  // outlives the driver, which may set it
  ClockDriver driver_{&clock_};
};

TEST_F(HubClientFakeTest, OpenPinsTheCommitWithOneApiCall) {
  auto c = Open();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ((*c)->commit(), kCommit);
  ASSERT_EQ(net_.calls().size(), 1u);
  EXPECT_EQ(net_.calls()[0].url, kRevisionUrl);
  EXPECT_FALSE(net_.calls()[0].head_only);
  EXPECT_EQ(net_.calls()[0].timeout, milliseconds(seconds(300)));  // api_timeout
  EXPECT_EQ((*c)->stats().api_requests, 1u);
  EXPECT_EQ((*c)->stats().retries, 0u);
}

TEST_F(HubClientFakeTest, FailedFirstCallIsRetriedAfterTheBackoffOnTheClock) {
  net_.FailCall(1, {503});
  auto c = Open();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(net_.calls().size(), 2u);
  EXPECT_EQ((*c)->stats().retries, 1u);
  // retry_base 500 ms, first retry: half fixed, half jitter.
  EXPECT_GE(Between(1, 2), milliseconds(250));
  EXPECT_LE(Between(1, 2), milliseconds(500));
}

TEST_F(HubClientFakeTest, RateLimitedCallWaitsItsRetryAfter) {
  net_.FailCall(1, {429, {"Retry-After: 30"}});
  auto c = Open();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(Between(1, 2), seconds(30));
  EXPECT_EQ((*c)->stats().rate_limited, 1u);
  EXPECT_EQ((*c)->stats().retries, 1u);
}

TEST_F(HubClientFakeTest, RetryAfterPastTheCapFailsAtOnceAsNotNow) {
  net_.FailCall(1, {429, {"Retry-After: 600"}});
  HubOutage outage = HubOutage::kNone;
  auto c = Open(&outage);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(c.status().message().find("more than the 300 s allowed"), std::string::npos)
      << c.status().ToString();
  EXPECT_EQ(net_.calls().size(), 1u);
  EXPECT_EQ(outage, HubOutage::kNotNow);
}

TEST_F(HubClientFakeTest, NoAnswerOnEveryTryIsUnreachableAfterMaxAttempts) {
  for (int n = 1; n <= 5; ++n) net_.FailCall(n, {});
  HubOutage outage = HubOutage::kNone;
  auto c = Open(&outage);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kIOError);
  EXPECT_NE(c.status().message().find("(after 5 attempts)"), std::string::npos) << c.status().ToString();
  EXPECT_EQ(net_.calls().size(), 5u);
  EXPECT_EQ(outage, HubOutage::kUnreachable);
}

TEST_F(HubClientFakeTest, ResolveTriesAndConnectTimeoutApplyToTheRevisionOnly) {
  for (int n = 1; n <= 5; ++n) net_.FailCall(n, {502});
  HubOptions o = Options();
  o.resolve_max_attempts = 2;
  o.resolve_connect_timeout = milliseconds(1'500);
  HubOutage outage = HubOutage::kNone;
  auto c = HubClient::Open(o, "org/model", "main", &outage);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(c.status().message().find("(after 2 attempts)"), std::string::npos) << c.status().ToString();
  ASSERT_EQ(net_.calls().size(), 2u);
  EXPECT_EQ(net_.calls()[0].connect_timeout, milliseconds(1'500));
  EXPECT_EQ(outage, HubOutage::kNotNow);
}

TEST_F(HubClientFakeTest, AuthErrorIsNotRetriedAndNeverQuotesTheToken) {
  net_.FailCall(1, {401, {std::string("X-Error-Message: invalid credentials Bearer ") + kToken}});
  HubOutage outage = HubOutage::kUnreachable;
  auto c = Open(&outage);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(c.status().message().find(kToken), std::string::npos) << c.status().ToString();
  EXPECT_EQ(net_.calls().size(), 1u);
  EXPECT_EQ(outage, HubOutage::kNone);
}

TEST_F(HubClientFakeTest, JsonCutShortWithoutALengthIsRetried) {
  net_.FailCall(1, {200, {}, std::nullopt, R"({"sha": "0123)"});
  auto c = Open();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(net_.calls().size(), 2u);
  EXPECT_EQ((*c)->stats().retries, 1u);
}

TEST_F(HubClientFakeTest, ListFilesFollowsTreePagesOnTheHub) {
  const std::string page2 = kTreeUrl + "&cursor=2";
  net_.canned[kTreeUrl] = {
      200, {"Link: <" + page2 + ">; rel=\"next\""}, R"([{"type":"file","path":"config.json","size":8}])"};
  net_.canned[page2] = {
      200, {}, R"([{"type":"directory","path":"w"},{"type":"file","path":"w/b.bin","size":3}])"};
  auto c = Open();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto files = (*c)->ListFiles();
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  ASSERT_EQ(files->size(), 2u);
  EXPECT_EQ((*files)[0].path, "config.json");
  EXPECT_EQ((*files)[1].path, "w/b.bin");
  EXPECT_EQ((*c)->stats().api_requests, 3u);
}

TEST_F(HubClientFakeTest, ListFilesRejectsANextPageOffTheHub) {
  net_.canned[kTreeUrl] = {200, {"Link: <http://evil.test/page2>; rel=\"next\""}, "[]"};
  auto c = Open();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto files = (*c)->ListFiles();
  ASSERT_FALSE(files.ok());
  EXPECT_EQ(files.status().code(), StatusCode::kCorruption);
  EXPECT_EQ(net_.calls().size(), 2u);
}

TEST_F(HubClientFakeTest, ResolveFileReadsTheCdnRedirectWithoutFollowingIt) {
  auto c = Open();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto f = (*c)->ResolveFile("w/a.safetensors");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->url, net_.cdn + "w/a.safetensors");
  EXPECT_FALSE(f->on_hub);
  EXPECT_EQ(f->size, 10'000u);
  EXPECT_EQ(f->expires, clock_.Now() + seconds(50 * 60));
  ASSERT_EQ(net_.calls().size(), 2u);
  EXPECT_TRUE(net_.calls()[1].head_only);
}

TEST_F(HubClientFakeTest, ResolveFileFollowsARedirectOnTheHub) {
  net_.FailCall(2, {307, {"Location: /org/model/resolve/" + std::string(kCommit) + "/config.json"}});
  auto c = Open();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto f = (*c)->ResolveFile("renamed.json");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->url, kResolvePrefix + "config.json");
  EXPECT_TRUE(f->on_hub);
  EXPECT_EQ((*c)->stats().resolves, 2u);
}

TEST_F(HubClientFakeTest, ResolveFileAnswersNotFoundWithoutRetrying) {
  auto c = Open();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto f = (*c)->ResolveFile("missing.bin");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(net_.calls().size(), 2u);
}

TEST_F(HubClientFakeTest, WholeFileResumesAfterAResetWithAnOpenRange) {
  net_.FailCall(3, {0, {}, 4'000});  // the GET after the HEAD: cut after 4,000 bytes
  auto c = Open();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto bytes = (*c)->FetchWholeFileToString("w/a.safetensors", 1 << 20);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  EXPECT_EQ(*bytes, net_.lfs_files["w/a.safetensors"]);
  ASSERT_EQ(net_.calls().size(), 4u);
  EXPECT_FALSE(net_.calls()[2].has_range);
  EXPECT_TRUE(net_.calls()[3].has_range);
  EXPECT_TRUE(net_.calls()[3].range_to_end);
  EXPECT_EQ(net_.calls()[3].range_first, 4'000u);
  EXPECT_EQ((*c)->stats().retries, 1u);
  EXPECT_EQ((*c)->stats().whole_file_gets, 2u);
}

TEST_F(HubClientFakeTest, WholeFileResolvesAgainWhenTheCdnRefuses) {
  net_.FailCall(3, {403});
  auto c = Open();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto bytes = (*c)->FetchWholeFileToString("w/a.safetensors", 1 << 20);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  ASSERT_EQ(net_.calls().size(), 5u);
  EXPECT_TRUE(net_.calls()[3].head_only);  // the resolve again
  EXPECT_EQ((*c)->stats().retries, 0u);    // not an attempt
}

TEST_F(HubClientFakeTest, WholeFileOverTheLimitFailsBeforeAnyByte) {
  auto c = Open();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto bytes = (*c)->FetchWholeFileToString("w/a.safetensors", 9'999);
  ASSERT_FALSE(bytes.ok());
  EXPECT_EQ(bytes.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(net_.calls().size(), 2u);  // the HEAD said the size
}

TEST_F(HubClientFakeTest, CancelCutsARetryWaitShort) {
  driver_.on_wait = [this] { cancel_.store(true); };
  net_.FailCall(1, {503, {"Retry-After: 60"}});
  HubOptions o = Options();
  o.cancel = &cancel_;
  auto c = HubClient::Open(o, "org/model", "main");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kCancelled);
  EXPECT_EQ(net_.calls().size(), 1u);
  EXPECT_LT(clock_.Now() - net_.call_times()[0], seconds(1));
}

}  // namespace
}  // namespace exlr8
