// CommitBatcher (background commits) against a real cache, and a pull whose
// width-file headers are longer than the first probe (two rounds).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <string>
#include <vector>

#include "client/file_sink.h"
#include "daemon/cache/cache.h"
#include "daemon/pull/commit_batcher.h"
#include "daemon/pull/consumers.h"
#include "format/release_writer.h"
#include "format/safetensors.h"
#include "tests/daemon/cache_test_util.h"
#include "tests/daemon/pull_test_util.h"

namespace exlr8 {
namespace {

using testing::kCommitA;
using testing::Pattern;
using testing::TempDir;

constexpr std::uint64_t kFileSize = 1 << 20;
constexpr std::uint64_t kChunk = 4096;

struct Fixture {
  TempDir dir;
  std::unique_ptr<Cache> cache;
  FileId file = 0;
  Fixture() {
    auto c = Cache::Open(dir.path());
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    cache = std::move(*c);
    auto fs = cache->PutFileset("org/name", "main", kCommitA);
    EXPECT_TRUE(fs.ok());
    auto f = cache->PutFile(*fs, "a.bin", kFileSize);
    EXPECT_TRUE(f.ok());
    file = *f;
  }
  void Write(std::uint64_t offset) {
    ASSERT_TRUE(cache->WriteAt(file, offset, Pattern(1, offset, kChunk)).ok());
  }
};

TEST(CommitBatcherTest, EveryAddedExtentIsRecordedAfterFlushAcrossBackgroundCommits) {
  Fixture fx;
  int commits = 0;
  {
    // Interval 0: every Add is due, so commits run in the background while
    // further extents queue behind them.
    CommitBatcher batch(*fx.cache, std::chrono::milliseconds(0), 1ull << 40, [&] { ++commits; });
    for (std::uint64_t off = 0; off < kFileSize; off += 2 * kChunk) {  // every other chunk
      fx.Write(off);
      ASSERT_TRUE(batch.Add({fx.file, off, kChunk}).ok());
    }
    ASSERT_TRUE(batch.Flush().ok());
  }
  EXPECT_GE(commits, 1);
  auto have = fx.cache->VerifiedExtents(fx.file);
  ASSERT_TRUE(have.ok());
  ASSERT_EQ(have->size(), kFileSize / (2 * kChunk));
  for (std::size_t i = 0; i < have->size(); ++i) {
    EXPECT_EQ((*have)[i].offset, i * 2 * kChunk);
    EXPECT_EQ((*have)[i].length, kChunk);
  }
}

TEST(CommitBatcherTest, NothingIsRecordedBeforeItsBatchIsCommitted) {
  Fixture fx;
  CommitBatcher batch(*fx.cache, std::chrono::hours(1), 1ull << 40);
  fx.Write(0);
  ASSERT_TRUE(batch.Add({fx.file, 0, kChunk}).ok());
  auto covered = fx.cache->Covers(fx.file, 0, kChunk);
  ASSERT_TRUE(covered.ok());
  EXPECT_FALSE(*covered);  // neither due by time nor by bytes
  ASSERT_TRUE(batch.Flush().ok());
  covered = fx.cache->Covers(fx.file, 0, kChunk);
  ASSERT_TRUE(covered.ok());
  EXPECT_TRUE(*covered);
}

TEST(CommitBatcherTest, ABackgroundCommitFailureIsReportedAndItsBatchDropped) {
  Fixture fx;
  CommitBatcher batch(*fx.cache, std::chrono::milliseconds(0), 1ull << 40);
  fx.Write(0);
  // Past the end of the file: CommitVerified rejects the batch.
  (void)batch.Add({fx.file, kFileSize, kChunk});  // ok, or the error if the commit already ran
  Status flushed = batch.Flush();
  EXPECT_EQ(flushed.code(), StatusCode::kInvalidArgument) << flushed.ToString();
  // Sticky: later batches are refused too rather than recorded out of order.
  EXPECT_EQ(batch.Add({fx.file, 0, kChunk}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(batch.Flush().code(), StatusCode::kInvalidArgument);
  auto have = fx.cache->VerifiedExtents(fx.file);
  ASSERT_TRUE(have.ok());
  EXPECT_TRUE(have->empty());
}

TEST(PullHeadersTest, HeadersLongerThanTheProbeAreFetchedInASecondRoundAndVerified) {
  TempDir release, cache;
  SynthOptions so;
  so.hidden = 128;
  so.halves = 8;
  so.experts = 48;  // 48 x 3 x 8 tensors per width file: a header of ~100 KB
  so.moe_layers = {1};
  so.dense_layers = {0};
  so.num_hidden_layers = 2;
  so.width_alignment = 1;
  so.seed = 3;
  DirectoryReleaseSink sink(release.path().string());
  ASSERT_TRUE(SynthesizeRelease(so, sink).ok());
  // The premise: the header does not fit the 64 KiB probe.
  const auto k2 = ReadAll(release.path() / "experts" / "exlr8-layer-001.k2.safetensors");
  auto n = SafetensorsHeaderSize(std::as_bytes(std::span(k2.data(), 8)), k2.size(), "k2");
  ASSERT_TRUE(n.ok());
  ASSERT_GT(*n, 64u * 1024);
  auto sim = StartSim(release.path());
  auto s = Pull(cache.path(), Options(*sim, "home", 2, 1));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(s->complete);
  ExpectCacheHoldsExactlyThePlan(cache.path(), release.path(), *s);
  // A rerun finds every header verified in the cache.
  auto again = Pull(cache.path(), Options(*sim, "home", 2, 1));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->bytes_fetched, 0u);
}

// Headers carry no checksum: one damaged in transit fails to parse or to
// validate, and is fetched again from byte 0; a release whose header is
// really wrong still fails, after the last try, with the parser's message.
TEST(PullHeadersTest, DamagedHeaderIsFetchedAgainFromByteZero) {
  TempDir release;
  SynthOptions so;
  so.hidden = 128;
  so.halves = 8;
  so.experts = 48;  // headers of ~100 KB: the whole 64 KiB probe is header
  so.moe_layers = {1};
  so.dense_layers = {0};
  so.num_hidden_layers = 2;
  so.width_alignment = 1;
  so.seed = 4;
  DirectoryReleaseSink sink(release.path().string());
  ASSERT_TRUE(SynthesizeRelease(so, sink).ok());
  {
    hubsim::FaultConfig f;
    f.corrupt = 1.0;
    f.match = ".k3.safetensors";
    f.max_faults = 2;  // the first two k3 answers: header requests
    f.on_hub = false;
    auto sim = StartSim(release.path(), "", f);
    TempDir cache;
    auto s = Pull(cache.path(), Options(*sim, "home", 2, 1));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_TRUE(s->complete);
    EXPECT_GE(s->checksum_failures, 1u);
    ExpectCacheHoldsExactlyThePlan(cache.path(), release.path(), *s);
  }
  {
    hubsim::FaultConfig f;
    f.corrupt = 1.0;
    f.match = ".k3.safetensors";
    f.on_hub = false;  // every k3 answer: no try can succeed
    auto sim = StartSim(release.path(), "", f);
    TempDir cache;
    PullOptions o = Options(*sim, "home", 2, 1);
    o.fetch.max_refetches = 2;
    auto s = Pull(cache.path(), o);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), StatusCode::kCorruption) << s.status().ToString();
    EXPECT_THAT(s.status().message(), ::testing::HasSubstr("k3.safetensors"));
  }
}

}  // namespace
}  // namespace exlr8
