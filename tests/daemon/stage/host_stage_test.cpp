// `exlr8d-stage --memory host` end to end, no GPU needed: a rank pulled from
// the hub simulator into a real cache, assembled by the real binary into a
// sealed memfd and leased over protocol v2 on a real Unix socket to this
// process (client/lease/host_lease.h), which finds the same bytes an
// in-process build of the image holds, every region at its digest; then
// SIGTERM: the release line reaches the lessee, and the holder exits once
// it has let go.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <string>

#include "client/lease/host_lease.h"
#include "daemon/stage/host_image.h"
#include "format/checksum.h"
#include "tests/daemon/cache_test_util.h"
#include "tests/daemon/child_process.h"
#include "tests/daemon/pull_test_util.h"
#include "tests/daemon/rank_test_util.h"

namespace exlr8 {
namespace {

using ::exlr8::testing::TempDir;

std::vector<std::string> StageArgs(const fs::path& cache, int tp, int rank) {
  return {"--cache", cache.string(),     "--repo", "exlr8/test",         "--manifest", "home",
          "--tp",    std::to_string(tp), "--rank", std::to_string(rank), "--memory",   "host"};
}

TEST(HostStageTest, ALesseeMapsTheImageAndLetsGoWhenAskedToRelease) {
  auto sim = StartSim(TinyRelease());
  TempDir cache, run;
  ASSERT_TRUE(Pull(cache.path(), Options(*sim, "home", 3, 1)).ok());
  const fs::path sock = run.path() / "lease.sock";
  std::vector<std::string> args = StageArgs(cache.path(), 3, 1);
  for (const char* a : {"--hold", "", "--release-wait", "20"}) args.emplace_back(a);
  args[args.size() - 3] = sock.string();
  ChildProcess stage("exlr8d-stage", args, (run.path() / "stage.err").string());
  ASSERT_TRUE(stage.ReadUntil("holding:")) << stage.printed();
  EXPECT_NE(stage.printed().find("0 mismatches"), std::string::npos) << stage.printed();

  auto lease = OpenHostLease(sock);
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  // The same bytes as an image this process builds from the same cache.
  auto own = BuildHostRankImage(TestRankRequest(cache.path(), 3, 1));
  ASSERT_TRUE(own.ok()) << own.status().ToString();
  ASSERT_EQ(lease->allocation_bytes(), own->image.bytes().size());
  EXPECT_EQ(std::memcmp(lease->allocation(), own->image.bytes().data(), own->image.bytes().size()), 0);
  // Every region at its digest, through the lessee's own tables.
  ASSERT_FALSE(lease->tables().tensors.empty());
  for (const ImageTensor& t : lease->tables().tensors)
    EXPECT_EQ(Xxh64::Hash(lease->Region(t)), t.xxh64) << t.What();
  EXPECT_EQ(lease->proof().hashed_regions, lease->tables().checks.size());
  EXPECT_EQ(lease->proof().hashed_mismatches, 0u);
  EXPECT_EQ(lease->description().memory_kind, LeaseMemoryKind::kHost);
  EXPECT_EQ(lease->description().tp, 3);
  EXPECT_EQ(lease->description().rank, 1);
  auto none = lease->PollRelease();
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_FALSE(none->has_value());

  stage.Send(SIGTERM);
  auto release = lease->WaitRelease(std::chrono::seconds(20));
  ASSERT_TRUE(release.ok()) << release.status().ToString();
  ASSERT_TRUE(release->has_value());
  EXPECT_FALSE((*release)->holder_gone);
  EXPECT_EQ((*release)->deadline_s, 20u);
  ASSERT_TRUE(stage.ReadUntil("waiting up to")) << stage.printed();
  lease->Close();
  ASSERT_TRUE(stage.ReadUntil("released after 1 lease(s)")) << stage.printed();
  EXPECT_EQ(stage.Signal(0), 0) << stage.ReadAll();
}

TEST(HostStageTest, WithoutHoldItChecksAndExits) {
  auto sim = StartSim(TinyRelease());
  TempDir cache, run;
  ASSERT_TRUE(Pull(cache.path(), Options(*sim, "home", 4, 2)).ok());
  ChildProcess stage("exlr8d-stage", StageArgs(cache.path(), 4, 2), (run.path() / "stage.err").string());
  EXPECT_EQ(stage.Signal(0), 0);  // waits: signal 0 only reaps
  EXPECT_NE(stage.ReadAll().find("ok (not held"), std::string::npos) << stage.printed();
}

TEST(HostStageTest, ARottenByteInTheCacheFailsNamingItsRegion) {
  auto sim = StartSim(TinyRelease());
  TempDir cache, run;
  auto pulled = Pull(cache.path(), Options(*sim, "home", 4, 2));
  ASSERT_TRUE(pulled.ok()) << pulled.status().ToString();
  // The first half of the first width file, one byte flipped on disk.
  bool flipped = false;
  for (const PlanFile& f : pulled->plan.files) {
    if (f.whole || flipped) continue;
    for (const PlanRange& r : f.ranges) {
      if (r.kind != PlanRange::Kind::kHalf) continue;
      std::fstream io(pulled->root / f.path, std::ios::in | std::ios::out | std::ios::binary);
      io.seekg(static_cast<std::streamoff>(r.offset + r.length / 2));
      char c = 0;
      io.read(&c, 1);
      c = static_cast<char>(c ^ 0x40);
      io.seekp(static_cast<std::streamoff>(r.offset + r.length / 2));
      io.write(&c, 1);
      flipped = static_cast<bool>(io);
      break;
    }
  }
  ASSERT_TRUE(flipped);
  const fs::path err = run.path() / "stage.err";
  ChildProcess stage("exlr8d-stage", StageArgs(cache.path(), 4, 2), err.string());
  EXPECT_EQ(stage.Signal(0), 3) << stage.ReadAll();
  std::ifstream in(err);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("half record"), std::string::npos) << text;
}

TEST(HostStageTest, CheckIsRefusedForHostMemory) {
  TempDir cache, run;
  std::vector<std::string> args = StageArgs(cache.path(), 4, 2);
  args.insert(args.end(), {"--check", "all"});
  ChildProcess stage("exlr8d-stage", args, (run.path() / "stage.err").string());
  EXPECT_EQ(stage.Signal(0), 2);
}

std::vector<std::string> DeviceV2Args(const fs::path& cache, int tp, int rank) {
  std::vector<std::string> args = StageArgs(cache, tp, rank);
  args.back() = "device";
  args.insert(args.end(), {"--lease", "v2"});
  return args;
}

// The device kind of the whole image: exit 4 naming the missing device
// here; on a GPU machine it stages, checks in place and exits 0.
TEST(HostStageTest, DeviceLeaseV2StagesOrSaysThereIsNoGpu) {
  auto sim = StartSim(TinyRelease());
  TempDir cache, run;
  ASSERT_TRUE(Pull(cache.path(), Options(*sim, "home", 4, 2)).ok());
  const fs::path err = run.path() / "stage.err";
  ChildProcess stage("exlr8d-stage", DeviceV2Args(cache.path(), 4, 2), err.string());
  const int code = stage.Signal(0);
  const std::string out = stage.ReadAll();
  std::ifstream in(err);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (code == 4) {
    EXPECT_NE(text.find("no CUDA device"), std::string::npos) << text;
  } else {
    EXPECT_EQ(code, 0) << out << text;
    EXPECT_NE(out.find("tiles bit-exact, weights within spec 9.3"), std::string::npos) << out;
    EXPECT_NE(out.find("dense matrices decoded on the GPU in place"), std::string::npos) << out;
    EXPECT_NE(out.find("ok (not held"), std::string::npos) << out;
  }
}

// Lease v2 is the default for device memory too: a count of halves to
// check (lease v1's) is refused without --lease v1, and a pulled rank is
// staged whole (on a GPU) or refused for want of one, never read as halves
// first. --lease v1 still works, with a warning that it is deprecated.
TEST(HostStageTest, DeviceMemoryDefaultsToLeaseV2AndV1IsDeprecated) {
  auto sim = StartSim(TinyRelease());
  TempDir cache, run;
  ASSERT_TRUE(Pull(cache.path(), Options(*sim, "home", 4, 2)).ok());
  fs::path err;  // each run's stderr (appended to: one file per run)
  auto printed = [&] {
    std::ifstream in(err);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  std::vector<std::string> args = StageArgs(cache.path(), 4, 2);
  args.resize(args.size() - 2);  // no --memory: device
  {
    std::vector<std::string> counted = args;
    counted.insert(counted.end(), {"--check", "5"});
    err = run.path() / "counted.err";
    ChildProcess stage("exlr8d-stage", counted, err.string());
    EXPECT_EQ(stage.Signal(0), 2) << stage.ReadAll() << printed();
    EXPECT_NE(printed().find("--check with --lease v2 (the default)"), std::string::npos) << printed();
  }
  {
    err = run.path() / "default.err";
    ChildProcess stage("exlr8d-stage", args, err.string());
    const int code = stage.Signal(0);
    const std::string out = stage.ReadAll();
    EXPECT_EQ(out.find("of halves of"), std::string::npos) << out;  // lease v1's first line
    EXPECT_EQ(printed().find("deprecated"), std::string::npos) << printed();
    if (code == 4) {
      EXPECT_NE(printed().find("no CUDA device"), std::string::npos) << printed();
    } else {
      EXPECT_EQ(code, 0) << out << printed();
      EXPECT_NE(out.find("tiles bit-exact, weights within spec 9.3"), std::string::npos) << out;
      EXPECT_NE(out.find("dense matrices decoded on the GPU in place"), std::string::npos) << out;
    }
  }
  {
    std::vector<std::string> v1 = args;
    v1.insert(v1.end(), {"--lease", "v1", "--check", "5"});
    err = run.path() / "v1.err";
    ChildProcess stage("exlr8d-stage", v1, err.string());
    const int code = stage.Signal(0);
    const std::string out = stage.ReadAll();
    EXPECT_NE(printed().find("warning: --lease v1 is deprecated and goes in the next release"),
              std::string::npos)
        << printed();
    EXPECT_TRUE(code == 0 || code == 4) << code << out << printed();  // 4: no GPU here
    EXPECT_NE(out.find("of halves of exlr8/test TP 4 rank 2"), std::string::npos) << out;
  }
}

TEST(HostStageTest, LeaseVersionAndCheckAreValidated) {
  TempDir cache, run;
  const std::string err = (run.path() / "stage.err").string();
  {
    std::vector<std::string> args = DeviceV2Args(cache.path(), 4, 2);
    args.back() = "v3";
    ChildProcess stage("exlr8d-stage", args, err);
    EXPECT_EQ(stage.Signal(0), 2);
  }
  {
    std::vector<std::string> args = DeviceV2Args(cache.path(), 4, 2);
    args.insert(args.end(), {"--check", "5"});  // v2 decodes a sample or all
    ChildProcess stage("exlr8d-stage", args, err);
    EXPECT_EQ(stage.Signal(0), 2);
  }
  {
    std::vector<std::string> args = StageArgs(cache.path(), 4, 2);
    args.insert(args.end(), {"--lease", "v1"});  // host memory is v2 only
    ChildProcess stage("exlr8d-stage", args, err);
    EXPECT_EQ(stage.Signal(0), 2);
  }
}

}  // namespace
}  // namespace exlr8
