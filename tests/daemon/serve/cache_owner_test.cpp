// CacheOwner (daemon/serve/cache_owner.h) on a FakeClock: a locked cache is
// tried again only once its retry interval has passed; other errors are
// tried again at once; Release lets another process have it.
#include "daemon/serve/cache_owner.h"

#include <gtest/gtest.h>

#include "tests/daemon/base/fake_clock.h"
#include "tests/daemon/cache_test_util.h"

namespace exlr8 {
namespace {

using ::exlr8::testing::FakeClock;
using ::exlr8::testing::TempDir;
using namespace std::chrono_literals;

TEST(CacheOwnerTest, ALockedCacheIsNotTriedAgainBeforeTheRetryInterval) {
  FakeClock clock;
  int tries = 0;
  CacheOwner owner(
      [&]() -> Result<std::unique_ptr<Cache>> {
        ++tries;
        return FailedPreconditionError("locked by pid 42");
      },
      clock, 2000ms);
  const Clock::TimePoint t0 = clock.Now();
  EXPECT_EQ(owner.Acquire().status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(tries, 1);
  EXPECT_EQ(owner.retry_at(), t0 + 2000ms);
  clock.Advance(1999ms);
  auto again = owner.Acquire();
  EXPECT_EQ(again.status().message(), "locked by pid 42");  // the last try's answer, nothing tried
  EXPECT_EQ(tries, 1);
  clock.Advance(1ms);
  EXPECT_FALSE(owner.Acquire().ok());
  EXPECT_EQ(tries, 2);
  EXPECT_EQ(owner.retry_at(), t0 + 4000ms);
  EXPECT_FALSE(owner.is_open());
  EXPECT_EQ(owner.WaitingMessage(again.status()),
            "waiting for the cache: locked by pid 42; retrying every 2000 ms");
}

TEST(CacheOwnerTest, OtherErrorsAreTriedAgainAtOnce) {
  FakeClock clock;
  int tries = 0;
  CacheOwner owner(
      [&]() -> Result<std::unique_ptr<Cache>> {
        ++tries;
        return IOError("no such device");
      },
      clock, 2000ms);
  EXPECT_EQ(owner.Acquire().status().code(), StatusCode::kIOError);
  EXPECT_EQ(owner.Acquire().status().code(), StatusCode::kIOError);
  EXPECT_EQ(tries, 2);
}

TEST(CacheOwnerTest, HoldsTheCacheLockUntilReleased) {
  FakeClock clock;
  TempDir dir;
  CacheOwner owner(CacheOwner::OpenerFor(dir.path(), CacheOptions()), clock, 2000ms);
  auto cache = owner.Acquire();
  ASSERT_TRUE(cache.ok()) << cache.status().ToString();
  EXPECT_TRUE(owner.is_open());
  EXPECT_EQ(*owner.Acquire(), *cache);  // the same, not opened again
  CacheOptions no_wait;
  no_wait.lock_wait = std::chrono::milliseconds(0);
  auto other = Cache::Open(dir.path(), no_wait);
  EXPECT_EQ(other.status().code(), StatusCode::kFailedPrecondition);
  owner.Release();
  EXPECT_FALSE(owner.is_open());
  EXPECT_TRUE(Cache::Open(dir.path()).ok());
}

}  // namespace
}  // namespace exlr8
