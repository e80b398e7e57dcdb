// Unit tests of ConcurrencyController (daemon/hub/concurrency_controller.h)
// on a FakeClock and a simulated link: every wait is fake time; and of
// ConnectionSpread (connection_spread.h), which spreads those transfers.
#include "daemon/hub/concurrency_controller.h"
#include "daemon/hub/connection_spread.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "tests/daemon/base/fake_clock.h"

namespace exlr8 {
namespace {

using std::chrono::milliseconds;
using testing::FakeClock;

// A link whose throughput grows with the transfers in flight up to
// `saturation` of them (each moves `per_transfer` bytes/s, as a round-trip
// bound path does), then stays flat. Transfers of `range` bytes; the
// fetcher always has work to fill the limit.
struct Link {
  int saturation = 40;
  double per_transfer = 1e6;
  double range = 100e3;
  double noise = 0;  // +- this fraction, deterministic
};

struct Sim {
  FakeClock clock;
  ConcurrencyController c;
  std::vector<int> limits;  // after each step
  double ended_carry = 0;
  std::uint32_t seed = 12345;

  explicit Sim(ConcurrencyOptions o = {}) : c(clock, o) {}

  double Noise(double amount) {
    seed = seed * 1103515245u + 12345u;
    const double u = static_cast<double>((seed >> 8) & 0xffff) / 65535.0;  // [0, 1]
    return 1.0 + amount * (2 * u - 1);
  }

  // Runs `steps` of 10 ms on `link`.
  void Run(const Link& link, int steps) {
    for (int i = 0; i < steps; ++i) {
      c.InFlight(c.limit());
      const double rate = std::min(c.limit(), link.saturation) * link.per_transfer * Noise(link.noise);
      const double bytes = rate * 0.010;
      c.Received(static_cast<std::uint64_t>(bytes));
      ended_carry += bytes / link.range;
      while (ended_carry >= 1) {
        c.Ended();
        ended_carry -= 1;
      }
      clock.Advance(milliseconds(10));
      c.Tick();
      limits.push_back(c.limit());
    }
  }
};

TEST(ConcurrencyControllerTest, GrowsWhileThroughputGrowsAndStopsAtTheSaturation) {
  Sim s;
  EXPECT_EQ(s.c.limit(), 16);
  s.Run(Link{}, 500);  // 5 s
  // Saturates at 40: 16 -> 32 (gain) -> 64 (1.25x, gain) -> 128 (none): back to 64.
  EXPECT_GE(s.c.limit(), 40);
  EXPECT_LE(s.c.limit(), 80);
  EXPECT_GE(s.c.peak(), 64);
  EXPECT_NE(s.c.phase(), ConcurrencyController::Phase::kStart);  // the climb ended
}

TEST(ConcurrencyControllerTest, ReachesTheCeilingWhenEveryStepPays) {
  ConcurrencyOptions o;
  o.ceiling = 256;
  Sim s(o);
  Link link;
  link.saturation = 1000;
  s.Run(link, 300);
  EXPECT_EQ(s.c.limit(), 256);
  // Fast: the climb from 16 to 256 takes 4 doublings.
  const auto first = std::find(s.limits.begin(), s.limits.end(), 256);
  ASSERT_NE(first, s.limits.end());
  EXPECT_LT(first - s.limits.begin(), 150) << "steps of 10 ms to reach the ceiling";
}

TEST(ConcurrencyControllerTest, DoesNotGrowWhereMoreTransfersBuyNothing) {
  Sim s;
  Link link;
  link.saturation = 8;  // already saturated at the initial 16
  s.Run(link, 1000);
  EXPECT_LE(s.c.limit(), 20);
  // Probes are rare and short: most of the time the limit is the initial one.
  const auto at16 = std::count(s.limits.begin(), s.limits.end(), 16);
  EXPECT_GT(at16, 800);
}

// A path bound by something else (the CPU): the initial 64 is more than
// pays; after the climb stops, the limit halves down to 16 (the old fixed
// default), where fewer would still lose nothing.
TEST(ConcurrencyControllerTest, ShrinksWhereFewerTransfersLoseNothing) {
  ConcurrencyOptions o;
  o.initial = 64;
  Sim s(o);
  Link link;
  link.saturation = 8;
  s.Run(link, 1500);  // windows are long here: every transfer takes 1.6-3.2 s
  s.limits.clear();
  s.Run(link, 500);
  EXPECT_EQ(s.c.peak(), 128);
  EXPECT_LE(*std::max_element(s.limits.begin(), s.limits.end()), 20);  // 16, and its x1.25 probes
  EXPECT_GT(std::count(s.limits.begin(), s.limits.end(), 16), 400);
}

// Where the halving costs throughput it is undone.
TEST(ConcurrencyControllerTest, ShrinkingStopsWhereItCosts) {
  ConcurrencyOptions o;
  o.initial = 64;
  Sim s(o);
  Link link;
  link.saturation = 50;
  s.Run(link, 1000);
  EXPECT_EQ(s.c.limit(), 64);
}

TEST(ConcurrencyControllerTest, OscillationStaysBoundedUnderNoise) {
  Sim s;
  Link link;
  link.noise = 0.15;
  s.Run(link, 300);  // converge
  s.limits.clear();
  s.Run(link, 3000);  // 30 s
  const auto [lo, hi] = std::minmax_element(s.limits.begin(), s.limits.end());
  EXPECT_GE(*lo, 32) << "fell well below the saturation (40)";
  EXPECT_LE(*hi, 128) << "grew far past the saturation (40)";
  int changes = 0;
  for (std::size_t i = 1; i < s.limits.size(); ++i) changes += s.limits[i] != s.limits[i - 1];
  EXPECT_LE(changes, 60) << "the limit changed too often";
}

TEST(ConcurrencyControllerTest, ABurstOf429HalvesOnceAndThenRecovers) {
  Sim s;
  s.Run(Link{}, 500);
  const int before = s.c.limit();
  ASSERT_GE(before, 40);
  // 50 answers of 429 at once: one halving, not 50.
  for (int i = 0; i < 50; ++i) s.c.Throttled();
  EXPECT_EQ(s.c.limit(), before / 2);
  EXPECT_EQ(s.c.backoffs(), 1u);
  // A second burst a window later halves again.
  s.Run(Link{}, 11);
  for (int i = 0; i < 50; ++i) s.c.Throttled();
  EXPECT_LE(s.c.limit(), before / 2);
  EXPECT_EQ(s.c.backoffs(), 2u);
  const int low = s.c.limit();
  // The throttling ends: the limit climbs back to where throughput stops growing.
  s.Run(Link{}, 1000);
  EXPECT_GT(s.c.limit(), low);
  EXPECT_GE(s.c.limit(), 40);
}

TEST(ConcurrencyControllerTest, Sustained429KeepsTheLimitLowDownToTheFloor) {
  ConcurrencyOptions o;
  o.floor = 4;
  Sim s(o);
  for (int i = 0; i < 200; ++i) {
    s.c.Throttled();
    s.Run(Link{}, 5);
  }
  EXPECT_EQ(s.c.limit(), 4);
  EXPECT_GT(s.c.backoffs(), 2u);
}

TEST(ConcurrencyControllerTest, ErrorsTakeAQuarterOff) {
  Sim s;
  s.Run(Link{}, 500);
  const int before = s.c.limit();
  s.c.Failed();
  EXPECT_EQ(s.c.limit(), before * 3 / 4);
  s.c.Failed();  // the same window: no second decrease
  EXPECT_EQ(s.c.limit(), before * 3 / 4);
}

TEST(ConcurrencyControllerTest, MemoryPressureShrinksTheGrowthButNotBelowItsFloor) {
  Sim s;
  s.Run(Link{}, 500);
  ASSERT_GT(s.c.limit(), 16);
  for (int i = 0; i < 100; ++i) {
    s.c.Pressure();
    s.Run(Link{}, 11);
  }
  EXPECT_EQ(s.c.limit(), 16);
}

TEST(ConcurrencyControllerTest, AnUnusedLimitTeachesNothing) {
  Sim s;
  // Only 5 transfers ever run: the windows do not count, the limit stays.
  for (int i = 0; i < 500; ++i) {
    s.c.InFlight(5);
    s.c.Received(50'000);
    s.c.Ended();
    s.clock.Advance(milliseconds(10));
    s.c.Tick();
  }
  EXPECT_EQ(s.c.limit(), 16);
}

TEST(ConcurrencyControllerTest, BoundsAreClamped) {
  FakeClock clock;
  ConcurrencyOptions o;
  o.floor = 50;
  o.initial = 10;
  o.ceiling = 20;
  ConcurrencyController c(clock, o);
  EXPECT_EQ(c.limit(), 20);
  c.Throttled();
  EXPECT_EQ(c.limit(), 20);  // floor clamped to the ceiling
}

// ConnectionSpread: the path counts as long until an answer is measured;
// the shortest wait decides, the ranges' over the resolves' once there is one.
TEST(ConnectionSpreadTest, TheShortestMeasuredWaitDecidesAndRangesWinOverResolves) {
  using std::chrono::microseconds;
  ConnectionSpread s({.long_path_streams = 4, .short_path_streams = 16, .short_path = microseconds(2000)});
  EXPECT_EQ(s.streams(), 4);
  EXPECT_FALSE(s.short_path());
  s.Answered(false, microseconds(-1));  // not measured
  EXPECT_EQ(s.streams(), 4);
  s.Answered(false, microseconds(30'000));
  EXPECT_EQ(s.streams(), 4);
  s.Answered(false, microseconds(1'999));  // the hub is near
  EXPECT_EQ(s.streams(), 16);
  EXPECT_TRUE(s.short_path());
  s.Answered(true, microseconds(2'000));  // the CDN is not: 2 ms is not short
  EXPECT_EQ(s.streams(), 4);
  EXPECT_FALSE(s.short_path());
  s.Answered(false, microseconds(100));  // resolves no longer count
  EXPECT_EQ(s.streams(), 4);
  s.Answered(true, microseconds(900'000));  // a slow answer does not undo a shorter one
  s.Answered(true, microseconds(1'500));
  EXPECT_EQ(s.streams(), 16);
  s.Answered(true, microseconds(50'000));
  EXPECT_EQ(s.streams(), 16);
}

}  // namespace
}  // namespace exlr8
