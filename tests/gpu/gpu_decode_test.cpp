// GPU decode and upload against the CPU reference (format/trellis.h) and the
// golden fixtures. Tolerance: zero — every comparison is bit for bit.
//
// Tests that need a GPU skip (GTEST_SKIP) when no CUDA device is visible, as
// on the build and CI machines; the rest (error mapping, argument checks,
// type properties) run everywhere.
#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "format/safetensors.h"
#include "format/trellis.h"
#include "gpu/check.h"
#include "gpu/cuda_check.h"
#include "gpu/decode.cuh"
#include "gpu/device.h"
#include "gpu/device_buffer.h"
#include "gpu/stream.h"
#include "gpu/upload.h"

namespace exlr8 {
namespace {

using Bytes = std::vector<std::byte>;
using HalfSpans = std::vector<std::span<const std::byte>>;

constexpr const char* kNoGpu = "no CUDA device: GPU tests run on the device machine";

bool HaveGpu() {
  static const bool have = [] {
    auto n = CudaDeviceCount();
    return n.ok() && *n > 0;
  }();
  return have;
}

Bytes RandomBytes(std::size_t n, std::mt19937_64& rng) {
  Bytes b(n);
  for (auto& x : b) x = static_cast<std::byte>(rng());
  return b;
}

HalfSpans Spans(const std::vector<Bytes>& v) { return HalfSpans(v.begin(), v.end()); }

// ---- without a GPU ----

static_assert(!std::is_constructible_v<CudaStreamView, int>, "literal 0 must not name a stream");
static_assert(!std::is_constructible_v<CudaStreamView, std::nullptr_t>, "nullptr must not name a stream");
static_assert(!std::is_copy_constructible_v<DeviceBuffer> && std::is_nothrow_move_constructible_v<DeviceBuffer>);
static_assert(!std::is_copy_constructible_v<PinnedHostBuffer> &&
              std::is_nothrow_move_constructible_v<PinnedHostBuffer>);
static_assert(!std::is_copy_constructible_v<CudaStream> && std::is_nothrow_move_constructible_v<CudaStream>);

TEST(CudaCheck, MapsErrorsToStatusCodesWithFileLineAndName) {
  const Status none = CudaErrorToStatus(cudaErrorNoDevice, "cudaGetDeviceCount(&n)", "x.cpp", 12);
  EXPECT_EQ(none.code(), StatusCode::kUnavailable);
  EXPECT_NE(none.message().find("x.cpp:12"), std::string::npos) << none.message();
  EXPECT_NE(none.message().find("cudaErrorNoDevice"), std::string::npos) << none.message();
  EXPECT_NE(none.message().find("cudaGetDeviceCount(&n)"), std::string::npos) << none.message();
  EXPECT_EQ(CudaErrorToStatus(cudaErrorInsufficientDriver, "f()", "y.cpp", 1).code(), StatusCode::kUnavailable);
  EXPECT_EQ(CudaErrorToStatus(cudaErrorMemoryAllocation, "cudaMalloc", "y.cpp", 1).code(),
            StatusCode::kResourceExhausted);
  EXPECT_EQ(CudaErrorToStatus(cudaErrorInvalidValue, "f()", "y.cpp", 1).code(), StatusCode::kInternal);
  EXPECT_EQ(CudaErrorToStatus(cudaErrorIllegalAddress, "f()", "y.cpp", 1).code(), StatusCode::kInternal);
  EXPECT_TRUE(CudaErrorToStatus(cudaSuccess, "f()", "y.cpp", 1).ok());
}

Status TryPassesErrorsOut(cudaError_t e) {
  EXLR8_CUDA_TRY(e);
  return Status::Ok();
}

TEST(CudaCheck, TryMacroReturnsOnFailureOnly) {
  EXPECT_TRUE(TryPassesErrorsOut(cudaSuccess).ok());
  const Status s = TryPassesErrorsOut(cudaErrorMemoryAllocation);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("gpu_decode_test.cpp:"), std::string::npos) << s.message();
}

TEST(Device, CountIsNonNegativeAndRequireAgrees) {
  auto n = CudaDeviceCount();
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  ASSERT_GE(*n, 0);
  const Status s = RequireCudaDevice();
  if (*n == 0) {
    EXPECT_EQ(s.code(), StatusCode::kUnavailable);
    EXPECT_EQ(s.message().rfind("no CUDA device", 0), 0u) << s.message();
  } else {
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
}

TEST(CheckGpuDecode, RejectsBadArgumentsBeforeTouchingTheDevice) {
  std::mt19937_64 rng(1);
  const Bytes half = RandomBytes(16 * 2 * 256, rng);
  const HalfSpans one{half};
  const CudaStreamView s = CudaStreamView::PerThreadDefault();
  EXPECT_EQ(CheckGpuDecode(one, 0, HalfLayout::kGateUp, 256, s).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckGpuDecode(one, 9, HalfLayout::kGateUp, 256, s).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckGpuDecode(one, 2, HalfLayout::kGateUp, 200, s).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckGpuDecode(one, 2, HalfLayout::kGateUp, 0, s).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckGpuDecode(HalfSpans{}, 2, HalfLayout::kGateUp, 256, s).status().code(),
            StatusCode::kInvalidArgument);
  // right K and length, wrong byte count: the message names the half
  const auto wrong = CheckGpuDecode(one, 3, HalfLayout::kDown, 256, s);
  EXPECT_EQ(wrong.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(wrong.status().message().find("half 0"), std::string::npos) << wrong.status().message();
}

TEST(CheckGpuDecode, WithoutDeviceSaysUnavailable) {
  if (HaveGpu()) GTEST_SKIP() << "a CUDA device is present; this checks the no-device path";
  std::mt19937_64 rng(2);
  const Bytes half = RandomBytes(16 * 2 * 128, rng);
  const auto r = CheckGpuDecode(HalfSpans{half}, 2, HalfLayout::kGateUp, 128, CudaStreamView::PerThreadDefault());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(r.status().message().rfind("no CUDA device", 0), 0u) << r.status().message();
}

// ---- on a GPU ----

class Gpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveGpu()) GTEST_SKIP() << kNoGpu;
    auto s = CudaStream::Create();
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    stream_.emplace(std::move(s).value());
  }
  CudaStreamView stream() const { return stream_->view(); }

  // Runs CheckGpuDecode in both table modes and expects zero mismatches.
  void ExpectBitExact(const std::vector<Bytes>& halves, int k, HalfLayout layout, std::uint64_t hidden) {
    for (DecodeTableMode mode : {DecodeTableMode::kGlobalF32, DecodeTableMode::kSharedE4M3}) {
      GpuCheckOptions opt;
      opt.mode = mode;
      auto r = CheckGpuDecode(Spans(halves), k, layout, hidden, stream(), opt);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      EXPECT_EQ(r->weights, halves.size() * 128 * hidden);
      EXPECT_TRUE(r->ok()) << "K" << k << (layout == HalfLayout::kDown ? " down" : " gate/up") << " hidden " << hidden
                           << " " << DecodeTableModeName(mode) << ": " << r->ToString();
    }
  }

  std::optional<CudaStream> stream_;
};

TEST_F(Gpu, RandomHalvesEveryWidthBothLayoutsBitExact) {
  const unsigned seed = 20251129;
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int k = kMinTrellisK; k <= kMaxTrellisK; ++k) {
    for (HalfLayout layout : {HalfLayout::kGateUp, HalfLayout::kDown}) {
      const std::uint64_t hidden = layout == HalfLayout::kGateUp ? 256 : 384;  // down: 3 column blocks
      std::vector<Bytes> halves;
      for (int i = 0; i < 5; ++i) halves.push_back(RandomBytes(16 * k * hidden, rng));
      ExpectBitExact(halves, k, layout, hidden);
    }
  }
}

TEST_F(Gpu, EdgeTilesAllZeroAndAllOnesBitExact) {
  // Constant streams hit the tail-biting wrap with identical states.
  for (int k = kMinTrellisK; k <= kMaxTrellisK; ++k) {
    std::vector<Bytes> halves{Bytes(16 * k * 128, std::byte{0}), Bytes(16 * k * 128, std::byte{0xFF}),
                              Bytes(16 * k * 128, std::byte{0x5A})};
    ExpectBitExact(halves, k, HalfLayout::kGateUp, 128);
  }
}

TEST_F(Gpu, GlmSizedHalvesBitExact) {
  const unsigned seed = 6144;
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  constexpr std::uint64_t kHidden = 6144;
  for (int k : {2, 3, 4}) {
    for (HalfLayout layout : {HalfLayout::kGateUp, HalfLayout::kDown}) {
      std::vector<Bytes> halves;
      for (int i = 0; i < 2; ++i) halves.push_back(RandomBytes(16 * k * kHidden, rng));
      ExpectBitExact(halves, k, layout, kHidden);
    }
  }
}

TEST_F(Gpu, CheckBatchesWhenOutputBudgetIsSmall) {
  std::mt19937_64 rng(77);
  std::vector<Bytes> halves;
  for (int i = 0; i < 7; ++i) halves.push_back(RandomBytes(16 * 3 * 256, rng));
  GpuCheckOptions opt;
  opt.max_batch_weights = 2 * 128 * 256 + 5;  // two halves per batch, four batches
  auto r = CheckGpuDecode(Spans(halves), 3, HalfLayout::kDown, 256, stream(), opt);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->ok()) << r->ToString();
  EXPECT_EQ(r->halves, 7u);
}

// The golden fixture: k{K}.raw holds 64 tiles, k{K}.decoded their 64 x 256
// values in tile order. 64 tiles are one gate/up run of length 128, so tile n
// lands at rows 16(n/8), cols 16(n%8) of a 128 x 128 T (spec 8.1).
TEST_F(Gpu, GoldenTilesEveryWidthBitForBit) {
  const std::string path = std::string(EXLR8_SHARED_DIR) + "/fixtures/golden/tiles.safetensors";
  std::ifstream in(path, std::ios::binary);
  ASSERT_TRUE(in) << "cannot open " << path;
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Bytes file(chars.size());
  std::memcpy(file.data(), chars.data(), chars.size());
  auto header = ParseSafetensorsHeader(file, file.size(), path);
  ASSERT_TRUE(header.ok()) << header.status().ToString();
  auto tensor = [&](const std::string& name) -> std::span<const std::byte> {
    const TensorInfo* t = header->Find(name);
    if (t == nullptr) return {};
    return std::span<const std::byte>(file).subspan(header->AbsoluteOffset(*t), t->byte_size());
  };

  auto cb = DeviceCodebook::Upload(stream());
  ASSERT_TRUE(cb.ok()) << cb.status().ToString();
  for (int k = kMinTrellisK; k <= kMaxTrellisK; ++k) {
    const std::string prefix = "k" + std::to_string(k);
    const auto raw = tensor(prefix + ".raw");
    const auto want_bytes = tensor(prefix + ".decoded");
    ASSERT_EQ(raw.size(), 64 * TileBytes(k)) << prefix;
    ASSERT_EQ(want_bytes.size(), 64u * 256u * 4u) << prefix;
    std::vector<float> want(64 * 256);
    std::memcpy(want.data(), want_bytes.data(), want_bytes.size());

    auto staged = UploadHalves(HalfSpans{raw}, 1, stream());
    ASSERT_TRUE(staged.ok()) << staged.status().ToString();
    for (DecodeTableMode mode : {DecodeTableMode::kGlobalF32, DecodeTableMode::kSharedE4M3}) {
      auto out = DeviceBuffer::Allocate(128 * 128 * sizeof(float));
      ASSERT_TRUE(out.ok());
      ASSERT_TRUE(out->MemsetAsync(0xFF, stream()).ok());
      const HalfBatch batch{staged->device_base(), staged->device_offsets(), 0, 1, k, HalfLayout::kGateUp, 128};
      ASSERT_TRUE(LaunchDecodeHalves(batch, {out->data_as<float>(), nullptr}, *cb, mode, stream()).ok());
      std::vector<float> got(128 * 128);
      ASSERT_TRUE(out->CopyToHostAsync(0, {reinterpret_cast<std::byte*>(got.data()), got.size() * 4}, stream()).ok());
      ASSERT_TRUE(stream_->Synchronize().ok());
      for (int n = 0; n < 64; ++n)
        for (int r = 0; r < 16; ++r)
          for (int c = 0; c < 16; ++c) {
            const float g = got[(16 * (n / 8) + r) * 128 + 16 * (n % 8) + c];
            const float w = want[n * 256 + r * 16 + c];
            ASSERT_EQ(std::bit_cast<std::uint32_t>(g), std::bit_cast<std::uint32_t>(w))
                << prefix << " " << DecodeTableModeName(mode) << " tile " << n << " (" << r << ", " << c << ")";
          }
    }
  }
}

TEST_F(Gpu, UploadRoundTripByteExactWithPointerTable) {
  std::mt19937_64 rng(99);
  // 3 experts x 2 halves of mixed sizes (not multiples of the alignment).
  std::vector<Bytes> halves;
  for (std::size_t size : {1000u, 4096u, 3u, 70000u, 12345u, 256u}) halves.push_back(RandomBytes(size, rng));
  for (bool pinned : {true, false}) {
    UploadOptions opt;
    opt.pinned_staging = pinned;
    opt.staging_bytes = 4096;  // many chunks, a half split across chunks
    opt.staging_buffers = 3;
    UploadStats stats;
    auto staged = UploadHalves(Spans(halves), 2, stream(), opt, &stats);
    ASSERT_TRUE(staged.ok()) << staged.status().ToString();
    EXPECT_EQ(staged->num_experts(), 3u);
    EXPECT_EQ(stats.bytes, 1000u + 4096 + 3 + 70000 + 12345 + 256);
    EXPECT_GE(stats.device_bytes, stats.bytes);
    // the device table equals the host offsets; every half is 256-aligned
    std::vector<std::uint64_t> table(halves.size());
    ASSERT_EQ(cudaMemcpy(table.data(), staged->device_offsets(), table.size() * 8, cudaMemcpyDeviceToHost),
              cudaSuccess);
    EXPECT_EQ(table, staged->offsets());
    for (std::size_t e = 0; e < 3; ++e)
      for (std::size_t h = 0; h < 2; ++h) {
        const std::size_t i = e * 2 + h;
        EXPECT_EQ(staged->offsets()[i] % 256, 0u);
        EXPECT_EQ(staged->HalfPointer(e, h), staged->device_base() + staged->offsets()[i]);
        Bytes back(halves[i].size());
        ASSERT_TRUE(staged->CopyHalfToHostAsync(i, back, stream()).ok());
        ASSERT_TRUE(stream_->Synchronize().ok());
        EXPECT_EQ(back, halves[i]) << (pinned ? "pinned" : "pageable") << " expert " << e << " half " << h;
      }
    Bytes wrong(5);
    EXPECT_EQ(staged->CopyHalfToHostAsync(0, wrong, stream()).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(staged->CopyHalfToHostAsync(6, wrong, stream()).code(), StatusCode::kInvalidArgument);
  }
}

// Chunks of several MiB are filled by several host threads (ParallelCopy).
TEST_F(Gpu, UploadWithCopyThreadsRoundTrip) {
  std::mt19937_64 rng(123);
  std::vector<Bytes> halves{RandomBytes((9 << 20) + 17, rng), RandomBytes(3 << 20, rng), RandomBytes(5, rng)};
  for (int threads : {1, 3, 8}) {
    UploadOptions opt;
    opt.staging_bytes = 4 << 20;
    opt.copy_threads = threads;
    auto staged = UploadHalves(Spans(halves), 1, stream(), opt);
    ASSERT_TRUE(staged.ok()) << staged.status().ToString();
    for (std::size_t i = 0; i < halves.size(); ++i) {
      Bytes back(halves[i].size());
      ASSERT_TRUE(staged->CopyHalfToHostAsync(i, back, stream()).ok());
      ASSERT_TRUE(stream_->Synchronize().ok());
      EXPECT_EQ(back, halves[i]) << threads << " threads, half " << i;
    }
  }
  UploadOptions bad;
  bad.copy_threads = 0;
  EXPECT_EQ(UploadHalves(Spans(halves), 1, stream(), bad).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(Gpu, UploadRejectsBadArguments) {
  std::mt19937_64 rng(5);
  std::vector<Bytes> halves{RandomBytes(10, rng), RandomBytes(10, rng), RandomBytes(10, rng)};
  EXPECT_EQ(UploadHalves(Spans(halves), 2, stream()).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(UploadHalves(Spans(halves), 0, stream()).status().code(), StatusCode::kInvalidArgument);
  UploadOptions bad_align;
  bad_align.alignment = 24;
  EXPECT_EQ(UploadHalves(Spans(halves), 1, stream(), bad_align).status().code(), StatusCode::kInvalidArgument);
  std::vector<Bytes> with_empty{RandomBytes(10, rng), Bytes{}};
  EXPECT_EQ(UploadHalves(Spans(with_empty), 1, stream()).status().code(), StatusCode::kInvalidArgument);
}

// Decoding a slice of a multi-expert table (first_half > 0) reads the right
// halves through the pointer table and writes half j of the batch at j*128*hidden.
TEST_F(Gpu, DecodeSliceOfPointerTable) {
  std::mt19937_64 rng(31);
  constexpr int k = 4;
  constexpr std::uint64_t hidden = 512;
  std::vector<Bytes> halves;
  for (int i = 0; i < 8; ++i) halves.push_back(RandomBytes(16 * k * hidden, rng));  // 4 experts x 2 halves
  auto staged = UploadHalves(Spans(halves), 2, stream());
  ASSERT_TRUE(staged.ok()) << staged.status().ToString();
  auto cb = DeviceCodebook::Upload(stream());
  ASSERT_TRUE(cb.ok()) << cb.status().ToString();
  constexpr std::uint64_t first = 3, count = 4;
  auto out = DeviceBuffer::Allocate(count * 128 * hidden * sizeof(float));
  auto out8 = DeviceBuffer::Allocate(count * 128 * hidden);
  ASSERT_TRUE(out.ok() && out8.ok());
  const HalfBatch batch{staged->device_base(), staged->device_offsets(), first, count, k, HalfLayout::kDown, hidden};
  ASSERT_TRUE(LaunchDecodeHalves(batch, {out->data_as<float>(), out8->data_as<std::uint8_t>()}, *cb,
                                 DecodeTableMode::kSharedE4M3, stream())
                  .ok());
  std::vector<float> got(count * 128 * hidden);
  std::vector<std::uint8_t> got8(count * 128 * hidden);
  ASSERT_TRUE(out->CopyToHostAsync(0, {reinterpret_cast<std::byte*>(got.data()), got.size() * 4}, stream()).ok());
  ASSERT_TRUE(out8->CopyToHostAsync(0, {reinterpret_cast<std::byte*>(got8.data()), got8.size()}, stream()).ok());
  ASSERT_TRUE(stream_->Synchronize().ok());
  std::vector<float> want(128 * hidden);
  for (std::uint64_t j = 0; j < count; ++j) {
    ASSERT_TRUE(DecodeHalfTiles(halves[first + j], k, HalfLayout::kDown, hidden, want).ok());
    for (std::uint64_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(std::bit_cast<std::uint32_t>(got[j * want.size() + i]), std::bit_cast<std::uint32_t>(want[i]))
          << "batch half " << j << " element " << i;
      ASSERT_EQ(got8[j * want.size() + i], FloatToE4M3(want[i])) << "batch half " << j << " element " << i;
    }
  }
}

TEST_F(Gpu, LaunchRejectsBadArguments) {
  auto cb = DeviceCodebook::Upload(stream());
  ASSERT_TRUE(cb.ok()) << cb.status().ToString();
  auto buf = DeviceBuffer::Allocate(4096);
  ASSERT_TRUE(buf.ok());
  const auto* base = buf->data_as<std::byte>();
  const auto* offs = buf->data_as<std::uint64_t>();
  float* out = buf->data_as<float>();
  auto code = [&](HalfBatch b, DecodeOutputs o) {
    return LaunchDecodeHalves(b, o, *cb, DecodeTableMode::kGlobalF32, stream()).code();
  };
  EXPECT_EQ(code({base, offs, 0, 1, 0, HalfLayout::kGateUp, 128}, {out, nullptr}), StatusCode::kInvalidArgument);
  EXPECT_EQ(code({base, offs, 0, 1, 9, HalfLayout::kGateUp, 128}, {out, nullptr}), StatusCode::kInvalidArgument);
  EXPECT_EQ(code({base, offs, 0, 1, 2, HalfLayout::kGateUp, 100}, {out, nullptr}), StatusCode::kInvalidArgument);
  EXPECT_EQ(code({base, offs, 0, 1, 2, HalfLayout::kGateUp, 128}, {nullptr, nullptr}), StatusCode::kInvalidArgument);
  EXPECT_EQ(code({nullptr, offs, 0, 1, 2, HalfLayout::kGateUp, 128}, {out, nullptr}), StatusCode::kInvalidArgument);
  EXPECT_EQ(code({base + 1, offs, 0, 1, 2, HalfLayout::kGateUp, 128}, {out, nullptr}), StatusCode::kInvalidArgument);
  EXPECT_EQ(code({base, offs, 0, 1, 2, HalfLayout::kGateUp, 128}, {out + 1, nullptr}), StatusCode::kInvalidArgument);
  EXPECT_EQ(code({base, offs, 0, 1, 2, HalfLayout::kGateUp, 128}, {nullptr, buf->data_as<std::uint8_t>() + 4}),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(code({base, offs, 0, ~0ull / 1024, 2, HalfLayout::kGateUp, 1024}, {out, nullptr}),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(stream_->Synchronize().ok());
}

TEST_F(Gpu, DeviceBufferCopiesNeedAStreamAndCheckRanges) {
  auto a = DeviceBuffer::Allocate(1024);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  std::mt19937_64 rng(8);
  const Bytes src = RandomBytes(1024, rng);
  ASSERT_TRUE(a->CopyFromHostAsync(src, 0, stream()).ok());
  auto b = DeviceBuffer::CopyOf(*a, stream());
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  Bytes back(1024);
  ASSERT_TRUE(b->CopyToHostAsync(0, back, stream()).ok());
  ASSERT_TRUE(stream_->Synchronize().ok());
  EXPECT_EQ(back, src);
  EXPECT_EQ(a->CopyFromHostAsync(src, 1, stream()).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(a->CopyToHostAsync(1025, std::span<std::byte>(back).first(0), stream()).code(),
            StatusCode::kInvalidArgument);
  DeviceBuffer moved = std::move(*a);
  EXPECT_EQ(moved.size(), 1024u);
  EXPECT_EQ(a->size(), 0u);  // NOLINT(bugprone-use-after-move): moved-from is empty by contract
  EXPECT_EQ(a->data(), nullptr);
}

}  // namespace
}  // namespace exlr8
