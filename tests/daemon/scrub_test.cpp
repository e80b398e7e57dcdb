// The scrub (daemon/scrub/scrub.h) against caches filled by real pulls from the hub simulator: damage bytes on disk, find
// them, forget them, and pull exactly them again.
#include "daemon/scrub/scrub.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <string>

#include "client/file_sink.h"
#include "format/json.h"
#include "format/layout.h"
#include "format/release_writer.h"
#include "tests/daemon/cache_test_util.h"
#include "tests/daemon/pull_test_util.h"
#include "tests/daemon/scrub_test_util.h"

namespace exlr8 {
namespace {

using ::exlr8::testing::FlipByte;
using ::exlr8::testing::Pulled;
using ::exlr8::testing::RecordedBytes;
using ::exlr8::testing::TempDir;
using ::testing::HasSubstr;

Result<ScrubReport> Scrub(const fs::path& dir, bool repair) {
  EXLR8_ASSIGN_OR_RETURN(auto cache, repair ? Cache::Open(dir) : Cache::OpenReadOnly(dir));
  EXLR8_ASSIGN_OR_RETURN(auto sets, cache->ListFilesets());
  if (sets.size() != 1) return InternalError("expected one fileset");
  ScrubOptions o;
  o.repair = repair;
  o.threads = 3;
  return ScrubFileset(*cache, sets[0].id, o);
}

TEST(ScrubTest, AFreshPullIsCleanAndEveryRecordedByteIsChecked) {
  Pulled p;
  // Two plans sharing bytes: the scrub checks what is recorded, whichever pull brought it.
  auto second = Pull(p.dir.path(), Options(*p.sim, "up1", 4, 1));
  ASSERT_TRUE(second.ok()) << second.status().ToString();

  for (const bool repair : {false, true}) {
    auto r = Scrub(p.dir.path(), repair);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(r->clean()) << r->failures.front().what << ": " << r->failures.front().error;
    EXPECT_EQ(r->bytes_recorded, RecordedBytes(p.dir.path()));
    EXPECT_EQ(r->bytes_checked, r->bytes_recorded);
    EXPECT_EQ(r->bytes_unaccounted, 0u);
    EXPECT_EQ(r->bytes_unchecked, 0u);
    EXPECT_EQ(r->bytes_forgotten, 0u);
    EXPECT_FALSE(r->repaired);

    // The counts are the union of both plans.
    std::set<std::pair<std::string, std::uint64_t>> halves;
    std::set<std::string> width_files, whole_files;
    for (const Plan* plan : {&p.summary.plan, &second->plan}) {
      for (const PlanFile& f : plan->files) {
        if (f.whole && f.size > 0) whole_files.insert(f.path);
        if (f.whole) continue;
        width_files.insert(f.path);
        for (const PlanRange& range : f.ranges)
          if (range.kind == PlanRange::Kind::kHalf) halves.insert({f.path, range.offset});
      }
    }
    EXPECT_EQ(r->halves, halves.size());
    EXPECT_EQ(r->headers, width_files.size());
    EXPECT_EQ(r->whole_files, whole_files.size());
  }
}

TEST(ScrubTest, DamagedBytesAreFoundForgottenAndPulledAgainExactly) {
  Pulled p;
  const PlanFile& width = p.WidthFile();
  const PlanRange& half = Pulled::FirstHalf(width);
  const std::string manifest = ManifestPath("home");
  const std::uint64_t manifest_size = fs::file_size(p.DataPath(manifest));
  FlipByte(p.DataPath(width.path), half.offset + half.length / 2);
  FlipByte(p.DataPath(manifest), manifest_size - 2);
  const std::uint64_t before = RecordedBytes(p.dir.path());

  // Checking alone reports both and forgets nothing.
  auto check = Scrub(p.dir.path(), /*repair=*/false);
  ASSERT_TRUE(check.ok()) << check.status().ToString();
  ASSERT_EQ(check->failures.size(), 2u);
  EXPECT_EQ(check->checks_failed, 2u);
  // Sorted by file path: experts/ before manifests/.
  EXPECT_EQ(check->failures[0].file, width.path);
  EXPECT_EQ(check->failures[0].offset, half.offset);
  EXPECT_EQ(check->failures[0].length, half.length);
  EXPECT_EQ(check->failures[0].what, half.What());
  EXPECT_THAT(check->failures[0].error, HasSubstr("XXH64"));
  EXPECT_EQ(check->failures[1].file, manifest);
  EXPECT_EQ(check->failures[1].what, "whole file");
  EXPECT_THAT(check->failures[1].error, HasSubstr("SHA"));
  EXPECT_FALSE(check->repaired);
  EXPECT_EQ(RecordedBytes(p.dir.path()), before);

  // Repairing forgets exactly those bytes.
  auto repair = Scrub(p.dir.path(), /*repair=*/true);
  ASSERT_TRUE(repair.ok()) << repair.status().ToString();
  EXPECT_EQ(repair->failures.size(), 2u);
  EXPECT_TRUE(repair->repaired);
  EXPECT_EQ(repair->bytes_forgotten, half.length + manifest_size);
  EXPECT_EQ(RecordedBytes(p.dir.path()), before - half.length - manifest_size);
  {
    auto cache = Cache::OpenReadOnly(p.dir.path());
    ASSERT_TRUE(cache.ok());
    auto sets = (*cache)->ListFilesets();
    const FileId id = *(*cache)->FindFile((*sets)[0].id, width.path);
    EXPECT_FALSE(*(*cache)->Covers(id, half.offset, half.length));
    EXPECT_FALSE((*cache)->GetFile(*(*cache)->FindFile((*sets)[0].id, manifest))->whole_verified);
  }

  // The next pull fetches exactly what was forgotten, and the cache is whole again.
  auto again = Pull(p.dir.path(), Options(*p.sim, "home", 3, 2));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->bytes_fetched, half.length + manifest_size);
  ExpectCacheHoldsExactlyThePlan(p.dir.path(), p.release, *again);
  auto after = Scrub(p.dir.path(), /*repair=*/false);
  ASSERT_TRUE(after.ok());
  EXPECT_TRUE(after->clean());
  EXPECT_EQ(after->bytes_checked, before);
}

TEST(ScrubTest, ADamagedHeaderIsForgottenUpToTheFirstHalf) {
  Pulled p;
  const PlanFile& width = p.WidthFile(1);
  // The 8-byte length prefix: the header no longer parses.
  FlipByte(p.DataPath(width.path), 2);
  auto r = Scrub(p.dir.path(), /*repair=*/true);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->failures.size(), 1u);
  EXPECT_EQ(r->failures[0].file, width.path);
  EXPECT_EQ(r->failures[0].what, "header");
  EXPECT_EQ(r->failures[0].offset, 0u);
  // The pull recorded [0, 8 + N); the scrub cannot trust N any more, and
  // forgets what is recorded from byte 0 up to the width file's first half.
  std::uint64_t header_bytes = 0;
  for (const PlanRange& range : width.ranges)
    if (range.kind == PlanRange::Kind::kHeader) header_bytes = range.length;
  ASSERT_GT(header_bytes, 8u);
  EXPECT_EQ(r->bytes_forgotten, header_bytes);

  auto again = Pull(p.dir.path(), Options(*p.sim, "home", 3, 2));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  ExpectCacheHoldsExactlyThePlan(p.dir.path(), p.release, *again);
  EXPECT_TRUE(Scrub(p.dir.path(), false)->clean());
}

// Packed width files (alignment 1): the header's recorded extent runs on
// into the first half's, so only the index tells them apart.
TEST(ScrubTest, InAPackedReleaseADamagedHeaderIsToldApartFromTheHalfAfterIt) {
  TempDir release;
  SynthOptions so;
  so.width_alignment = 1;
  so.seed = 11;
  DirectoryReleaseSink sink(release.path().string());
  ASSERT_TRUE(SynthesizeRelease(so, sink).ok());
  Pulled p(release.path(), 1, 0);
  const PlanFile& width = p.WidthFile();
  std::uint64_t header_bytes = 0;
  for (const PlanRange& range : width.ranges)
    if (range.kind == PlanRange::Kind::kHeader) header_bytes = range.length;
  // The premise: a half starts right where the header ends.
  ASSERT_EQ(Pulled::FirstHalf(width).offset, header_bytes);

  FlipByte(p.DataPath(width.path), 2);
  auto r = Scrub(p.dir.path(), /*repair=*/true);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->failures.size(), 1u);
  EXPECT_EQ(r->failures[0].what, "header");
  EXPECT_EQ(r->bytes_forgotten, header_bytes);
  EXPECT_EQ(r->bytes_unaccounted, 0u);

  auto again = Pull(p.dir.path(), Options(*p.sim, "home", 1, 0));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  ExpectCacheHoldsExactlyThePlan(p.dir.path(), release.path(), *again);
  auto after = Scrub(p.dir.path(), false);
  ASSERT_TRUE(after.ok());
  EXPECT_TRUE(after->clean());
  EXPECT_EQ(after->bytes_checked, after->bytes_recorded);
}

// Other choices where the format leaves them open (spec 14/16).
TEST(ScrubTest, AReleaseWithOtherChoicesScrubsCleanAndRepairsASharedHalf) {
  TempDir release;
  const SynthOptions so = OtherChoicesRelease(9);
  DirectoryReleaseSink sink(release.path().string());
  ASSERT_TRUE(SynthesizeRelease(so, sink).ok());
  Pulled p(release.path(), 3, 1);
  auto clean = Scrub(p.dir.path(), false);
  ASSERT_TRUE(clean.ok()) << clean.status().ToString();
  EXPECT_TRUE(clean->clean());
  EXPECT_EQ(clean->bytes_checked, clean->bytes_recorded);
  EXPECT_EQ(clean->bytes_unaccounted, 0u);

  const PlanFile* file = nullptr;
  const PlanRange* shared = nullptr;
  for (const PlanFile& f : p.summary.plan.files)
    for (const PlanRange& r : f.ranges)
      if (shared == nullptr && r.kind == PlanRange::Kind::kHalf && r.tag.expert == kSharedExpert) {
        file = &f;
        shared = &r;
      }
  ASSERT_NE(shared, nullptr);
  FlipByte(p.DataPath(file->path), shared->offset + shared->length - 1);
  auto r = Scrub(p.dir.path(), true);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->failures.size(), 1u);
  EXPECT_EQ(r->failures[0].what, shared->What());
  EXPECT_THAT(r->failures[0].what, HasSubstr("shared"));
  EXPECT_EQ(r->bytes_forgotten, shared->length);
  auto again = Pull(p.dir.path(), Options(*p.sim, "home", 3, 1));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->bytes_fetched, shared->length);
  EXPECT_TRUE(Scrub(p.dir.path(), false)->clean());
}

TEST(ScrubTest, ADamagedIndexFileIsForgottenAndItsLayersHalvesAreLeftUnchecked) {
  Pulled p;
  const PlanFile& width = p.WidthFile();
  const int layer = ClassifyReleasePath(width.path).layer;
  const std::string index = ExpertIndexPath(layer);
  FlipByte(p.DataPath(index), fs::file_size(p.DataPath(index)) - 1);
  std::uint64_t layer_bytes = 0;  // recorded bytes of the layer's width files
  for (const PlanFile& f : p.summary.plan.files)
    if (!f.whole && ClassifyReleasePath(f.path).layer == layer) layer_bytes += f.bytes();

  auto r = Scrub(p.dir.path(), /*repair=*/true);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->failures.size(), 1u);
  EXPECT_EQ(r->failures[0].file, index);
  EXPECT_EQ(r->bytes_forgotten, fs::file_size(p.DataPath(index)));
  EXPECT_EQ(r->bytes_unchecked, layer_bytes);
  EXPECT_EQ(r->bytes_unaccounted, 0u);

  auto again = Pull(p.dir.path(), Options(*p.sim, "home", 3, 2));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->bytes_fetched, fs::file_size(p.DataPath(index)));
  auto after = Scrub(p.dir.path(), false);
  ASSERT_TRUE(after.ok());
  EXPECT_TRUE(after->clean());
  EXPECT_EQ(after->bytes_unchecked, 0u);
}

TEST(ScrubTest, AMissingOrTruncatedDataFileFailsEveryCheckOfIt) {
  Pulled p;
  const PlanFile& gone = p.WidthFile(0);
  const PlanFile& cut = p.WidthFile(1);
  fs::remove(p.DataPath(gone.path));
  // Cut after the first half: the halves after it can no longer be read.
  const PlanRange& first = Pulled::FirstHalf(cut);
  fs::resize_file(p.DataPath(cut.path), first.offset + first.length);

  auto r = Scrub(p.dir.path(), /*repair=*/true);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  std::uint64_t gone_failures = 0, cut_failures = 0, cut_halves_after = 0;
  for (const ScrubFailure& f : r->failures) {
    gone_failures += f.file == gone.path;
    cut_failures += f.file == cut.path;
  }
  for (const PlanRange& range : cut.ranges) cut_halves_after += range.offset > first.offset;
  EXPECT_EQ(gone_failures, gone.ranges.size());  // its header and every half
  EXPECT_EQ(cut_failures, cut_halves_after);
  EXPECT_EQ(r->failures.size(), gone_failures + cut_failures);

  auto again = Pull(p.dir.path(), Options(*p.sim, "home", 3, 2));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  ExpectCacheHoldsExactlyThePlan(p.dir.path(), p.release, *again);
  EXPECT_TRUE(Scrub(p.dir.path(), false)->clean());
}

// A data file grown past its listed size keeps its recorded bytes, but the
// stage refuses it: a check-only scrub says so, never "clean",
// and a repairing one (a writable open) cuts it back.
TEST(ScrubTest, ADataFileLongerThanListedIsReportedAndCutBack) {
  Pulled p;
  const PlanFile& grown = p.WidthFile(0);
  const fs::path path = p.DataPath(grown.path);
  const std::uint64_t size = fs::file_size(path);
  fs::resize_file(path, size + 4096);
  auto check = Scrub(p.dir.path(), /*repair=*/false);
  ASSERT_TRUE(check.ok()) << check.status().ToString();
  EXPECT_FALSE(check->clean());
  ASSERT_EQ(check->failures.size(), 1u);
  EXPECT_EQ(check->failures[0].file, grown.path);
  EXPECT_EQ(check->failures[0].what, "size");
  EXPECT_THAT(check->failures[0].error, HasSubstr("exlr8d-stage refuses it"));
  auto repair = Scrub(p.dir.path(), /*repair=*/true);
  ASSERT_TRUE(repair.ok()) << repair.status().ToString();
  EXPECT_TRUE(repair->clean());
  EXPECT_EQ(repair->bytes_forgotten, 0u);
  EXPECT_EQ(fs::file_size(path), size);
  EXPECT_TRUE(Scrub(p.dir.path(), false)->clean());

  // Grown while a long-lived owner (exlr8d serve) has it open: opening does
  // not cut it back then, the repairing scrub does.
  auto owner = Cache::Open(p.dir.path());
  ASSERT_TRUE(owner.ok()) << owner.status().ToString();
  auto sets = (*owner)->ListFilesets();
  ASSERT_TRUE(sets.ok() && sets->size() == 1u);
  const std::vector<FileInfo> files = *(*owner)->ListFiles((*sets)[0].id);
  for (const FileInfo& f : files) {
    if (f.path == grown.path) {
      ASSERT_TRUE((*owner)->OpenVerified(f.id).ok());
    }
  }
  fs::resize_file(path, size + 4096);
  ScrubOptions o;
  o.repair = true;
  auto again = ScrubFileset(**owner, (*sets)[0].id, o);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(again->clean());
  EXPECT_EQ(fs::file_size(path), size);
}

// A lost width file of 1,176 halves: every check of it fails, the report
// details the first kMaxFailureDetails and counts them all, and every
// failed check's bytes are forgotten (then pulled again).
TEST(ScrubTest, ThousandsOfFailuresAreCountedAllAndDetailedUpToTheCap) {
  TempDir release;
  SynthOptions so;
  so.hidden = 128;
  so.halves = 8;
  so.experts = 48;  // 48 x 3 x 8 halves in the one width file
  so.widths = {4};
  so.shared_widths = {4};
  so.moe_layers = {1};
  so.dense_layers = {0};
  so.num_hidden_layers = 2;
  so.seed = 5;
  DirectoryReleaseSink sink(release.path().string());
  ASSERT_TRUE(SynthesizeRelease(so, sink).ok());
  Pulled p(release.path(), 1, 0);
  const PlanFile& width = p.WidthFile();
  ASSERT_GT(width.ranges.size(), ScrubReport::kMaxFailureDetails);
  fs::remove(p.DataPath(width.path));
  const std::uint64_t before = RecordedBytes(p.dir.path());

  auto r = Scrub(p.dir.path(), true);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->checks_failed, width.ranges.size());  // its header and every half
  EXPECT_EQ(r->failures.size(), ScrubReport::kMaxFailureDetails);
  EXPECT_FALSE(r->clean());
  EXPECT_EQ(r->bytes_forgotten, width.bytes());
  EXPECT_EQ(RecordedBytes(p.dir.path()), before - width.bytes());
  auto again = Pull(p.dir.path(), Options(*p.sim, "home", 1, 0));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->bytes_fetched, width.bytes() + [&] {
    std::uint64_t header = 0;  // fetched twice: recorded only when two fetches agree
    for (const PlanRange& range : width.ranges)
      if (range.kind == PlanRange::Kind::kHeader) header = range.length;
    return header;
  }());
  ExpectCacheHoldsExactlyThePlan(p.dir.path(), p.release, *again);
  EXPECT_TRUE(Scrub(p.dir.path(), false)->clean());
}

TEST(ScrubTest, ACancelledScrubForgetsNothing) {
  Pulled p;
  const PlanFile& width = p.WidthFile();
  FlipByte(p.DataPath(width.path), Pulled::FirstHalf(width).offset);
  const std::uint64_t before = RecordedBytes(p.dir.path());
  auto cache = Cache::Open(p.dir.path());
  ASSERT_TRUE(cache.ok());
  std::atomic<bool> cancel{true};
  ScrubOptions o;
  o.cancel = &cancel;
  auto r = ScrubFileset(**cache, (*(*cache)->ListFilesets())[0].id, o);
  EXPECT_EQ(r.status().code(), StatusCode::kCancelled);
  EXPECT_EQ(*(*cache)->RecordedBytes(), before);
  // A read-only view cannot repair.
  auto view = Cache::OpenReadOnly(p.dir.path());
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(ScrubFileset(**view, (*(*view)->ListFilesets())[0].id).status().code(),
            StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace exlr8
