// daemon/base/file_lock.h on real lock files, its wait on a FakeClock.
#include "daemon/base/file_lock.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <thread>

#include "tests/daemon/base/fake_clock.h"
#include "tests/daemon/cache_test_util.h"

namespace exlr8 {
namespace {

using ::exlr8::testing::FakeClock;
using ::exlr8::testing::TempDir;
using namespace std::chrono_literals;

// A holder that lets go within the wait is waited for; the wait is the
// clock's, however long it takes in real time.
TEST(FileLockTest, AWaiterGetsTheLockOnceItsHolderLetsGo) {
  TempDir tmp;
  FakeClock clock;
  const auto path = tmp.path() / "x.lock";
  auto first = FileLock::Acquire(path);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  std::optional<Result<std::unique_ptr<FileLock>>> second;
  std::thread waiter([&] { second = FileLock::Acquire(path, 1min, "a test holds it", &clock); });
  ASSERT_TRUE(clock.AwaitWaiters(1));
  clock.Advance(30s);  // half the wait: it still waits
  ASSERT_TRUE(clock.AwaitWaiters(1));
  first->reset();
  while (clock.AwaitWaiters(1, 200ms)) clock.Advance(10ms);
  waiter.join();
  ASSERT_TRUE(second.has_value());
  EXPECT_TRUE(second->ok()) << second->status().ToString();
}

// One that does not let go is named, with what `holder_is` says of it.
TEST(FileLockTest, AHolderThatStaysIsNamedAfterTheWait) {
  TempDir tmp;
  FakeClock clock;
  const auto path = tmp.path() / "x.lock";
  auto first = FileLock::Acquire(path);
  ASSERT_TRUE(first.ok());
  std::atomic<bool> done{false};
  std::optional<Result<std::unique_ptr<FileLock>>> second;
  std::thread waiter([&] {
    second = FileLock::Acquire(path, 2s, "a test holds it", &clock);
    done = true;
  });
  while (!done) {
    if (clock.AwaitWaiters(1, 200ms)) clock.Advance(500ms);
  }
  waiter.join();
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(second->status().message(),
            path.string() + " is locked by pid " + std::to_string(::getpid()) + " (a test holds it)");
}

}  // namespace
}  // namespace exlr8
