// A rank's whole image assembled from a real cache (pulled from the hub
// simulator) into sealed host memory, and checked against the cache's bytes
// read here independently of the image plan (format/expert_index,
// format/safetensors, the manifest).
#include "daemon/stage/host_image.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <map>
#include <set>

#include "client/file_sink.h"
#include "client/lease/image_layout.h"
#include "daemon/stage/image_common.h"
#include "daemon/stage/rank_image_plan.h"
#include "format/checksum.h"
#include "format/expert_index.h"
#include "format/layout.h"
#include "format/manifest.h"
#include "format/safetensors.h"
#include "tests/daemon/cache_test_util.h"
#include "tests/daemon/host_image_test_util.h"
#include "tests/daemon/pull_test_util.h"
#include "tests/daemon/rank_test_util.h"

namespace exlr8 {
namespace {

using ::exlr8::testing::TempDir;
using ::testing::HasSubstr;

TEST(HostImageTest, HoldsTheCachesBytes) {
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  auto pulled = Pull(cache.path(), Options(*sim, "home", 3, 1));
  ASSERT_TRUE(pulled.ok()) << pulled.status().ToString();
  BuildAndCheck(cache.path(), pulled->commit, "home", 3, 1);
}

// Widths that differ half by half, other dtypes (BF16 slices, F16 block
// rows), packed and shuffled halves: nothing rests on the fixture's choices.
TEST(HostImageTest, ASynthesizedReleaseWithWidthsPerHalf) {
  TempDir release;
  SynthOptions so = OtherChoicesRelease(11);
  so.home_mix = ManifestMix::kRandomPerHalf;
  DirectoryReleaseSink sink(release.path().string());
  ASSERT_TRUE(SynthesizeRelease(so, sink).ok());
  auto sim = StartSim(release.path());
  TempDir cache;
  for (int rank : {0, 2}) {
    auto pulled = Pull(cache.path(), Options(*sim, "home", 3, rank));
    ASSERT_TRUE(pulled.ok()) << pulled.status().ToString();
    BuildAndCheck(cache.path(), pulled->commit, "home", 3, rank);
  }
}

TEST(HostImageTest, TheMemfdsAreSealed) {
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  ASSERT_TRUE(Pull(cache.path(), Options(*sim, "home", 4, 1)).ok());
  auto img = BuildHostRankImage(TestRankRequest(cache.path(), 4, 1));
  ASSERT_TRUE(img.ok()) << img.status().ToString();
  for (int fd : {img->image_fd.get(), img->tables_fd.get()}) {
    EXPECT_EQ(fcntl(fd, F_GET_SEALS), F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL);
    EXPECT_NE(fcntl(fd, F_GETFD) & FD_CLOEXEC, 0);
    const char byte = 1;
    EXPECT_EQ(pwrite(fd, &byte, 1, 0), -1);
    EXPECT_EQ(errno, EPERM);
    struct stat st {};
    ASSERT_EQ(fstat(fd, &st), 0);
    EXPECT_NE(ftruncate(fd, st.st_size + 4096), 0);
    EXPECT_NE(ftruncate(fd, 0), 0);
    EXPECT_EQ(mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0), MAP_FAILED);
    EXPECT_EQ(fcntl(fd, F_ADD_SEALS, 0), -1);  // F_SEAL_SEAL: no seal removed or added
    void* ro = mmap(nullptr, 4096, PROT_READ, MAP_SHARED, fd, 0);
    EXPECT_NE(ro, MAP_FAILED);
    if (ro != MAP_FAILED) munmap(ro, 4096);
  }
  // Through /proc (another process's way in): still read-only.
  const std::string proc = "/proc/self/fd/" + std::to_string(img->image_fd.get());
  UniqueFd again(open(proc.c_str(), O_WRONLY));
  ASSERT_TRUE(again.valid());
  const char byte = 1;
  EXPECT_EQ(write(again.get(), &byte, 1), -1);
  EXPECT_EQ(errno, EPERM);
}

void Flip(const fs::path& file, std::uint64_t offset) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x10);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

TEST(HostImageTest, AFlippedByteFailsTheBuildNamingTheRegion) {
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  auto pulled = Pull(cache.path(), Options(*sim, "home", 3, 2));
  ASSERT_TRUE(pulled.ok());
  auto plan = PlanRankImage(TestRankRequest(cache.path(), 3, 2));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const ImageTables& tables = plan->layout.tables;
  // A half record in the middle, and a dense matrix's data.
  std::uint32_t half = 0, dense = 0;
  for (std::uint32_t i = 0; i < tables.tensors.size(); ++i) {
    if (tables.tensors[i].kind == ImageRegionKind::kHalfRecord && half == 0 && i > 10) half = i;
    if (tables.tensors[i].kind == ImageRegionKind::kDenseData && dense == 0) dense = i;
  }
  ASSERT_NE(half, 0u);
  ASSERT_NE(dense, 0u);
  const ImageSourcePiece trellis = plan->sources[half].pieces[0];
  const std::string width_file = plan->map_files[trellis.map];
  const ImageSourcePiece data = plan->sources[dense].pieces[0];
  const std::string dense_file = plan->map_files[data.map];
  const std::string half_name = tables.tensors[half].What();
  const std::string dense_name = tables.tensors[dense].name;

  Flip(Mirror(cache.path(), pulled->commit) / width_file, trellis.offset + trellis.length / 2);
  for (int threads : {1, 4}) {
    auto request = TestRankRequest(cache.path(), 3, 2);
    request.threads = threads;
    auto bad = BuildHostRankImage(request);
    ASSERT_EQ(bad.status().code(), StatusCode::kCorruption);
    EXPECT_THAT(bad.status().message(), HasSubstr("half record " + half_name));
    EXPECT_THAT(bad.status().message(), HasSubstr(width_file + " at byte " + std::to_string(trellis.offset)));
  }
  Flip(Mirror(cache.path(), pulled->commit) / width_file, trellis.offset + trellis.length / 2);
  ASSERT_TRUE(BuildHostRankImage(TestRankRequest(cache.path(), 3, 2)).ok());

  Flip(Mirror(cache.path(), pulled->commit) / dense_file, data.offset + 1);
  auto bad = BuildHostRankImage(TestRankRequest(cache.path(), 3, 2));
  ASSERT_EQ(bad.status().code(), StatusCode::kCorruption);
  EXPECT_THAT(bad.status().message(), HasSubstr("dense data '" + dense_name + "'"));
  EXPECT_THAT(bad.status().message(), HasSubstr(dense_file + " at byte " + std::to_string(data.offset)));
}

TEST(HostImageTest, RefusesWhatTheCacheDoesNotHoldVerified) {
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  ASSERT_TRUE(Pull(cache.path(), Options(*sim, "home", 4, 1)).ok());
  auto other = BuildHostRankImage(TestRankRequest(cache.path(), 4, 2));
  EXPECT_EQ(other.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(other.status().message(),
              HasSubstr("is not verified in the cache: run exlr8d pull for TP 4 rank 2"));
  auto never = TestRankRequest(cache.path(), 4, 1);
  never.repo = "exlr8/never";
  EXPECT_EQ(BuildHostRankImage(never).status().code(), StatusCode::kNotFound);
}

TEST(HostImageTest, AStopAskedForEndsTheBuild) {
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  ASSERT_TRUE(Pull(cache.path(), Options(*sim, "home", 4, 0)).ok());
  std::atomic<bool> stop{false};
  auto request = TestRankRequest(cache.path(), 4, 0);
  RankReadProgress progress;
  request.progress = &progress;
  request.cancel = &stop;
  request.before_reading = [&] {
    stop = true;  // as a signal would, once the plan is made
    return Status::Ok();
  };
  auto stopped = BuildHostRankImage(request);
  EXPECT_EQ(stopped.status().code(), StatusCode::kCancelled);
  EXPECT_THAT(stopped.status().message(), HasSubstr("stopped while copying"));
  // Stopped before the first byte, not after the whole copy.
  EXPECT_GT(progress.bytes_total.load(), 0u);
  EXPECT_EQ(progress.bytes_checked.load(), 0u);
  stop = true;
  request.before_reading = nullptr;
  EXPECT_EQ(BuildHostRankImage(request).status().code(), StatusCode::kCancelled);
}

// The device stage assembles its staging buffers window by window from the
// plan's pieces (AssembleImageWindow): every window size gives the host
// image's bytes, padding included.
TEST(HostImageTest, WindowsAssembledFromThePlanAreTheImage) {
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  ASSERT_TRUE(Pull(cache.path(), Options(*sim, "home", 3, 1)).ok());
  const RankRequest request = TestRankRequest(cache.path(), 3, 1);
  auto img = BuildHostRankImage(request);
  ASSERT_TRUE(img.ok()) << img.status().ToString();
  auto plan = PlanRankImage(request);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const std::span<const std::byte> want = img->image.bytes();
  ASSERT_EQ(plan->layout.allocation_bytes(), want.size());
  for (std::uint64_t window : {std::uint64_t{4096}, std::uint64_t{4096 + 100}, std::uint64_t{65536},
                               std::uint64_t{1} << 20, std::uint64_t{want.size()}}) {
    SCOPED_TRACE("window " + std::to_string(window));
    auto items = SortedImageCopyItems(*plan, window);
    ASSERT_TRUE(items.ok()) << items.status().ToString();
    std::vector<std::byte> got(want.size(), std::byte{0xEE});
    for (std::uint64_t begin = 0; begin < got.size(); begin += window)
      AssembleImageWindow(
          *items, begin,
          std::span<std::byte>(got).subspan(begin, std::min<std::uint64_t>(window, got.size() - begin)));
    std::size_t first_diff = got.size();
    for (std::size_t i = 0; i < got.size() && first_diff == got.size(); ++i)
      if (got[i] != want[i]) first_diff = i;
    EXPECT_EQ(first_diff, got.size()) << "differs from the host image at byte " << first_diff;
  }
}

}  // namespace
}  // namespace exlr8
