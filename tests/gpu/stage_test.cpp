// exlr8d's GPU stage end to end: a rank pulled from the hub simulator into a
// real cache, read back and verified (rank_reader.h), staged on the GPU and
// checked there (gpu_stage.h). Skips without a CUDA device (CI); runs on the
// device machine.
#include "daemon/stage/gpu_stage.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gpu/device.h"
#include "tests/daemon/cache_test_util.h"
#include "tests/daemon/pull_test_util.h"
#include "tests/daemon/rank_test_util.h"

namespace exlr8 {
namespace {

using ::exlr8::testing::TempDir;

bool HaveGpu() {
  auto n = CudaDeviceCount();
  return n.ok() && *n > 0;
}

TEST(GpuStage, WithoutDeviceSaysUnavailable) {
  if (HaveGpu()) GTEST_SKIP() << "a CUDA device is present; this checks the no-device path";
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  ASSERT_TRUE(Pull(cache.path(), Options(*sim, "home", 4, 1)).ok());
  auto rank = ReadRankHalves(TestRankRequest(cache.path(), 4, 1));
  ASSERT_TRUE(rank.ok()) << rank.status().ToString();
  EXPECT_EQ(StageOnGpu(*rank, {}).status().code(), StatusCode::kUnavailable);
}

TEST(GpuStage, EveryPulledHalfStagedAndDecodedBitExact) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device: GPU tests run on the device machine";
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  for (const auto& [tp, rank] : std::vector<std::pair<int, int>>{{1, 0}, {3, 2}, {4, 1}}) {
    SCOPED_TRACE("TP " + std::to_string(tp) + " rank " + std::to_string(rank));
    ASSERT_TRUE(Pull(cache.path(), Options(*sim, "home", tp, rank)).ok());
    auto halves = ReadRankHalves(TestRankRequest(cache.path(), tp, rank));
    ASSERT_TRUE(halves.ok()) << halves.status().ToString();
    GpuStageOptions o;
    o.check_halves = GpuStageOptions::kAllHalves;
    auto report = StageOnGpu(*halves, o);
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    EXPECT_TRUE(report->ok()) << report->first_mismatch;
    EXPECT_EQ(report->halves, halves->halves.size());
    EXPECT_EQ(report->checked_halves, halves->halves.size());
    EXPECT_EQ(report->upload.bytes, halves->total_bytes);
    std::uint64_t weights = 0;
    for (const RankHalf& h : halves->halves) weights += 128 * h.hidden;
    EXPECT_EQ(report->checked_weights, weights);
    EXPECT_GT(report->upload.GBPerSecond(), 0.0);
  }
}

TEST(GpuStage, ASampleIsSpreadOverTheRank) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device: GPU tests run on the device machine";
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  ASSERT_TRUE(Pull(cache.path(), Options(*sim, "home", 1, 0)).ok());
  auto halves = ReadRankHalves(TestRankRequest(cache.path(), 1, 0));
  ASSERT_TRUE(halves.ok());
  GpuStageOptions o;
  o.check_halves = 5;
  auto report = StageOnGpu(*halves, o);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_TRUE(report->ok()) << report->first_mismatch;
  EXPECT_EQ(report->checked_halves, 5u);
  EXPECT_EQ(report->halves, halves->halves.size());
  o.check_halves = 0;
  report = StageOnGpu(*halves, o);
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->checked_halves, 0u);
  EXPECT_EQ(report->checked_weights, 0u);
}

}  // namespace
}  // namespace exlr8
