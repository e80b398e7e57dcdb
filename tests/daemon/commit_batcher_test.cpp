// CommitBatcher (background commits) against a real cache.
#include "daemon/pull/commit_batcher.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "daemon/cache/cache.h"
#include "daemon/pull/consumers.h"
#include "tests/daemon/base/fake_clock.h"
#include "tests/daemon/cache_test_util.h"

namespace exlr8 {
namespace {

using testing::FakeClock;
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

// Waits (up to 10 s) until [offset, offset + length) of `file` is recorded.
bool RecordedSoon(Cache& cache, FileId file, std::uint64_t offset, std::uint64_t length) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    auto covered = cache.Covers(file, offset, length);
    if (covered.ok() && *covered) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

// What is queued after the last hand-over is recorded within the interval,
// without waiting for the next Add, or for Flush at the pull's end when none
// comes (the last index files and headers of a planning step). The interval
// is measured on the injected clock.
TEST(CommitBatcherTest, WhatIsQueuedIsRecordedWithinAnIntervalWithoutMoreAdds) {
  Fixture fx;
  FakeClock clock;
  CommitBatcher batch(*fx.cache, std::chrono::minutes(1), 1ull << 40, {}, nullptr, &clock);
  fx.Write(0);
  ASSERT_TRUE(batch.Add({fx.file, 0, kChunk}).ok());  // neither due by time nor by bytes
  fx.Write(kChunk);
  ASSERT_TRUE(batch.Add({fx.file, kChunk, kChunk}).ok());
  ASSERT_TRUE(clock.AwaitWaiters(1));  // the committer waits for the interval
  clock.Advance(std::chrono::seconds(59));
  auto covered = fx.cache->Covers(fx.file, 0, kChunk);
  ASSERT_TRUE(covered.ok());
  EXPECT_FALSE(*covered) << "recorded before its interval ended";
  clock.Advance(std::chrono::seconds(1));
  EXPECT_TRUE(RecordedSoon(*fx.cache, fx.file, 0, 2 * kChunk));
}

TEST(CommitBatcherTest, CommitSoonHandsTheBatchOverWithoutWaitingForItsInterval) {
  Fixture fx;
  CommitBatcher batch(*fx.cache, std::chrono::hours(1), 1ull << 40);
  fx.Write(0);
  ASSERT_TRUE(batch.Add({fx.file, 0, kChunk}).ok());
  fx.Write(kChunk);
  ASSERT_TRUE(batch.NotePrefix(fx.file, 2 * kChunk).ok());
  auto covered = fx.cache->Covers(fx.file, 0, kChunk);
  ASSERT_TRUE(covered.ok());
  EXPECT_FALSE(*covered);  // neither due by time nor by bytes
  ASSERT_TRUE(batch.CommitSoon().ok());
  EXPECT_TRUE(RecordedSoon(*fx.cache, fx.file, 0, kChunk));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (fx.cache->GetFile(fx.file)->durable_prefix != 2 * kChunk &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(fx.cache->GetFile(fx.file)->durable_prefix, 2 * kChunk);
  EXPECT_TRUE(batch.CommitSoon().ok());  // nothing queued: nothing to do
  EXPECT_TRUE(batch.Flush().ok());
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

}  // namespace
}  // namespace exlr8
