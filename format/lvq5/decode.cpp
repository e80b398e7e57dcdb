// Compiled with -ffp-contract=off (format/CMakeLists.txt): the f32 group-
// affine dequantization must round after the multiply and after the add.
#include "format/lvq5/decode.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "format/dtype.h"
#include "format/tetra/tables.h"
#include "format/tetra/word.h"

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

namespace {

// Rows of a Tetra record per chunk: about kDecodeChunkValues values, at
// least one row.
std::uint64_t TetraRowsPerChunk(const MatrixRecord& r) {
  return std::max<std::uint64_t>(1, kDecodeChunkValues / std::max<std::uint64_t>(1, r.d_in));
}

}  // namespace

Status DecodeTetraCoords(const ByteSource& file, const MatrixRecord& r, const Int8Sink& sink) {
  EXLR8_RETURN_IF_ERROR(tetra::TablesStatus());
  const tetra::Tables& tables = tetra::BuiltTables();
  const std::uint64_t row_bytes = std::uint64_t{kTetraWordBytes} * r.nblocks;
  if (row_bytes == 0) return Status::Ok();
  const std::uint64_t step = TetraRowsPerChunk(r);
  std::vector<std::byte> disk;
  std::vector<std::int8_t> out;
  for (std::uint64_t i0 = 0; i0 < r.d_out; i0 += step) {
    const std::uint64_t rows = std::min<std::uint64_t>(step, r.d_out - i0);
    disk.resize(rows * row_bytes);
    EXLR8_RETURN_IF_ERROR(file.ReadAt(r.codes_offset + i0 * row_bytes, disk));
    out.resize(4 * disk.size());
    tetra::DecodeDiskWords(tables, disk, out);
    EXLR8_RETURN_IF_ERROR(sink(out));
  }
  return Status::Ok();
}

Status DecodeTetraWeights(const ByteSource& file, const MatrixRecord& r, const FloatSink& sink) {
  EXLR8_RETURN_IF_ERROR(tetra::TablesStatus());
  const tetra::Tables& tables = tetra::BuiltTables();
  std::array<std::byte, 16> cbytes;
  EXLR8_RETURN_IF_ERROR(file.ReadAt(r.centroids_offset, cbytes));
  double centroids[2];
  std::memcpy(centroids, cbytes.data(), sizeof centroids);  // little-endian host (format/ assumes it)
  const std::uint64_t row_bytes = std::uint64_t{kTetraWordBytes} * r.nblocks;
  const std::uint64_t step = TetraRowsPerChunk(r);
  std::vector<std::byte> disk, scales_bytes, tail_bytes;
  std::vector<std::int8_t> coords;
  std::vector<float> out;
  for (std::uint64_t i0 = 0; i0 < r.d_out; i0 += step) {
    const std::uint64_t rows = std::min<std::uint64_t>(step, r.d_out - i0);
    disk.resize(rows * row_bytes);
    scales_bytes.resize(rows * 8);
    tail_bytes.resize(rows * 4 * r.tail_cols);
    EXLR8_RETURN_IF_ERROR(file.ReadAt(r.codes_offset + i0 * row_bytes, disk));
    EXLR8_RETURN_IF_ERROR(file.ReadAt(r.row_scales_offset + i0 * 8, scales_bytes));
    EXLR8_RETURN_IF_ERROR(file.ReadAt(r.tail_offset + i0 * 4 * r.tail_cols, tail_bytes));
    coords.resize(4 * disk.size());
    tetra::DecodeDiskWords(tables, disk, coords);
    out.resize(rows * r.d_in);
    for (std::uint64_t i = 0; i < rows; ++i) {
      double row_scale;
      std::memcpy(&row_scale, &scales_bytes[8 * i], 8);
      float* row_out = &out[i * r.d_in];
      for (std::uint64_t j = 0; j < r.nblocks; ++j) {
        const std::uint64_t block = i * r.nblocks + j;
        const std::uint64_t w = tetra::WordFromDisk(&disk[kTetraWordBytes * block]);
        tetra::ReconstructBlock(&coords[kTetraBlock * block], centroids[(w & tetra::kGainBit) ? 1 : 0],
                                row_scale, row_out + kTetraBlock * j);
      }
      if (r.tail_cols)
        std::memcpy(row_out + kTetraBlock * r.nblocks, &tail_bytes[i * 4 * r.tail_cols], 4 * r.tail_cols);
    }
    EXLR8_RETURN_IF_ERROR(sink(out));
  }
  return Status::Ok();
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
