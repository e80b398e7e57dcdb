// Tests of format/safetensors_writer.h: round trips through the reader
// (format/safetensors.h), alignment and padding, header-only layouts, and
// every InvalidArgument the writer returns.
#include "format/safetensors_writer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "format/safetensors.h"

namespace exlr8 {
namespace {

std::vector<std::byte> Bytes(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<std::byte> v(n);
  for (auto& b : v) b = std::byte(rng() & 0xFF);
  return v;
}

TensorBytes T(std::string name, DType dtype, std::vector<std::uint64_t> shape, unsigned seed, bool aligned = true) {
  std::uint64_t n = DTypeSize(dtype);
  for (auto d : shape) n *= d;
  return TensorBytes{std::move(name), dtype, std::move(shape), Bytes(n, seed), aligned};
}

TEST(SafetensorsWriter, RoundTripThroughReader) {
  std::vector<TensorBytes> ts;
  ts.push_back(T("z.last_name_first", DType::kF16, {3, 5}, 1));
  ts.push_back(T("a.index", DType::kI64, {4, 3, 2}, 2));
  ts.push_back(T("scalar", DType::kF32, {}, 3));
  ts.push_back(T("empty", DType::kU8, {0}, 4));
  ts.push_back(T("bf", DType::kBF16, {7}, 5));
  SafetensorsWriteOptions o;
  o.metadata = {{"widths", "2,3,4"}, {"layer", "3"}};
  auto file = SerializeSafetensors(ts, o);
  ASSERT_TRUE(file.ok()) << file.status().ToString();

  auto h = ParseSafetensorsHeader(*file, file->size(), "rt.safetensors");
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->data_start() % 8, 0u);
  EXPECT_EQ(h->padding_entries(), 0u);
  EXPECT_EQ(h->data_start() + h->data_end(), file->size());
  ASSERT_EQ(h->tensors().size(), ts.size());
  EXPECT_EQ(h->metadata().at("widths"), "2,3,4");
  EXPECT_EQ(h->metadata().at("layer"), "3");
  for (const TensorBytes& t : ts) {
    const TensorInfo* info = h->Find(t.name);
    ASSERT_NE(info, nullptr) << t.name;
    EXPECT_EQ(info->dtype, t.dtype) << t.name;
    EXPECT_EQ(info->shape, t.shape) << t.name;
    ASSERT_EQ(info->byte_size(), t.bytes.size()) << t.name;
    if (t.bytes.empty()) continue;  // memcmp on a null pointer is UB even for 0 bytes
    EXPECT_EQ(0, std::memcmp(file->data() + h->AbsoluteOffset(*info), t.bytes.data(), t.bytes.size())) << t.name;
  }
  // order of data = order given, not name order
  EXPECT_LT(h->Find("z.last_name_first")->begin, h->Find("a.index")->begin);
}

TEST(SafetensorsWriter, AlignsEveryTensorAndTheDataStart) {
  for (std::uint64_t align : {16u, 4096u, 65536u}) {
    std::vector<TensorBytes> ts;
    for (int i = 0; i < 6; ++i) ts.push_back(T("t" + std::to_string(i), DType::kU8, {1000u + 37u * i}, 10 + i));
    SafetensorsWriteOptions o;
    o.alignment = align;
    auto file = SerializeSafetensors(ts, o);
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    auto h = ParseSafetensorsHeader(*file, file->size(), "aligned.safetensors");
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    EXPECT_EQ(h->data_start() % align, 0u) << align;
    EXPECT_EQ(h->padding_entries(), 5u) << align;  // every tensor after the first needs a gap
    for (const TensorInfo& t : h->tensors()) {
      EXPECT_FALSE(IsPaddingName(t.name));
      EXPECT_EQ(h->AbsoluteOffset(t) % align, 0u) << t.name << " align " << align;
    }
    // padding bytes are zero, tensor bytes intact
    for (const TensorBytes& t : ts) {
      const TensorInfo* info = h->Find(t.name);
      ASSERT_NE(info, nullptr);
      EXPECT_EQ(0, std::memcmp(file->data() + h->AbsoluteOffset(*info), t.bytes.data(), t.bytes.size()));
    }
  }
}

TEST(SafetensorsWriter, AlignsOnlyChosenTensors) {
  std::vector<TensorBytes> ts;
  ts.push_back(T("a", DType::kU8, {100}, 1, true));
  ts.push_back(T("b", DType::kU8, {100}, 2, false));  // packed right after a
  ts.push_back(T("c", DType::kU8, {100}, 3, true));
  ts.push_back(T("d", DType::kU8, {100}, 4, false));
  SafetensorsWriteOptions o;
  o.alignment = 256;
  auto file = SerializeSafetensors(ts, o);
  ASSERT_TRUE(file.ok());
  auto h = ParseSafetensorsHeader(*file, file->size(), "x");
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->Find("a")->begin, 0u);
  EXPECT_EQ(h->Find("b")->begin, 100u);
  EXPECT_EQ(h->Find("c")->begin, 256u);
  EXPECT_EQ(h->Find("d")->begin, 356u);
  EXPECT_EQ(h->padding_entries(), 1u);
}

// Filler before the first tensor (a layout the format allows, spec U-1);
// an aligned first tensor then starts at the next multiple past it.
TEST(SafetensorsWriter, LeadingPaddingComesBeforeTheFirstTensor) {
  for (std::uint64_t align : {1u, 256u}) {
    std::vector<TensorBytes> ts;
    ts.push_back(T("a", DType::kU8, {100}, 1));
    ts.push_back(T("b", DType::kU8, {100}, 2));
    SafetensorsWriteOptions o;
    o.alignment = align;
    o.leading_padding = 1000;
    auto file = SerializeSafetensors(ts, o);
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    auto h = ParseSafetensorsHeader(*file, file->size(), "lead.safetensors");
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    EXPECT_EQ(h->Find("a")->begin, align == 1 ? 1000u : 1024u) << align;
    EXPECT_EQ(h->padding_entries(), align == 1 ? 1u : 3u) << align;  // lead, then the gaps before a and b
    EXPECT_EQ(0, std::memcmp(file->data() + h->AbsoluteOffset(*h->Find("b")), ts[1].bytes.data(), 100));
  }
}

TEST(SafetensorsWriter, HeaderOnlyLayoutDescribesTheWholeFile) {
  SafetensorsWriteOptions o;
  o.alignment = 4096;
  o.metadata = {{"format", "exlr8"}, {"width", "3"}};
  SafetensorsBuilder b(o);
  std::uint64_t sum = 0;
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(b.Add("e0.gate.h" + std::to_string(i), DType::kU8, {12288}, i % 2 == 0).ok());
    sum += 12288;
  }
  auto layout = b.Layout();
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  EXPECT_EQ(layout->head.size(), layout->data_start);
  EXPECT_EQ(layout->data_start % 4096, 0u);
  EXPECT_EQ(layout->file_size, layout->data_start + sum);  // 24576 per pair: no gaps needed
  EXPECT_EQ(layout->padding_entries, 0u);
  // The reader accepts the head alone, given the full size (a sparse file).
  auto h = ParseSafetensorsHeader(layout->head, layout->file_size, "sparse.safetensors");
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  ASSERT_EQ(h->tensors().size(), 10u);
  for (std::size_t i = 0; i < 10; ++i) {
    const TensorInfo* t = h->Find(layout->tensors[i].name);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(h->AbsoluteOffset(*t), layout->tensors[i].absolute_offset);
    EXPECT_EQ(t->byte_size(), 12288u);
  }
  EXPECT_EQ(h->metadata().at("width"), "3");
}

TEST(SafetensorsWriter, NoMetadataMeansNoMetadataKey) {
  std::vector<TensorBytes> ts = {T("x", DType::kF32, {2}, 1)};
  auto file = SerializeSafetensors(ts);
  ASSERT_TRUE(file.ok());
  const std::uint64_t n = LoadLE64(file->data());
  std::string json(reinterpret_cast<const char*>(file->data() + 8), n);
  EXPECT_EQ(json.find("__metadata__"), std::string::npos) << json;
  auto h = ParseSafetensorsHeader(*file, file->size(), "x");
  ASSERT_TRUE(h.ok());
  EXPECT_TRUE(h->metadata().empty());
}

TEST(SafetensorsWriter, EscapesNamesAndMetadata) {
  std::vector<TensorBytes> ts = {T("we\"ird\\name\x01", DType::kU8, {3}, 1)};
  SafetensorsWriteOptions o;
  o.metadata = {{"k\"ey", "va\\lue\n"}};
  auto file = SerializeSafetensors(ts, o);
  ASSERT_TRUE(file.ok());
  auto h = ParseSafetensorsHeader(*file, file->size(), "x");
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_NE(h->Find("we\"ird\\name\x01"), nullptr);
  EXPECT_EQ(h->metadata().at("k\"ey"), "va\\lue\n");
}

TEST(SafetensorsWriter, RejectsBadNames) {
  SafetensorsBuilder b;
  EXPECT_EQ(b.Add("", DType::kU8, {1}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(b.Add("__pad.0", DType::kU8, {1}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(b.Add("__metadata__", DType::kU8, {1}).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(b.Add("x", DType::kU8, {1}).ok());
  Status dup = b.Add("x", DType::kF16, {2});
  EXPECT_EQ(dup.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(dup.message().find("'x'"), std::string::npos) << dup.message();
  EXPECT_EQ(b.size(), 1u);
}

TEST(SafetensorsWriter, RejectsOverflowAndRank) {
  SafetensorsBuilder b;
  EXPECT_EQ(b.Add("big", DType::kI64, {1ull << 32, 1ull << 32}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(b.Add("rank9", DType::kU8, std::vector<std::uint64_t>(9, 1)).code(), StatusCode::kInvalidArgument);
  // Fits in 64 bits alone, but two of them overflow the data size.
  ASSERT_TRUE(b.Add("h1", DType::kU8, {1ull << 63}).ok());
  ASSERT_TRUE(b.Add("h2", DType::kU8, {1ull << 63}).ok());
  EXPECT_EQ(b.Layout().status().code(), StatusCode::kResourceExhausted);
}

TEST(SafetensorsWriter, RejectsBadAlignmentAndMetadata) {
  SafetensorsWriteOptions o;
  o.alignment = 3;
  EXPECT_EQ(SafetensorsBuilder(o).Layout().status().code(), StatusCode::kInvalidArgument);
  o.alignment = 0;
  EXPECT_EQ(SafetensorsBuilder(o).Layout().status().code(), StatusCode::kInvalidArgument);
  o.alignment = 1;
  o.metadata = {{"a", "1"}, {"a", "2"}};
  EXPECT_EQ(SafetensorsBuilder(o).Layout().status().code(), StatusCode::kInvalidArgument);
}

TEST(SafetensorsWriter, RejectsWrongByteCount) {
  TensorBytes t = T("x", DType::kF16, {4}, 1);
  t.bytes.pop_back();
  auto r = SerializeSafetensors(std::span<const TensorBytes>(&t, 1));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("'x' has 7 bytes, expected 8"), std::string::npos) << r.status().message();
}

TEST(SafetensorsWriter, HeaderCapIsEnforced) {
  // 100 MB of header would take too long to build; check the arithmetic by
  // a huge metadata value instead.
  SafetensorsWriteOptions o;
  o.metadata = {{"big", std::string(kMaxSafetensorsHeaderBytes, 'x')}};
  EXPECT_EQ(SafetensorsBuilder(o).Layout().status().code(), StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace exlr8
