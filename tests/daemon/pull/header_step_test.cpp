// HeaderStep on the in-memory hub of tests/daemon/hub/fake_transport.h and
// a real cache: no request leaves the process (the hub test server only
// answers HubClient::Open's revision lookup) and nothing sleeps.
#include "daemon/pull/header_step.h"

#include <gtest/gtest.h>

#include <string>

#include "daemon/hub/range_fetcher.h"
#include "format/safetensors_writer.h"
#include "tests/daemon/base/fake_clock.h"
#include "tests/daemon/cache_test_util.h"
#include "tests/daemon/hub/fake_transport.h"
#include "tests/daemon/hub_test_server.h"
#include "tests/daemon/test_consumer.h"

namespace exlr8 {
namespace {

using testing::FakeClock;
using testing::FakeHub;
using testing::FakeHubTransport;
using testing::kCommitA;
using testing::OpenHub;
using testing::TempDir;

constexpr const char* kWidth = "experts/w.safetensors";

std::string WidthFileBytes() {
  std::vector<TensorBytes> tensors(2);
  tensors[0].name = "a";
  tensors[0].shape = {4096};
  tensors[0].bytes.assign(4096, std::byte{1});
  tensors[1].name = "b";
  tensors[1].shape = {4096};
  tensors[1].bytes.assign(4096, std::byte{2});
  Result<std::vector<std::byte>> file = SerializeSafetensors(tensors);
  EXPECT_TRUE(file.ok()) << file.status().ToString();
  return std::string(reinterpret_cast<const char*>(file->data()), file->size());
}

class HeaderStepTest : public ::testing::Test {
 protected:
  HeaderStepTest() : client_(OpenHub(hub_)) {
    std::string prefix = client_->ResolveUrl("x");
    prefix.pop_back();
    net_ = std::make_unique<FakeHubTransport>(prefix, client_->commit(), &clock_);
    bytes_ = WidthFileBytes();
    net_->lfs_files[kWidth] = bytes_;
    cache_ = std::move(Cache::Open(tmp_.path())).value();
    const FilesetId fs = *cache_->PutFileset("org/model", "main", kCommitA);
    const std::vector<NewFile> listing{{kWidth, bytes_.size(), std::string(64, '0'), std::nullopt}};
    EXPECT_TRUE(cache_->PutFiles(fs, listing).ok());
    std::vector<FileInfo> files = *cache_->ListFiles(fs);
    file_ = files.at(0);
    space = std::make_unique<PullSpace>(*cache_, /*make_room=*/false, counters_.bytes_written_verified);
    space->Open();                     // as a pull that writes (not a dry run)
    spans_[kWidth] = WidthFileSpan{};  // no half at this width: the header alone is checked
  }

  RangeFetcherOptions Options() {
    RangeFetcherOptions o = testing::FastOptions();
    o.transport = net_.get();
    o.clock = &clock_;
    return o;
  }

  // One run of the step, each round a fetcher run of its own.
  Status RunStep(RangeFetcher* fetcher, std::uint64_t* reused, bool offline = false,
                 std::uint64_t max_header_bytes = 1 << 20) {
    HeaderStep::Env env{*cache_, counters_, *space, fetcher};
    env.offline = offline;
    env.max_refetches = 2;
    env.max_header_bytes = max_header_bytes;
    env.run_round = [fetcher](HeaderConsumer& consumer) -> Status {
      Status s = fetcher->Run(consumer);
      return consumer.first_error().ok() ? s : consumer.first_error();
    };
    env.new_batch = [this]() -> CommitBatcher& {
      batches_.push_back(std::make_unique<CommitBatcher>(*cache_, std::chrono::milliseconds(1000), 1 << 20,
                                                         std::function<void()>(), space->recorded_counter()));
      return *batches_.back();
    };
    HeaderStep step(std::move(env), spans_);
    Status s = step.Run({&file_}, reused);
    header_bytes_ = step.TakeHeaderBytes();
    for (auto& b : batches_) {
      const Status flushed = b->Flush();
      if (s.ok()) s = flushed;
    }
    return s;
  }

  std::uint64_t HeaderSize() const {
    std::uint64_t n = 0;
    for (int i = 7; i >= 0; --i)
      n = (n << 8) | static_cast<unsigned char>(bytes_[static_cast<std::size_t>(i)]);
    return 8 + n;
  }

  FakeHub hub_;
  std::unique_ptr<HubClient> client_;
  FakeClock clock_;
  std::unique_ptr<FakeHubTransport> net_;
  std::string bytes_;
  TempDir tmp_;
  std::unique_ptr<Cache> cache_;
  FileInfo file_;
  std::map<std::string, WidthFileSpan> spans_;
  JobCounters counters_;
  std::unique_ptr<PullSpace> space;  // on cache_
  std::vector<std::unique_ptr<CommitBatcher>> batches_;
  std::map<std::string, std::uint64_t> header_bytes_;
};

TEST_F(HeaderStepTest, AFetchedHeaderIsRecordedOnceTwoFetchesAgree) {
  RangeFetcher fetcher(*client_, Options());
  std::uint64_t reused = 0;
  const Status s = RunStep(&fetcher, &reused);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(reused, 0u);
  EXPECT_EQ(header_bytes_.at(kWidth), HeaderSize());
  EXPECT_EQ(net_->CountCalls(/*head_only=*/false), 2);  // the header, then a second fetch that agrees
  EXPECT_EQ(*cache_->VerifiedExtents(file_.id), (std::vector<Extent>{{0, HeaderSize()}}));
  EXPECT_EQ(counters_.bytes_written_verified.load(), HeaderSize());
  EXPECT_EQ(counters_.checksum_failures.load(), 0u);
  // Claimed: the first round's estimate (the whole small file), then set
  // to what was written.
  EXPECT_EQ(space->claimed(), HeaderSize());
}

TEST_F(HeaderStepTest, AHeaderVerifiedInTheCacheIsReusedWithoutARequest) {
  {
    RangeFetcher fetcher(*client_, Options());
    std::uint64_t reused = 0;
    ASSERT_TRUE(RunStep(&fetcher, &reused).ok());
  }
  const std::size_t calls = net_->calls().size();
  std::uint64_t reused = 0;
  const Status s = RunStep(/*fetcher=*/nullptr, &reused, /*offline=*/true);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(reused, HeaderSize());
  EXPECT_EQ(header_bytes_.at(kWidth), HeaderSize());
  EXPECT_EQ(net_->calls().size(), calls);
}

TEST_F(HeaderStepTest, OfflineAMissingHeaderFailsAndClaimsNothing) {
  std::uint64_t reused = 0;
  const Status s = RunStep(/*fetcher=*/nullptr, &reused, /*offline=*/true);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find(kWidth), std::string::npos);
  EXPECT_EQ(space->claimed(), 0u);
  EXPECT_TRUE(net_->calls().empty());
}

TEST_F(HeaderStepTest, AHeaderThatFailsItsChecksIsFetchedAgainThenFails) {
  RangeFetcher fetcher(*client_, Options());
  std::uint64_t reused = 0;
  const Status s = RunStep(&fetcher, &reused, false, /*max_header_bytes=*/64);  // every fetch is "too large"
  EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find("the header failed verification 3 times"), std::string::npos) << s.ToString();
  EXPECT_EQ(counters_.checksum_failures.load(), 3u);  // max_refetches + 1 fetches, each counted
  EXPECT_EQ(net_->CountCalls(/*head_only=*/false), 3);
  EXPECT_TRUE(cache_->VerifiedExtents(file_.id)->empty());
}

}  // namespace
}  // namespace exlr8
