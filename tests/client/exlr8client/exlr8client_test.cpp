// libexlr8client (client/include/exlr8/exlr8client.h, .hpp) against the real
// holder: the shared fixture's TP 3 rank 1 pulled from the hub simulator
// into a real cache and staged in host memory by the real `exlr8d-stage
// --memory host --hold SOCK`, leased over a real Unix socket by the shared
// library this test links (as a serving process links it). Every tensor's
// bytes equal an image this process builds from the same cache; the C API
// from C (c_api_check.c, linked with the library alone) runs against the
// same holder; error paths; a device description refused with a clear
// Unavailable where the CUDA driver cannot be loaded or has no GPU (the
// device kind itself: tests/gpu/exlr8client_device_test.cpp); the holder's
// release reaching the lessee.
#include "exlr8/exlr8client.hpp"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "client/lease/description_v2.h"
#include "daemon/stage/host_image.h"
#include "daemon/stage/lease_server.h"
#include "format/byte_source.h"
#include "format/checksum.h"
#include "format/expert_decode.h"
#include "format/expert_index.h"
#include "format/layout.h"
#include "tests/client/lease/lease_v2_test_util.h"
#include "tests/daemon/cache_test_util.h"
#include "tests/daemon/child_process.h"
#include "tests/daemon/pull_test_util.h"
#include "tests/daemon/rank_test_util.h"
#include "tests/format/block_tolerance.h"
#include "tests/format/golden_files.h"

namespace exlr8 {
namespace {

using ::exlr8::testing::TempDir;

std::vector<std::string> StageArgs(const fs::path& cache, const fs::path& sock) {
  return {"--cache",  cache.string(), "--repo", "exlr8/test",  "--manifest",
          "home",     "--tp",         "3",      "--rank",      "1",
          "--memory", "host",         "--hold", sock.string(), "--release-wait",
          "20"};
}

// One staged rank held for the whole suite (the stage takes a second or
// two): the cache it came from and the holder's socket.
class HeldRankTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    sim_ = StartSim(TinyRelease());
    cache_ = std::make_unique<TempDir>();
    run_ = std::make_unique<TempDir>();
    auto pulled = Pull(cache_->path(), Options(*sim_, "home", 3, 1));
    ASSERT_TRUE(pulled.ok()) << pulled.status().ToString();
    sock_ = run_->path() / "lease.sock";
    stage_ = std::make_unique<ChildProcess>("exlr8d-stage", StageArgs(cache_->path(), sock_),
                                            (run_->path() / "stage.err").string());
    ASSERT_TRUE(stage_->ReadUntil("holding:")) << stage_->printed();
  }
  static void TearDownTestSuite() {
    stage_.reset();
    run_.reset();
    cache_.reset();
    sim_.reset();
  }
  void SetUp() override {
    if (stage_ == nullptr || stage_->printed().find("holding:") == std::string::npos)
      GTEST_SKIP() << "no holder";
  }

  static inline std::unique_ptr<hubsim::HubSim> sim_;
  static inline std::unique_ptr<TempDir> cache_, run_;
  static inline fs::path sock_;
  static inline std::unique_ptr<ChildProcess> stage_;
};

TEST_F(HeldRankTest, EveryTensorEqualsTheCacheAndEachLookupFindsIt) {
  exlr8client::Lease lease = exlr8client::Lease::Open(sock_.string());
  ASSERT_TRUE(lease.is_open());
  auto own = BuildHostRankImage(TestRankRequest(cache_->path(), 3, 1));
  ASSERT_TRUE(own.ok()) << own.status().ToString();
  const std::span<const std::byte> bytes = own->image.bytes();

  const exlr8client::Info info = lease.info();
  EXPECT_STREQ(info.repo, "exlr8/test");
  EXPECT_STREQ(info.manifest, "home");
  EXPECT_EQ(info.tp, 3);
  EXPECT_EQ(info.rank, 1);
  EXPECT_EQ(info.memory_kind, static_cast<std::uint32_t>(EXLR8_MEMORY_HOST));
  ASSERT_EQ(info.allocation_count, 1u);
  EXPECT_EQ(info.allocation_bytes[0], bytes.size());
  EXPECT_EQ(info.image_bytes, bytes.size());
  ASSERT_EQ(info.tensor_count, lease.tensor_count());
  ASSERT_GT(info.tensor_count, 0u);
  // The whole image, then each region and its lookup.
  EXPECT_EQ(std::memcmp(info.allocation, bytes.data(), bytes.size()), 0);
  int halves = 0, named = 0, signs = 0;
  for (std::uint64_t i = 0; i < lease.tensor_count(); ++i) {
    const exlr8client::Tensor t = lease.tensor(i);
    ASSERT_LE(t.offset + t.length, bytes.size());
    EXPECT_EQ(std::memcmp(t.data, bytes.data() + t.offset, t.length), 0) << i;
    EXPECT_EQ(Xxh64::Hash({static_cast<const std::byte*>(t.data), t.length}), t.xxh64) << i;
    EXPECT_EQ(exlr8_xxh64(t.data, t.length), t.xxh64) << i;
    std::vector<std::byte> read(t.length);
    lease.Read(t.offset, read.data(), read.size());
    EXPECT_EQ(std::memcmp(read.data(), t.data, t.length), 0) << i;
    const ImageTensor& mine = own->layout.tables.tensors[i];
    EXPECT_EQ(t.offset, mine.offset);
    EXPECT_EQ(t.xxh64, mine.xxh64);
    EXPECT_EQ(t.kind, static_cast<std::uint32_t>(mine.kind));
    EXPECT_EQ(t.dtype, static_cast<std::uint32_t>(mine.dtype));
    std::optional<exlr8client::Tensor> same;
    if (t.kind == EXLR8_TENSOR_HALF_RECORD) {
      ++halves;
      same = lease.FindHalf(t.layer, t.expert, t.proj, t.half);
    } else if (t.kind == EXLR8_TENSOR_SIGNS_IN || t.kind == EXLR8_TENSOR_SIGNS_OUT) {
      ++signs;
      same = lease.FindSigns(t.layer, t.kind == EXLR8_TENSOR_SIGNS_OUT);
    } else {
      ++named;
      EXPECT_EQ(std::string(t.name), mine.name);
      same = lease.Find(t.name);
    }
    ASSERT_TRUE(same.has_value()) << i;
    EXPECT_EQ(same->index, i);
  }
  EXPECT_GT(halves, 0);
  EXPECT_GT(named, 0);
  EXPECT_GT(signs, 0);
  EXPECT_FALSE(lease.Find("no.such.tensor").has_value());
  EXPECT_FALSE(lease.FindHalf(info.layers, 0, EXLR8_PROJ_GATE, 0).has_value());

  // The offset table: the tables' copy, the image's, and the builder's.
  const exlr8client::OffsetTable table = lease.offset_table();
  ASSERT_EQ(table.entries, own->layout.tables.offset_table.size());
  EXPECT_EQ(std::memcmp(table.host, own->layout.tables.offset_table.data(), table.entries * 8), 0);
  EXPECT_EQ(std::memcmp(table.image, table.host, table.entries * 8), 0);

  const exlr8client::Proof proof = lease.proof();
  EXPECT_STREQ(proof.commit, info.commit);
  EXPECT_EQ(proof.hashed_regions, info.check_count);
  EXPECT_EQ(proof.hashed_mismatches, 0u);
  EXPECT_EQ(proof.has_mismatch, 0);
  const std::string proof_json(lease.proof_json());
  auto parsed = ParseLeaseDescriptionV2(lease.description_json());
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(proof_json, WriteLeaseProof(parsed->proof));
  EXPECT_EQ(parsed->commit, info.commit);
  EXPECT_NE(std::string(lease.description_json()).find("\"proof\":" + proof_json), std::string::npos);
  lease.Close();
  EXPECT_FALSE(lease.is_open());
}

TEST_F(HeldRankTest, TheCApiFromCPassesItsChecks) {
  const auto [code, out] = RunShell(std::string(EXLR8_C_API_CHECK) + " " + sock_.string());
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("ok: "), std::string::npos) << out;
}

TEST_F(HeldRankTest, ErrorPathsNameWhatFailed) {
  // No socket there.
  const std::string missing = (run_->path() / "nobody.sock").string();
  try {
    (void)exlr8client::Lease::Open(missing);
    ADD_FAILURE() << "opened " << missing;
  } catch (const exlr8client::Error& e) {
    EXPECT_EQ(e.status(), EXLR8_NOT_FOUND);
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
  }
  // The wrong kind.
  try {
    (void)exlr8client::Lease::Open(sock_.string(), {exlr8client::MemoryKind::kDevice});
    ADD_FAILURE() << "a host lease opened as device memory";
  } catch (const exlr8client::Error& e) {
    EXPECT_EQ(e.status(), EXLR8_FAILED_PRECONDITION);
    EXPECT_NE(std::string(e.what()).find("in host memory, the caller asked for device memory"),
              std::string::npos)
        << e.what();
  }
  // Closed twice, and used after close.
  exlr8client::Lease lease = exlr8client::Lease::Open(sock_.string(), {exlr8client::MemoryKind::kHost});
  lease.Close();
  try {
    lease.Close();
    ADD_FAILURE() << "closed twice";
  } catch (const exlr8client::Error& e) {
    EXPECT_EQ(e.status(), EXLR8_FAILED_PRECONDITION);
    EXPECT_NE(std::string(e.what()).find("already closed"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)lease.tensor_count(), exlr8client::Error);
  // NULL arguments and bad structures.
  exlr8_lease* raw = nullptr;
  EXPECT_EQ(exlr8_lease_open(nullptr, nullptr, &raw), EXLR8_INVALID_ARGUMENT);
  EXPECT_EQ(exlr8_lease_open(sock_.c_str(), nullptr, nullptr), EXLR8_INVALID_ARGUMENT);
  exlr8_open_options bad;
  exlr8_open_options_init(&bad);
  bad.memory_kind = 9;
  EXPECT_EQ(exlr8_lease_open(sock_.c_str(), &bad, &raw), EXLR8_INVALID_ARGUMENT);
  EXPECT_NE(std::string(exlr8_last_error_message()).find("memory_kind 9"), std::string::npos);
  const std::string too_long = "/tmp/" + std::string(200, 'x') + ".sock";
  EXPECT_EQ(exlr8_lease_open(too_long.c_str(), nullptr, &raw), EXLR8_INVALID_ARGUMENT);
  EXPECT_EQ(raw, nullptr);
  exlr8client::Lease open = exlr8client::Lease::Open(sock_.string());
  exlr8_lease_info info{};
  info.struct_size = 8;
  EXPECT_EQ(exlr8_lease_get_info(open.get(), &info), EXLR8_INVALID_ARGUMENT);
  EXPECT_NE(std::string(exlr8_last_error_message()).find("struct_size 8"), std::string::npos);
  EXPECT_THROW((void)open.tensor(open.tensor_count()), exlr8client::Error);
  // The message is per thread: another thread's failure leaves this one's.
  EXPECT_EQ(exlr8_lease_find_by_name(open.get(), "mine", &info.tensor_count), EXLR8_NOT_FOUND);
  std::thread([&] {
    std::uint64_t i;
    EXPECT_EQ(exlr8_lease_find_by_name(open.get(), "theirs", &i), EXLR8_NOT_FOUND);
  }).join();
  EXPECT_NE(std::string(exlr8_last_error_message()).find("'mine'"), std::string::npos)
      << exlr8_last_error_message();
}

// A holder of a device description: the synthetic image's memfd stands in
// for the GPU allocation (each lessee here is refused before it imports).
constexpr const char* kFakeUuid = "GPU-5a1b2c3d-0000-1111-2222-333344445555";
constexpr const char* kFakeBus = "0000:4E:00.0";
struct FakeDeviceHolder {
  FakeDeviceHolder() : im(testing::MakeV2Image(11)), fds(im) {
    LeaseDescriptionV2 d = im.description;
    d.memory_kind = LeaseMemoryKind::kDevice;
    d.device = LeaseGpu{kFakeUuid, kFakeBus, 0};
    path = run.path() / "device.sock";
    auto started = LeaseServer::StartV2(path, WriteLeaseDescriptionV2(d), {{fds.image, fds.tables}});
    EXPECT_TRUE(started.ok()) << started.status().ToString();
    if (started.ok()) server = std::move(*started);
  }
  testing::V2Image im;
  testing::V2Fds fds;
  TempDir run;
  fs::path path;
  std::unique_ptr<LeaseServer> server;
};

// Sets EXLR8CLIENT_CUDA_DRIVER for the scope (the library reads it at each
// load attempt until one succeeds; a failed one is not kept).
class DriverOverride {
 public:
  explicit DriverOverride(const char* value) { ::setenv("EXLR8CLIENT_CUDA_DRIVER", value, 1); }
  ~DriverOverride() { ::unsetenv("EXLR8CLIENT_CUDA_DRIVER"); }
};

// The open's status and message, the handle checked NULL on failure.
std::pair<exlr8_status, std::string> OpenStatus(const fs::path& path) {
  exlr8_lease* lease = nullptr;
  const exlr8_status s = exlr8_lease_open(path.c_str(), nullptr, &lease);
  std::string message = s == EXLR8_OK ? "" : exlr8_last_error_message();
  if (s != EXLR8_OK) {
    EXPECT_EQ(lease, nullptr);
  }
  exlr8_lease_free(lease);
  return {s, message};
}

TEST(Exlr8ClientTest, WithoutTheCudaDriverADeviceLeaseIsUnavailableNamingItsGpu) {
  FakeDeviceHolder holder;
  ASSERT_NE(holder.server, nullptr);
  {
    DriverOverride none("/nonexistent/libcuda.so.1");
    const auto [status, message] = OpenStatus(holder.path);
    EXPECT_EQ(status, EXLR8_UNAVAILABLE) << message;
    EXPECT_NE(message.find(std::string("lease from ") + holder.path.string()), std::string::npos) << message;
    EXPECT_NE(message.find(kFakeUuid), std::string::npos) << message;
    EXPECT_NE(message.find(kFakeBus), std::string::npos) << message;
    EXPECT_NE(message.find("the CUDA driver (/nonexistent/libcuda.so.1, from EXLR8CLIENT_CUDA_DRIVER) could "
                           "not be loaded: /nonexistent/libcuda.so.1: cannot open shared object file"),
              std::string::npos)
        << message;
  }
  {
    // A library that is not the driver: named with the first entry point missing.
    DriverOverride libm("libm.so.6");
    const auto [status, message] = OpenStatus(holder.path);
    EXPECT_EQ(status, EXLR8_UNAVAILABLE) << message;
    EXPECT_NE(message.find("the CUDA driver (libm.so.6, from EXLR8CLIENT_CUDA_DRIVER) has no entry point "
                           "cuGetErrorName"),
              std::string::npos)
        << message;
  }
  // The default name, where this machine has no driver (a build machine).
  if (void* real = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL); real != nullptr) {
    ::dlclose(real);
  } else {
    const auto [status, message] = OpenStatus(holder.path);
    EXPECT_EQ(status, EXLR8_UNAVAILABLE) << message;
    EXPECT_NE(message.find("the CUDA driver (libcuda.so.1) could not be loaded: libcuda.so.1: cannot open "
                           "shared object file"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find(kFakeUuid), std::string::npos) << message;
  }
  // A host lease from a synthetic holder opens, for comparison.
  const fs::path host_path = holder.run.path() / "host.sock";
  auto host = LeaseServer::StartV2(host_path, WriteLeaseDescriptionV2(holder.im.description),
                                   {{holder.fds.image, holder.fds.tables}});
  ASSERT_TRUE(host.ok()) << host.status().ToString();
  exlr8client::Lease ok = exlr8client::Lease::Open(host_path.string());
  EXPECT_EQ(ok.tensor_count(), holder.im.layout.tables.tensors.size());
}

// A driver that loads but has no GPU (the CUDA Toolkit's stub libcuda.so),
// from a C program linked with the library alone: cuInit's answer, the GPU
// named. A separate process: a loaded driver stays loaded.
TEST(Exlr8ClientTest, WithAStubDriverADeviceLeaseIsUnavailableFromC) {
  if (std::string(EXLR8_STUB_DRIVER).empty()) GTEST_SKIP() << "no CUDA Toolkit stub driver here";
  FakeDeviceHolder holder;
  ASSERT_NE(holder.server, nullptr);
  const auto [code, out] = RunShell(std::string("EXLR8CLIENT_CUDA_DRIVER=") + EXLR8_STUB_DRIVER + " " +
                                    EXLR8_READ_CHECK + " " + holder.path.string());
  EXPECT_EQ(code, 3) << out;
  EXPECT_NE(out.find("REFUSED UNAVAILABLE: lease from " + holder.path.string()), std::string::npos) << out;
  EXPECT_NE(out.find(std::string("device memory of ") + kFakeUuid + " (PCI bus " + kFakeBus +
                     "): cuInit failed: CUresult 34 (CUDA_ERROR_STUB_LIBRARY"),
            std::string::npos)
      << out;
  // The same program without a driver at all.
  const auto [code2, out2] = RunShell(std::string("EXLR8CLIENT_CUDA_DRIVER=/nonexistent/libcuda.so.1 ") +
                                      EXLR8_READ_CHECK + " " + holder.path.string());
  EXPECT_EQ(code2, 3) << out2;
  EXPECT_NE(out2.find("REFUSED UNAVAILABLE: "), std::string::npos) << out2;
  EXPECT_NE(out2.find("could not be loaded"), std::string::npos) << out2;
}

// The C lessee that reads every tensor back (exlr8_lease_read) on the held
// host image.
TEST_F(HeldRankTest, TheCLesseeReadsEveryTensorBack) {
  const auto [code, out] = RunShell(std::string(EXLR8_READ_CHECK) + " " + sock_.string());
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("OPENED kind=host cuda_device=-1 uuid= tensors="), std::string::npos) << out;
  EXPECT_NE(out.find(" mismatches=0 offset_table=equal\n"), std::string::npos) << out;
  EXPECT_NE(out.find("CLOSED\n"), std::string::npos) << out;
}

TEST(Exlr8ClientTest, TheHoldersReleaseReachesTheLesseeWhichLetsGo) {
  auto sim = StartSim(TinyRelease());
  TempDir cache, run;
  ASSERT_TRUE(Pull(cache.path(), Options(*sim, "home", 3, 1)).ok());
  const fs::path sock = run.path() / "lease.sock";
  ChildProcess stage("exlr8d-stage", StageArgs(cache.path(), sock), (run.path() / "stage.err").string());
  ASSERT_TRUE(stage.ReadUntil("holding:")) << stage.printed();
  exlr8client::Lease lease = exlr8client::Lease::Open(sock.string());
  EXPECT_FALSE(lease.PollRelease().has_value());
  EXPECT_GE(lease.release_fd(), 0);
  stage.Send(SIGTERM);
  const std::optional<exlr8client::Release> release = lease.PollRelease(std::chrono::seconds(20));
  ASSERT_TRUE(release.has_value());
  EXPECT_FALSE(release->holder_gone);
  EXPECT_EQ(release->deadline_s, 20u);
  ASSERT_TRUE(stage.ReadUntil("waiting up to")) << stage.printed();
  lease.Close();
  ASSERT_TRUE(stage.ReadUntil("released after 1 lease(s)")) << stage.printed();
  EXPECT_EQ(stage.Signal(0), 0) << stage.ReadAll();
}

using ::exlr8::testing::BlocksOutsideTolerance;

// exlr8_lease_half_weights on a host lease: every half record's weights
// equal DecodeExpertHalf on the release's own files bit for bit (the same
// format/ code over the same bytes), and those the golden file holds are
// within spec 9.3's tolerance of it.
TEST_F(HeldRankTest, HalfWeightsEqualTheFormatDecoderAndTheGoldenFile) {
  exlr8client::Lease lease = exlr8client::Lease::Open(sock_.string());
  auto golden = testing::LoadSafetensors(testing::SharedPath("fixtures/golden/exlr8-tiny.safetensors"));
  ASSERT_TRUE(golden.ok()) << golden.status().ToString();
  const fs::path release = TinyRelease();
  int halves = 0, against_golden = 0;
  for (std::uint64_t i = 0; i < lease.tensor_count(); ++i) {
    const exlr8client::Tensor t = lease.tensor(i);
    if (t.kind != EXLR8_TENSOR_HALF_RECORD) continue;
    const bool shared = t.expert == EXLR8_SHARED_EXPERT;
    const std::string name = std::to_string(t.layer) + "/" + (shared ? "shared" : std::to_string(t.expert)) +
                             "/" + exlr8_proj_name(t.proj) + "/" + std::to_string(t.half) + "/" +
                             std::to_string(t.k);
    SCOPED_TRACE(name);
    const std::vector<float> got = lease.HalfWeights(i);

    const auto index_bytes = testing::ReadWholeFile((release / ExpertIndexPath(t.layer)).string());
    const SpanByteSource index_src(index_bytes, ExpertIndexPath(t.layer));
    auto index = ExpertIndex::Read(index_src, static_cast<int>(t.layer));
    ASSERT_TRUE(index.ok()) << index.status().ToString();
    const int expert = shared ? kSharedExpert : static_cast<int>(t.expert);
    const Proj proj = static_cast<Proj>(t.proj);
    auto entry = index->Half(expert, proj, t.half, static_cast<int>(t.k));
    ASSERT_TRUE(entry.ok()) << entry.status().ToString();
    const auto width =
        testing::ReadWholeFile((release / ExpertWidthPath(t.layer, static_cast<int>(t.k))).string());
    ASSERT_LE(entry->offset + entry->length, width.size());
    std::vector<float> want;
    ASSERT_TRUE(DecodeExpertHalf(*index, index_src,
                                 std::span<const std::byte>(width).subspan(entry->offset, entry->length),
                                 expert, proj, t.half, static_cast<int>(t.k), DecodeStage::kWeights, true,
                                 &want)
                    .ok());
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
    ++halves;

    const std::vector<float> g = golden->F32(name + "/weights");
    if (g.empty()) continue;
    ASSERT_EQ(g.size(), got.size());
    const std::uint64_t hidden = got.size() / 128;
    const bool down = t.proj == EXLR8_PROJ_DOWN;
    EXPECT_EQ(BlocksOutsideTolerance(down ? 128 : hidden, down ? hidden : 128, got.data(), g.data()), 0);
    ++against_golden;
  }
  EXPECT_GT(halves, 0);
  EXPECT_GT(against_golden, 0);
  std::printf("half weights: %d halves bit-identical to DecodeExpertHalf, %d within 9.3 of golden\n", halves,
              against_golden);
}

TEST_F(HeldRankTest, HalfWeightsErrorPaths) {
  exlr8client::Lease lease = exlr8client::Lease::Open(sock_.string());
  exlr8_lease* c = lease.get();
  std::optional<std::uint64_t> half, other;
  exlr8client::Tensor h{};
  for (std::uint64_t i = 0; i < lease.tensor_count(); ++i) {
    const exlr8client::Tensor t = lease.tensor(i);
    if (t.kind == EXLR8_TENSOR_HALF_RECORD && !half) {
      half = i;
      h = t;
    }
    if (t.kind != EXLR8_TENSOR_HALF_RECORD && !other) other = i;
  }
  ASSERT_TRUE(half && other);
  const std::uint64_t elems = 128 * (h.shape[0] / (16ull * h.k));
  std::vector<float> out(elems + 1, 7.0f);
  auto expect = [&](exlr8_status got, exlr8_status want, const std::string& says) {
    EXPECT_EQ(got, want) << exlr8_status_name(got);
    EXPECT_NE(std::string(exlr8_last_error_message()).find(says), std::string::npos)
        << exlr8_last_error_message();
  };
  expect(exlr8_lease_half_weights(c, *other, out.data(), elems, nullptr), EXLR8_INVALID_ARGUMENT,
         "not a half record");
  expect(exlr8_lease_half_weights(c, lease.tensor_count(), out.data(), elems, nullptr),
         EXLR8_INVALID_ARGUMENT, "is past the");
  expect(exlr8_lease_half_weights(c, *half, nullptr, elems, nullptr), EXLR8_INVALID_ARGUMENT, "out is NULL");
  expect(exlr8_lease_half_weights(c, *half, out.data(), elems - 1, nullptr), EXLR8_INVALID_ARGUMENT,
         "out_elems " + std::to_string(elems - 1));
  expect(exlr8_lease_half_weights(c, *half, out.data(), elems + 1, nullptr), EXLR8_INVALID_ARGUMENT,
         "128 x hidden = " + std::to_string(elems));
  EXPECT_EQ(out[0], 7.0f);  // nothing written on an error
  expect(exlr8_lease_half_weights(nullptr, *half, out.data(), elems, nullptr), EXLR8_INVALID_ARGUMENT,
         "the lease is NULL");
  try {
    (void)lease.HalfWeights(*other);
    ADD_FAILURE() << "weights of a non-half";
  } catch (const exlr8client::Error& e) {
    EXPECT_EQ(e.status(), EXLR8_INVALID_ARGUMENT);
  }
  ASSERT_EQ(exlr8_lease_half_weights(c, *half, out.data(), elems, nullptr), EXLR8_OK)
      << exlr8_last_error_message();
  EXPECT_EQ(out[elems], 7.0f);  // exactly elems written
  lease.Close();
  expect(exlr8_lease_half_weights(c, *half, out.data(), elems, nullptr), EXLR8_FAILED_PRECONDITION,
         "is closed");
}

// The installed library from outside the tree (tests/client/consumer_test.sh:
// `cmake --install`, find_package and pkg-config builds, run on this lease).
TEST_F(HeldRankTest, AnInstalledConsumerBuildsAndRuns) {
  if (std::getenv("EXLR8_CONSUMER_TEST") == nullptr) GTEST_SKIP() << "set EXLR8_CONSUMER_TEST=1 (ctest does)";
  TempDir work;
  const std::string command = std::string(EXLR8_SOURCE_DIR) + "/tests/client/consumer_test.sh " +
                              EXLR8_BUILD_DIR + " " + EXLR8_SOURCE_DIR + " " + sock_.string() + " " +
                              work.path().string();
  const auto [code, out] = RunShell(command);
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("consumer ok"), std::string::npos) << out;
  EXPECT_NE(out.find("consumer_test: ok"), std::string::npos) << out;
}

}  // namespace
}  // namespace exlr8
