// GPU reconstruction (gpu/reconstruct.cuh) against the CPU reference
// (format/reconstruct.h) on random tiles and vectors, and the comparison
// kernels the rank image's in-place check uses. Tests that need a GPU skip
// without one; the argument checks run everywhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "format/dtype.h"
#include "format/reconstruct.h"
#include "format/trellis.h"
#include "gpu/device.h"
#include "gpu/device_buffer.h"
#include "gpu/reconstruct.cuh"
#include "gpu/stream.h"

namespace exlr8 {
namespace {

bool HaveGpu() {
  static const bool have = [] {
    auto n = CudaDeviceCount();
    return n.ok() && *n > 0;
  }();
  return have;
}

#define SKIP_WITHOUT_GPU() \
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device: GPU tests run on the device machine"

template <typename T>
DeviceBuffer Upload(std::span<const T> host, CudaStreamView stream) {
  auto buf = DeviceBuffer::Allocate(std::max<std::size_t>(host.size_bytes(), 1));
  EXPECT_TRUE(buf.ok()) << buf.status().ToString();
  EXPECT_TRUE(buf->CopyFromHostAsync(std::as_bytes(host), 0, stream).ok());
  return std::move(*buf);
}

template <typename T>
std::vector<T> Download(const DeviceBuffer& buf, std::size_t n, CudaStreamView stream) {
  std::vector<T> out(n);
  EXPECT_TRUE(buf.CopyToHostAsync(0, std::as_writable_bytes(std::span(out)), stream).ok());
  EXPECT_TRUE(stream.Synchronize().ok());
  return out;
}

// Random E4M3 tile values (no NaN), as DecodeHalfTiles produces.
std::vector<float> RandomTiles(std::size_t n, std::mt19937_64& rng) {
  std::vector<float> t(n);
  for (float& x : t) {
    std::uint8_t b;
    do b = static_cast<std::uint8_t>(rng());
    while (IsE4M3NaN(b));
    x = E4M3ToFloat(b);
  }
  return t;
}

std::vector<float> RandomVector(std::size_t n, std::mt19937_64& rng, float scale) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// max over 128 x 128 blocks of max|a-b| / max|b|.
double WorstBlockError(std::span<const float> a, std::span<const float> b, std::size_t rows,
                       std::size_t cols) {
  double worst = 0;
  for (std::size_t rb = 0; rb < rows; rb += 128)
    for (std::size_t cb = 0; cb < cols; cb += 128) {
      double md = 0, mr = 0;
      for (std::size_t r = rb; r < rb + 128; ++r)
        for (std::size_t c = cb; c < cb + 128; ++c) {
          md = std::max(md, std::fabs(static_cast<double>(a[r * cols + c]) - b[r * cols + c]));
          mr = std::max(mr, std::fabs(static_cast<double>(b[r * cols + c])));
        }
      worst = std::max(worst, mr > 0 ? md / mr : md);
    }
  return worst;
}

TEST(GpuReconstruct, RefusesBadShapesWithoutTouchingTheDevice) {
  CudaStreamView stream = CudaStreamView::LegacyDefault();
  ReconstructBatch b;
  b.count = 1;
  b.rows = 100;
  b.cols = 128;
  EXPECT_EQ(LaunchReconstructBlocks(b, stream).code(), StatusCode::kInvalidArgument);
  b.rows = 128;
  EXPECT_EQ(LaunchReconstructBlocks(b, stream).code(), StatusCode::kInvalidArgument);  // null pointers
  EXPECT_EQ(
      LaunchExpandHalfVectors(nullptr, nullptr, 1, HalfLayout::kDown, 200, nullptr, nullptr, stream).code(),
      StatusCode::kInvalidArgument);
  EXPECT_EQ(LaunchConvertToFloat(nullptr, DType::kU8, 4, nullptr, stream).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(LaunchBlockErrors(nullptr, nullptr, 1, 128, 64, nullptr, stream).code(),
            StatusCode::kInvalidArgument);
}

// Several matrices at once, each with its own vectors, and one with shared
// vectors (stride 0): within spec 9.3 of ReconstructBlocks, block by block.
TEST(GpuReconstruct, MatchesTheCpuReferenceWithinSpecTolerance) {
  SKIP_WITHOUT_GPU();
  auto stream = CudaStream::Create();
  ASSERT_TRUE(stream.ok());
  std::mt19937_64 rng(26);
  struct Shape {
    std::size_t count, rows, cols;
    bool shared;
  };
  for (const Shape s : {Shape{3, 256, 128, false}, Shape{2, 128, 384, false}, Shape{4, 384, 256, true}}) {
    SCOPED_TRACE(std::to_string(s.count) + " x " + std::to_string(s.rows) + " x " + std::to_string(s.cols));
    const std::size_t n = s.rows * s.cols;
    std::vector<float> t = RandomTiles(s.count * n, rng);
    const std::size_t nu = s.shared ? s.rows : s.count * s.rows, nv = s.shared ? s.cols : s.count * s.cols;
    const std::vector<float> u = RandomVector(nu, rng, 0.02f), v = RandomVector(nv, rng, 3.0f);
    DeviceBuffer dw = Upload<float>(t, stream->view()), du = Upload<float>(u, stream->view()),
                 dv = Upload<float>(v, stream->view());
    ReconstructBatch b;
    b.w = dw.data_as<float>();
    b.count = s.count;
    b.rows = s.rows;
    b.cols = s.cols;
    b.u = du.data_as<float>();
    b.u_stride = s.shared ? 0 : s.rows;
    b.v = dv.data_as<float>();
    b.v_stride = s.shared ? 0 : s.cols;
    ASSERT_TRUE(LaunchReconstructBlocks(b, stream->view()).ok());
    const std::vector<float> gpu = Download<float>(dw, t.size(), stream->view());
    std::size_t bit_equal = 0;
    for (std::size_t j = 0; j < s.count; ++j) {
      std::span<float> cpu(t.data() + j * n, n);
      const std::span<const float> uj(u.data() + (s.shared ? 0 : j * s.rows), s.rows);
      const std::span<const float> vj(v.data() + (s.shared ? 0 : j * s.cols), s.cols);
      ASSERT_TRUE(ReconstructBlocks(s.rows, s.cols, cpu, uj, vj).ok());
      const std::span<const float> g(gpu.data() + j * n, n);
      EXPECT_LE(WorstBlockError(g, cpu, s.rows, s.cols), 1e-5);
      for (std::size_t i = 0; i < n; ++i)
        bit_equal += std::bit_cast<std::uint32_t>(g[i]) == std::bit_cast<std::uint32_t>(cpu[i]);
    }
    // The butterflies are the CPU's in its order: bit for bit in practice.
    std::printf("  %zu of %zu weights bit-identical to the CPU's\n", bit_equal, t.size());
  }
}

// u and v of gate/up and down halves read in place (bytes at odd offsets,
// F16, BF16 and F32) equal ExpandHiddenSideVector's and the slice's.
TEST(GpuReconstruct, ExpandsHalfVectorsInPlaceInEveryDtype) {
  SKIP_WITHOUT_GPU();
  auto stream = CudaStream::Create();
  ASSERT_TRUE(stream.ok());
  std::mt19937_64 rng(9);
  constexpr std::size_t kHidden = 384;
  const DType dtypes[] = {DType::kF16, DType::kBF16, DType::kF32};
  std::vector<std::byte> image;
  auto put = [&](std::span<const float> values, DType dtype) {
    const std::uint64_t at = image.size() + 1;  // deliberately misaligned
    image.resize(at + values.size() * DTypeSize(dtype));
    for (std::size_t i = 0; i < values.size(); ++i) {
      std::byte* p = image.data() + at + i * DTypeSize(dtype);
      if (dtype == DType::kF16) StoreLE16(p, FloatToHalf(values[i]));
      if (dtype == DType::kBF16) StoreLE16(p, FloatToBFloat16(values[i]));
      if (dtype == DType::kF32) StoreLE32(p, std::bit_cast<std::uint32_t>(values[i]));
    }
    return at;
  };
  auto stored = [&](std::uint64_t at, DType dtype, std::size_t n) {
    std::vector<float> out(n);
    EXPECT_TRUE(ConvertToFloat(dtype, std::span(image).subspan(at, n * DTypeSize(dtype)), out).ok());
    return out;
  };
  std::vector<HalfVectorRef> refs;
  for (DType sd : dtypes)
    for (DType bd : dtypes) {
      HalfVectorRef r;
      std::vector<float> signs(kHidden);
      for (float& x : signs) x = (rng() & 1) ? 1.0f : -1.0f;
      r.slice = put(RandomVector(128, rng, 1.0f), sd);
      r.block = put(RandomVector(kHidden / 128, rng, 0.1f), bd);
      r.signs = put(signs, sd);
      r.slice_dtype = static_cast<std::uint8_t>(sd);
      r.block_dtype = static_cast<std::uint8_t>(bd);
      r.signs_dtype = static_cast<std::uint8_t>(sd);
      refs.push_back(r);
    }
  DeviceBuffer dimage = Upload<std::byte>(image, stream->view());
  DeviceBuffer drefs = Upload<HalfVectorRef>(refs, stream->view());
  for (HalfLayout layout : {HalfLayout::kGateUp, HalfLayout::kDown}) {
    const bool down = layout == HalfLayout::kDown;
    const std::size_t rows = down ? 128 : kHidden, cols = down ? kHidden : 128;
    auto du = DeviceBuffer::Allocate(refs.size() * rows * 4);
    auto dv = DeviceBuffer::Allocate(refs.size() * cols * 4);
    ASSERT_TRUE(du.ok() && dv.ok());
    ASSERT_TRUE(LaunchExpandHalfVectors(static_cast<const std::byte*>(dimage.data()),
                                        drefs.data_as<HalfVectorRef>(), refs.size(), layout, kHidden,
                                        du->data_as<float>(), dv->data_as<float>(), stream->view())
                    .ok());
    const auto u = Download<float>(*du, refs.size() * rows, stream->view());
    const auto v = Download<float>(*dv, refs.size() * cols, stream->view());
    for (std::size_t j = 0; j < refs.size(); ++j) {
      const HalfVectorRef& r = refs[j];
      const auto slice = stored(r.slice, static_cast<DType>(r.slice_dtype), 128);
      const auto block = stored(r.block, static_cast<DType>(r.block_dtype), kHidden / 128);
      const auto signs = stored(r.signs, static_cast<DType>(r.signs_dtype), kHidden);
      std::vector<float> hidden(kHidden);
      ASSERT_TRUE(ExpandHiddenSideVector(signs, block, hidden).ok());
      const float* gh = down ? v.data() + j * kHidden : u.data() + j * kHidden;
      const float* gs = down ? u.data() + j * 128 : v.data() + j * 128;
      EXPECT_EQ(std::memcmp(gh, hidden.data(), kHidden * 4), 0) << "half " << j << " hidden side";
      EXPECT_EQ(std::memcmp(gs, slice.data(), 128 * 4), 0) << "half " << j << " slice";
    }
  }
  // ConvertToFloat's twin.
  for (DType d : dtypes) {
    const std::uint64_t at = put(RandomVector(1000, rng, 5.0f), d);
    DeviceBuffer di = Upload<std::byte>(image, stream->view());
    auto out = DeviceBuffer::Allocate(1000 * 4);
    ASSERT_TRUE(out.ok());
    ASSERT_TRUE(LaunchConvertToFloat(static_cast<const std::byte*>(di.data()) + at, d, 1000,
                                     out->data_as<float>(), stream->view())
                    .ok());
    const auto g = Download<float>(*out, 1000, stream->view());
    const auto want = stored(at, d, 1000);
    EXPECT_EQ(std::memcmp(g.data(), want.data(), 4000), 0) << DTypeName(d);
  }
}

TEST(GpuReconstruct, ComparisonsFindWhatDiffers) {
  SKIP_WITHOUT_GPU();
  auto stream = CudaStream::Create();
  ASSERT_TRUE(stream.ok());
  std::mt19937_64 rng(3);
  // Two 256 x 128 matrices: one element off by 1e-3 in block (1, 0) of the
  // second, a NaN in block (0, 0) of the first.
  std::vector<float> b = RandomVector(2 * 256 * 128, rng, 1.0f), a = b;
  a[256 * 128 + 200 * 128 + 5] += 1e-3f;
  a[7] = std::nanf("");
  DeviceBuffer da = Upload<float>(a, stream->view()), db = Upload<float>(b, stream->view());
  auto errs = DeviceBuffer::Allocate(4 * sizeof(BlockError));
  ASSERT_TRUE(errs.ok());
  ASSERT_TRUE(LaunchBlockErrors(da.data_as<float>(), db.data_as<float>(), 2, 256, 128,
                                errs->data_as<BlockError>(), stream->view())
                  .ok());
  const auto e = Download<BlockError>(*errs, 4, stream->view());
  EXPECT_TRUE(std::isinf(e[0].max_diff));
  EXPECT_EQ(e[1].max_diff, 0.0f);
  EXPECT_EQ(e[2].max_diff, 0.0f);
  EXPECT_NEAR(e[3].max_diff, 1e-3, 1e-6);
  float mr = 0;
  for (std::size_t i = 256 * 128 + 128 * 128; i < 2 * 256 * 128; ++i) mr = std::max(mr, std::fabs(b[i]));
  EXPECT_EQ(e[3].max_ref, mr);

  auto result = DeviceBuffer::Allocate(sizeof(CompareResult));
  ASSERT_TRUE(result.ok());
  ASSERT_TRUE(LaunchCompareBits(da.data_as<float>(), db.data_as<float>(), a.size(),
                                result->data_as<CompareResult>(), stream->view())
                  .ok());
  auto r = Download<CompareResult>(*result, 1, stream->view());
  EXPECT_EQ(r[0].mismatches, 2u);
  EXPECT_EQ(r[0].first, 7u);
  ASSERT_TRUE(LaunchCompareBits(db.data_as<float>(), db.data_as<float>(), b.size(),
                                result->data_as<CompareResult>(), stream->view())
                  .ok());
  r = Download<CompareResult>(*result, 1, stream->view());
  EXPECT_EQ(r[0].mismatches, 0u);
  EXPECT_EQ(r[0].first, ~0ull);

  // Tiles: fp32 and E4M3 against the reference's bytes.
  std::vector<std::uint8_t> ref(4096), e4m3;
  for (auto& x : ref) do
      x = static_cast<std::uint8_t>(rng());
    while (IsE4M3NaN(x));
  std::vector<float> f32(ref.size());
  for (std::size_t i = 0; i < ref.size(); ++i) f32[i] = E4M3ToFloat(ref[i]);
  e4m3 = ref;
  e4m3[3000] ^= 1;
  f32[100] = std::nextafter(f32[100], 1e9f);
  DeviceBuffer dref = Upload<std::uint8_t>(ref, stream->view()),
               de = Upload<std::uint8_t>(e4m3, stream->view()), df = Upload<float>(f32, stream->view());
  ASSERT_TRUE(LaunchCompareTiles(df.data_as<float>(), de.data_as<std::uint8_t>(),
                                 dref.data_as<std::uint8_t>(), ref.size(), result->data_as<CompareResult>(),
                                 stream->view())
                  .ok());
  r = Download<CompareResult>(*result, 1, stream->view());
  EXPECT_EQ(r[0].mismatches, 2u);
  EXPECT_EQ(r[0].first, 100u);
}

}  // namespace
}  // namespace exlr8
