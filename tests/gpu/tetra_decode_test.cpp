// The GPU Tetra decode (gpu/tetra_decode.cuh) against the CPU reference
// (format/tetra/word.h DecodeDiskWords) byte for byte: the lvq5-tiny
// fixture's 4,096 words, millions of seeded random words in matrices of
// several geometries (odd and even nblocks, d_out not a multiple of 8,
// garbage in the row padding, a stride above the minimum), a word flipped
// on the device found and named by (row, block), the f32 reconstruction
// against ReconstructBlock bit for bit, and the byte comparison.
// Tests that need a GPU skip without one; the argument checks run everywhere.
#include "gpu/tetra_decode.cuh"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "format/tetra/served.h"
#include "format/tetra/tables.h"
#include "format/tetra/word.h"
#include "gpu/device.h"
#include "gpu/device_buffer.h"
#include "gpu/stream.h"
#include "tests/format/test_util.h"

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

constexpr std::size_t kGuard = 64;  // sentinel bytes past every output
constexpr std::uint8_t kSentinel = 0xAB;

DeviceBuffer UploadBytes(std::span<const std::byte> host, CudaStreamView stream) {
  auto buf = DeviceBuffer::Allocate(std::max<std::size_t>(host.size(), 1));
  EXPECT_TRUE(buf.ok()) << buf.status().ToString();
  if (!host.empty()) {
    EXPECT_TRUE(buf->CopyFromHostAsync(host, 0, stream).ok());
  }
  return std::move(*buf);
}

std::vector<std::byte> Download(const DeviceBuffer& buf, std::size_t n, CudaStreamView stream) {
  std::vector<std::byte> out(n);
  EXPECT_TRUE(buf.CopyToHostAsync(0, out, stream).ok());
  EXPECT_TRUE(stream.Synchronize().ok());
  return out;
}

// A served matrix built from a disk stream, with its CPU reference decode.
struct Matrix {
  std::uint64_t d_out = 0, nblocks = 0, stride = 0;
  std::vector<std::byte> disk, served;
  std::vector<std::int8_t> want;  // DecodeDiskWords of disk
};

// `stride_extra` bytes beyond ServedRowStride; `garbage_padding` fills every
// padding byte with 0xFF (the kernel must not read them into a word).
Matrix MakeMatrix(std::uint64_t d_out, std::uint64_t nblocks, std::mt19937_64& rng,
                  std::uint64_t stride_extra, bool garbage_padding) {
  Matrix m;
  m.d_out = d_out;
  m.nblocks = nblocks;
  const std::uint64_t min_stride = tetra::ServedRowStride(nblocks);
  m.stride = min_stride + stride_extra;
  m.disk.resize(6 * d_out * nblocks);
  for (std::size_t i = 0; i < m.disk.size(); i += 8) {
    const std::uint64_t r = rng();
    std::memcpy(m.disk.data() + i, &r, std::min<std::size_t>(8, m.disk.size() - i));
  }
  std::vector<std::byte> tight(min_stride * d_out);
  EXPECT_TRUE(tetra::DiskToServed(m.disk, nblocks, tight).ok());
  m.served.assign(m.stride * d_out, garbage_padding ? std::byte{0xFF} : std::byte{0});
  for (std::uint64_t i = 0; i < d_out; ++i)
    std::memcpy(m.served.data() + m.stride * i, tight.data() + min_stride * i, 6 * nblocks);
  m.want.resize(24 * d_out * nblocks);
  tetra::DecodeDiskWords(tetra::BuiltTables(), m.disk, m.want);
  return m;
}

std::string Where(std::uint64_t index, std::uint64_t nblocks) {
  const TetraCoordIndex at = LocateTetraCoord(index, nblocks);
  return "byte " + std::to_string(index) + " (row " + std::to_string(at.row) + ", block " +
         std::to_string(at.block) + ", coordinate " + std::to_string(at.coord) + ")";
}

// Decodes `m` on the GPU; checks the output against m.want on the device
// (LaunchCompareBytes) and on the host, and that nothing past the output was
// written. Returns the device comparison.
CompareResult DecodeAndCompare(const Matrix& m, const DeviceTetraTables& tables, CudaStreamView stream,
                               const DeviceBuffer* codes_override = nullptr) {
  const std::size_t out_bytes = m.want.size();
  DeviceBuffer codes = codes_override != nullptr ? DeviceBuffer() : UploadBytes(m.served, stream);
  const DeviceBuffer& c = codes_override != nullptr ? *codes_override : codes;
  auto out = DeviceBuffer::Allocate(out_bytes + kGuard);
  EXPECT_TRUE(out.ok());
  EXPECT_TRUE(out->MemsetAsync(kSentinel, stream).ok());
  DeviceBuffer ref = UploadBytes(std::as_bytes(std::span(m.want)), stream);
  auto result = DeviceBuffer::Allocate(sizeof(CompareResult));
  EXPECT_TRUE(result.ok());
  const TetraServedMatrix sm{c.data_as<std::byte>(), m.d_out, m.nblocks, m.stride};
  const Status st = LaunchTetraDecode(sm, out->data_as<std::int8_t>(), tables, stream);
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_TRUE(LaunchCompareBytes(out->data_as<std::byte>(), ref.data_as<std::byte>(), out_bytes,
                                 result->data_as<CompareResult>(), stream)
                  .ok());
  const std::vector<std::byte> got = Download(*out, out_bytes + kGuard, stream);
  CompareResult r;
  EXPECT_TRUE(result->CopyToHostAsync(0, std::as_writable_bytes(std::span(&r, 1)), stream).ok());
  EXPECT_TRUE(stream.Synchronize().ok());
  // The host's own comparison agrees with the device's.
  std::uint64_t count = 0, first = ~0ull;
  for (std::size_t i = 0; i < out_bytes; ++i)
    if (static_cast<std::int8_t>(got[i]) != m.want[i]) {
      ++count;
      first = std::min<std::uint64_t>(first, i);
    }
  EXPECT_EQ(r.mismatches, count) << "device and host comparisons disagree";
  EXPECT_EQ(r.first, first) << "device and host comparisons disagree";
  for (std::size_t i = out_bytes; i < out_bytes + kGuard; ++i)
    EXPECT_EQ(static_cast<std::uint8_t>(got[i]), kSentinel)
        << "the decode wrote past its output at byte " << i;
  return r;
}

TEST(GpuTetraDecode, RefusesBadArgumentsWithoutTouchingTheDevice) {
  CudaStreamView stream = CudaStreamView::LegacyDefault();
  DeviceTetraTables none;  // not uploaded
  alignas(8) std::int8_t out[48];
  alignas(8) std::byte codes[64] = {};
  auto launch = [&](TetraServedMatrix m) { return LaunchTetraDecode(m, out, none, stream).code(); };
  EXPECT_EQ(launch({codes, 1, 0, 8}), StatusCode::kInvalidArgument);  // nblocks 0
  EXPECT_EQ(launch({codes, 1, (1ull << 26) + 1, 1ull << 30}),
            StatusCode::kInvalidArgument);                             // too many blocks
  EXPECT_EQ(launch({codes, 1, 3, 16}), StatusCode::kInvalidArgument);  // stride below round_up(18, 8) = 24
  EXPECT_EQ(launch({codes, 1, 3, 26}), StatusCode::kInvalidArgument);  // stride not a multiple of 4
  EXPECT_EQ(launch({codes, 1ull << 62, 3, 24}), StatusCode::kInvalidArgument);  // size overflow
  EXPECT_EQ(launch({codes, 0, 3, 24}), StatusCode::kOk);                        // no rows: nothing to do
  EXPECT_EQ(launch({nullptr, 1, 3, 24}), StatusCode::kInvalidArgument);
  EXPECT_EQ(launch({codes, 1, 3, 24}), StatusCode::kInvalidArgument);  // tables not uploaded
  EXPECT_EQ(LaunchCompareBytes(codes, codes, 4, nullptr, stream).code(), StatusCode::kInvalidArgument);
  alignas(8) float f32[24];
  double d[2] = {};
  EXPECT_EQ(LaunchTetraReconstruct({codes, 1, 1, 8}, {d, d, nullptr, 24}, f32, none, stream).code(),
            StatusCode::kInvalidArgument);  // tail_cols above 23
  EXPECT_EQ(LaunchTetraReconstruct({codes, 1, 1, 8}, {d, d, nullptr, 3}, f32, none, stream).code(),
            StatusCode::kInvalidArgument);  // tables not uploaded (and no tail)
  EXPECT_EQ(LaunchTetraReconstruct({codes, 1, 0, 8}, {d, d, nullptr, 0}, f32, none, stream).code(),
            StatusCode::kInvalidArgument);  // nblocks 0
}

TEST(GpuTetraDecode, UploadsTheBuiltTables) {
  SKIP_WITHOUT_GPU();
  auto stream = CudaStream::Create();
  ASSERT_TRUE(stream.ok());
  auto tables = DeviceTetraTables::Upload(stream->view());
  ASSERT_TRUE(tables.ok()) << tables.status().ToString();
  // The device bytes are the built tables, in the documented order.
  std::vector<std::byte> got(kTetraDeviceTableBytes);
  ASSERT_EQ(cudaMemcpy(got.data(), tables->data(), got.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  const tetra::Tables& t = tetra::BuiltTables();
  std::size_t off = 0;
  auto expect_piece = [&](const void* p, std::size_t n, const char* what) {
    EXPECT_EQ(std::memcmp(got.data() + off, p, n), 0) << what << " at device offset " << off;
    off += n;
  };
  expect_piece(t.rows.data(), sizeof t.rows, "rows");
  expect_piece(t.branches.data(), sizeof t.branches, "branches");
  expect_piece(t.prefixes.data(), sizeof t.prefixes, "prefixes");
  expect_piece(t.suffixes.data(), sizeof t.suffixes, "suffixes");
  expect_piece(t.invnorm.data(), sizeof t.invnorm, "invnorm");
  EXPECT_EQ(off, tetra::kDecodeTableBytes);
  expect_piece(t.order.data(), sizeof t.order, "order");
}

// (a) The fixture's 4,096 words, as one row and as 64 x 64, against the
// fixture's own coordinates (and so against the CPU reference).
TEST(GpuTetraDecode, FixtureWords) {
  SKIP_WITHOUT_GPU();
  auto stream = CudaStream::Create();
  ASSERT_TRUE(stream.ok());
  auto tables = DeviceTetraTables::Upload(stream->view());
  ASSERT_TRUE(tables.ok()) << tables.status().ToString();
  const auto bytes = testing::ReadBytes(testing::SharedDir() / "fixtures" / "lvq5-tiny" / "words.bin");
  ASSERT_EQ(bytes.size(), 4096u * 32) << "fixtures/lvq5-tiny/words.bin";
  for (const std::uint64_t nblocks : {std::uint64_t{4096}, std::uint64_t{64}, std::uint64_t{1}}) {
    SCOPED_TRACE("nblocks " + std::to_string(nblocks));
    Matrix m;
    m.nblocks = nblocks;
    m.d_out = 4096 / nblocks;
    m.stride = tetra::ServedRowStride(nblocks);
    m.disk.resize(6 * 4096);
    m.want.resize(24 * 4096);
    for (std::size_t i = 0; i < 4096; ++i) {
      std::uint64_t w;
      std::memcpy(&w, bytes.data() + 32 * i, 8);
      tetra::WordToDisk(w, m.disk.data() + 6 * i);
      std::memcpy(m.want.data() + 24 * i, bytes.data() + 32 * i + 8, 24);
    }
    std::vector<std::int8_t> cpu(m.want.size());
    tetra::DecodeDiskWords(tetra::BuiltTables(), m.disk, cpu);
    ASSERT_EQ(cpu, m.want) << "the CPU reference disagrees with the fixture";
    m.served.resize(m.stride * m.d_out);
    ASSERT_TRUE(tetra::DiskToServed(m.disk, nblocks, m.served).ok());
    const CompareResult r = DecodeAndCompare(m, *tables, stream->view());
    EXPECT_EQ(r.mismatches, 0u) << "first mismatch at " << Where(r.first, nblocks);
  }
}

// (b) Seeded random words (every 48-bit value is legal, spec 3.4), about
// 4.6 million, in matrices of several shapes.
TEST(GpuTetraDecode, RandomWordsMatchTheCpuByteForByte) {
  SKIP_WITHOUT_GPU();
  auto stream = CudaStream::Create();
  ASSERT_TRUE(stream.ok());
  auto tables = DeviceTetraTables::Upload(stream->view());
  ASSERT_TRUE(tables.ok()) << tables.status().ToString();
  std::mt19937_64 rng(0x28);
  struct Shape {
    std::uint64_t d_out, nblocks, stride_extra;
    bool garbage;
  };
  std::uint64_t words = 0;
  for (const Shape s :
       {Shape{1, 1, 0, false}, Shape{1, 1, 0, true}, Shape{3, 7, 0, true}, Shape{13, 11, 0, false},
        Shape{17, 2, 4, true}, Shape{250, 106, 0, true}, Shape{1001, 107, 8, true},
        Shape{777, 1024, 0, false}, Shape{4099, 427, 0, true}, Shape{2047, 1001, 12, true}}) {
    SCOPED_TRACE(std::to_string(s.d_out) + " x " + std::to_string(s.nblocks) + " stride +" +
                 std::to_string(s.stride_extra) + (s.garbage ? " garbage padding" : ""));
    const Matrix m = MakeMatrix(s.d_out, s.nblocks, rng, s.stride_extra, s.garbage);
    const CompareResult r = DecodeAndCompare(m, *tables, stream->view());
    EXPECT_EQ(r.mismatches, 0u) << "first mismatch at " << Where(r.first, s.nblocks);
    words += s.d_out * s.nblocks;
  }
  EXPECT_GT(words, 4'000'000u);
}

// (c) One word changed in device memory after the upload: the comparison
// with the CPU reference of the original stream finds it and names it.
TEST(GpuTetraDecode, AWordFlippedOnTheDeviceIsFoundAndNamed) {
  SKIP_WITHOUT_GPU();
  auto stream = CudaStream::Create();
  ASSERT_TRUE(stream.ok());
  auto tables = DeviceTetraTables::Upload(stream->view());
  ASSERT_TRUE(tables.ok()) << tables.status().ToString();
  std::mt19937_64 rng(0x5eed);
  const Matrix m = MakeMatrix(37, 13, rng, 0, false);
  struct Flip {
    std::uint64_t row, block;
    int byte, bit;  // within the served 6-byte word: bit 8*byte+bit of W
    bool moves;     // whether the point changes (the gain bit 47 does not)
  };
  for (const Flip f :
       {Flip{20, 7, 0, 0, true}, Flip{36, 12, 5, 6, true}, Flip{0, 0, 3, 1, true}, Flip{5, 4, 5, 7, false}}) {
    SCOPED_TRACE("W bit " + std::to_string(8 * f.byte + f.bit) + " of row " + std::to_string(f.row) +
                 ", block " + std::to_string(f.block));
    DeviceBuffer codes = UploadBytes(m.served, stream->view());
    const std::size_t at = m.stride * f.row + 6 * f.block + f.byte;
    const std::byte flipped = m.served[at] ^ static_cast<std::byte>(1 << f.bit);
    ASSERT_TRUE(codes.CopyFromHostAsync(std::span(&flipped, 1), at, stream->view()).ok());
    const CompareResult r = DecodeAndCompare(m, *tables, stream->view(), &codes);
    if (!f.moves) {
      EXPECT_EQ(r.mismatches, 0u) << "the gain bit moved the point: " << Where(r.first, m.nblocks);
      continue;
    }
    ASSERT_GT(r.mismatches, 0u) << "the flipped word was not found";
    EXPECT_LE(r.mismatches, 24u) << "more than one word differs";
    const TetraCoordIndex where = LocateTetraCoord(r.first, m.nblocks);
    EXPECT_EQ(where.row, f.row) << Where(r.first, m.nblocks);
    EXPECT_EQ(where.block, f.block) << Where(r.first, m.nblocks);
  }
}

// The f32 reconstruction against ReconstructBlock and the tail, bit for
// bit, with centroids and row scales of both signs and every tail width
// class (none, short, 23).
TEST(GpuTetraDecode, ReconstructionMatchesTheCpuBitForBit) {
  SKIP_WITHOUT_GPU();
  auto stream = CudaStream::Create();
  ASSERT_TRUE(stream.ok());
  const CudaStreamView sv = stream->view();
  auto tables = DeviceTetraTables::Upload(sv);
  ASSERT_TRUE(tables.ok()) << tables.status().ToString();
  std::mt19937_64 rng(0x24);
  std::normal_distribution<double> gauss(0.0, 0.05);
  struct Shape {
    std::uint64_t d_out, nblocks, tail_cols;
  };
  for (const Shape s :
       {Shape{13, 11, 16}, Shape{250, 106, 0}, Shape{3, 1, 23}, Shape{1001, 7, 5}, Shape{4099, 64, 1}}) {
    SCOPED_TRACE(std::to_string(s.d_out) + " x " + std::to_string(s.nblocks) + " blocks + " +
                 std::to_string(s.tail_cols) + " tail columns");
    const Matrix m = MakeMatrix(s.d_out, s.nblocks, rng, 0, true);
    const double centroids[2] = {gauss(rng) * 20, -gauss(rng) * 20};
    std::vector<double> row_scales(s.d_out);
    for (double& r : row_scales) r = gauss(rng);
    std::vector<float> tail(s.d_out * s.tail_cols);
    for (float& t : tail) t = static_cast<float>(gauss(rng));
    const std::uint64_t d_in = 24 * s.nblocks + s.tail_cols;
    std::vector<float> want(s.d_out * d_in);
    for (std::uint64_t i = 0; i < s.d_out; ++i) {
      for (std::uint64_t j = 0; j < s.nblocks; ++j) {
        const std::uint64_t word = i * s.nblocks + j;
        const std::uint64_t gain = tetra::WordFromDisk(m.disk.data() + 6 * word) >> 47;
        tetra::ReconstructBlock(m.want.data() + 24 * word, centroids[gain], row_scales[i],
                                want.data() + i * d_in + 24 * j);
      }
      std::copy_n(tail.begin() + i * s.tail_cols, s.tail_cols, want.begin() + i * d_in + 24 * s.nblocks);
    }
    DeviceBuffer codes = UploadBytes(m.served, sv);
    DeviceBuffer d_centroids = UploadBytes(std::as_bytes(std::span(centroids)), sv);
    DeviceBuffer d_rows = UploadBytes(std::as_bytes(std::span(row_scales)), sv);
    DeviceBuffer d_tail = UploadBytes(std::as_bytes(std::span(tail)), sv);
    DeviceBuffer d_want = UploadBytes(std::as_bytes(std::span(want)), sv);
    const std::size_t out_bytes = want.size() * sizeof(float);
    auto out = DeviceBuffer::Allocate(out_bytes + kGuard);
    ASSERT_TRUE(out.ok());
    ASSERT_TRUE(out->MemsetAsync(kSentinel, sv).ok());
    const TetraScales scales{d_centroids.data_as<double>(), d_rows.data_as<double>(),
                             s.tail_cols > 0 ? d_tail.data_as<float>() : nullptr, s.tail_cols};
    const Status st = LaunchTetraReconstruct({codes.data_as<std::byte>(), m.d_out, m.nblocks, m.stride},
                                             scales, out->data_as<float>(), *tables, sv);
    ASSERT_TRUE(st.ok()) << st.ToString();
    auto res = DeviceBuffer::Allocate(sizeof(CompareResult));
    ASSERT_TRUE(res.ok());
    ASSERT_TRUE(LaunchCompareBytes(out->data_as<std::byte>(), d_want.data_as<std::byte>(), out_bytes,
                                   res->data_as<CompareResult>(), sv)
                    .ok());
    CompareResult r;
    ASSERT_TRUE(res->CopyToHostAsync(0, std::as_writable_bytes(std::span(&r, 1)), sv).ok());
    const std::vector<std::byte> got = Download(*out, out_bytes + kGuard, sv);
    if (r.mismatches != 0) {
      const std::uint64_t f = r.first / sizeof(float), row = f / d_in, col = f % d_in;
      float g;
      std::memcpy(&g, got.data() + 4 * f, 4);
      ADD_FAILURE() << r.mismatches << " bytes differ; first at row " << row << ", column " << col
                    << (col >= 24 * s.nblocks ? " (tail)" : " (block " + std::to_string(col / 24) + ")")
                    << ": GPU " << g << ", CPU " << want[f];
    }
    EXPECT_EQ(std::memcmp(got.data(), want.data(), out_bytes), 0);
    for (std::size_t i = out_bytes; i < out_bytes + kGuard; ++i)
      ASSERT_EQ(static_cast<std::uint8_t>(got[i]), kSentinel) << "wrote past the output at byte " << i;
  }
}

// The byte comparison alone: aligned (vector) and unaligned paths, counts
// and the first index, the tail past the last 16-byte chunk.
TEST(GpuTetraDecode, CompareBytesCountsAndFindsTheFirst) {
  SKIP_WITHOUT_GPU();
  auto stream = CudaStream::Create();
  ASSERT_TRUE(stream.ok());
  std::mt19937_64 rng(3);
  const std::size_t n = 1'000'003;
  std::vector<std::byte> a(n + 1);
  for (auto& x : a) x = static_cast<std::byte>(rng());
  std::vector<std::byte> b = a;
  const std::vector<std::size_t> diffs = {17, 18, 99'999, 500'000, n - 1};
  for (std::size_t i : diffs) b[i] ^= std::byte{0x40};
  DeviceBuffer da = UploadBytes(a, stream->view()), db = UploadBytes(b, stream->view());
  auto res = DeviceBuffer::Allocate(sizeof(CompareResult));
  ASSERT_TRUE(res.ok());
  auto run = [&](std::size_t offset, std::size_t len) {
    EXPECT_TRUE(LaunchCompareBytes(da.data_as<std::byte>() + offset, db.data_as<std::byte>() + offset, len,
                                   res->data_as<CompareResult>(), stream->view())
                    .ok());
    CompareResult r;
    EXPECT_TRUE(res->CopyToHostAsync(0, std::as_writable_bytes(std::span(&r, 1)), stream->view()).ok());
    EXPECT_TRUE(stream->Synchronize().ok());
    return r;
  };
  CompareResult r = run(0, n);  // aligned: vector path and a 3-byte tail
  EXPECT_EQ(r.mismatches, diffs.size());
  EXPECT_EQ(r.first, 17u);
  r = run(1, n - 1);  // unaligned: byte path; indices shift by one
  EXPECT_EQ(r.mismatches, diffs.size());
  EXPECT_EQ(r.first, 16u);
  r = run(19, 99'980);  // no difference in [19, 99'999)
  EXPECT_EQ(r.mismatches, 0u);
  EXPECT_EQ(r.first, ~0ull);
  r = run(0, 0);
  EXPECT_EQ(r.mismatches, 0u);
}

}  // namespace
}  // namespace exlr8
