// A pulled rank's halves read back from a real cache (pulled from the hub
// simulator), verified again: what exlr8d-stage hands to the GPU.
#include "daemon/stage/rank_reader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <set>

#include "tests/daemon/cache_test_util.h"
#include "tests/daemon/pull_test_util.h"
#include "tests/daemon/rank_test_util.h"

namespace exlr8 {
namespace {

using ::exlr8::testing::TempDir;
using ::testing::HasSubstr;

TEST(RankReaderTest, ReadsExactlyThePulledHalvesByteForByte) {
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  for (int rank : {1, 2}) {
    auto pulled = Pull(cache.path(), Options(*sim, "home", 3, rank));
    ASSERT_TRUE(pulled.ok()) << pulled.status().ToString();
    RankRequest request = TestRankRequest(cache.path(), 3, rank);
    RankReadProgress progress;  // what exlr8d-stage reports while it reads
    request.progress = &progress;
    auto read = ReadRankHalves(request);
    ASSERT_TRUE(read.ok()) << read.status().ToString();
    EXPECT_EQ(progress.bytes_total.load(), read->total_bytes);
    EXPECT_EQ(progress.bytes_checked.load(), read->total_bytes);
    const PlanTotals& t = pulled->plan.totals;
    EXPECT_EQ(read->halves.size(), t.routed_halves + t.shared_halves);
    EXPECT_EQ(read->total_bytes, t.half_bytes);
    EXPECT_EQ(read->commit, pulled->commit);
    std::map<std::string, std::vector<char>> sources;
    bool saw_down = false, saw_gate = false;
    std::set<std::pair<std::string, std::uint64_t>> got_ranges;
    for (const RankHalf& h : read->halves) {
      auto& src = sources[h.file];
      if (src.empty()) src = ReadAll(TinyRelease() / h.file);
      ASSERT_LE(h.file_offset + h.length, src.size()) << h.tag.What();
      const auto got = read->Bytes(h);
      ASSERT_EQ(got.size(), h.length);
      EXPECT_EQ(std::memcmp(got.data(), src.data() + h.file_offset, h.length), 0) << h.tag.What();
      EXPECT_EQ(h.hidden, 256u) << h.tag.What();  // the fixture's hidden size
      EXPECT_EQ(h.length, 16u * static_cast<std::uint64_t>(h.tag.k) * h.hidden);
      EXPECT_EQ(h.layout == HalfLayout::kDown, h.tag.proj == Proj::kDown) << h.tag.What();
      saw_down |= h.tag.proj == Proj::kDown;
      saw_gate |= h.tag.proj == Proj::kGate;
      got_ranges.insert({h.file, h.file_offset});
    }
    EXPECT_TRUE(saw_down && saw_gate);
    // Exactly the halves the pull planned for this rank.
    std::set<std::pair<std::string, std::uint64_t>> planned;
    for (const PlanFile& f : pulled->plan.files)
      for (const PlanRange& r : f.ranges)
        if (r.kind == PlanRange::Kind::kHalf) planned.insert({f.path, r.offset});
    EXPECT_EQ(got_ranges, planned);
  }
}

TEST(RankReaderTest, RefusesWhatTheCacheDoesNotHoldVerified) {
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  ASSERT_TRUE(Pull(cache.path(), Options(*sim, "home", 4, 1)).ok());
  // Another rank's halves are holes in the cache: never read as zeros.
  auto other = ReadRankHalves(TestRankRequest(cache.path(), 4, 2));
  EXPECT_EQ(other.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(other.status().message(), HasSubstr("is not verified in the cache: run exlr8d pull for TP 4 rank 2"));
  auto never = TestRankRequest(cache.path(), 4, 1);
  never.repo = "exlr8/never";
  EXPECT_EQ(ReadRankHalves(never).status().code(), StatusCode::kNotFound);
  auto missing_manifest = TestRankRequest(cache.path(), 4, 1);
  missing_manifest.manifest = "nosuch";
  EXPECT_THAT(ReadRankHalves(missing_manifest).status().message(), HasSubstr("no manifests/"));
  EXPECT_EQ(ReadRankHalves(TestRankRequest(cache.path(), 4, 4)).status().code(), StatusCode::kInvalidArgument);
}

TEST(RankReaderTest, ABitThatRottedOnDiskIsCaughtNamingTheHalf) {
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  auto pulled = Pull(cache.path(), Options(*sim, "home", 4, 3));
  ASSERT_TRUE(pulled.ok());
  auto good = ReadRankHalves(TestRankRequest(cache.path(), 4, 3));
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  // Two halves rot; with several threads hashing, the error still names the
  // first in plan order.
  const RankHalf& victim = good->halves[good->halves.size() / 2];
  const RankHalf& later = good->halves.back();
  auto flip = [&](const RankHalf& h) {
    const fs::path file = cache.path() / "exlr8/test" / pulled->commit / h.file;
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(h.file_offset + h.length / 2));
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x10);
    f.seekp(static_cast<std::streamoff>(h.file_offset + h.length / 2));
    f.write(&c, 1);
  };
  flip(victim);
  flip(later);
  const fs::path file = cache.path() / "exlr8/test" / pulled->commit / victim.file;
  for (int threads : {1, 8}) {
    auto request = TestRankRequest(cache.path(), 4, 3);
    request.threads = threads;
    auto bad = ReadRankHalves(request);
    EXPECT_EQ(bad.status().code(), StatusCode::kCorruption);
    EXPECT_THAT(bad.status().message(), HasSubstr(victim.tag.What())) << threads << " threads";
  }
  auto bad = ReadRankHalves(TestRankRequest(cache.path(), 4, 3));
  EXPECT_EQ(bad.status().code(), StatusCode::kCorruption);
  EXPECT_THAT(bad.status().message(), HasSubstr(victim.tag.What()));
  EXPECT_THAT(bad.status().message(), HasSubstr("XXH64 mismatch"));
  // A data file of another size than the cache recorded is not read at all.
  fs::resize_file(file, fs::file_size(file) + 1);
  auto resized = ReadRankHalves(TestRankRequest(cache.path(), 4, 3));
  EXPECT_EQ(resized.status().code(), StatusCode::kCorruption);
  EXPECT_THAT(resized.status().message(), HasSubstr("the cache recorded"));
}

// The plan is made from the cached manifest and index files, so both kinds
// of file are checked by their hashes first: a manifest changed in the
// cache (here up1's copied over home's) would otherwise stage up1's widths
// as "home", every half passing its checksum.
TEST(RankReaderTest, AManifestOrIndexChangedInTheCacheIsRefused) {
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  for (const char* manifest : {"home", "up1"}) {
    auto pulled = Pull(cache.path(), Options(*sim, manifest, 4, 1));
    ASSERT_TRUE(pulled.ok()) << pulled.status().ToString();
  }
  ASSERT_TRUE(ReadRankHalves(TestRankRequest(cache.path(), 4, 1)).ok());
  const fs::path root = cache.path() / "exlr8/test" / Pull(cache.path(), Options(*sim, "home", 4, 1))->commit;
  const fs::path home = root / "manifests/exlr8-manifest-home.json";
  const std::vector<char> original = ReadAll(home);
  fs::copy_file(root / "manifests/exlr8-manifest-up1.json", home, fs::copy_options::overwrite_existing);
  auto swapped = ReadRankHalves(TestRankRequest(cache.path(), 4, 1));
  EXPECT_EQ(swapped.status().code(), StatusCode::kCorruption) << swapped.status().ToString();
  EXPECT_THAT(swapped.status().message(), HasSubstr("manifests/exlr8-manifest-home.json in the cache: git SHA-1"));
  {
    std::ofstream out(home, std::ios::binary | std::ios::trunc);
    out.write(original.data(), static_cast<std::streamsize>(original.size()));
  }
  ASSERT_TRUE(ReadRankHalves(TestRankRequest(cache.path(), 4, 1)).ok());

  // An index file: one byte of its JSON header's padding (a space), where
  // the parser would not notice.
  const fs::path index = root / "experts/exlr8-layer-003.index.safetensors";
  std::vector<char> bytes = ReadAll(index);
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  ASSERT_EQ(bytes[8 + n - 1], ' ') << "the fixture's header is padded";
  {
    std::fstream f(index, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(8 + n - 1));
    f.put('\t');
  }
  auto rotted = ReadRankHalves(TestRankRequest(cache.path(), 4, 1));
  EXPECT_EQ(rotted.status().code(), StatusCode::kCorruption) << rotted.status().ToString();
  EXPECT_THAT(rotted.status().message(), HasSubstr("exlr8-layer-003.index.safetensors in the cache"));
}

// A width file replaced by a link to the very bytes it held is still not
// the cache's: refused as corruption (exit 3), never followed.
TEST(RankReaderTest, AWidthFileReplacedByALinkIsCorruption) {
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  auto pulled = Pull(cache.path(), Options(*sim, "home", 4, 2));
  ASSERT_TRUE(pulled.ok()) << pulled.status().ToString();
  auto good = ReadRankHalves(TestRankRequest(cache.path(), 4, 2));
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  const std::string file = good->halves.front().file;
  const fs::path data = cache.path() / "exlr8/test" / pulled->commit / file;
  TempDir elsewhere;
  fs::copy_file(data, elsewhere.path() / "copy");
  fs::remove(data);
  fs::create_symlink(elsewhere.path() / "copy", data);
  auto linked = ReadRankHalves(TestRankRequest(cache.path(), 4, 2));
  EXPECT_EQ(linked.status().code(), StatusCode::kCorruption) << linked.status().ToString();
  EXPECT_THAT(linked.status().message(), HasSubstr(file));
}

// Asked to, the reader pins the fileset for as long as its result lives:
// exlr8d-stage holds it so while the rank is on the GPU.
TEST(RankReaderTest, PinsTheFilesetWhileTheHalvesAreHeld) {
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  auto pulled = Pull(cache.path(), Options(*sim, "home", 2, 1));
  ASSERT_TRUE(pulled.ok()) << pulled.status().ToString();
  RankRequest request = TestRankRequest(cache.path(), 2, 1);
  request.pin_holder = "exlr8d-stage home tp2 rank1";
  {
    auto read = ReadRankHalves(request);
    ASSERT_TRUE(read.ok()) << read.status().ToString();
    ASSERT_NE(read->pin, nullptr) << read->pin_error;
    auto cache_view = Cache::Open(cache.path());
    ASSERT_TRUE(cache_view.ok());
    auto sets = *(*cache_view)->ListFilesets();
    ASSERT_EQ(sets.size(), 1u);
    ASSERT_EQ(sets[0].process_pins.size(), 1u);
    EXPECT_EQ(sets[0].process_pins[0].holder, "exlr8d-stage home tp2 rank1");
    EXPECT_EQ(sets[0].commit, pulled->commit);
    EXPECT_EQ((*cache_view)->Evict(sets[0].id).status().code(), StatusCode::kFailedPrecondition);
  }
  EXPECT_TRUE(ListProcessPins(cache.path(), true)->empty());
  // A cache it cannot pin in is read all the same, saying why.
  std::filesystem::remove_all(ProcessPinDir(cache.path()));
  std::ofstream(ProcessPinDir(cache.path())) << "in the way";
  auto unpinned = ReadRankHalves(request);
  ASSERT_TRUE(unpinned.ok()) << unpinned.status().ToString();
  EXPECT_EQ(unpinned->pin, nullptr);
  EXPECT_THAT(unpinned->pin_error, HasSubstr("not a directory"));
}

// Told to stop (exlr8d-stage's signal), the reader returns Cancelled and
// keeps nothing: no halves, and the pin it took is gone with them.
TEST(RankReaderTest, AStopAskedForEndsTheReadAndDropsThePin) {
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  ASSERT_TRUE(Pull(cache.path(), Options(*sim, "home", 2, 1)).ok());
  RankRequest request = TestRankRequest(cache.path(), 2, 1);
  request.pin_holder = "exlr8d-stage home tp2 rank1";
  std::atomic<bool> stop{true};
  request.cancel = &stop;
  auto read = ReadRankHalves(request);
  ASSERT_EQ(read.status().code(), StatusCode::kCancelled) << read.status().ToString();
  EXPECT_THAT(read.status().message(), HasSubstr("stopped while"));
  EXPECT_TRUE(ListProcessPins(cache.path(), true)->empty());
  // The same request, not stopped, reads the rank.
  stop.store(false);
  auto again = ReadRankHalves(request);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_FALSE(again->halves.empty());
}

// The stage's hook before the halves are read: an error there ends the read
// before a byte of a half is hashed (exlr8d-stage: no GPU, so no 75 GB read).
TEST(RankReaderTest, AnErrorBeforeReadingEndsItBeforeAnyHalfIsHashed) {
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  ASSERT_TRUE(Pull(cache.path(), Options(*sim, "home", 2, 1)).ok());
  RankRequest request = TestRankRequest(cache.path(), 2, 1);
  RankReadProgress progress;
  request.progress = &progress;
  int called = 0;
  request.before_reading = [&] {
    ++called;
    return UnavailableError("no CUDA device");
  };
  auto read = ReadRankHalves(request);
  EXPECT_EQ(read.status().code(), StatusCode::kUnavailable) << read.status().ToString();
  EXPECT_EQ(called, 1);
  EXPECT_GT(progress.bytes_total.load(), 0u);  // located
  EXPECT_EQ(progress.bytes_checked.load(), 0u);  // not read
  request.before_reading = [] { return Status::Ok(); };
  auto again = ReadRankHalves(request);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(progress.bytes_checked.load(), again->total_bytes);
}

}  // namespace
}  // namespace exlr8
