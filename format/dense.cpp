// Dense and vocab files (spec section 10): the strict reader, the block
// checks and the decoders, over a ByteSource. About 520 lines: the reader's
// error context (MatrixErrors: file, matrix, field, byte offset) is shared
// by every decoder, so they stay beside it.
#include "format/dense.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <string>

#include "format/checksum.h"
#include "format/reconstruct.h"
#include "format/trellis.h"

namespace exlr8 {

namespace {

constexpr std::uint64_t kB = 128;

std::uint64_t CeilDiv(std::uint64_t a, std::uint64_t b) { return a / b + (a % b != 0); }


// "<file>: matrix 'm': <what> at byte <offset>: <message>".
class MatrixErrors {
 public:
  MatrixErrors(const std::string& file, const std::string& matrix) : file_(file), matrix_(matrix) {}
  Status At(std::string_view what, std::uint64_t offset, std::string_view message) const {
    return CorruptionError(file_ + ": matrix '" + matrix_ + "': " + std::string(what) + " at byte " +
                           std::to_string(offset) + ": " + std::string(message));
  }
  Status Tensor(const DenseTensor& t, std::string_view message) const {
    return At("tensor '" + t.name + "'", t.offset, message);
  }

 private:
  const std::string& file_;
  const std::string& matrix_;
};

DenseTensor MakeTensor(const SafetensorsHeader& header, const TensorInfo& info) {
  DenseTensor t;
  t.name = info.name;
  t.dtype = info.dtype;
  t.shape = info.shape;
  t.offset = header.AbsoluteOffset(info);
  t.length = info.byte_size();
  return t;
}

enum class Kind { kU8, kFloat, kBF16Only, kF32Only };

bool DTypeFits(Kind kind, DType d) {
  switch (kind) {
    case Kind::kU8: return d == DType::kU8 || d == DType::kI8;  // spec 3.2: bytes as 1-byte integers
    case Kind::kFloat: return IsFloatVectorDType(d);
    case Kind::kBF16Only: return d == DType::kBF16;
    case Kind::kF32Only: return d == DType::kF32;
  }
  return false;
}

std::string_view KindName(Kind kind) {
  switch (kind) {
    case Kind::kU8: return "U8 (or I8)";
    case Kind::kFloat: return "F16/BF16/F32";
    case Kind::kBF16Only: return "BF16";
    case Kind::kF32Only: return "F32";
  }
  return "?";
}

struct Want {
  const char* suffix;
  Kind kind;
  std::vector<std::uint64_t> shape;
};

// The data tensors a record requires, in table order (10.3).
Result<std::vector<Want>> RequiredTensors(const DenseRecord& r, const MatrixErrors& err, std::uint64_t rec_off) {
  const std::uint64_t out = r.out, inp = r.inp;
  const bool side2 = r.side == DenseSide::kInput;
  switch (r.format) {
    case DenseFormat::kTrellis: {
      if (out % kB != 0 || inp % kB != 0)
        return err.At("record", rec_off,
                      "TRELLIS needs out and inp multiples of 128, got " + std::to_string(out) + " x " +
                          std::to_string(inp));
      const std::uint64_t entry = 16 * static_cast<std::uint64_t>(r.k) * (side2 ? out : inp);
      return std::vector<Want>{{"trellis", Kind::kU8, {side2 ? inp / kB : out / kB, entry}},
                               {"suh", Kind::kFloat, {inp}},
                               {"svh", Kind::kFloat, {out}}};
    }
    case DenseFormat::kInt4:
      if (side2) {
        if (inp % kB != 0)
          return err.At("record", rec_off, "INT4 side 2 needs inp a multiple of 128, got " + std::to_string(inp));
        return std::vector<Want>{{"q4", Kind::kU8, {inp / kB, out, 64}}, {"s4", Kind::kFloat, {inp / kB, out, 4}}};
      }
      if (inp % 32 != 0)
        return err.At("record", rec_off, "INT4 needs inp a multiple of 32, got " + std::to_string(inp));
      return std::vector<Want>{{"q4", Kind::kU8, {out, inp / 2}}, {"s4", Kind::kFloat, {out, inp / 32}}};
    case DenseFormat::kMxfp8:
      if (inp % 32 != 0)
        return err.At("record", rec_off, "MXFP8 needs inp a multiple of 32, got " + std::to_string(inp));
      return std::vector<Want>{{"fp8", Kind::kU8, {out, inp}}, {"e8m0", Kind::kU8, {out, inp / 32}}};
    case DenseFormat::kFp8Block:
      return std::vector<Want>{{"fp8", Kind::kU8, {out, inp}},
                               {"scale", Kind::kFloat, {CeilDiv(out, kB), CeilDiv(inp, kB)}}};
    case DenseFormat::kFp8Row:
      return std::vector<Want>{{"fp8", Kind::kU8, {out, inp}}, {"scale", Kind::kFloat, {out}}};
    case DenseFormat::kBf16:
      return std::vector<Want>{{"bf16", Kind::kBF16Only, {out, inp}}};
    case DenseFormat::kFp32:
      return std::vector<Want>{{"fp32", Kind::kF32Only, {out, inp}}};
  }
  return err.At("record", rec_off, "unknown format");
}

Result<std::vector<std::byte>> ReadTensor(const DenseTensor& t, const ByteSource& source) {
  std::vector<std::byte> bytes(t.length);
  EXLR8_RETURN_IF_ERROR(source.ReadAt(t.offset, bytes));
  return bytes;
}

// A float tensor in fp32; Corruption naming the first non-finite element.
Result<std::vector<float>> ReadFiniteFloats(const DenseTensor& t, const ByteSource& source,
                                            const MatrixErrors& err) {
  EXLR8_ASSIGN_OR_RETURN(auto bytes, ReadTensor(t, source));
  const std::size_t es = DTypeSize(t.dtype);
  std::vector<float> out(bytes.size() / es);
  EXLR8_RETURN_IF_ERROR(ConvertToFloat(t.dtype, bytes, out));
  for (std::size_t i = 0; i < out.size(); ++i)
    if (!std::isfinite(out[i]))
      return err.At("tensor '" + t.name + "' element " + std::to_string(i), t.offset + i * es,
                    "non-finite scale value");
  return out;
}

Status BadE4M3(const MatrixErrors& err, const DenseTensor& t, std::size_t i) {
  return err.At("tensor '" + t.name + "' element " + std::to_string(i), t.offset + i,
                "E4M3 NaN byte (0x7F/0xFF)");
}

// A finite scale times a stored value that overflows fp32: no real weight
// is that large, so the file is refused rather than decoded to infinities.
Status ScaleOverflow(const MatrixErrors& err, const DenseTensor& scales, std::size_t i, std::size_t o,
                     std::size_t col) {
  return err.At("tensor '" + scales.name + "' element " + std::to_string(i), scales.offset + DTypeSize(scales.dtype) * i,
                "scale overflows fp32 at weight [" + std::to_string(o) + ", " + std::to_string(col) + "]");
}

// Entry g of a TRELLIS matrix reconstructed to `t` (`cols` wide): finite
// vectors whose products overflow fp32 are refused like scales that do.
Status CheckEntryFinite(const MatrixErrors& err, const DenseTensor& trellis, std::uint64_t g,
                        std::uint64_t entry_bytes, std::span<const float> t, std::uint64_t cols) {
  const auto bad = FirstNonFinite(t);
  if (!bad) return Status::Ok();
  return err.At("tensor '" + trellis.name + "' entry " + std::to_string(g), trellis.offset + g * entry_bytes,
                "reconstructed value [" + std::to_string(*bad / cols) + ", " + std::to_string(*bad % cols) +
                    "] overflows fp32: suh/svh hold absurd scales");
}

// TRELLIS (8.3, 9): entry by entry, decode the run, reconstruct it and write
// its transpose into the (out, inp) result.
Status DecodeTrellis(const DenseMatrix& m, const ByteSource& source, const MatrixErrors& err,
                     std::vector<float>& w) {
  const DenseRecord& r = m.record;
  const DenseTensor& trellis = m.data[0];
  EXLR8_ASSIGN_OR_RETURN(const auto suh, ReadFiniteFloats(m.data[1], source, err));
  EXLR8_ASSIGN_OR_RETURN(const auto svh, ReadFiniteFloats(m.data[2], source, err));
  const bool side2 = r.side == DenseSide::kInput;
  const std::uint64_t len = side2 ? r.out : r.inp;
  const std::uint64_t entry_bytes = trellis.SliceBytes();
  const std::uint64_t entries = trellis.shape[0];
  std::vector<std::byte> run(entry_bytes);
  std::vector<float> t(kB * len);
  const std::size_t inp = r.inp;
  for (std::uint64_t g = 0; g < entries; ++g) {
    EXLR8_RETURN_IF_ERROR(source.ReadAt(trellis.offset + g * entry_bytes, run));
    if (side2) {  // input rows 128g.., laid out like a down half: 128 x out
      EXLR8_RETURN_IF_ERROR(DecodeTrellisRun(run, r.k, HalfLayout::kDown, len, t));
      EXLR8_RETURN_IF_ERROR(ReconstructHalf(HalfLayout::kDown, len, t,
                                            std::span(suh).subspan(g * kB, kB), svh));
      EXLR8_RETURN_IF_ERROR(CheckEntryFinite(err, trellis, g, entry_bytes, t, len));
      for (std::size_t j = 0; j < kB; ++j)
        for (std::size_t o = 0; o < len; ++o) w[o * inp + g * kB + j] = t[j * len + o];
    } else {  // output columns 128g.., laid out like a gate/up half: inp x 128
      EXLR8_RETURN_IF_ERROR(DecodeTrellisRun(run, r.k, HalfLayout::kGateUp, len, t));
      EXLR8_RETURN_IF_ERROR(ReconstructHalf(HalfLayout::kGateUp, len, t, suh,
                                            std::span(svh).subspan(g * kB, kB)));
      EXLR8_RETURN_IF_ERROR(CheckEntryFinite(err, trellis, g, entry_bytes, t, kB));
      for (std::size_t i = 0; i < len; ++i)
        for (std::size_t j = 0; j < kB; ++j) w[(g * kB + j) * inp + i] = t[i * kB + j];
    }
  }
  return Status::Ok();
}

Status DecodeInt4(const DenseMatrix& m, const ByteSource& source, const MatrixErrors& err, std::vector<float>& w) {
  const DenseRecord& r = m.record;
  EXLR8_ASSIGN_OR_RETURN(const auto q4, ReadTensor(m.data[0], source));
  EXLR8_ASSIGN_OR_RETURN(const auto s4, ReadFiniteFloats(m.data[1], source, err));
  const std::size_t out = r.out, inp = r.inp;
  for (std::size_t o = 0; o < out; ++o) {
    for (std::size_t i = 0; i < inp; ++i) {
      std::size_t byte, scale;
      if (r.side == DenseSide::kInput) {
        const std::size_t blk = i / kB, in_blk = i % kB;
        byte = (blk * out + o) * 64 + in_blk / 2;
        scale = (blk * out + o) * 4 + in_blk / 32;
      } else {
        byte = o * (inp / 2) + i / 2;
        scale = o * (inp / 32) + i / 32;
      }
      const unsigned b = std::to_integer<unsigned>(q4[byte]);
      const int nib = static_cast<int>((i & 1) ? (b >> 4) : (b & 0xF));
      const float x = static_cast<float>(nib - 8) * s4[scale];
      if (!std::isfinite(x)) return ScaleOverflow(err, m.data[1], scale, o, i);
      w[o * inp + i] = x;
    }
  }
  return Status::Ok();
}

Status DecodeFp8(const DenseMatrix& m, const ByteSource& source, const MatrixErrors& err, std::vector<float>& w) {
  const DenseRecord& r = m.record;
  const std::size_t out = r.out, inp = r.inp;
  EXLR8_ASSIGN_OR_RETURN(const auto fp8, ReadTensor(m.data[0], source));
  std::vector<float> scale;  // per format: e8m0 powers, block grid or per-row
  if (r.format == DenseFormat::kMxfp8) {
    EXLR8_ASSIGN_OR_RETURN(const auto e8, ReadTensor(m.data[1], source));
    scale.resize(e8.size());
    for (std::size_t i = 0; i < e8.size(); ++i) {
      const int e = std::to_integer<int>(e8[i]);
      if (e == 255)
        return err.At("tensor '" + m.data[1].name + "' element " + std::to_string(i), m.data[1].offset + i,
                      "E8M0 value 255 (would be 2^128)");
      scale[i] = std::ldexp(1.0f, e - 127);  // exact, 2^-127 is an fp32 subnormal
    }
  } else {
    EXLR8_ASSIGN_OR_RETURN(scale, ReadFiniteFloats(m.data[1], source, err));
  }
  const std::size_t grid_cols = CeilDiv(inp, kB);
  for (std::size_t o = 0; o < out; ++o) {
    for (std::size_t i = 0; i < inp; ++i) {
      const std::uint8_t b = std::to_integer<std::uint8_t>(fp8[o * inp + i]);
      if (IsE4M3NaN(b)) return BadE4M3(err, m.data[0], o * inp + i);
      std::size_t si;
      switch (r.format) {
        case DenseFormat::kMxfp8: si = o * (inp / 32) + i / 32; break;
        case DenseFormat::kFp8Block: si = (o / kB) * grid_cols + i / kB; break;
        default: si = o; break;  // FP8_ROW
      }
      const float x = E4M3ToFloat(b) * scale[si];
      if (!std::isfinite(x)) return ScaleOverflow(err, m.data[1], si, o, i);
      w[o * inp + i] = x;
    }
  }
  return Status::Ok();
}

}  // namespace

std::string_view DenseFormatName(DenseFormat f) {
  static constexpr std::string_view kNames[kDenseFormatCount] = {"TRELLIS", "INT4", "MXFP8", "FP8_BLOCK",
                                                                 "FP8_ROW", "BF16", "FP32"};
  const int i = static_cast<int>(f) - 1;
  return (i >= 0 && i < kDenseFormatCount) ? kNames[i] : "UNKNOWN";
}

std::uint64_t DenseTensor::SliceBytes() const {
  if (shape.empty() || shape[0] == 0) return length;
  return length / shape[0];
}

const DenseTensor* DenseMatrix::Data(std::string_view suffix) const {
  for (const DenseTensor& t : data)
    if (t.name.size() == name.size() + 1 + suffix.size() && t.name.ends_with(suffix) &&
        t.name[name.size()] == '.' && t.name.starts_with(name))
      return &t;
  return nullptr;
}

const DenseMatrix* DenseFile::FindMatrix(std::string_view name) const {
  for (const DenseMatrix& m : matrices_)
    if (m.name == name) return &m;
  return nullptr;
}

const DenseTensor* DenseFile::FindPlain(std::string_view name) const {
  for (const DenseTensor& t : plain_)
    if (t.name == name) return &t;
  return nullptr;
}

Result<DenseFile> DenseFile::Read(const ByteSource& source) {
  std::array<std::byte, 8> first{};
  if (source.size() < 8)
    return CorruptionError(source.name() + ": " + std::to_string(source.size()) + " bytes, too short");
  EXLR8_RETURN_IF_ERROR(source.ReadAt(0, first));
  EXLR8_ASSIGN_OR_RETURN(std::uint64_t n, SafetensorsHeaderSize(first, source.size(), source.name()));
  std::vector<std::byte> bytes(n);
  EXLR8_RETURN_IF_ERROR(source.ReadAt(0, bytes));
  EXLR8_ASSIGN_OR_RETURN(SafetensorsHeader header,
                         ParseSafetensorsHeader(bytes, source.size(), source.name()));
  return Parse(header, source);
}

Result<DenseFile> DenseFile::Parse(const SafetensorsHeader& header, const ByteSource& source) {
  DenseFile file;
  file.file_name_ = source.name();
  std::set<std::string, std::less<>> claimed;
  for (const TensorInfo& info : header.tensors()) {
    if (!info.name.ends_with(".record")) continue;
    DenseMatrix m;
    m.name = info.name.substr(0, info.name.size() - 7);
    const MatrixErrors err(file.file_name_, m.name);
    m.record_tensor = MakeTensor(header, info);
    const DenseTensor& rt = m.record_tensor;
    if (m.name.empty()) return err.Tensor(rt, "record of a matrix with an empty name");

    // record (10.2)
    if (!IsIntegerDType(rt.dtype) || rt.shape != std::vector<std::uint64_t>{8})
      return err.Tensor(rt, "record must be an integer vector of 8, got " + std::string(DTypeName(rt.dtype)) + " " +
                                ShapeToString(rt.shape));
    EXLR8_ASSIGN_OR_RETURN(const auto rec_bytes, ReadTensor(rt, source));
    std::int64_t f[8];
    for (int i = 0; i < 8; ++i) f[i] = ReadIntAsI64(rt.dtype, rec_bytes, i);
    const std::uint64_t es = DTypeSize(rt.dtype);
    auto field_at = [&](int i) { return rt.offset + i * es; };
    if (f[0] < 1 || f[0] > kDenseFormatCount)
      return err.At("record field 0 (format)", field_at(0), "unknown format code " + std::to_string(f[0]));
    m.record.format = static_cast<DenseFormat>(f[0]);
    for (int i : {1, 2})
      if (f[i] < 1 || static_cast<std::uint64_t>(f[i]) > kMaxDenseDim)
        return err.At(std::string("record field ") + std::to_string(i) + (i == 1 ? " (out)" : " (inp)"), field_at(i),
                      "dimension " + std::to_string(f[i]) + " outside 1.." + std::to_string(kMaxDenseDim));
    m.record.out = static_cast<std::uint64_t>(f[1]);
    m.record.inp = static_cast<std::uint64_t>(f[2]);
    if (m.record.out * m.record.inp > kMaxDenseElements)
      return err.At("record", rt.offset,
                    "matrix " + std::to_string(m.record.out) + " x " + std::to_string(m.record.inp) +
                        " exceeds the cap of " + std::to_string(kMaxDenseElements) + " elements");
    if (m.record.format == DenseFormat::kTrellis && (f[3] < kMinTrellisK || f[3] > kMaxTrellisK))
      return err.At("record field 3 (K)", field_at(3), "trellis width " + std::to_string(f[3]) + " outside 1..8");
    m.record.k = static_cast<int>(std::clamp<std::int64_t>(f[3], -1, 255));
    if (f[4] < 0 || f[4] > 2)
      return err.At("record field 4 (side)", field_at(4), "side " + std::to_string(f[4]) + " outside 0..2");
    m.record.side = static_cast<DenseSide>(f[4]);
    for (int i = 0; i < 3; ++i) m.record.reserved[i] = f[5 + i];
    if (m.record.side == DenseSide::kInput && m.record.format != DenseFormat::kTrellis &&
        m.record.format != DenseFormat::kInt4)
      return err.At("record field 4 (side)", field_at(4),
                    "side 2 with format " + std::string(DenseFormatName(m.record.format)) +
                        " is not supported (spec U-9: its blocks would not be contiguous)");

    // checksum (5.4)
    const std::string ck_name = m.name + ".checksum";
    const TensorInfo* ck = header.Find(ck_name);
    if (ck == nullptr) return err.At("tensor '" + ck_name + "'", rt.offset, "missing (record present)");
    m.checksum_tensor = MakeTensor(header, *ck);
    const std::uint64_t dim = m.record.side == DenseSide::kInput ? m.record.inp : m.record.out;
    const std::uint64_t blocks = CeilDiv(dim, kB);
    if ((ck->dtype != DType::kI64 && ck->dtype != DType::kU64) || ck->shape != std::vector<std::uint64_t>{blocks})
      return err.Tensor(m.checksum_tensor, "checksum must be I64/U64 [" + std::to_string(blocks) + "], got " +
                                               std::string(DTypeName(ck->dtype)) + " " + ShapeToString(ck->shape));
    EXLR8_ASSIGN_OR_RETURN(const auto ck_bytes, ReadTensor(m.checksum_tensor, source));
    m.checksums.resize(blocks);
    for (std::uint64_t b = 0; b < blocks; ++b) m.checksums[b] = ReadIntAsU64(ck->dtype, ck_bytes, b);

    // data tensors (10.3)
    EXLR8_ASSIGN_OR_RETURN(const auto wants, RequiredTensors(m.record, err, rt.offset));
    for (const Want& want : wants) {
      const std::string tname = m.name + "." + want.suffix;
      const TensorInfo* ti = header.Find(tname);
      if (ti == nullptr)
        return err.At("tensor '" + tname + "'", rt.offset,
                      "missing; format " + std::string(DenseFormatName(m.record.format)) + " needs it");
      DenseTensor t = MakeTensor(header, *ti);
      if (!DTypeFits(want.kind, t.dtype) || t.shape != want.shape)
        return err.Tensor(t, std::string(DTypeName(t.dtype)) + " " + ShapeToString(t.shape) + ", expected " +
                                 std::string(KindName(want.kind)) + " " + ShapeToString(want.shape) + " for " +
                                 std::string(DenseFormatName(m.record.format)) + " out=" +
                                 std::to_string(m.record.out) + " inp=" + std::to_string(m.record.inp) +
                                 " K=" + std::to_string(m.record.k) +
                                 " side=" + std::to_string(static_cast<int>(m.record.side)));
      claimed.insert(tname);
      m.data.push_back(std::move(t));
    }
    claimed.insert(info.name);
    claimed.insert(ck_name);
    file.matrices_.push_back(std::move(m));
  }
  for (const TensorInfo& info : header.tensors())
    if (!claimed.contains(info.name)) file.plain_.push_back(MakeTensor(header, info));
  return file;
}

Result<std::vector<ByteRun>> DenseBlockRuns(const DenseMatrix& m, std::uint64_t block) {
  if (block >= m.num_blocks())
    return InvalidArgumentError("matrix '" + m.name + "': block " + std::to_string(block) + " of " +
                                std::to_string(m.num_blocks()));
  const DenseRecord& r = m.record;
  // First-dimension rows 128b .. min(128b + 128, dim) - 1 of a tensor (for
  // a vector: those elements).
  auto rows = [&](const DenseTensor& t) {
    const std::uint64_t first = block * kB;
    const std::uint64_t n = std::min<std::uint64_t>(kB, t.shape[0] - first);
    return ByteRun{t.offset + first * t.SliceBytes(), n * t.SliceBytes()};
  };
  auto whole = [](const DenseTensor& t) { return ByteRun{t.offset, t.length}; };
  auto entry = [&](const DenseTensor& t) { return ByteRun{t.offset + block * t.SliceBytes(), t.SliceBytes()}; };
  const auto& d = m.data;
  switch (r.format) {
    case DenseFormat::kTrellis:
      if (r.side == DenseSide::kInput) return std::vector<ByteRun>{entry(d[0]), rows(d[1]), whole(d[2])};
      return std::vector<ByteRun>{entry(d[0]), rows(d[2]), whole(d[1])};
    case DenseFormat::kInt4:
      if (r.side == DenseSide::kInput) return std::vector<ByteRun>{entry(d[0]), entry(d[1])};
      return std::vector<ByteRun>{rows(d[0]), rows(d[1])};
    case DenseFormat::kFp8Block:
      return std::vector<ByteRun>{rows(d[0]), entry(d[1])};
    case DenseFormat::kMxfp8:
    case DenseFormat::kFp8Row:
      return std::vector<ByteRun>{rows(d[0]), rows(d[1])};
    case DenseFormat::kBf16:
    case DenseFormat::kFp32:
      return std::vector<ByteRun>{rows(d[0])};
  }
  return InternalError("matrix '" + m.name + "': unknown format");
}

Status VerifyDenseBlock(const DenseFile& file, const DenseMatrix& m, std::uint64_t block, const ByteSource& source) {
  EXLR8_ASSIGN_OR_RETURN(const auto runs, DenseBlockRuns(m, block));
  Xxh64 hasher;
  std::vector<std::byte> buf;
  constexpr std::uint64_t kChunk = 1 << 20;
  for (const ByteRun& run : runs) {
    for (std::uint64_t done = 0; done < run.length;) {
      const std::uint64_t n = std::min(kChunk, run.length - done);
      buf.resize(n);
      EXLR8_RETURN_IF_ERROR(source.ReadAt(run.offset + done, buf));
      hasher.Update(buf);
      done += n;
    }
  }
  const std::uint64_t actual = hasher.Digest();
  if (actual != m.checksums[block])
    return CorruptionError(file.file_name() + ": matrix '" + m.name + "' block " + std::to_string(block) +
                           " (data from byte " + std::to_string(runs.front().offset) +
                           "): checksum mismatch, expected " + Hex64(m.checksums[block]) + ", actual " +
                           Hex64(actual));
  return Status::Ok();
}

Status VerifyDenseMatrix(const DenseFile& file, const DenseMatrix& m, const ByteSource& source) {
  for (std::uint64_t b = 0; b < m.num_blocks(); ++b) EXLR8_RETURN_IF_ERROR(VerifyDenseBlock(file, m, b, source));
  return Status::Ok();
}

Result<DenseVerifyReport> VerifyDenseFile(const ByteSource& file) {
  EXLR8_ASSIGN_OR_RETURN(DenseFile dense, DenseFile::Read(file));
  DenseVerifyReport report;
  for (const DenseMatrix& m : dense.matrices()) {
    ++report.matrices;
    for (std::uint64_t b = 0; b < m.num_blocks(); ++b) {
      Status s = VerifyDenseBlock(dense, m, b, file);
      if (s.ok())
        ++report.blocks_ok;
      else if (s.code() == StatusCode::kCorruption)
        report.mismatches.push_back(s.message());
      else
        return s;
    }
  }
  return report;
}

Status CheckDenseFile(const ByteSource& file) {
  EXLR8_ASSIGN_OR_RETURN(DenseVerifyReport report, VerifyDenseFile(file));
  if (report.mismatches.empty()) return Status::Ok();
  std::string more;
  if (report.mismatches.size() > 1)
    more = " (and " + std::to_string(report.mismatches.size() - 1) + " more blocks of " + file.name() + ")";
  return CorruptionError(report.mismatches.front() + more);
}

Result<std::vector<float>> DecodeDenseMatrix(const DenseFile& file, const DenseMatrix& m, const ByteSource& source) {
  const MatrixErrors err(file.file_name(), m.name);
  std::vector<float> w(m.record.out * m.record.inp);
  switch (m.record.format) {
    case DenseFormat::kTrellis:
      EXLR8_RETURN_IF_ERROR(DecodeTrellis(m, source, err, w));
      break;
    case DenseFormat::kInt4:
      EXLR8_RETURN_IF_ERROR(DecodeInt4(m, source, err, w));
      break;
    case DenseFormat::kMxfp8:
    case DenseFormat::kFp8Block:
    case DenseFormat::kFp8Row:
      EXLR8_RETURN_IF_ERROR(DecodeFp8(m, source, err, w));
      break;
    case DenseFormat::kBf16:
    case DenseFormat::kFp32: {
      EXLR8_ASSIGN_OR_RETURN(const auto bytes, ReadTensor(m.data[0], source));
      EXLR8_RETURN_IF_ERROR(ConvertToFloat(m.data[0].dtype, bytes, w));
      break;
    }
  }
  return w;
}

Result<std::vector<float>> ReadPlainTensorAsFloat(const DenseTensor& t, const ByteSource& source) {
  if (!IsFloatVectorDType(t.dtype))
    return InvalidArgumentError(source.name() + ": tensor '" + t.name + "' has dtype " +
                                std::string(DTypeName(t.dtype)) + ", not F16/BF16/F32");
  const std::uint64_t n = t.length / DTypeSize(t.dtype);
  if (n > kMaxDenseElements)
    return CorruptionError(source.name() + ": tensor '" + t.name + "' at byte " + std::to_string(t.offset) +
                           ": " + std::to_string(n) + " elements exceed the cap");
  EXLR8_ASSIGN_OR_RETURN(const auto bytes, ReadTensor(t, source));
  std::vector<float> out(n);
  EXLR8_RETURN_IF_ERROR(ConvertToFloat(t.dtype, bytes, out));
  return out;
}

}  // namespace exlr8
