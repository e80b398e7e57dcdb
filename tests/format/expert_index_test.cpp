#include "format/expert_index.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <bit>
#include <set>

#include "format/dtype.h"
#include "format/expert_decode.h"
#include "format/layout.h"
#include "format/safetensors.h"
#include "format/safetensors_writer.h"
#include "tests/format/test_util.h"

namespace exlr8 {
namespace {

using ::exlr8::testing::PatchBytes;
using ::exlr8::testing::ReadBytes;
using ::exlr8::testing::TinyRelease;
using ::testing::HasSubstr;

Result<ExpertIndex> ReadIndex(const std::vector<std::byte>& bytes, int layer = 3) {
  SpanByteSource src(bytes, "exlr8-layer-003.index.safetensors");
  return ExpertIndex::Read(src, layer);
}

std::vector<std::byte> FixtureIndex() { return ReadBytes(TinyRelease() / ExpertIndexPath(3)); }

// Absolute byte offset of tensor `name` in an index file.
std::uint64_t TensorOffset(const std::vector<std::byte>& bytes, const std::string& name) {
  auto n = SafetensorsHeaderSize(bytes, bytes.size(), "f");
  auto h = ParseSafetensorsHeader(bytes, bytes.size(), "f");
  EXPECT_TRUE(n.ok() && h.ok());
  return h->AbsoluteOffset(*h->Find(name));
}

TEST(ExpertIndexTest, ReadsFixtureGeometryFromShapes) {
  auto bytes = FixtureIndex();
  auto ix = ReadIndex(bytes);
  ASSERT_TRUE(ix.ok()) << ix.status().ToString();
  EXPECT_EQ(ix->hidden(), 256u);
  EXPECT_EQ(ix->experts(), 4u);
  EXPECT_EQ(ix->halves_per_expert(), 16u);
  EXPECT_EQ(ix->widths(), (std::vector<int>{2, 3, 4}));
  EXPECT_EQ(ix->shared_widths(), (std::vector<int>{3, 4}));
  EXPECT_TRUE(ix->has_shared());
  auto he = ix->Half(1, Proj::kUp, 5, 3);
  ASSERT_TRUE(he.ok());
  EXPECT_EQ(he->length, 16u * 3 * 256);
  EXPECT_EQ(ix->Half(kSharedExpert, Proj::kGate, 0, 2).status().code(), StatusCode::kNotFound);  // shared has 3,4
  EXPECT_EQ(ix->Half(4, Proj::kGate, 0, 2).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ix->Half(0, Proj::kGate, 16, 2).status().code(), StatusCode::kInvalidArgument);
}

TEST(ExpertIndexTest, ChecksumTailPointsAtVectorSliceAndBlockRow) {
  auto bytes = FixtureIndex();
  auto ix = ReadIndex(bytes);
  ASSERT_TRUE(ix.ok());
  auto tail = ix->ChecksumTail(2, Proj::kDown, 7, 4);
  // k4.down.suh is F16 [4, 2048]: row 2, elements 896..1023
  EXPECT_EQ(tail[0].offset, TensorOffset(bytes, "k4.down.suh") + (2 * 2048 + 128 * 7) * 2);
  EXPECT_EQ(tail[0].length, 256u);
  // k4.down.sv_block is F32 [4, 2]: row 2
  EXPECT_EQ(tail[1].offset, TensorOffset(bytes, "k4.down.sv_block") + 2 * 2 * 4);
  EXPECT_EQ(tail[1].length, 8u);
}

TEST(ExpertIndexTest, LoadHalfVectorsFoldsSignsAndBlockScales) {
  auto bytes = FixtureIndex();
  SpanByteSource src(bytes, "idx");
  auto ix = ExpertIndex::Read(src, 3);
  ASSERT_TRUE(ix.ok());
  std::vector<float> u, v;
  ASSERT_TRUE(ix->LoadHalfVectors(src, 1, Proj::kGate, 2, 3, &u, &v).ok());
  ASSERT_EQ(u.size(), 256u);
  ASSERT_EQ(v.size(), 128u);
  // u[i] = signs.in[i] * su_block[1][i/128]
  const std::uint64_t signs = TensorOffset(bytes, "signs.in"), su = TensorOffset(bytes, "k3.gate.su_block"),
                      svh = TensorOffset(bytes, "k3.gate.svh");
  for (int i : {0, 127, 128, 255}) {
    float s = HalfToFloat(LoadLE16(bytes.data() + signs + 2 * i));
    float b = std::bit_cast<float>(LoadLE32(bytes.data() + su + 4 * (2 + i / 128)));
    EXPECT_EQ(u[i], s * b) << i;
  }
  EXPECT_EQ(v[5], HalfToFloat(LoadLE16(bytes.data() + svh + 2 * (2048 + 256 + 5))));
}

// Reads the (patched) index and the reconstruction vectors of half h of
// expert e's projection p at K3.
Status LoadVectorsK3(const std::vector<std::byte>& bytes, int e, Proj p, std::uint32_t h) {
  SpanByteSource src(bytes, "exlr8-layer-003.index.safetensors");
  auto ix = ExpertIndex::Read(src, 3);
  if (!ix.ok()) return ix.status();
  std::vector<float> u, v;
  return ix->LoadHalfVectors(src, e, p, h, 3, &u, &v);
}

// Non-finite vector elements pass the index reader (they are data, read
// only when a half is reconstructed) but are refused there (spec U-10),
// naming the tensor, the element and its byte.
TEST(ExpertIndexTest, LoadHalfVectorsRejectsNonFiniteElements) {
  struct Case {
    const char* tensor;
    std::uint64_t element;  // flat index into the tensor
    int bytes_per;
    std::uint32_t bits;  // the non-finite value's bit pattern
    const char* shown;   // "[row, col]"
  };
  // Expert 1, gate, half 2, K3: svh F16 [4, 2048], su_block F32 [4, 2], signs.in F16 [256].
  // (A non-finite sign is refused earlier, by Read: see RejectsSignsOtherThanPlusOrMinusOne.)
  for (const Case& c : {Case{"k3.gate.svh", 2048 + 256 + 5, 2, 0x7C00, "[1, 261]"},           // +inf
                        Case{"k3.gate.su_block", 2 + 1, 4, 0x7FC00000, "[1, 1]"}}) {           // NaN
    SCOPED_TRACE(c.tensor);
    auto bytes = FixtureIndex();
    const std::uint64_t at = TensorOffset(bytes, c.tensor) + c.element * c.bytes_per;
    if (c.bytes_per == 2) StoreLE16(bytes.data() + at, static_cast<std::uint16_t>(c.bits));
    else StoreLE32(bytes.data() + at, c.bits);
    const Status st = LoadVectorsK3(bytes, 1, Proj::kGate, 2);
    ASSERT_EQ(st.code(), StatusCode::kCorruption) << st.ToString();
    EXPECT_THAT(st.message(), HasSubstr("exlr8-layer-003.index.safetensors: tensor '" + std::string(c.tensor) +
                                        "' element " + c.shown + " at byte " + std::to_string(at)));
    EXPECT_THAT(st.message(), HasSubstr("non-finite"));
    // Other halves do not read that element.
    EXPECT_TRUE(LoadVectorsK3(bytes, 0, Proj::kDown, 2).ok());
  }
}

// The hidden-side signs are covered by no checksum (spec 5.3), so anything
// but exactly +1 or -1 in them is refused when the index is read, naming the
// tensor, the element and its byte: a 0 would silently zero a channel of
// every expert of the layer, a 0.5 halve it.
TEST(ExpertIndexTest, RejectsSignsOtherThanPlusOrMinusOne) {
  struct Value {
    std::uint16_t f16;
    const char* shown;
  };
  for (const char* tensor : {"signs.in", "signs.out"}) {  // both F16 [256] in the fixture
    for (const Value& v : {Value{0x0000, ": 0,"}, Value{0x8000, ": -0,"}, Value{0x3800, ": 0.5,"},
                           Value{0x4000, ": 2,"}, Value{0x7BFF, ": 65504,"}, Value{0xFC00, ": -inf,"},
                           Value{0x7E00, ": nan,"}}) {
      SCOPED_TRACE(std::string(tensor) + v.shown);
      auto bytes = FixtureIndex();
      const std::uint64_t at = TensorOffset(bytes, tensor) + 2 * 200;
      StoreLE16(bytes.data() + at, v.f16);
      auto ix = ReadIndex(bytes);
      ASSERT_FALSE(ix.ok());
      EXPECT_EQ(ix.status().code(), StatusCode::kCorruption);
      EXPECT_THAT(ix.status().message(),
                  HasSubstr("exlr8-layer-003.index.safetensors: tensor '" + std::string(tensor) +
                            "' element [200] at byte " + std::to_string(at) + v.shown +
                            " expected +1 or -1"));
    }
  }
  // Both signs occur in the fixture, and both pass.
  auto bytes = FixtureIndex();
  const std::uint64_t signs = TensorOffset(bytes, "signs.in");
  std::set<std::uint16_t> seen;
  for (int i = 0; i < 256; ++i) seen.insert(LoadLE16(bytes.data() + signs + 2 * i));
  EXPECT_EQ(seen, (std::set<std::uint16_t>{0x3C00, 0xBC00}));
  EXPECT_TRUE(ReadIndex(bytes).ok());
}

// LoadHalfVectors reads the signs again from the source it is given (a
// cache file may have changed since Read), and checks them again.
TEST(ExpertIndexTest, LoadHalfVectorsChecksTheSignsItReads) {
  auto good = FixtureIndex();
  SpanByteSource good_src(good, "exlr8-layer-003.index.safetensors");
  auto ix = ExpertIndex::Read(good_src, 3);
  ASSERT_TRUE(ix.ok()) << ix.status().ToString();
  auto changed = good;
  const std::uint64_t at = TensorOffset(changed, "signs.in") + 2 * 17;
  StoreLE16(changed.data() + at, 0x0000);
  SpanByteSource changed_src(changed, "exlr8-layer-003.index.safetensors");
  std::vector<float> u, v;
  const Status st = ix->LoadHalfVectors(changed_src, 1, Proj::kGate, 2, 3, &u, &v);
  ASSERT_EQ(st.code(), StatusCode::kCorruption) << st.ToString();
  EXPECT_THAT(st.message(), HasSubstr("tensor 'signs.in' element [17] at byte " + std::to_string(at) + ": 0,"));
  // Down reads signs.out, which is unchanged.
  EXPECT_TRUE(ix->LoadHalfVectors(changed_src, 1, Proj::kDown, 2, 3, &u, &v).ok());
}

// An empty shared_widths says the layer has no shared expert (allowed); a
// shared. tensor beside it is a contradiction, refused rather than dropped.
TEST(ExpertIndexTest, RejectsSharedTensorsWhenSharedWidthsIsEmpty) {
  auto bytes = FixtureIndex();
  auto hdr = ParseSafetensorsHeader(bytes, bytes.size(), "f");
  ASSERT_TRUE(hdr.ok());
  auto rebuild = [&](bool keep_shared) {
    std::vector<TensorBytes> tensors;
    for (const TensorInfo& t : hdr->tensors()) {
      if (!keep_shared && t.name.starts_with("shared.")) continue;
      const std::uint64_t at = hdr->AbsoluteOffset(t);
      tensors.push_back({t.name, t.dtype, t.shape,
                         std::vector<std::byte>(bytes.begin() + static_cast<std::ptrdiff_t>(at),
                                                bytes.begin() + static_cast<std::ptrdiff_t>(at + t.byte_size()))});
    }
    SafetensorsWriteOptions options;
    options.metadata = {{"widths", "2,3,4"}, {"shared_widths", ""}};
    auto out = SerializeSafetensors(tensors, options);
    EXPECT_TRUE(out.ok()) << out.status().ToString();
    return out.ok() ? *out : std::vector<std::byte>{};
  };
  auto without = ReadIndex(rebuild(false));
  ASSERT_TRUE(without.ok()) << without.status().ToString();
  EXPECT_FALSE(without->has_shared());
  auto with = ReadIndex(rebuild(true));
  ASSERT_FALSE(with.ok());
  EXPECT_EQ(with.status().code(), StatusCode::kCorruption);
  EXPECT_THAT(with.status().message(), HasSubstr("exlr8-layer-003.index.safetensors: tensor 'shared."));
  EXPECT_THAT(with.status().message(), HasSubstr("but __metadata__ 'shared_widths' is empty"));
}

// Finite vectors can still make weights overflow fp32: the decode refuses
// such a half instead of returning infinities.
TEST(ExpertIndexTest, DecodeRefusesWeightsThatOverflow) {
  auto bytes = FixtureIndex();
  const std::uint64_t su = TensorOffset(bytes, "k3.gate.su_block");  // F32 [4, 2]
  for (int b = 0; b < 2; ++b) StoreLE32(bytes.data() + su + 4 * (2 + b), std::bit_cast<std::uint32_t>(3e38f));
  SpanByteSource src(bytes, "exlr8-layer-003.index.safetensors");
  auto ix = ExpertIndex::Read(src, 3);
  ASSERT_TRUE(ix.ok()) << ix.status().ToString();
  auto he = ix->Half(1, Proj::kGate, 2, 3);
  ASSERT_TRUE(he.ok());
  const auto width_file = ReadBytes(TinyRelease() / ExpertWidthPath(3, 3));
  const std::span<const std::byte> half(width_file.data() + he->offset, he->length);
  std::vector<float> out;
  Status st = DecodeExpertHalf(*ix, src, half, 1, Proj::kGate, 2, 3, DecodeStage::kWeights, false, &out);
  ASSERT_EQ(st.code(), StatusCode::kCorruption) << st.ToString();
  EXPECT_THAT(st.message(), HasSubstr("exlr8-layer-003.index.safetensors: L3 e1 gate h2 K3: reconstructed weight ["));
  EXPECT_THAT(st.message(), HasSubstr("overflows fp32"));
  // The tiles alone are fine, and so is a half whose vectors are not touched.
  EXPECT_TRUE(DecodeExpertHalf(*ix, src, half, 1, Proj::kGate, 2, 3, DecodeStage::kTiles, false, &out).ok());
  auto other = ix->Half(0, Proj::kGate, 2, 3);
  ASSERT_TRUE(other.ok());
  EXPECT_TRUE(DecodeExpertHalf(*ix, src, std::span<const std::byte>(width_file.data() + other->offset, other->length),
                               0, Proj::kGate, 2, 3, DecodeStage::kWeights, true, &out)
                  .ok());
}

// ---- catalogue of broken index files: each must be rejected with its error ----

struct BrokenIndex {
  const char* name;
  std::string from, to;  // header patch (same length)
  const char* expect;    // part of the message
};

class BrokenIndexTest : public ::testing::TestWithParam<BrokenIndex> {};

TEST_P(BrokenIndexTest, Rejected) {
  auto bytes = FixtureIndex();
  const auto& c = GetParam();
  ASSERT_TRUE(PatchBytes(bytes, c.from, c.to)) << "patch target not found: " << c.from;
  auto ix = ReadIndex(bytes);
  ASSERT_FALSE(ix.ok()) << c.name;
  EXPECT_EQ(ix.status().code(), StatusCode::kCorruption);
  EXPECT_THAT(ix.status().message(), HasSubstr(c.expect));
  EXPECT_THAT(ix.status().message(), HasSubstr("exlr8-layer-003.index.safetensors"));
}

INSTANTIATE_TEST_SUITE_P(
    Catalogue, BrokenIndexTest,
    ::testing::Values(
        BrokenIndex{"missing widths", "\"widths\"", "\"widthz\"", "no 'widths'"},
        BrokenIndex{"missing shared_widths", "\"shared_widths\"", "\"shared_widthz\"", "no 'shared_widths'"},
        BrokenIndex{"width not an integer", "\"2,3,4\"", "\"2,x,4\"", "is not an integer in 1..8"},
        BrokenIndex{"width out of range", "\"2,3,4\"", "\"2,3,9\"", "is not an integer in 1..8"},
        BrokenIndex{"stored width without tensors", "\"3,4\"", "\"3,5\"", "missing tensor 'shared.k5.index'"},
        BrokenIndex{"missing signs", "\"signs.out\"", "\"signs.ouT\"", "missing tensor 'signs.out'"},
        BrokenIndex{"index wrong dtype", "\"k2.index\":{\"dtype\":\"I64\"", "\"k2.index\":{\"dtype\":\"F64\"",
                    "expected I64 or U64"},
        BrokenIndex{"vector wrong shape", "\"shape\":[4,2048],\"data_offsets\":[4608,",
                    "\"shape\":[2048,4],\"data_offsets\":[4608,", "expected [4,2048]"},
        BrokenIndex{"block vector integer", "\"k3.down.sv_block\":{\"dtype\":\"F32\"",
                    "\"k3.down.sv_block\":{\"dtype\":\"I32\"", "expected F16, BF16 or F32"}),
    [](const auto& param_info) {
      std::string n = param_info.param.name;
      for (auto& ch : n) if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
      return n;
    });

TEST(ExpertIndexTest, RejectsWrongHalfLength) {
  auto bytes = FixtureIndex();
  const std::uint64_t at = TensorOffset(bytes, "k2.index") + 8 * (2 * 5 + 1);  // entry 5's length
  StoreLE64(bytes.data() + at, 8191);
  auto ix = ReadIndex(bytes);
  ASSERT_FALSE(ix.ok());
  EXPECT_EQ(ix.status().code(), StatusCode::kCorruption);
  EXPECT_THAT(ix.status().message(), HasSubstr("length 8191, expected 16*K*hidden = 8192"));
  EXPECT_THAT(ix.status().message(), HasSubstr("[0, gate, h5]"));
}

TEST(ExpertIndexTest, RejectsNegativeOffset) {
  auto bytes = FixtureIndex();
  StoreLE64(bytes.data() + TensorOffset(bytes, "k3.index") + 16 * 7, static_cast<std::uint64_t>(-4096));
  auto ix = ReadIndex(bytes);
  ASSERT_FALSE(ix.ok());
  EXPECT_THAT(ix.status().message(), HasSubstr("negative offset"));
}

TEST(ExpertIndexTest, WidthFileValidationCatchesHalvesOutsideAndOverlapping) {
  auto bytes = FixtureIndex();
  auto wbytes = ReadBytes(TinyRelease() / ExpertWidthPath(3, 2));
  auto wh = ParseSafetensorsHeader(wbytes, wbytes.size(), "k2");
  ASSERT_TRUE(wh.ok());
  {
    auto ix = ReadIndex(bytes);
    ASSERT_TRUE(ix.ok());
    EXPECT_TRUE(ix->ValidateWidthFile(2, *wh, wbytes.size(), "k2").ok());
    // The same halves against a smaller file: outside.
    Status s = ix->ValidateWidthFile(2, *wh, wbytes.size() - 4096, "k2");
    EXPECT_EQ(s.code(), StatusCode::kCorruption);
    EXPECT_THAT(s.message(), HasSubstr("lies outside the data section"));
  }
  // Entry 1 made to start inside entry 0.
  const std::uint64_t at = TensorOffset(bytes, "k2.index");
  StoreLE64(bytes.data() + at + 16, LoadLE64(bytes.data() + at) + 16);
  auto ix = ReadIndex(bytes);
  ASSERT_TRUE(ix.ok());
  Status s = ix->ValidateWidthFile(2, *wh, wbytes.size(), "k2");
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_THAT(s.message(), HasSubstr("halves overlap"));
}

// The span a reader keeps instead of the tables: where the halves start
// and end, checked against a header exactly as ValidateWidthFile does.
TEST(ExpertIndexTest, SpanOfWidthIsWhatTheHeaderIsCheckedAgainst) {
  auto ix = ReadIndex(FixtureIndex());
  ASSERT_TRUE(ix.ok());
  auto wbytes = ReadBytes(TinyRelease() / ExpertWidthPath(3, 2));
  auto wh = ParseSafetensorsHeader(wbytes, wbytes.size(), "k2");
  ASSERT_TRUE(wh.ok());
  auto span = ix->SpanOfWidth(2);
  ASSERT_TRUE(span.ok()) << span.status().ToString();
  ASSERT_FALSE(span->empty);
  EXPECT_EQ(span->lowest_offset, *ix->LowestHalfOffset(2));
  EXPECT_GE(span->lowest_offset, wh->data_start());
  EXPECT_LE(span->highest_end, wbytes.size());
  EXPECT_GT(span->highest_end, span->lowest_offset);
  EXPECT_THAT(span->lowest_half, HasSubstr("L3 "));
  EXPECT_TRUE(span->Validate(*wh, wbytes.size(), "k2").ok());
  // One byte short at the end: the highest half is named.
  Status end = span->Validate(*wh, span->highest_end - 1, "k2");
  EXPECT_EQ(end.code(), StatusCode::kCorruption);
  EXPECT_THAT(end.message(), HasSubstr("k2: half " + span->highest_half + " lies outside the data section"));
  // A header reaching past the first half: the lowest half is named.
  WidthFileSpan early = *span;
  early.lowest_offset = wh->data_start() - 1;
  Status start = early.Validate(*wh, wbytes.size(), "k2");
  EXPECT_EQ(start.code(), StatusCode::kCorruption);
  EXPECT_THAT(start.message(), HasSubstr("half " + span->lowest_half + " lies outside"));
  // No half at a width the layer does not store: nothing to check.
  auto none = ix->SpanOfWidth(8);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty);
  EXPECT_TRUE(none->Validate(*wh, 0, "k8").ok());
}

TEST(ExpertIndexTest, TruncatedFilesNeverCrash) {
  auto bytes = FixtureIndex();
  for (size_t n : {0, 7, 8, 100, 3000, 3456, 50000, 189519}) {
    std::vector<std::byte> cut(bytes.begin(), bytes.begin() + static_cast<long>(std::min(n, bytes.size())));
    auto ix = ReadIndex(cut);
    EXPECT_FALSE(ix.ok()) << n;
    EXPECT_EQ(ix.status().code(), StatusCode::kCorruption) << n << " " << ix.status().ToString();
  }
}

TEST(WidthListTest, Spellings) {
  EXPECT_EQ(*ParseWidthList("2,3,4"), (std::vector<int>{2, 3, 4}));
  EXPECT_EQ(*ParseWidthList(" 4, 2 ,4"), (std::vector<int>{2, 4}));
  EXPECT_FALSE(ParseWidthList("").ok());
  EXPECT_FALSE(ParseWidthList("2,,3").ok());
  EXPECT_FALSE(ParseWidthList("0").ok());
  EXPECT_FALSE(ParseWidthList("3.0").ok());
}

TEST(LayoutTest, NamesRoundTrip) {
  EXPECT_EQ(ExpertIndexPath(3), "experts/exlr8-layer-003.index.safetensors");
  EXPECT_EQ(ExpertWidthPath(40, 3), "experts/exlr8-layer-040.k3.safetensors");
  EXPECT_EQ(ExpertWidthPath(1234, 2), "experts/exlr8-layer-1234.k2.safetensors");
  auto r = ClassifyReleasePath("experts/exlr8-layer-077.k4.safetensors");
  EXPECT_EQ(r.kind, ReleaseFileKind::kExpertWidth);
  EXPECT_EQ(r.layer, 77);
  EXPECT_EQ(r.k, 4);
  EXPECT_EQ(ClassifyReleasePath("experts/exlr8-layer-3.k4.safetensors").kind, ReleaseFileKind::kOther);
  EXPECT_EQ(ClassifyReleasePath("dense/exlr8-dense-000.safetensors").kind, ReleaseFileKind::kDense);
  EXPECT_EQ(ClassifyReleasePath("dense/exlr8-vocab.safetensors").kind, ReleaseFileKind::kVocab);
  EXPECT_EQ(ClassifyReleasePath("manifests/exlr8-manifest-bit325.json").manifest, "bit325");
  EXPECT_TRUE(IsManifestName("home"));
  EXPECT_FALSE(IsManifestName("./home.json"));
}

}  // namespace
}  // namespace exlr8
