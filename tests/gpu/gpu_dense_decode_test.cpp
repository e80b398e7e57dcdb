// GPU decoding of dense matrices (gpu/dense_decode.cuh) against the CPU
// decoder (format/dense.h DecodeDenseMatrix) on every matrix of the shared
// fixture's dense and vocabulary files, which hold every format: bit for
// bit, TRELLIS (decode, reconstruction, transpose) within spec 9.3 per
// 128 x 128 block. GPU tests skip without a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <vector>

#include "format/byte_source.h"
#include "format/dense.h"
#include "format/trellis.h"
#include "gpu/decode.cuh"
#include "gpu/dense_decode.cuh"
#include "gpu/device.h"
#include "gpu/device_buffer.h"
#include "gpu/reconstruct.cuh"
#include "gpu/stream.h"

namespace exlr8 {
namespace {

bool HaveGpu() {
  auto n = CudaDeviceCount();
  return n.ok() && *n > 0;
}

std::vector<std::byte> ReadFile(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<char> c((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> b(c.size());
  std::memcpy(b.data(), c.data(), c.size());
  return b;
}

DeviceBuffer Upload(std::span<const std::byte> host, CudaStreamView stream) {
  auto buf = DeviceBuffer::Allocate(std::max<std::size_t>(host.size(), 1));
  EXPECT_TRUE(buf.ok());
  EXPECT_TRUE(buf->CopyFromHostAsync(host, 0, stream).ok());
  return std::move(*buf);
}

TEST(GpuDenseDecode, RefusesWhatItCannotDecode) {
  const CudaStreamView s = CudaStreamView::LegacyDefault();
  DenseDecodeArgs a;
  a.format = DenseFormat::kTrellis;
  a.out = a.inp = 128;
  float* w = nullptr;
  EXPECT_EQ(LaunchDecodeDense(a, w, s).code(), StatusCode::kInvalidArgument);
  a.format = DenseFormat::kFp8Row;
  a.scale_dtype = DType::kU8;
  EXPECT_EQ(LaunchDecodeDense(a, w, s).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(LaunchTrellisEntriesToWeight(nullptr, DenseSide::kInput, 100, 128, w, s).code(),
            StatusCode::kInvalidArgument);
}

// The whole file goes to the device, so every tensor is read at its file
// offset, aligned or not (the non-trellis kernel reads bytes).
TEST(GpuDenseDecode, EveryFixtureMatrixMatchesTheCpuDecoder) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device: GPU tests run on the device machine";
  auto stream = CudaStream::Create();
  ASSERT_TRUE(stream.ok());
  auto codebook = DeviceCodebook::Upload(stream->view());
  ASSERT_TRUE(codebook.ok());
  std::set<DenseFormat> formats;
  const std::filesystem::path dir =
      std::filesystem::path(EXLR8_SHARED_DIR) / "fixtures" / "exlr8-tiny" / "dense";
  for (const char* name : {"exlr8-dense-000.safetensors", "exlr8-dense-003.safetensors",
                           "exlr8-dense-004.safetensors", "exlr8-vocab.safetensors"}) {
    const std::vector<std::byte> bytes = ReadFile(dir / name);
    ASSERT_FALSE(bytes.empty()) << name;
    const SpanByteSource src(bytes, name);
    auto file = DenseFile::Read(src);
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    DeviceBuffer d_file = Upload(bytes, stream->view());
    const auto* base = static_cast<const std::byte*>(d_file.data());
    for (const DenseMatrix& m : file->matrices()) {
      SCOPED_TRACE(std::string(name) + " " + m.name + " " + std::string(DenseFormatName(m.record.format)));
      formats.insert(m.record.format);
      auto want = DecodeDenseMatrix(*file, m, src);
      ASSERT_TRUE(want.ok()) << want.status().ToString();
      const std::uint64_t out = m.record.out, inp = m.record.inp, n = out * inp;
      auto d_w = DeviceBuffer::Allocate(n * 4);
      ASSERT_TRUE(d_w.ok());
      if (m.record.format == DenseFormat::kTrellis) {
        const DenseTensor& tr = m.data[0];
        const bool side2 = m.record.side == DenseSide::kInput;
        const std::uint64_t len = side2 ? out : inp, entries = tr.shape[0], entry = tr.SliceBytes();
        // Trellis runs need 4-byte alignment: the tensor in its own buffer.
        DeviceBuffer d_tr = Upload(std::span(bytes).subspan(tr.offset, tr.length), stream->view());
        std::vector<std::uint64_t> offsets(entries);
        for (std::uint64_t g = 0; g < entries; ++g) offsets[g] = g * entry;
        DeviceBuffer d_off = Upload(std::as_bytes(std::span(offsets)), stream->view());
        auto d_t = DeviceBuffer::Allocate(n * 4);
        auto d_u = DeviceBuffer::Allocate(inp * 4);
        auto d_v = DeviceBuffer::Allocate(out * 4);
        ASSERT_TRUE(d_t.ok() && d_u.ok() && d_v.ok());
        const HalfBatch batch{static_cast<const std::byte*>(d_tr.data()),
                              d_off.data_as<std::uint64_t>(),
                              0,
                              entries,
                              m.record.k,
                              side2 ? HalfLayout::kDown : HalfLayout::kGateUp,
                              len};
        ASSERT_TRUE(LaunchDecodeHalves(batch, {d_t->data_as<float>(), nullptr}, *codebook,
                                       DecodeTableMode::kSharedE4M3, stream->view())
                        .ok());
        ASSERT_TRUE(LaunchConvertToFloat(base + m.data[1].offset, m.data[1].dtype, inp, d_u->data_as<float>(),
                                         stream->view())
                        .ok());
        ASSERT_TRUE(LaunchConvertToFloat(base + m.data[2].offset, m.data[2].dtype, out, d_v->data_as<float>(),
                                         stream->view())
                        .ok());
        ReconstructBatch rb;
        rb.w = d_t->data_as<float>();
        rb.count = entries;
        rb.rows = side2 ? 128 : inp;
        rb.cols = side2 ? out : 128;
        rb.u = d_u->data_as<float>();
        rb.u_stride = side2 ? 128 : 0;
        rb.v = d_v->data_as<float>();
        rb.v_stride = side2 ? 0 : 128;
        ASSERT_TRUE(LaunchReconstructBlocks(rb, stream->view()).ok());
        ASSERT_TRUE(LaunchTrellisEntriesToWeight(d_t->data_as<float>(), m.record.side, out, inp,
                                                 d_w->data_as<float>(), stream->view())
                        .ok());
      } else {
        DenseDecodeArgs a;
        a.base = base;
        a.format = m.record.format;
        a.side = m.record.side;
        a.out = out;
        a.inp = inp;
        a.data[0] = m.data[0].offset;
        if (m.data.size() > 1) {
          a.data[1] = m.data[1].offset;
          a.scale_dtype = m.data[1].dtype;
        }
        ASSERT_TRUE(LaunchDecodeDense(a, d_w->data_as<float>(), stream->view()).ok());
      }
      std::vector<float> got(n);
      ASSERT_TRUE(d_w->CopyToHostAsync(0, std::as_writable_bytes(std::span(got)), stream->view()).ok());
      ASSERT_TRUE(stream->Synchronize().ok());
      if (m.record.format == DenseFormat::kTrellis) {
        double worst = 0;
        for (std::uint64_t rb = 0; rb < out; rb += 128)
          for (std::uint64_t cb = 0; cb < inp; cb += 128) {
            double md = 0, mr = 0;
            for (std::uint64_t r = rb; r < rb + 128; ++r)
              for (std::uint64_t c = cb; c < cb + 128; ++c) {
                md = std::max(md, std::fabs(static_cast<double>(got[r * inp + c]) - (*want)[r * inp + c]));
                mr = std::max(mr, std::fabs(static_cast<double>((*want)[r * inp + c])));
              }
            worst = std::max(worst, mr > 0 ? md / mr : md);
          }
        EXPECT_LE(worst, 1e-5);
      } else {
        std::size_t diff = 0;
        for (std::uint64_t i = 0; i < n; ++i)
          diff += std::bit_cast<std::uint32_t>(got[i]) != std::bit_cast<std::uint32_t>((*want)[i]);
        EXPECT_EQ(diff, 0u);
      }
    }
  }
  EXPECT_EQ(formats.size(), 7u) << "the fixture holds every dense format";
}

}  // namespace
}  // namespace exlr8
