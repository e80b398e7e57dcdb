// What the cache does when fdatasync fails (EIO: a disk's write-back
// error). The binary links tests/daemon/base/failing_data_sync.h's
// fdatasync, which fails on demand and otherwise forwards to libc's: real
// files, real SQLite, one injected error.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "daemon/cache/cache.h"
#include "tests/daemon/base/failing_data_sync.h"
#include "tests/daemon/cache_test_util.h"

namespace exlr8 {
namespace {

using ::testing::HasSubstr;
using testing::kCommitA;
using testing::Pattern;
using testing::TempDir;

struct Fixture {
  TempDir tmp;
  std::unique_ptr<Cache> cache;
  FileId a = 0, b = 0;

  void Open() {
    cache.reset();
    auto c = Cache::Open(tmp.path());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    cache = std::move(c).value();
    const FilesetId fs = *cache->PutFileset("org/model", "main", kCommitA);
    a = *cache->PutFile(fs, "experts/exlr8-layer-003.k3.safetensors", 1 << 16);
    b = *cache->PutFile(fs, "experts/exlr8-layer-004.k3.safetensors", 1 << 16);
  }
  Status WriteAndCommit(FileId f, std::uint64_t offset, std::size_t length) {
    EXLR8_RETURN_IF_ERROR(cache->WriteAt(f, offset, Pattern(f, offset, length)));
    const VerifiedExtent e{f, offset, length};
    return cache->CommitVerified({&e, 1});
  }
};

// The sanity check every test below relies on: the interposer is the
// fdatasync the cache calls.
TEST(CacheSyncFailureTest, TheCacheCallsThisFdatasync) {
  Fixture fx;
  fx.Open();
  const int before = ::exlr8::testing::DataSyncCalls();
  ASSERT_TRUE(fx.WriteAndCommit(fx.a, 0, 4096).ok());
  EXPECT_GT(::exlr8::testing::DataSyncCalls(), before);
}

// Linux reports a write-back error once per open file: a later fdatasync
// that returns 0 says nothing of the pages the failed one lost. So after
// one failure, nothing more of that file is recorded in this process; other
// files go on, and a reopened cache (a restarted exlr8d, which fetches the
// unrecorded bytes again) records it again.
TEST(CacheSyncFailureTest, AFailedSyncBlocksThatFileUntilTheCacheIsReopened) {
  Fixture fx;
  fx.Open();
  ASSERT_TRUE(fx.WriteAndCommit(fx.a, 0, 4096).ok());

  ::exlr8::testing::FailNextDataSyncs(1);
  Status failed = fx.WriteAndCommit(fx.a, 4096, 4096);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.code(), StatusCode::kIOError) << failed.ToString();
  EXPECT_THAT(failed.message(), HasSubstr("fdatasync"));
  EXPECT_THAT(failed.message(), HasSubstr("exlr8-layer-003.k3.safetensors"));
  EXPECT_EQ(::exlr8::testing::DataSyncFailuresLeft(), 0);

  // fdatasync would pass now, but the file's lost pages cannot be told.
  Status again = fx.WriteAndCommit(fx.a, 8192, 4096);
  ASSERT_FALSE(again.ok());
  EXPECT_THAT(again.message(), HasSubstr("failed earlier in this process"));
  EXPECT_EQ(*fx.cache->VerifiedExtents(fx.a), (std::vector<Extent>{{0, 4096}}))
      << "only what was synced before the failure stays recorded";

  EXPECT_TRUE(fx.WriteAndCommit(fx.b, 0, 4096).ok()) << "another file goes on";

  fx.Open();
  EXPECT_TRUE(fx.WriteAndCommit(fx.a, 4096, 8192).ok());
  EXPECT_EQ(*fx.cache->VerifiedExtents(fx.a), (std::vector<Extent>{{0, 12288}}));
}

}  // namespace
}  // namespace exlr8
