// Unit tests of FileResolver (daemon/hub/file_resolver.h) on a FakeClock:
// resolve answers are handed in as HubClient::ResolveStep values, nothing
// is sent.
#include "daemon/hub/file_resolver.h"

#include <gtest/gtest.h>

#include <vector>

#include "tests/daemon/base/fake_clock.h"

namespace exlr8 {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::FakeClock;
using State = FileResolver::File::State;

class FileResolverTest : public ::testing::Test {
 protected:
  FileResolverTest() : sched_(clock_, Policy(), 1), resolver_(Naming(), sched_, Options()) {}

  static RetryPolicy Policy() {
    RetryPolicy p;
    p.retry_base = milliseconds(100);
    p.retry_cap = milliseconds(1000);
    return p;
  }
  static FileResolver::Options Options() {
    FileResolver::Options o;
    o.max_parallel_resolves = 2;
    o.max_attempts = 3;
    o.max_reresolves_per_file = 2;
    o.max_throttle_wait = seconds(60);
    return o;
  }
  static FileResolver::Naming Naming() {
    return {[](std::string_view p) { return "http://hub/org/r/resolve/c/" + std::string(p); },
            [](std::string_view p) { return "file '" + std::string(p) + "'"; }};
  }

  HubClient::ResolveStep Resolved(std::string url, bool on_hub, Clock::Duration ttl = std::chrono::hours(1)) {
    HubClient::ResolveStep step;
    step.resolved.emplace();
    step.resolved->url = std::move(url);
    step.resolved->on_hub = on_hub;
    step.resolved->size = 1000;
    step.resolved->expires = clock_.Now() + ttl;
    return step;
  }
  static HubClient::ResolveStep Retryable(std::optional<milliseconds> wait = std::nullopt) {
    HubClient::ResolveStep step;
    step.status = UnavailableError("file 'a': hub answered 429");
    step.retryable = true;
    step.wait = wait;
    return step;
  }

  // Resolves `fi` for `job` with `step`; returns the outcome.
  FileResolver::Outcome ResolveOnce(std::uint32_t fi, std::uint32_t job, HubClient::ResolveStep step) {
    resolver_.Wait(fi, job);
    EXPECT_TRUE(resolver_.CanStartResolve());
    EXPECT_EQ(resolver_.StartNextResolve(), fi);
    return resolver_.OnResolveEnd(fi, std::move(step));
  }

  FakeClock clock_;
  TransferScheduler sched_;
  FileResolver resolver_;
};

TEST_F(FileResolverTest, ResolveReadiesEveryWaiterAndBumpsTheGeneration) {
  const std::uint32_t fi = resolver_.FileFor("a.safetensors");
  EXPECT_EQ(resolver_.FileFor("a.safetensors"), fi);
  resolver_.Wait(fi, 1);
  resolver_.Wait(fi, 2);
  EXPECT_EQ(resolver_.file(fi).state, State::kQueued);
  EXPECT_EQ(resolver_.file(fi).next_url, "http://hub/org/r/resolve/c/a.safetensors");
  ASSERT_EQ(resolver_.StartNextResolve(), fi);
  EXPECT_EQ(resolver_.running(), 1);
  const auto out = resolver_.OnResolveEnd(fi, Resolved("http://cdn/a?sig=1", false));
  EXPECT_EQ(out.ready, (std::vector<std::uint32_t>{1, 2}));
  EXPECT_TRUE(out.failed.empty());
  const auto& f = resolver_.file(fi);
  EXPECT_EQ(f.state, State::kReady);
  EXPECT_EQ(f.url, "http://cdn/a?sig=1");
  EXPECT_EQ(f.generation, 1u);
  EXPECT_EQ(resolver_.running(), 0);
}

TEST_F(FileResolverTest, NoResolveForAFileNobodyWaitsForAnyMore) {
  const std::uint32_t fi = resolver_.FileFor("a");
  resolver_.Wait(fi, 1);
  resolver_.CancelRun();
  EXPECT_FALSE(resolver_.HasQueued());
  EXPECT_EQ(resolver_.file(fi).state, State::kUnresolved);
  resolver_.Wait(fi, 2);
  resolver_.CancelRun();
  resolver_.StartRun();
  EXPECT_EQ(resolver_.StartNextResolve(), std::nullopt);
}

TEST_F(FileResolverTest, ResolvesRunAtMostTheBoundAtOnce) {
  for (std::uint32_t i = 0; i < 3; ++i) resolver_.Wait(resolver_.FileFor("f" + std::to_string(i)), i);
  EXPECT_TRUE(resolver_.StartNextResolve().has_value());
  EXPECT_TRUE(resolver_.StartNextResolve().has_value());
  EXPECT_FALSE(resolver_.CanStartResolve());  // two running, the bound
  resolver_.OnResolveEnd(0, Resolved("http://cdn/0", false));
  EXPECT_TRUE(resolver_.CanStartResolve());
}

TEST_F(FileResolverTest, ExpiredUrlIsResolvedAgainWithoutWaiting) {
  const std::uint32_t fi = resolver_.FileFor("a");
  ResolveOnce(fi, 1, Resolved("http://cdn/a?1", false, seconds(10)));
  EXPECT_TRUE(resolver_.ExpireIfDue(fi, clock_.Now()));
  EXPECT_EQ(resolver_.file(fi).state, State::kReady);
  clock_.Advance(seconds(10));
  EXPECT_TRUE(resolver_.ExpireIfDue(fi, clock_.Now()));
  EXPECT_EQ(resolver_.file(fi).state, State::kUnresolved);
  EXPECT_FALSE(sched_.ResolvesPaused());  // the first re-resolve waits for nothing
  const auto out = ResolveOnce(fi, 2, Resolved("http://cdn/a?2", false));
  EXPECT_EQ(out.ready, std::vector<std::uint32_t>{2});
  EXPECT_EQ(resolver_.file(fi).generation, 2u);
  EXPECT_EQ(resolver_.file(fi).reresolves_this_run, 1);
}

TEST_F(FileResolverTest, RefusedAgainAfterAFreshResolvePausesResolvesThenFails) {
  const std::uint32_t fi = resolver_.FileFor("a");
  ResolveOnce(fi, 1, Resolved("http://cdn/a?1", false));
  ASSERT_TRUE(resolver_.Invalidate(fi, "CDN answered 403"));
  ResolveOnce(fi, 1, Resolved("http://cdn/a?2", false));
  ASSERT_TRUE(resolver_.Invalidate(fi, "CDN answered 403"));
  EXPECT_TRUE(sched_.ResolvesPaused());  // a backoff before the next resolve
  clock_.Advance(seconds(1));
  EXPECT_FALSE(sched_.ResolvesPaused());
  ResolveOnce(fi, 1, Resolved("http://cdn/a?3", false));
  EXPECT_FALSE(resolver_.Invalidate(fi, "CDN answered 403"));  // past max_reresolves_per_file
  const auto& f = resolver_.file(fi);
  EXPECT_EQ(f.state, State::kFailed);
  EXPECT_EQ(f.failure.code(), StatusCode::kUnavailable);
  EXPECT_NE(f.failure.message().find("file 'a': CDN answered 403 after 2 re-resolves"), std::string::npos)
      << f.failure.ToString();
  resolver_.StartRun();  // a new Run tries a failed file again
  EXPECT_EQ(resolver_.file(fi).state, State::kUnresolved);
}

TEST_F(FileResolverTest, ThrottledResolvePausesEveryResolveForTheServersWait) {
  const std::uint32_t a = resolver_.FileFor("a");
  const std::uint32_t b = resolver_.FileFor("b");
  resolver_.Wait(a, 1);
  ASSERT_EQ(resolver_.StartNextResolve(), a);
  resolver_.Wait(b, 7);
  const auto out = resolver_.OnResolveEnd(a, Retryable(seconds(30)));
  EXPECT_TRUE(out.ready.empty() && out.failed.empty());
  EXPECT_EQ(resolver_.file(a).state, State::kQueued);
  EXPECT_FALSE(resolver_.CanStartResolve());  // b too waits for the hub's 30 s
  clock_.Advance(seconds(29));
  EXPECT_FALSE(resolver_.CanStartResolve());
  clock_.Advance(seconds(1));
  EXPECT_TRUE(resolver_.CanStartResolve());
}

TEST_F(FileResolverTest, FailedResolvesInARowFailTheFileAndItsWaiters) {
  const std::uint32_t fi = resolver_.FileFor("a");
  resolver_.Wait(fi, 4);
  ResolveOnce(fi, 5, Retryable());
  clock_.Advance(seconds(5));
  ResolveOnce(fi, 6, Retryable());
  clock_.Advance(seconds(5));
  resolver_.Wait(fi, 7);
  ASSERT_EQ(resolver_.StartNextResolve(), fi);
  const auto out = resolver_.OnResolveEnd(fi, Retryable());
  EXPECT_EQ(out.failed, (std::vector<std::uint32_t>{4, 5, 6, 7}));
  EXPECT_EQ(out.failure.message(), "file 'a': hub answered 429 (resolve failed 3 times)");
}

TEST_F(FileResolverTest, ServersWaitPastTheCapFailsTheFile) {
  const std::uint32_t fi = resolver_.FileFor("a");
  const auto out = ResolveOnce(fi, 1, Retryable(seconds(61)));
  EXPECT_EQ(out.failed, std::vector<std::uint32_t>{1});
  EXPECT_NE(out.failure.message().find("61 s"), std::string::npos) << out.failure.ToString();
}

TEST_F(FileResolverTest, RelativeRedirectsAreFollowedFirstAndBounded) {
  const std::uint32_t fi = resolver_.FileFor("a");
  HubClient::ResolveStep hop;
  hop.follow = "http://hub/elsewhere/a";
  resolver_.Wait(fi, 1);
  ASSERT_EQ(resolver_.StartNextResolve(), fi);
  resolver_.Wait(resolver_.FileFor("b"), 9);
  resolver_.OnResolveEnd(fi, hop);
  ASSERT_EQ(resolver_.StartNextResolve(), fi);  // ahead of b, queued before
  EXPECT_EQ(resolver_.file(fi).next_url, "http://hub/elsewhere/a");
  FileResolver::Outcome out;
  for (int i = 0; i < 5; ++i) {
    out = resolver_.OnResolveEnd(fi, hop);
    if (!out.failed.empty()) break;
    ASSERT_EQ(resolver_.StartNextResolve(), fi);
  }
  EXPECT_EQ(out.failed, std::vector<std::uint32_t>{1});
  EXPECT_EQ(out.failure.message(), "file 'a': too many redirects on the hub");
}

TEST_F(FileResolverTest, ListedHubFileStartsReadyUntilTheHubRedirects) {
  resolver_.ExpectServedByHub("config.json", 120);
  resolver_.ExpectServedByHub("../bad", 1);  // refused: its requests fail with the reason
  const std::uint32_t fi = resolver_.FileFor("config.json");
  const auto& f = resolver_.file(fi);
  EXPECT_EQ(f.state, State::kReady);
  EXPECT_TRUE(f.presumed && f.on_hub);
  EXPECT_EQ(f.url, "http://hub/org/r/resolve/c/config.json");
  EXPECT_EQ(f.size, 120u);
  EXPECT_TRUE(resolver_.ExpireIfDue(fi, clock_.Now() + std::chrono::hours(1000)));
  EXPECT_EQ(f.state, State::kReady);  // never expires
  resolver_.Unpresume(fi);
  EXPECT_EQ(f.state, State::kUnresolved);
  EXPECT_FALSE(f.presumed);
  ResolveOnce(fi, 1, Resolved("http://cdn/config.json", false));
  resolver_.ExpectServedByHub("config.json", 120);  // resolved once: stays as resolved
  EXPECT_FALSE(resolver_.file(fi).presumed);
}

TEST_F(FileResolverTest, PermanentFailureFailsAtOnce) {
  const std::uint32_t fi = resolver_.FileFor("a");
  HubClient::ResolveStep step;
  step.status = IOError("file 'a': resolve: SSL peer certificate");
  const auto out = ResolveOnce(fi, 1, step);
  EXPECT_EQ(out.failed, std::vector<std::uint32_t>{1});
  EXPECT_EQ(resolver_.file(fi).state, State::kFailed);
}

}  // namespace
}  // namespace exlr8
