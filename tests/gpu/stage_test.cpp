// exlr8d's GPU stage end to end: a rank pulled from the hub simulator into a
// real cache, read back and verified (rank_reader.h), staged on the GPU and
// checked there (gpu_stage.h). Skips without a CUDA device (CI); runs on the
// device machine.
#include "daemon/stage/gpu_stage.h"

#include <cuda_runtime.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "client/lease/open_lease.h"
#include "daemon/stage/lease.h"
#include "gpu/device.h"
#include "tests/daemon/cache_test_util.h"
#include "tests/daemon/child_process.h"
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
    std::atomic<std::uint64_t> uploaded{0};  // what exlr8d-stage reports while it uploads
    o.upload.bytes_uploaded = &uploaded;
    auto report = StageOnGpu(*halves, o);
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    EXPECT_TRUE(report->ok()) << report->first_mismatch;
    EXPECT_EQ(uploaded.load(), halves->total_bytes);
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

// Told to stop (exlr8d-stage's signal), staging returns Cancelled and
// keeps nothing; the device memory it had is freed.
TEST(GpuStage, AStopAskedForEndsStagingAndKeepsNothing) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device: GPU tests run on the device machine";
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  ASSERT_TRUE(Pull(cache.path(), Options(*sim, "home", 1, 0)).ok());
  auto halves = ReadRankHalves(TestRankRequest(cache.path(), 1, 0));
  ASSERT_TRUE(halves.ok()) << halves.status().ToString();
  std::atomic<bool> stop{true};
  GpuStageOptions o;
  o.cancel = &stop;
  StagedHalves kept;
  auto report = StageOnGpu(*halves, o, &kept);
  EXPECT_EQ(report.status().code(), StatusCode::kCancelled) << report.status().ToString();
  EXPECT_THAT(report.status().message(), ::testing::HasSubstr("stopped after 0 of"));
  EXPECT_EQ(kept.num_halves(), 0u);
  stop.store(false);
  report = StageOnGpu(*halves, o, &kept);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(kept.num_halves(), halves->halves.size());
}

// The serving process's side refuses a description it cannot trust, before
// it maps anything (no device needed).
TEST(Lease, MalformedDescriptionsAreRefused) {
  TempDir dir;
  const fs::path socket = dir.path() / "lease.sock";
  auto expect = [&](const std::string& description, const std::string& what) {
    auto server = LeaseServer::Start(socket, description);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    auto lease = OpenLease(socket);
    EXPECT_EQ(lease.status().code(), StatusCode::kCorruption) << description;
    EXPECT_THAT(lease.status().message(), ::testing::HasSubstr(what)) << description;
    EXPECT_EQ((*server)->served(), 1u);
  };
  expect("{not json", "lease description from");
  expect(R"({"version":2})", "version 2 is unknown");
  expect(R"({"version":1,"repo":"a/b","commit":"c","manifest":"home","tp":4,"rank":1,"device":0,"bytes":9})",
         "no 'halves' array");
  expect(R"({"version":1,"repo":"a/b","commit":"c","manifest":"home","tp":4,"rank":1,"device":0,"bytes":9,)"
         R"("halves":[{"layer":3,"proj":"gate","half":0,"k":2,"hidden":256,"offset":0,"length":8192}]})",
         "without an expert");
  // One holder per socket; its file goes when it stops.
  auto first = LeaseServer::Start(socket, "{}");
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(LeaseServer::Start(socket, "{}").status().code(), StatusCode::kFailedPrecondition);
  (*first)->Stop();
  EXPECT_FALSE(fs::exists(socket));
  EXPECT_EQ(OpenLease(socket).status().code(), StatusCode::kNotFound);
}

// `exlr8d-stage --lease v1 --hold` (deprecated; v2 is
// device_image_test's): a separate process that holds the staged rank;
// this process, in the serving process's place, opens the lease and finds
// there exactly the bytes the cache verified, and the pointer table.
TEST(GpuStage, ALeaseGivesAnotherProcessTheStagedBytesAndTable) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device: GPU tests run on the device machine";
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  ASSERT_TRUE(Pull(cache.path(), Options(*sim, "home", 4, 1)).ok());
  const std::string socket = (cache.path() / "lease.sock").string();
  ChildProcess holder("exlr8d-stage",
                      {"--cache", cache.path().string(), "--repo", "exlr8/test", "--manifest", "home", "--tp",
                       "4", "--rank", "1", "--lease", "v1", "--hold", socket});
  ASSERT_TRUE(holder.ReadUntil("holding")) << holder.printed();
  {
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    auto lease = OpenLease(socket);
    ASSERT_TRUE(lease.ok()) << lease.status().ToString();
    auto rank = ReadRankHalves(TestRankRequest(cache.path(), 4, 1));
    ASSERT_TRUE(rank.ok());
    ASSERT_EQ(lease->halves.size(), rank->halves.size());
    EXPECT_EQ(lease->bytes, rank->total_bytes);
    EXPECT_EQ(lease->commit, rank->commit);
    EXPECT_EQ(lease->tp, 4);
    EXPECT_EQ(lease->rank, 1);
    std::vector<std::uint64_t> table(lease->halves.size());
    ASSERT_EQ(cudaMemcpy(table.data(), lease->offsets.data(), table.size() * sizeof(std::uint64_t),
                         cudaMemcpyDeviceToHost),
              cudaSuccess);
    std::vector<std::byte> back;
    for (std::size_t i = 0; i < lease->halves.size(); ++i) {
      const LeasedHalf& lh = lease->halves[i];
      const RankHalf& rh = rank->halves[i];
      ASSERT_EQ(lh.tag.What(), rh.tag.What());
      EXPECT_EQ(table[i], lh.offset) << lh.tag.What();
      ASSERT_EQ(lh.length, rh.length);
      EXPECT_EQ(lh.hidden, rh.hidden);
      back.assign(lh.length, std::byte{0});
      ASSERT_EQ(cudaMemcpy(back.data(), static_cast<const std::byte*>(lease->data.data()) + lh.offset, lh.length,
                           cudaMemcpyDeviceToHost),
                cudaSuccess);
      EXPECT_EQ(std::memcmp(back.data(), rank->Bytes(rh).data(), lh.length), 0) << lh.tag.What();
    }
    // Told to stop while this process holds the lease, the holder takes no
    // new lessee and waits for this one; the memory stays valid meanwhile.
    holder.Send(SIGTERM);
    ASSERT_TRUE(holder.ReadUntil("lessee(s) to let go (pid " + std::to_string(::getpid()) + ")"))
        << holder.printed();
    EXPECT_FALSE(fs::exists(socket));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const LeasedHalf& last = lease->halves.back();
    back.assign(last.length, std::byte{0});
    ASSERT_EQ(cudaMemcpy(back.data(), static_cast<const std::byte*>(lease->data.data()) + last.offset, last.length,
                         cudaMemcpyDeviceToHost),
              cudaSuccess);
    EXPECT_EQ(std::memcmp(back.data(), rank->Bytes(rank->halves.back()).data(), last.length), 0);
  }  // the lease is closed: unmapped, then the connection
  EXPECT_THAT(holder.ReadAll(), ::testing::HasSubstr("released after 1 lease"));
  EXPECT_EQ(holder.Signal(SIGTERM), 0);
  EXPECT_FALSE(fs::exists(socket));
}

// A lessee that does not let go holds the memory no longer than
// --release-wait allows.
TEST(GpuStage, AHolderReleasesAfterItsWaitWhateverItsLessees) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device: GPU tests run on the device machine";
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  ASSERT_TRUE(Pull(cache.path(), Options(*sim, "home", 4, 2)).ok());
  const std::string socket = (cache.path() / "lease.sock").string();
  ChildProcess holder("exlr8d-stage",
                      {"--cache", cache.path().string(), "--repo", "exlr8/test", "--manifest", "home", "--tp",
                       "4", "--rank", "2", "--lease", "v1", "--hold", socket, "--release-wait", "1"});
  ASSERT_TRUE(holder.ReadUntil("holding")) << holder.printed();
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  auto lease = OpenLease(socket);
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  const auto t0 = std::chrono::steady_clock::now();
  holder.Send(SIGTERM);
  const std::string out = holder.ReadAll();  // to its exit
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_THAT(out, ::testing::HasSubstr("releasing with 1 lessee(s) still attached"));
  EXPECT_THAT(out, ::testing::HasSubstr("released after 1 lease"));
  EXPECT_GE(waited, 0.9);
  EXPECT_LT(waited, 10.0);
  EXPECT_EQ(holder.Signal(SIGTERM), 0);
}

}  // namespace
}  // namespace exlr8
