// RateLimiter on a FakeClock, alone and under a RangeFetcher that runs on
// the same clock (the fake hub of fake_transport.h: no socket, no sleep).
#include "daemon/hub/rate_limiter.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "daemon/hub/range_fetcher.h"
#include "tests/daemon/base/fake_clock.h"
#include "tests/daemon/hub/fake_transport.h"
#include "tests/daemon/test_consumer.h"

namespace exlr8 {
namespace {

using std::chrono::milliseconds;
using testing::FakeClock;
using testing::FakeHubTransport;
using testing::TestConsumer;

constexpr char kCommit[] = "0123456789abcdef0123456789abcdef01234567";

TEST(RateLimiterClockTest, BucketStartsFullAtTheClocksNowAndRefillsWithIt) {
  FakeClock clock;
  RateLimiter limit(1'000'000, clock);  // burst: 50,000 bytes
  EXPECT_FALSE(limit.Exhausted(clock.Now()));
  limit.Consume(50'000, clock.Now());
  EXPECT_TRUE(limit.Exhausted(clock.Now()));
  clock.Advance(milliseconds(10));  // earns 10,000 bytes
  EXPECT_FALSE(limit.Exhausted(clock.Now()));
  limit.Consume(10'000, clock.Now());
  EXPECT_TRUE(limit.Exhausted(clock.Now()));
}

TEST(RateLimiterClockTest, FetcherOnAFakeClockIsPacedByItsOwnTime) {
  FakeClock clock;
  const std::string prefix = "http://hub.test/org/model/resolve/" + std::string(kCommit) + "/";
  FakeHubTransport net(prefix, kCommit, &clock);
  net.canned["http://hub.test/api/models/org/model/revision/main"] = {
      200, {}, std::string(R"({"sha": ")") + kCommit + R"("})"};
  net.lfs_files["w.bin"] = std::string(400'000, 'w');
  net.chunk = 10'000;
  HubOptions ho;
  ho.endpoint = "http://hub.test";
  ho.token_from_environment = false;
  ho.use_env_proxy = false;
  ho.clock = &clock;
  ho.transport = &net;
  auto hub = HubClient::Open(ho, "org/model", "main");
  ASSERT_TRUE(hub.ok()) << hub.status().ToString();

  TestConsumer c;
  for (int i = 0; i < 4; ++i) c.Add("w.bin", static_cast<std::uint64_t>(i) * 100'000, 100'000);
  RangeFetcherOptions o = testing::FastOptions();
  o.transport = &net;
  o.clock = &clock;
  o.max_bytes_per_second = 1'000'000;
  RangeFetcher f(**hub, o);
  // A limiter that measured from another clock would never refill here:
  // the watchdog ends such a run instead of letting it spin.
  std::atomic<bool> cancel{false}, finished{false};
  std::thread watchdog([&] {
    for (int i = 0; i < 500 && !finished.load(); ++i) std::this_thread::sleep_for(milliseconds(10));
    cancel.store(true);
  });
  const Clock::TimePoint start = clock.Now();
  const Status s = f.Run(c, &cancel);
  finished.store(true);
  watchdog.join();
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(c.accepted.size(), 4u);
  // 400,000 bytes at 1 MB/s, less the 50,000-byte burst it starts with.
  EXPECT_GE(clock.Now() - start, milliseconds(300));
  EXPECT_LE(clock.Now() - start, milliseconds(600));
}

}  // namespace
}  // namespace exlr8
