// The host image of the fixture at every TP degree (1, 3..7) and of every
// rank of one, checked against the cache's bytes (the long tier: a pull each).
#include <gtest/gtest.h>

#include "daemon/stage/host_image.h"
#include "tests/daemon/cache_test_util.h"
#include "tests/daemon/host_image_test_util.h"
#include "tests/daemon/pull_test_util.h"

namespace exlr8 {
namespace {

using ::exlr8::testing::TempDir;

TEST(HostImageTest, HoldsTheCachesBytesAtEveryTpDegree) {
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  for (int tp : {1, 3, 4, 5, 6, 7}) {
    const int rank = tp - 1;
    auto pulled = Pull(cache.path(), Options(*sim, "home", tp, rank));
    ASSERT_TRUE(pulled.ok()) << pulled.status().ToString();
    BuildAndCheck(cache.path(), pulled->commit, "home", tp, rank);
  }
}

TEST(HostImageTest, EveryRankOfTp5) {
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  for (int rank = 0; rank < 5; ++rank) {
    auto pulled = Pull(cache.path(), Options(*sim, "home", 5, rank));
    ASSERT_TRUE(pulled.ok()) << pulled.status().ToString();
    BuildAndCheck(cache.path(), pulled->commit, "home", 5, rank);
  }
}

}  // namespace
}  // namespace exlr8
