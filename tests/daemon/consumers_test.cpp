// The pull engine's consumers (daemon/pull/consumers.h) against a fake hub
// and CDN on real loopback sockets and a real cache on disk.
#include "daemon/pull/consumers.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>

#include "daemon/cache/cache.h"
#include "daemon/pull/commit_batcher.h"
#include "daemon/cache/digest.h"
#include "tests/daemon/cache_test_util.h"
#include "tests/daemon/hub_test_server.h"
#include "tests/daemon/test_consumer.h"

namespace exlr8 {
namespace {

using ::testing::HasSubstr;
using testing::FakeHub;
using testing::FastOptions;
using testing::MakeBlob;
using testing::OpenHub;
using testing::ServeBlobRange;
using testing::TempDir;
using testing::TestRequest;
using testing::TestResponse;

std::string Sha256Hex(const std::string& bytes) {
  auto d = StreamDigest::Create(StreamDigest::Kind::kSha256, bytes.size());
  EXPECT_TRUE(d.ok());
  d->Update(std::as_bytes(std::span(bytes)));
  return d->FinishHex();
}

// A request that used up its retries on 503s ends the whole run at once:
// the server is down or throttling hard, so the run cannot complete, and
// the requests still streaming would only keep it going until each had used
// up its own retries (in a 503 storm, more than twice as long as the first
// to give up). Here the other file streams for 6 s; the run ends
// long before, and that file is not recorded.
TEST(ConsumersTest, AFileThatUsedUpItsRetriesOn503EndsTheRun) {
  FakeHub hub;
  hub.lfs_files["down.bin"] = MakeBlob(1000, 1);
  hub.lfs_files["slow.bin"] = MakeBlob(240'000, 2);
  hub.cdn_override = [&](const TestRequest& r) -> std::optional<TestResponse> {
    if (r.target.find("down.bin") != std::string::npos) {
      TestResponse resp;
      resp.status = 503;
      resp.headers.emplace_back("Retry-After", "0");
      return resp;
    }
    TestResponse resp = ServeBlobRange(hub.lfs_files["slow.bin"], r);
    resp.bytes_per_second = 40'000;
    return resp;
  };
  auto client = OpenHub(hub);
  ASSERT_NE(client, nullptr);

  TempDir dir;
  auto cache = Cache::Open(dir.path());
  ASSERT_TRUE(cache.ok()) << cache.status().ToString();
  const FilesetId fs = *(*cache)->PutFileset(hub.repo, "main", hub.commit);
  std::vector<WholeFileTarget> targets;
  for (const auto& [path, bytes] : hub.lfs_files) {
    const FileId id = *(*cache)->PutFile(fs, path, bytes.size());
    targets.push_back({id, path, bytes.size(), Sha256Hex(bytes), ""});
  }
  RangeFetcherOptions o = FastOptions();
  o.max_throttled = 2;
  RangeFetcher fetcher(*client, o);
  CommitBatcher batch(**cache, std::chrono::milliseconds(50), 1 << 20);
  JobCounters counters;
  WholeFileConsumer consumer(fetcher, **cache, batch, counters, targets);

  const auto t0 = std::chrono::steady_clock::now();
  Status s = fetcher.Run(consumer);
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr("down.bin"));
  EXPECT_LT(took, std::chrono::seconds(3)) << "the other file streamed on to its end";
  ASSERT_TRUE(batch.Flush().ok());
  EXPECT_TRUE(consumer.verified().empty());
  for (const WholeFileTarget& t : targets) EXPECT_FALSE((*cache)->GetFile(t.file)->whole_verified) << t.path;
}

}  // namespace
}  // namespace exlr8
