// Compiled with -ffp-contract=off (format/CMakeLists.txt): the f32 group-
// affine dequantization must round after the multiply and after the add.
#include "format/lvq5/decode.h"

#include <algorithm>
#include <vector>

#include "format/dtype.h"

namespace exlr8::lvq5 {

namespace {

std::uint16_t LoadU16(const std::byte* p) {
  return static_cast<std::uint16_t>(static_cast<std::uint16_t>(p[0]) |
                                    (static_cast<std::uint16_t>(p[1]) << 8));
}

// Group-affine values (Int4G128 and raw quant tensors): `count` = rows *
// row_len values, packed `bits` wide in one low-first stream, group g of row
// r at index r * ceil(row_len / group) + col / group.
Status DecodeGroupAffine(const ByteSource& file, std::uint32_t bits, std::uint32_t group, std::uint64_t rows,
                         std::uint64_t row_len, std::uint64_t packed_offset, std::uint64_t scales_offset,
                         std::uint64_t biases_offset, const FloatSink& sink) {
  const std::uint64_t count = rows * row_len;
  const std::uint64_t per_row = (row_len + group - 1) / group;
  std::vector<std::byte> packed, scales, biases;
  std::vector<float> out;
  for (std::uint64_t e0 = 0; e0 < count; e0 += kDecodeChunkValues) {
    const std::uint64_t e1 = std::min(count, e0 + kDecodeChunkValues);
    const std::uint64_t b0 = e0 * bits / 8, b1 = (e1 * bits + 7) / 8;
    const std::uint64_t g0 = (e0 / row_len) * per_row + (e0 % row_len) / group;
    const std::uint64_t g1 = ((e1 - 1) / row_len) * per_row + ((e1 - 1) % row_len) / group + 1;
    packed.resize(b1 - b0);
    scales.resize(2 * (g1 - g0));
    biases.resize(2 * (g1 - g0));
    EXLR8_RETURN_IF_ERROR(file.ReadAt(packed_offset + b0, packed));
    EXLR8_RETURN_IF_ERROR(file.ReadAt(scales_offset + 2 * g0, scales));
    EXLR8_RETURN_IF_ERROR(file.ReadAt(biases_offset + 2 * g0, biases));
    out.resize(e1 - e0);
    std::uint64_t row = e0 / row_len, col = e0 % row_len;
    for (std::uint64_t e = e0; e < e1; ++e) {
      std::uint32_t q;
      if (bits == 4) {
        const auto byte = static_cast<std::uint32_t>(packed[e / 2 - b0]);
        q = (e & 1) ? byte >> 4 : byte & 0xF;
      } else {
        q = static_cast<std::uint32_t>(packed[e - b0]);
      }
      const std::uint64_t g = row * per_row + col / group - g0;
      const float scale = HalfToFloat(LoadU16(&scales[2 * g]));
      const float bias = HalfToFloat(LoadU16(&biases[2 * g]));
      const float prod = scale * static_cast<float>(q);
      out[e - e0] = prod + bias;
      if (++col == row_len) {
        col = 0;
        ++row;
      }
    }
    EXLR8_RETURN_IF_ERROR(sink(out));
  }
  return Status::Ok();
}

}  // namespace

Status DecodeTetraCoords(const ByteSource& file, const MatrixRecord& r, const Int8Sink& sink) {
  (void)file;
  (void)sink;
  return UnimplementedError(file.name() + ": record '" + r.name +
                            "': Tetra decoding is not yet built into this exlr8");
}

Status DecodeTetraWeights(const ByteSource& file, const MatrixRecord& r, const FloatSink& sink) {
  (void)sink;
  return UnimplementedError(file.name() + ": record '" + r.name +
                            "': Tetra decoding is not yet built into this exlr8");
}

Status DecodeInt4G128(const ByteSource& file, const MatrixRecord& r, const FloatSink& sink) {
  return DecodeGroupAffine(file, r.bits, r.group, r.d_out, r.d_in, r.packed_offset, r.scales_offset,
                           r.biases_offset, sink);
}

Status DecodeRaw(const ByteSource& file, const RawTensor& t, const FloatSink& sink) {
  if (t.tag == RawTag::kQuant)
    return DecodeGroupAffine(file, t.bits, t.group, t.rows, t.row_len, t.data_offset, t.scales_offset,
                             t.biases_offset, sink);
  std::vector<std::byte> in;
  std::vector<float> out;
  for (std::uint64_t e0 = 0; e0 < t.count; e0 += kDecodeChunkValues) {
    const std::uint64_t n = std::min(t.count - e0, kDecodeChunkValues);
    in.resize(2 * n);
    EXLR8_RETURN_IF_ERROR(file.ReadAt(t.data_offset + 2 * e0, in));
    out.resize(n);
    for (std::uint64_t i = 0; i < n; ++i) out[i] = HalfToFloat(LoadU16(&in[2 * i]));
    EXLR8_RETURN_IF_ERROR(sink(out));
  }
  return Status::Ok();
}

Status DecodeMatrix(const ByteSource& file, const MatrixRecord& r, const FloatSink& sink) {
  return r.kind == Kind::kTetra ? DecodeTetraWeights(file, r, sink) : DecodeInt4G128(file, r, sink);
}

Status ReadBlobBytes(const ByteSource& file, const Blob& b, const BytesSink& sink) {
  std::vector<std::byte> buf;
  for (std::uint64_t o = 0; o < b.length; o += kDecodeChunkValues) {
    buf.resize(std::min(b.length - o, kDecodeChunkValues));
    EXLR8_RETURN_IF_ERROR(file.ReadAt(b.data_offset + o, buf));
    EXLR8_RETURN_IF_ERROR(sink(buf));
  }
  return Status::Ok();
}

}  // namespace exlr8::lvq5
