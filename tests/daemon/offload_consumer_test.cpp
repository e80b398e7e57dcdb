// OffloadConsumer between a real RangeFetcher (fake hub and CDN on loopback)
// and a recording consumer: the inner consumer sees exactly the calls it
// would see without offloading, in order, from one thread at a time (one
// worker) or one thread at a time per request (several workers).
#include "daemon/pull/offload_consumer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>

#include "tests/daemon/hub_test_server.h"
#include "tests/daemon/test_consumer.h"

namespace exlr8 {
namespace {

using ::testing::HasSubstr;
using testing::FakeHub;
using testing::MakeBlob;
using testing::ServeBlobRange;
using testing::FastOptions;
using testing::OpenHub;
using testing::TestConsumer;
using testing::TestRequest;
using testing::TestResponse;

// A transfer held back while the worker catches up (ReadyFor) receives
// nothing meanwhile: under ThreadSanitizer on a loaded 2-core machine that
// can outlast the helpers' 3 s stall timeout, which would turn it into a
// retried (and counted) failure. The product default is 30 s.
std::unique_ptr<HubClient> OpenPatient(const FakeHub& hub) {
  HubOptions o = testing::TestHubOptions(hub);
  o.stall_timeout = std::chrono::seconds(30);
  return OpenHub(hub, std::move(o));
}

RangeFetcherOptions PatientOptions() {
  RangeFetcherOptions o = FastOptions();
  o.max_attempts = 8;
  return o;
}

// Checks that the inner consumer is never entered by two threads at once.
class ExclusiveConsumer : public TestConsumer {
 public:
  std::atomic<int> inside{0};
  std::atomic<int> overlaps{0};
  struct Enter {
    explicit Enter(ExclusiveConsumer& c) : c_(c) {
      if (c_.inside.fetch_add(1) != 0) c_.overlaps.fetch_add(1);
    }
    ~Enter() { c_.inside.fetch_sub(1); }
    ExclusiveConsumer& c_;
  };
  bool NextRequest(RangeRequest* out) override {
    Enter e(*this);
    return TestConsumer::NextRequest(out);
  }
  Status OnData(std::uint64_t id, std::uint64_t offset, std::span<const std::byte> bytes) override {
    Enter e(*this);
    return TestConsumer::OnData(id, offset, bytes);
  }
  RangeVerdict OnComplete(std::uint64_t id) override {
    Enter e(*this);
    return TestConsumer::OnComplete(id);
  }
  void OnReset(std::uint64_t id) override {
    Enter e(*this);
    TestConsumer::OnReset(id);
  }
  void OnFailed(std::uint64_t id, const Status& status) override {
    Enter e(*this);
    TestConsumer::OnFailed(id, status);
  }
};

TEST(OffloadConsumerTest, SameCallsAsInlineWithRefetchesFailuresAndCutBodies) {
  FakeHub hub;
  hub.lfs_files["a.bin"] = MakeBlob(3'000'000, 31);
  auto client = OpenPatient(hub);
  ASSERT_NE(client, nullptr);
  // Every 5th CDN answer stops after 1000 body bytes (the fetcher resumes).
  std::atomic<int> n{0};
  hub.cdn_override = [&](const TestRequest& r) -> std::optional<TestResponse> {
    TestResponse resp = ServeBlobRange(hub.lfs_files["a.bin"], r);
    if (++n % 5 == 0 && resp.status == 206) resp.send_only = 1000;
    return resp;
  };
  ExclusiveConsumer inner;
  const std::uint64_t len = 3'000'000 / 60;
  for (std::uint64_t i = 0; i < 60; ++i) inner.Add("a.bin", i * len, len);
  std::map<std::uint64_t, int> seen;  // inner's verdicts run one at a time
  inner.verdict = [&](std::uint64_t id, const std::string&) {
    if (id == 13) return RangeVerdict::Fail(CorruptionError("bad tile in req 13"));
    if (id % 4 == 1 && ++seen[id] == 1) return RangeVerdict::Refetch(CorruptionError("xxh64 mismatch"));
    return RangeVerdict::Accept();
  };
  inner.data_hook = [](std::uint64_t id, std::uint64_t) {
    return id == 20 ? ResourceExhaustedError("disk full writing req 20") : Status::Ok();
  };
  RangeFetcherOptions o = PatientOptions();
  o.max_parallel = 6;
  RangeFetcher f(*client, o);
  Status s;
  {
    OffloadConsumer offload(inner, f, 64 * 1024);  // small: the producer waits often
    s = f.Run(offload);
    offload.Drain();
  }
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(inner.violations, 0);
  EXPECT_EQ(inner.overlaps.load(), 0);
  EXPECT_EQ(inner.outstanding, 0);  // every request ended exactly once
  ASSERT_EQ(inner.failed.size(), 2u);
  EXPECT_THAT(inner.failed[13].message(), HasSubstr("bad tile in req 13"));
  EXPECT_EQ(inner.failed[20].code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(inner.failed[20].message(), HasSubstr("disk full writing req 20"));
  EXPECT_EQ(inner.accepted.size(), 58u);
  inner.ExpectBytes(hub.lfs_files);
  for (std::uint64_t id = 1; id < 60; id += 4) {
    if (id == 13) continue;
    EXPECT_EQ(inner.resets[id], 1) << id;
    EXPECT_EQ(inner.completes[id], 2) << id;
  }
  EXPECT_GT(f.counters().resumes, 0u);
}

// Ranges of several 256 KiB messages each, arriving interleaved on a few
// transfers, some cut short (resumed mid-message) and some refetched: every
// byte reaches the inner consumer once per attempt, at its offset, with
// recycled buffers never leaking an earlier message's bytes.
TEST(OffloadConsumerTest, LargeRangesSpanManyMessagesAndRecycledBuffers) {
  FakeHub hub;
  hub.lfs_files["a.bin"] = MakeBlob(12'000'000, 35);
  auto client = OpenPatient(hub);
  ASSERT_NE(client, nullptr);
  std::atomic<int> n{0};
  hub.cdn_override = [&](const TestRequest& r) -> std::optional<TestResponse> {
    TestResponse resp = ServeBlobRange(hub.lfs_files["a.bin"], r);
    if (++n % 3 == 0 && resp.status == 206) resp.send_only = 700'000;  // mid-message
    return resp;
  };
  ExclusiveConsumer inner;
  const std::uint64_t len = 1'500'000;
  for (std::uint64_t i = 0; i < 8; ++i) inner.Add("a.bin", i * len, len);
  std::map<std::uint64_t, int> seen;
  inner.verdict = [&](std::uint64_t id, const std::string&) {
    if (id % 3 == 0 && ++seen[id] == 1) return RangeVerdict::Refetch(CorruptionError("sha256 mismatch"));
    return RangeVerdict::Accept();
  };
  RangeFetcherOptions o = PatientOptions();
  o.max_parallel = 3;
  RangeFetcher f(*client, o);
  Status s;
  {
    OffloadConsumer offload(inner, f);
    s = f.Run(offload);
    offload.Drain();
  }
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(inner.violations, 0);
  EXPECT_EQ(inner.outstanding, 0);
  EXPECT_EQ(inner.accepted.size(), 8u);
  inner.ExpectBytes(hub.lfs_files);
  EXPECT_GT(f.counters().resumes, 0u);
  EXPECT_EQ(f.counters().refetches, 3u);  // ids 0, 3, 6
}

// For several workers: calls for one request never overlap, calls for
// different requests may; records which threads made them.
class PerRequestConsumer : public TestConsumer {
 public:
  std::mutex mu;  // the recorder's maps are shared between requests
  std::array<std::atomic<int>, 256> inside{};
  std::atomic<int> same_request_overlaps{0};
  std::set<std::thread::id> threads;
  struct Enter {
    Enter(PerRequestConsumer& c, std::uint64_t id) : c_(c), id_(id) {
      if (c_.inside[id_].fetch_add(1) != 0) c_.same_request_overlaps.fetch_add(1);
      std::this_thread::sleep_for(std::chrono::microseconds(50));  // widen the window for overlaps
    }
    ~Enter() { c_.inside[id_].fetch_sub(1); }
    PerRequestConsumer& c_;
    std::uint64_t id_;
  };
  bool NextRequest(RangeRequest* out) override {
    std::lock_guard<std::mutex> lock(mu);
    return TestConsumer::NextRequest(out);
  }
  Status OnData(std::uint64_t id, std::uint64_t offset, std::span<const std::byte> bytes) override {
    Enter e(*this, id);
    std::lock_guard<std::mutex> lock(mu);
    threads.insert(std::this_thread::get_id());
    return TestConsumer::OnData(id, offset, bytes);
  }
  RangeVerdict OnComplete(std::uint64_t id) override {
    Enter e(*this, id);
    std::lock_guard<std::mutex> lock(mu);
    return TestConsumer::OnComplete(id);
  }
  void OnReset(std::uint64_t id) override {
    Enter e(*this, id);
    std::lock_guard<std::mutex> lock(mu);
    TestConsumer::OnReset(id);
  }
  void OnFailed(std::uint64_t id, const Status& status) override {
    Enter e(*this, id);
    std::lock_guard<std::mutex> lock(mu);
    TestConsumer::OnFailed(id, status);
  }
};

TEST(OffloadConsumerTest, SeveralWorkersKeepEachRequestsCallsInOrder) {
  FakeHub hub;
  hub.lfs_files["a.bin"] = MakeBlob(6'000'000, 36);
  auto client = OpenPatient(hub);
  ASSERT_NE(client, nullptr);
  std::atomic<int> n{0};
  hub.cdn_override = [&](const TestRequest& r) -> std::optional<TestResponse> {
    TestResponse resp = ServeBlobRange(hub.lfs_files["a.bin"], r);
    if (++n % 4 == 0 && resp.status == 206) resp.send_only = 100'000;  // resumed
    return resp;
  };
  PerRequestConsumer inner;
  const std::uint64_t len = 6'000'000 / 48;  // 125 KB: one message or two
  for (std::uint64_t i = 0; i < 48; ++i) inner.Add("a.bin", i * len, len);
  std::map<std::uint64_t, int> seen;  // (under inner.mu)
  inner.verdict = [&](std::uint64_t id, const std::string&) {
    if (id == 7) return RangeVerdict::Fail(CorruptionError("bad tile in req 7"));
    if (id % 5 == 2 && ++seen[id] == 1) return RangeVerdict::Refetch(CorruptionError("xxh64 mismatch"));
    return RangeVerdict::Accept();
  };
  RangeFetcherOptions o = PatientOptions();
  o.max_parallel = 8;
  RangeFetcher f(*client, o);
  Status s;
  {
    OffloadConsumer offload(inner, f, 1u << 20, {}, /*workers=*/4);
    s = f.Run(offload);
    offload.Drain();
  }
  EXPECT_FALSE(s.ok());  // request 7 failed
  EXPECT_EQ(inner.violations, 0);  // each request's bytes in order, complete, ended once
  EXPECT_EQ(inner.same_request_overlaps.load(), 0);
  EXPECT_EQ(inner.outstanding, 0);
  EXPECT_GE(inner.threads.size(), 2u) << "the requests were spread over the workers";
  ASSERT_EQ(inner.failed.size(), 1u);
  EXPECT_THAT(inner.failed[7].message(), HasSubstr("bad tile in req 7"));
  EXPECT_EQ(inner.accepted.size(), 47u);
  inner.ExpectBytes(hub.lfs_files);
  for (std::uint64_t id = 2; id < 48; id += 5) {
    if (id == 7) continue;
    EXPECT_EQ(inner.resets[id], 1) << id;
    EXPECT_EQ(inner.completes[id], 2) << id;
  }
  EXPECT_GT(f.counters().resumes, 0u);
}

TEST(OffloadConsumerTest, WriteErrorStopsTheTransferEarly) {
  FakeHub hub;
  hub.lfs_files["a.bin"] = MakeBlob(4'000'000, 32);
  auto client = OpenPatient(hub);
  ASSERT_NE(client, nullptr);
  hub.cdn_override = [&](const TestRequest& r) -> std::optional<TestResponse> {
    TestResponse resp = ServeBlobRange(hub.lfs_files["a.bin"], r);
    resp.bytes_per_second = 4'000'000;  // one second for the whole range
    return resp;
  };
  TestConsumer inner;
  inner.Add("a.bin", 0, 4'000'000);
  inner.data_hook = [](std::uint64_t, std::uint64_t) { return IOError("EIO writing the cache"); };
  RangeFetcher f(*client, PatientOptions());
  const auto t0 = std::chrono::steady_clock::now();
  Status s;
  {
    OffloadConsumer offload(inner, f);
    s = f.Run(offload);
    offload.Drain();
  }
  EXPECT_EQ(s.code(), StatusCode::kIOError) << s.ToString();
  EXPECT_EQ(inner.failed.size(), 1u);
  EXPECT_EQ(inner.violations, 0);
  // The worker took only the first chunk; the transfer stopped long before
  // the body's end (paced at one second).
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(700));
  EXPECT_LT(f.counters().bytes_received, 2'000'000u);
  EXPECT_EQ(hub.cdn().request_count(), 1u);  // not retried
}

TEST(OffloadConsumerTest, QueuedBytesStayWithinTheBound) {
  FakeHub hub;
  hub.lfs_files["a.bin"] = MakeBlob(2'000'000, 33);
  auto client = OpenPatient(hub);
  ASSERT_NE(client, nullptr);
  TestConsumer inner;
  for (std::uint64_t i = 0; i < 20; ++i) inner.Add("a.bin", i * 100'000, 100'000);
  // A slow disk: the fetch thread must wait for the worker, not buffer.
  inner.data_hook = [](std::uint64_t, std::uint64_t) {
    std::this_thread::sleep_for(std::chrono::microseconds(300));
    return Status::Ok();
  };
  RangeFetcher f(*client, PatientOptions());
  constexpr std::size_t kBound = 128 * 1024;
  Status s;
  std::size_t peak = 0;
  {
    OffloadConsumer offload(inner, f, kBound);
    s = f.Run(offload);
    offload.Drain();
    peak = offload.peak_queued_bytes();
  }
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(inner.accepted.size(), 20u);
  inner.ExpectBytes(hub.lfs_files);
  EXPECT_GT(peak, 0u);
  // A message (a request's chunks, up to 256 KiB) may exceed the bound's
  // remainder only when the lane was empty; otherwise the bound holds.
  EXPECT_LE(peak, kBound);
}

}  // namespace
}  // namespace exlr8
