// CommitBatcher (background commits) against a real cache, ChainConsumer
// (two consumers in one fetcher run) with scripted consumers, and a pull
// whose width-file headers are longer than the first probe (two rounds).
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

// Hands out `n` requests with ids 0..n-1 and records every callback.
class Scripted final : public RangeConsumer {
 public:
  Scripted(std::string name, int n) : name_(std::move(name)), n_(n) {}
  bool NextRequest(RangeRequest* out) override {
    if (next_ >= n_) {
      ++exhausted_calls;
      return false;
    }
    out->path = name_;
    out->offset = static_cast<std::uint64_t>(next_) * 10;
    out->length = 10;
    out->id = static_cast<std::uint64_t>(next_++);
    return true;
  }
  Status OnData(std::uint64_t id, std::uint64_t, std::span<const std::byte>) override {
    log.push_back("data " + std::to_string(id));
    return Status::Ok();
  }
  RangeVerdict OnComplete(std::uint64_t id) override {
    log.push_back("complete " + std::to_string(id));
    return RangeVerdict::Accept();
  }
  void OnReset(std::uint64_t id) override { log.push_back("reset " + std::to_string(id)); }
  void OnFailed(std::uint64_t id, const Status&) override { log.push_back("failed " + std::to_string(id)); }

  std::vector<std::string> log;
  int exhausted_calls = 0;

 private:
  std::string name_;
  int n_;
  int next_ = 0;
};

TEST(ChainConsumerTest, FirstConsumerFirstAndCallbacksRoutedByMappedId) {
  Scripted a("a", 2), b("b", 3);
  int switched = 0;
  ChainConsumer chain(a, b, [&] { ++switched; });
  std::vector<RangeRequest> got;
  RangeRequest r;
  while (chain.NextRequest(&r)) got.push_back(r);
  EXPECT_FALSE(chain.NextRequest(&r));
  ASSERT_EQ(got.size(), 5u);
  EXPECT_EQ(switched, 1);
  EXPECT_EQ(a.exhausted_calls, 1);  // never asked again once it said no
  EXPECT_EQ(b.exhausted_calls, 1);
  for (int i = 0; i < 2; ++i) EXPECT_EQ(got[i].path, "a");
  for (int i = 2; i < 5; ++i) EXPECT_EQ(got[i].path, "b");
  std::set<std::uint64_t> ids;
  for (const auto& q : got) ids.insert(q.id);
  EXPECT_EQ(ids.size(), 5u);  // a's id 0 and b's id 0 differ after mapping

  const std::byte byte{1};
  ASSERT_TRUE(chain.OnData(got[1].id, 10, {&byte, 1}).ok());
  EXPECT_EQ(chain.OnComplete(got[2].id).kind, RangeVerdict::Kind::kAccept);
  chain.OnReset(got[4].id);
  chain.OnFailed(got[0].id, CancelledError("x"));
  EXPECT_EQ(a.log, (std::vector<std::string>{"data 1", "failed 0"}));
  EXPECT_EQ(b.log, (std::vector<std::string>{"complete 0", "reset 2"}));
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

}  // namespace
}  // namespace exlr8
