// Dense/vocab file parsing, checksums and decode on hand-built files: one
// valid file per format with hand-computed values, and a catalogue of broken
// records and tensors, each of which must be rejected with a named error.
#include "format/dense.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <regex>
#include <string>
#include <vector>

#include "format/checksum.h"
#include "format/dtype.h"
#include "format/safetensors.h"
#include "format/trellis.h"
#include "tests/format/dense_damage.h"
#include "tests/format/test_util.h"

namespace exlr8 {
namespace {

struct Tensor {
  std::string name;
  std::string dtype;
  std::vector<std::uint64_t> shape;
  std::vector<std::byte> data;
};

std::vector<std::byte> I64s(const std::vector<std::int64_t>& v) {
  std::vector<std::byte> b(8 * v.size());
  for (std::size_t i = 0; i < v.size(); ++i) StoreLE64(b.data() + 8 * i, static_cast<std::uint64_t>(v[i]));
  return b;
}
std::vector<std::byte> F16s(const std::vector<float>& v) {
  std::vector<std::byte> b(2 * v.size());
  for (std::size_t i = 0; i < v.size(); ++i) StoreLE16(b.data() + 2 * i, FloatToHalf(v[i]));
  return b;
}
std::vector<std::byte> F32s(const std::vector<float>& v) {
  std::vector<std::byte> b(4 * v.size());
  for (std::size_t i = 0; i < v.size(); ++i) StoreLE32(b.data() + 4 * i, std::bit_cast<std::uint32_t>(v[i]));
  return b;
}
std::vector<std::byte> Bytes(std::size_t n, std::uint8_t fill) { return std::vector<std::byte>(n, std::byte{fill}); }

// A safetensors file of the tensors in order, with the data section packed.
std::vector<std::byte> BuildFile(const std::vector<Tensor>& tensors) {
  std::string json = "{";
  std::uint64_t at = 0;
  for (const Tensor& t : tensors) {
    if (json.size() > 1) json += ",";
    json += "\"" + t.name + "\":{\"dtype\":\"" + t.dtype + "\",\"shape\":[";
    for (std::size_t i = 0; i < t.shape.size(); ++i) json += (i ? "," : "") + std::to_string(t.shape[i]);
    json += "],\"data_offsets\":[" + std::to_string(at) + "," + std::to_string(at + t.data.size()) + "]}";
    at += t.data.size();
  }
  json += "}";
  while (json.size() % 8) json += ' ';
  std::vector<std::byte> out(8);
  StoreLE64(out.data(), json.size());
  for (char c : json) out.push_back(static_cast<std::byte>(c));
  for (const Tensor& t : tensors) out.insert(out.end(), t.data.begin(), t.data.end());
  return out;
}

// A parsed hand-built file that keeps its bytes alive.
struct Built {
  std::vector<std::byte> bytes;
  std::unique_ptr<SpanByteSource> src;
  Result<SafetensorsHeader> header = InternalError("unset");
  Result<DenseFile> dense = InternalError("unset");
};

std::unique_ptr<Built> Parse(const std::vector<Tensor>& tensors) {
  auto b = std::make_unique<Built>();
  b->bytes = BuildFile(tensors);
  b->src = std::make_unique<SpanByteSource>(b->bytes, "dense/test.safetensors");
  b->header = ParseSafetensorsHeader(b->bytes, b->bytes.size(), "dense/test.safetensors");
  if (b->header.ok()) b->dense = DenseFile::Parse(*b->header, *b->src);
  return b;
}

std::vector<std::int64_t> Record(int format, std::int64_t out, std::int64_t inp, std::int64_t k, std::int64_t side) {
  return {format, out, inp, k, side, 0, 0, 0};
}

// checksum digests filled in by the caller-provided function of the tensors
Tensor Checksums(const std::string& m, const std::vector<std::uint64_t>& digests) {
  std::vector<std::byte> b(8 * digests.size());
  for (std::size_t i = 0; i < digests.size(); ++i) StoreLE64(b.data() + 8 * i, digests[i]);
  return {m + ".checksum", "U64", {digests.size()}, b};
}

std::uint64_t Hash(const std::vector<std::vector<std::byte>>& parts) {
  Xxh64 h;
  for (const auto& p : parts) h.Update(p);
  return h.Digest();
}

std::vector<std::byte> Slice(const std::vector<std::byte>& v, std::size_t from, std::size_t n) {
  return std::vector<std::byte>(v.begin() + from, v.begin() + from + n);
}

// ---- valid files, hand-computed values ----

TEST(DenseDecode, Int4BothLayoutsAgreeWithHandValues) {
  // out = 2, inp = 128. nib(o, i) = (o + i) % 16, scale per 32-group = group + 1 + o.
  const std::size_t out = 2, inp = 128;
  auto nib = [](std::size_t o, std::size_t i) { return static_cast<unsigned>((o + i) % 16); };
  std::vector<std::byte> q_rows(out * inp / 2), q_blk(out * 64);
  std::vector<float> s_rows(out * inp / 32), s_blk(out * 4);
  for (std::size_t o = 0; o < out; ++o)
    for (std::size_t c = 0; c < inp / 2; ++c) {
      const auto b = static_cast<std::byte>(nib(o, 2 * c) | (nib(o, 2 * c + 1) << 4));
      q_rows[o * inp / 2 + c] = b;
      q_blk[o * 64 + c] = b;  // one 128-input block
    }
  for (std::size_t o = 0; o < out; ++o)
    for (std::size_t g = 0; g < 4; ++g) s_rows[o * 4 + g] = s_blk[o * 4 + g] = static_cast<float>(g + 1 + o);
  for (int side : {1, 2}) {
    SCOPED_TRACE("side " + std::to_string(side));
    const bool s2 = side == 2;
    const Tensor q{"m.q4", "U8", s2 ? std::vector<std::uint64_t>{1, out, 64} : std::vector<std::uint64_t>{out, inp / 2},
                   s2 ? q_blk : q_rows};
    const Tensor s{"m.s4", "F16", s2 ? std::vector<std::uint64_t>{1, out, 4} : std::vector<std::uint64_t>{out, 4},
                   F16s(s2 ? s_blk : s_rows)};
    // side 2: one block = q4[0] || s4[0]; side 1: one block of 2 rows.
    const auto built = Parse({{"m.record", "I64", {8}, I64s(Record(2, out, inp, 0, side))},
                              Checksums("m", {Hash({q.data, s.data})}), q, s});
    ASSERT_TRUE(built->dense.ok()) << built->dense.status().ToString();
    const DenseMatrix* m = built->dense->FindMatrix("m");
    ASSERT_NE(m, nullptr);
    EXPECT_TRUE(VerifyDenseMatrix(*built->dense, *m, *built->src).ok());
    auto w = DecodeDenseMatrix(*built->dense, *m, *built->src);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    for (std::size_t o = 0; o < out; ++o)
      for (std::size_t i = 0; i < inp; ++i)
        ASSERT_EQ((*w)[o * inp + i], (static_cast<float>(nib(o, i)) - 8) * static_cast<float>(i / 32 + 1 + o))
            << o << "," << i;
  }
}

TEST(DenseDecode, Fp8FormatsAndChecksumRowSlices) {
  // out = 130 (two blocks, the second partial), inp = 32.
  const std::size_t out = 130, inp = 32;
  std::vector<std::byte> fp8(out * inp);
  for (std::size_t i = 0; i < fp8.size(); ++i) fp8[i] = static_cast<std::byte>(i % 0x7E);  // no NaN bytes
  auto e4 = [&](std::size_t o, std::size_t i) { return E4M3ToFloat(std::to_integer<std::uint8_t>(fp8[o * inp + i])); };

  // FP8_ROW: scale[o] = o + 0.5 (F32). Block 1 = fp8 rows 128..129 || scale[128..129].
  std::vector<float> row_scale(out);
  for (std::size_t o = 0; o < out; ++o) row_scale[o] = static_cast<float>(o) + 0.5f;
  const auto rs = F32s(row_scale);
  {
    const auto built = Parse({{"r.record", "I32", {8}, [] {
                                 std::vector<std::byte> b(32);
                                 const std::int32_t v[8] = {5, 130, 32, 0, 1, 0, 0, 0};
                                 for (int i = 0; i < 8; ++i) StoreLE32(b.data() + 4 * i, static_cast<std::uint32_t>(v[i]));
                                 return b;
                               }()},
                              Checksums("r", {Hash({Slice(fp8, 0, 128 * inp), Slice(rs, 0, 128 * 4)}),
                                              Hash({Slice(fp8, 128 * inp, 2 * inp), Slice(rs, 128 * 4, 2 * 4)})}),
                              {"r.fp8", "U8", {out, inp}, fp8},
                              {"r.scale", "F32", {out}, rs}});
    ASSERT_TRUE(built->dense.ok()) << built->dense.status().ToString();
    const DenseMatrix& m = built->dense->matrices().at(0);
    EXPECT_EQ(m.num_blocks(), 2u);
    EXPECT_TRUE(VerifyDenseMatrix(*built->dense, m, *built->src).ok());
    auto w = DecodeDenseMatrix(*built->dense, m, *built->src);
    ASSERT_TRUE(w.ok());
    EXPECT_EQ((*w)[129 * inp + 5], e4(129, 5) * 129.5f);
    EXPECT_EQ((*w)[3 * inp + 31], e4(3, 31) * 3.5f);
  }
  // FP8_BLOCK: scale grid [2, 1] BF16 = {2, -0.25}. Block 1 = fp8 rows 128.. || scale row 1.
  {
    std::vector<std::byte> grid(4);
    StoreLE16(grid.data(), FloatToBFloat16(2.0f));
    StoreLE16(grid.data() + 2, FloatToBFloat16(-0.25f));
    const auto built = Parse({{"b.record", "I64", {8}, I64s(Record(4, out, inp, 0, 1))},
                              Checksums("b", {Hash({Slice(fp8, 0, 128 * inp), Slice(grid, 0, 2)}),
                                              Hash({Slice(fp8, 128 * inp, 2 * inp), Slice(grid, 2, 2)})}),
                              {"b.fp8", "U8", {out, inp}, fp8},
                              {"b.scale", "BF16", {2, 1}, grid}});
    ASSERT_TRUE(built->dense.ok()) << built->dense.status().ToString();
    const DenseMatrix& m = built->dense->matrices().at(0);
    EXPECT_TRUE(VerifyDenseMatrix(*built->dense, m, *built->src).ok());
    auto w = DecodeDenseMatrix(*built->dense, m, *built->src);
    ASSERT_TRUE(w.ok());
    EXPECT_EQ((*w)[127 * inp + 7], e4(127, 7) * 2.0f);
    EXPECT_EQ((*w)[128 * inp + 7], e4(128, 7) * -0.25f);
  }
  // MXFP8: e8m0[o][g] = 127 + (o % 3) - 1 -> scale 2^((o%3)-1); 0 -> 2^-127.
  {
    std::vector<std::byte> e8(out);
    for (std::size_t o = 0; o < out; ++o) e8[o] = static_cast<std::byte>(126 + o % 3);
    e8[0] = std::byte{0};
    const auto built = Parse({{"x.record", "I64", {8}, I64s(Record(3, out, inp, 0, 0))},
                              Checksums("x", {Hash({Slice(fp8, 0, 128 * inp), Slice(e8, 0, 128)}),
                                              Hash({Slice(fp8, 128 * inp, 2 * inp), Slice(e8, 128, 2)})}),
                              {"x.fp8", "U8", {out, inp}, fp8},
                              {"x.e8m0", "U8", {out, 1}, e8}});
    ASSERT_TRUE(built->dense.ok()) << built->dense.status().ToString();
    const DenseMatrix& m = built->dense->matrices().at(0);
    EXPECT_TRUE(VerifyDenseMatrix(*built->dense, m, *built->src).ok());
    auto w = DecodeDenseMatrix(*built->dense, m, *built->src);
    ASSERT_TRUE(w.ok());
    EXPECT_EQ((*w)[4 * inp + 9], e4(4, 9) * 1.0f);
    EXPECT_EQ((*w)[5 * inp + 9], e4(5, 9) * 2.0f);
    EXPECT_EQ((*w)[0 * inp + 9], e4(0, 9) * std::ldexp(1.0f, -127));
  }
}

TEST(DenseDecode, Bf16AndFp32AsStored) {
  const std::vector<float> vals = {1.5f, -2.0f, 0.0f, 3.25f, -0.125f, 7.0f};
  std::vector<std::byte> bf(2 * vals.size());
  for (std::size_t i = 0; i < vals.size(); ++i) StoreLE16(bf.data() + 2 * i, FloatToBFloat16(vals[i]));
  const auto built = Parse({{"a.record", "I64", {8}, I64s(Record(6, 2, 3, 0, 1))},
                            Checksums("a", {Hash({bf})}),
                            {"a.bf16", "BF16", {2, 3}, bf},
                            {"b.record", "I64", {8}, I64s(Record(7, 3, 2, 0, 0))},
                            Checksums("b", {Hash({F32s(vals)})}),
                            {"b.fp32", "F32", {3, 2}, F32s(vals)},
                            {"norm.weight", "BF16", {3}, Slice(bf, 0, 6)}});
  ASSERT_TRUE(built->dense.ok()) << built->dense.status().ToString();
  ASSERT_EQ(built->dense->matrices().size(), 2u);
  ASSERT_EQ(built->dense->plain().size(), 1u);
  for (const DenseMatrix& m : built->dense->matrices()) {
    EXPECT_TRUE(VerifyDenseMatrix(*built->dense, m, *built->src).ok()) << m.name;
    auto w = DecodeDenseMatrix(*built->dense, m, *built->src);
    ASSERT_TRUE(w.ok());
    EXPECT_EQ(*w, vals) << m.name;
  }
}

TEST(DenseDecode, TrellisOrientationBothSides) {
  // All-zero trellis bytes: T = 1.875 everywhere, so W^T has 240 * suh[i] *
  // svh[o] at the first element of every 128 x 128 block and 0 elsewhere
  // (spec 15.9). Distinct suh/svh values expose any transposition.
  const std::size_t out = 256, inp = 384;
  const int k = 2;
  std::vector<float> suh(inp), svh(out);
  for (std::size_t i = 0; i < inp; ++i) suh[i] = 1.0f + static_cast<float>(i) / 512.0f;
  for (std::size_t o = 0; o < out; ++o) svh[o] = -1.0f - static_cast<float>(o) / 256.0f;
  for (int side : {0, 2}) {
    SCOPED_TRACE("side " + std::to_string(side));
    const std::uint64_t groups = side == 2 ? inp / 128 : out / 128;
    const std::uint64_t entry = 16 * k * (side == 2 ? out : inp);
    const auto tr = Bytes(groups * entry, 0);
    std::vector<std::uint64_t> digests;
    const auto suh_b = F16s(suh), svh_b = F16s(svh);
    for (std::uint64_t g = 0; g < groups; ++g)
      digests.push_back(side == 2 ? Hash({Slice(tr, g * entry, entry), Slice(suh_b, g * 256, 256), svh_b})
                                  : Hash({Slice(tr, g * entry, entry), Slice(svh_b, g * 256, 256), suh_b}));
    const auto built = Parse({{"t.record", "I64", {8}, I64s(Record(1, out, inp, k, side))},
                              Checksums("t", digests),
                              {"t.trellis", "U8", {groups, entry}, tr},
                              {"t.suh", "F16", {inp}, suh_b},
                              {"t.svh", "F16", {out}, svh_b}});
    ASSERT_TRUE(built->dense.ok()) << built->dense.status().ToString();
    const DenseMatrix& m = built->dense->matrices().at(0);
    EXPECT_TRUE(VerifyDenseMatrix(*built->dense, m, *built->src).ok());
    auto w = DecodeDenseMatrix(*built->dense, m, *built->src);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    for (std::size_t o = 0; o < out; ++o)
      for (std::size_t i = 0; i < inp; ++i) {
        const float su = HalfToFloat(FloatToHalf(suh[i])), sv = HalfToFloat(FloatToHalf(svh[o]));
        const double want = (o % 128 == 0 && i % 128 == 0) ? 240.0 * su * sv : 0.0;
        ASSERT_NEAR((*w)[o * inp + i], want, 1e-3) << o << "," << i;
      }
  }
}

// ---- checksum failure reporting ----

TEST(DenseChecksum, MismatchNamesMatrixBlockOffsetAndDigests) {
  const auto data = F32s({1, 2, 3, 4});
  const auto built = Parse({{"w.record", "I64", {8}, I64s(Record(7, 2, 2, 0, 0))},
                            Checksums("w", {0x1234}),
                            {"w.fp32", "F32", {2, 2}, data}});
  ASSERT_TRUE(built->dense.ok());
  const DenseMatrix& m = built->dense->matrices().at(0);
  Status s = VerifyDenseMatrix(*built->dense, m, *built->src);
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_NE(s.message().find("dense/test.safetensors"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("'w' block 0"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(Hex64(0x1234)), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(Hex64(Xxh64::Hash(data))), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("byte " + std::to_string(m.data[0].offset)), std::string::npos) << s.message();
  EXPECT_EQ(DenseBlockRuns(m, 1).status().code(), StatusCode::kInvalidArgument);
}

// ---- catalogue of broken files: each must be rejected ----

struct Broken {
  const char* what;
  std::vector<Tensor> tensors;
  const char* must_mention;
};

Tensor GoodRecord(const std::vector<std::int64_t>& r) { return {"m.record", "I64", {8}, I64s(r)}; }

TEST(DenseParse, RejectsBrokenRecordsAndTensors) {
  const auto fp32 = Tensor{"m.fp32", "F32", {2, 2}, F32s({1, 2, 3, 4})};
  const auto ck1 = Checksums("m", {0});
  const std::vector<Broken> cases = {
      {"record dtype F32", {{"m.record", "F32", {8}, Bytes(32, 0)}, ck1, fp32}, "record"},
      {"record shape [7]", {{"m.record", "I64", {7}, I64s({7, 2, 2, 0, 0, 0, 0})}, ck1, fp32}, "record"},
      {"format 0", {GoodRecord(Record(0, 2, 2, 0, 0)), ck1, fp32}, "field 0"},
      {"format 8", {GoodRecord(Record(8, 2, 2, 0, 0)), ck1, fp32}, "field 0"},
      {"side 3", {GoodRecord(Record(7, 2, 2, 0, 3)), ck1, fp32}, "field 4"},
      {"out 0", {GoodRecord(Record(7, 0, 2, 0, 0)), ck1, fp32}, "field 1"},
      {"inp negative", {GoodRecord(Record(7, 2, -2, 0, 0)), ck1, fp32}, "field 2"},
      {"out huge", {GoodRecord(Record(7, std::int64_t{1} << 40, 2, 0, 0)), ck1, fp32}, "field 1"},
      {"too many elements", {GoodRecord(Record(7, std::int64_t{1} << 30, std::int64_t{1} << 30, 0, 0)), ck1, fp32},
       "cap"},
      {"missing checksum", {GoodRecord(Record(7, 2, 2, 0, 0)), fp32}, "m.checksum"},
      {"checksum count", {GoodRecord(Record(7, 2, 2, 0, 0)), Checksums("m", {0, 0}), fp32}, "m.checksum"},
      {"checksum dtype I32", {GoodRecord(Record(7, 2, 2, 0, 0)), {"m.checksum", "I32", {2}, Bytes(8, 0)}, fp32},
       "m.checksum"},
      {"missing data", {GoodRecord(Record(7, 2, 2, 0, 0)), ck1}, "m.fp32"},
      {"data shape", {GoodRecord(Record(7, 2, 2, 0, 0)), ck1, {"m.fp32", "F32", {4}, F32s({1, 2, 3, 4})}}, "m.fp32"},
      {"data dtype", {GoodRecord(Record(7, 2, 2, 0, 0)), ck1, {"m.fp32", "F16", {2, 2}, Bytes(8, 0)}}, "m.fp32"},
      {"side 2 FP32 (U-9)", {GoodRecord(Record(7, 2, 2, 0, 2)), ck1, fp32}, "U-9"},
      {"side 2 FP8_ROW (U-9)",
       {GoodRecord(Record(5, 2, 2, 0, 2)), ck1, {"m.fp8", "U8", {2, 2}, Bytes(4, 0)}, {"m.scale", "F32", {2}, Bytes(8, 0)}},
       "U-9"},
      {"trellis K 0", {GoodRecord(Record(1, 128, 128, 0, 1)), ck1}, "field 3"},
      {"trellis K 9", {GoodRecord(Record(1, 128, 128, 9, 1)), ck1}, "field 3"},
      {"trellis not 128-multiple", {GoodRecord(Record(1, 128, 96, 2, 1)), ck1}, "multiples of 128"},
      {"trellis entry size",
       {GoodRecord(Record(1, 128, 128, 2, 1)), ck1, {"m.trellis", "U8", {1, 4095}, Bytes(4095, 0)},
        {"m.suh", "F16", {128}, Bytes(256, 0)}, {"m.svh", "F16", {128}, Bytes(256, 0)}},
       "m.trellis"},
      {"trellis vector dtype",
       {GoodRecord(Record(1, 128, 128, 2, 1)), ck1, {"m.trellis", "U8", {1, 4096}, Bytes(4096, 0)},
        {"m.suh", "I16", {128}, Bytes(256, 0)}, {"m.svh", "F16", {128}, Bytes(256, 0)}},
       "m.suh"},
      {"int4 inp not /32", {GoodRecord(Record(2, 2, 48, 0, 1)), ck1}, "multiple of 32"},
      {"int4 side 2 inp not /128", {GoodRecord(Record(2, 2, 64, 0, 2)), ck1}, "multiple of 128"},
      {"mxfp8 e8m0 shape",
       {GoodRecord(Record(3, 2, 32, 0, 0)), ck1, {"m.fp8", "U8", {2, 32}, Bytes(64, 0)},
        {"m.e8m0", "U8", {2, 2}, Bytes(4, 0)}},
       "m.e8m0"},
      {"fp8_block grid shape",
       {GoodRecord(Record(4, 2, 200, 0, 0)), ck1, {"m.fp8", "U8", {2, 200}, Bytes(400, 0)},
        {"m.scale", "F32", {1, 1}, Bytes(4, 0)}},
       "m.scale"},
  };
  for (const Broken& c : cases) {
    SCOPED_TRACE(c.what);
    const auto built = Parse(c.tensors);
    ASSERT_TRUE(built->header.ok()) << built->header.status().ToString();
    ASSERT_FALSE(built->dense.ok());
    EXPECT_EQ(built->dense.status().code(), StatusCode::kCorruption);
    const std::string msg = built->dense.status().message();
    EXPECT_NE(msg.find("dense/test.safetensors"), std::string::npos) << msg;
    EXPECT_NE(msg.find("matrix 'm'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("at byte "), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.must_mention), std::string::npos) << msg;
  }
}

// ---- corrupt values found while decoding (U-10) ----

TEST(DenseDecode, RejectsNaNBytesE8M0MaxNonFiniteScalesAndOverflow) {
  struct Case {
    const char* what;
    std::vector<Tensor> tensors;
    std::uint64_t bad_byte;  // offset of the bad element within the bad tensor
    std::size_t bad_tensor;  // index in tensors
  };
  std::vector<std::byte> fp8 = Bytes(64, 0x38);
  std::vector<std::byte> fp8_nan = fp8;
  fp8_nan[37] = std::byte{0xFF};
  std::vector<std::byte> e8 = Bytes(2, 127), e8_bad = e8;
  e8_bad[1] = std::byte{255};
  const std::vector<Case> cases = {
      {"E4M3 NaN",
       {GoodRecord(Record(5, 2, 32, 0, 0)), Checksums("m", {0}), {"m.fp8", "U8", {2, 32}, fp8_nan},
        {"m.scale", "F32", {2}, F32s({1, 1})}},
       37, 2},
      {"E8M0 255",
       {GoodRecord(Record(3, 2, 32, 0, 0)), Checksums("m", {0}), {"m.fp8", "U8", {2, 32}, fp8},
        {"m.e8m0", "U8", {2, 1}, e8_bad}},
       1, 3},
      {"inf scale",
       {GoodRecord(Record(5, 2, 32, 0, 0)), Checksums("m", {0}), {"m.fp8", "U8", {2, 32}, fp8},
        {"m.scale", "F32", {2}, F32s({1, INFINITY})}},
       4, 3},
      {"NaN s4",
       {GoodRecord(Record(2, 1, 32, 0, 1)), Checksums("m", {0}), {"m.q4", "U8", {1, 16}, Bytes(16, 0)},
        {"m.s4", "F16", {1, 1}, F16s({NAN})}},
       0, 3},
      // Finite scales whose products overflow fp32: nibble 0 is -8, and
      // -8 x 3e38 is -inf.
      {"INT4 scale overflows",
       {GoodRecord(Record(2, 1, 32, 0, 1)), Checksums("m", {0}), {"m.q4", "U8", {1, 16}, Bytes(16, 0)},
        {"m.s4", "F32", {1, 1}, F32s({3e38f})}},
       0, 3},
      // 0x7E is E4M3 448: 448 x 1e38 overflows, 448 x 1 does not.
      {"FP8_ROW scale overflows",
       {GoodRecord(Record(5, 2, 32, 0, 0)), Checksums("m", {0}), {"m.fp8", "U8", {2, 32}, Bytes(64, 0x7E)},
        {"m.scale", "F32", {2}, F32s({1, 1e38f})}},
       4, 3},
      // E8M0 254 is 2^127: 448 x 2^127 overflows.
      {"MXFP8 scale overflows",
       {GoodRecord(Record(3, 2, 32, 0, 0)), Checksums("m", {0}), {"m.fp8", "U8", {2, 32}, Bytes(64, 0x7E)},
        {"m.e8m0", "U8", {2, 1}, [] { auto e = Bytes(2, 127); e[1] = std::byte{254}; return e; }()}},
       1, 3},
      // TRELLIS: all-zero bytes decode to 1.875 (spec 15.1), times suh x
      // svh of 1e30 each: the reconstructed entry overflows.
      {"TRELLIS vectors overflow",
       {GoodRecord(Record(1, 128, 128, 1, 0)), Checksums("m", {0}), {"m.trellis", "U8", {1, 16 * 128}, Bytes(2048, 0)},
        {"m.suh", "F32", {128}, F32s(std::vector<float>(128, 1e30f))},
        {"m.svh", "F32", {128}, F32s(std::vector<float>(128, 1e30f))}},
       0, 2},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const auto built = Parse(c.tensors);
    ASSERT_TRUE(built->dense.ok()) << built->dense.status().ToString();
    const DenseMatrix& m = built->dense->matrices().at(0);
    auto w = DecodeDenseMatrix(*built->dense, m, *built->src);
    ASSERT_FALSE(w.ok());
    EXPECT_EQ(w.status().code(), StatusCode::kCorruption);
    const TensorInfo* t = built->header->Find(c.tensors[c.bad_tensor].name);
    ASSERT_NE(t, nullptr);
    const std::uint64_t abs = built->header->AbsoluteOffset(*t) + c.bad_byte;
    EXPECT_NE(w.status().message().find("at byte " + std::to_string(abs)), std::string::npos) << w.status().message();
    EXPECT_NE(w.status().message().find("matrix 'm'"), std::string::npos) << w.status().message();
  }
}

// ---- whole files: the check `exlr8 verify` and exlr8d share ----

TEST(DenseFileCheck, EveryDenseAndVocabFileOfTheFixturePasses) {
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(testing::TinyRelease() / "dense")) {
    const std::vector<std::byte> bytes = testing::ReadBytes(e.path());
    SpanByteSource src(bytes, e.path().filename().string());
    auto report = VerifyDenseFile(src);
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    EXPECT_GT(report->matrices, 0u) << e.path();
    EXPECT_GT(report->blocks_ok, 0u) << e.path();
    EXPECT_TRUE(report->mismatches.empty()) << e.path();
    EXPECT_TRUE(CheckDenseFile(src).ok()) << CheckDenseFile(src).ToString();
    ++files;
  }
  EXPECT_EQ(files, 4);
}

class DenseFileDamage : public ::testing::TestWithParam<testing::DenseDamage> {};

TEST_P(DenseFileDamage, FailsNamingTheFileAndWhere) {
  const std::string name = "dense/exlr8-dense-003.safetensors";
  auto bad = testing::DamageDenseFile(testing::ReadBytes(testing::TinyRelease() / name), GetParam());
  ASSERT_TRUE(bad.ok()) << bad.status().ToString();
  SpanByteSource src(*bad, name);
  Status s = CheckDenseFile(src);
  EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find(name), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(testing::DenseDamageMessage(GetParam())), std::string::npos) << s.message();
  EXPECT_TRUE(std::regex_search(s.message(), std::regex("(at|from) byte [0-9]+"))) << s.message();
  // Structure: no report at all; a block: listed in the report.
  auto report = VerifyDenseFile(src);
  if (GetParam() == testing::DenseDamage::kBlockChecksum) {
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    EXPECT_EQ(report->mismatches.size(), 1u);
  } else {
    EXPECT_EQ(report.status().code(), StatusCode::kCorruption);
  }
}

INSTANTIATE_TEST_SUITE_P(All, DenseFileDamage,
                         ::testing::Values(testing::DenseDamage::kPastEnd, testing::DenseDamage::kOverlap,
                                           testing::DenseDamage::kBlockChecksum),
                         [](const auto& param_info) {
                           return std::string(testing::DenseDamageName(param_info.param));
                         });

}  // namespace
}  // namespace exlr8
