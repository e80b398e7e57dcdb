#include "format/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "format/dtype.h"

namespace exlr8 {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr char kName[] = "t.safetensors";

// A safetensors file: LE u64 length, `json` (+ `pad` trailing spaces), then
// `data_bytes` bytes of data (value i & 0xFF at data offset i).
std::vector<std::byte> MakeFile(std::string_view json, std::size_t data_bytes = 0,
                                std::size_t pad = 0) {
  std::vector<std::byte> f(8);
  StoreLE64(f.data(), json.size() + pad);
  for (char c : json) f.push_back(static_cast<std::byte>(c));
  f.insert(f.end(), pad, std::byte{' '});
  for (std::size_t i = 0; i < data_bytes; ++i) f.push_back(static_cast<std::byte>(i & 0xFF));
  return f;
}

std::string Entry(std::string_view name, std::string_view dtype, std::string_view shape,
                  std::uint64_t begin, std::uint64_t end) {
  return "\"" + std::string(name) + "\":{\"dtype\":\"" + std::string(dtype) + "\",\"shape\":" +
         std::string(shape) + ",\"data_offsets\":[" + std::to_string(begin) + "," +
         std::to_string(end) + "]}";
}

Result<SafetensorsHeader> Parse(const std::vector<std::byte>& f) {
  return ParseSafetensorsHeader(f, f.size(), kName);
}

// ---- must reject: one hand-built file per failure class ----

struct BadFile {
  std::string label;
  std::vector<std::byte> bytes;
  std::optional<std::uint64_t> file_size;  // as told to the parser
  StatusCode code;
  std::string fragment;  // distinctive part of the message
};

std::vector<BadFile> Catalogue() {
  std::vector<BadFile> c;
  auto add = [&](std::string label, std::vector<std::byte> bytes, StatusCode code,
                 std::string fragment) {
    const std::uint64_t size = bytes.size();
    c.push_back({std::move(label), std::move(bytes), size, code, std::move(fragment)});
  };
  auto json = [&](std::string label, std::string text, std::size_t data, std::string fragment) {
    add(std::move(label), MakeFile(text, data), StatusCode::kCorruption, std::move(fragment));
  };
  const std::string ok_a = Entry("a", "F32", "[2,2]", 0, 16);

  add("truncated", {std::byte{2}, std::byte{0}, std::byte{0}}, StatusCode::kCorruption,
      "at byte 0: file is 3 bytes, too short for the 8-byte header length");
  {
    std::vector<std::byte> f = MakeFile("{}");
    StoreLE64(f.data(), 100);
    add("length past file", f, StatusCode::kCorruption,
        "header length at byte 0: 100 runs past the end of the file (10 bytes)");
  }
  {
    std::vector<std::byte> f(16, std::byte{' '});
    StoreLE64(f.data(), kMaxSafetensorsHeaderBytes + 1);
    c.push_back({"length over cap", f, std::nullopt, StatusCode::kCorruption,
                 "header length at byte 0: 100000001 exceeds the cap of 100000000 bytes"});
  }
  json("empty header", "", 0, "invalid header JSON at byte 8: unexpected end of input");
  json("not JSON", "hello", 0, "invalid header JSON at byte 8: unexpected 'h'");
  json("JSON then garbage", "{}x", 0, "invalid header JSON at byte 10: unexpected 'x' after");
  json("not an object", "[1,2]", 0, "header at byte 8: is not a JSON object");
  json("duplicate key", "{" + ok_a + "," + Entry("a", "F32", "[4]", 16, 32) + "}", 32,
       "invalid header JSON at byte 65: duplicate key \"a\"");
  json("invalid UTF-8 name", "{\"\xC3\x28\":{}}", 0, "invalid header JSON at byte 10: invalid UTF-8");
  json("nested too deep", R"({"a":{"dtype":"U8","shape":[[[1]]],"data_offsets":[0,1]}})", 1,
       "nesting deeper than 4 levels");
  json("metadata not an object", R"({"__metadata__":["x"]})", 0,
       "__metadata__ at byte 24: is not an object");
  json("metadata value not a string", R"({"__metadata__":{"k":1}})", 0,
       "__metadata__ key \"k\" at byte 29: value is not a string");
  json("entry not an object", R"({"a":[1]})", 0, "tensor 'a' at byte 13: entry is not an object");
  json("missing dtype", R"({"a":{"shape":[1],"data_offsets":[0,1]}})", 1,
       "tensor 'a' at byte 13: missing field \"dtype\"");
  json("missing shape", R"({"a":{"dtype":"U8","data_offsets":[0,1]}})", 1, "missing field \"shape\"");
  json("missing offsets", R"({"a":{"dtype":"U8","shape":[1]}})", 1, "missing field \"data_offsets\"");
  json("unknown field", R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":0}})", 1,
       "tensor 'a' at byte 64: unknown field \"x\"");
  json("unknown dtype", "{" + Entry("a", "Q8", "[1]", 0, 1) + "}", 1,
       "tensor 'a' at byte 22: unknown dtype \"Q8\"");
  json("dtype not a string", R"({"a":{"dtype":1,"shape":[1],"data_offsets":[0,1]}})", 1,
       "dtype is not a string");
  json("lowercase dtype", "{" + Entry("a", "f32", "[1]", 0, 4) + "}", 4, "unknown dtype \"f32\"");
  json("shape not an array", "{" + Entry("a", "U8", "4", 0, 4) + "}", 4,
       "tensor 'a' at byte 35: shape is not an array");
  json("negative dim", "{" + Entry("a", "U8", "[2,-1]", 0, 2) + "}", 2,
       "tensor 'a' at byte 38: shape[1] is not a non-negative integer");
  json("fractional dim", "{" + Entry("a", "U8", "[1.5]", 0, 2) + "}", 2,
       "shape[0] is not a non-negative integer");
  json("integral-valued float dim", "{" + Entry("a", "U8", "[2.0]", 0, 2) + "}", 2,
       "shape[0] is not a non-negative integer");
  json("string dim", "{" + Entry("a", "U8", "[\"2\"]", 0, 2) + "}", 2,
       "shape[0] is not a non-negative integer");
  json("rank over cap", "{" + Entry("a", "U8", "[1,1,1,1,1,1,1,1,1]", 0, 1) + "}", 1,
       "shape has rank 9, more than the cap of 8");
  json("offsets arity 1", R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0]}})", 1,
       "tensor 'a' at byte 54: data_offsets is not an array of two integers");
  json("offsets arity 3", R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}})", 2,
       "data_offsets is not an array of two integers");
  json("offsets not an array", R"({"a":{"dtype":"U8","shape":[1],"data_offsets":"0,1"}})", 1,
       "data_offsets is not an array of two integers");
  json("negative offset", R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[-1,1]}})", 1,
       "data_offsets[0] is not a non-negative integer");
  json("reversed offsets", "{" + Entry("a", "U8", "[0]", 8, 4) + "}", 8,
       "tensor 'a' at byte 54: data_offsets [8, 4] are reversed");
  json("offsets past end", "{" + Entry("a", "U8", "[8]", 0, 8) + "}", 7,
       "data_offsets [0, 8] run past the end of the data section (7 bytes)");
  json("size mismatch", "{" + Entry("a", "F32", "[2,2]", 0, 12) + "}", 12,
       "tensor 'a' at byte 57: data_offsets [0, 12] length 12, expected 16 (shape [2,2] x F32)");
  json("product overflow", "{" + Entry("a", "U8", "[1099511627776,1099511627776]", 0, 0) + "}", 0,
       "tensor 'a' at byte 35: byte size of shape [1099511627776,1099511627776] x U8 overflows 64 bits");
  json("dtype size overflow", "{" + Entry("a", "I64", "[2305843009213693952]", 0, 0) + "}", 0,
       "overflows 64 bits");
  json("overlap", "{" + ok_a + "," + Entry("b", "U8", "[4]", 12, 16) + "}", 16,
       "tensor 'b' at byte 110: data_offsets [12, 16] overlap tensor 'a' [0, 16]");
  json("empty tensor inside another",
       "{" + ok_a + "," + Entry("b", "U8", "[0]", 4, 4) + "}", 16, "overlap tensor 'a'");
  json("padding overlaps", "{" + ok_a + "," + Entry("__pad.0", "U8", "[8]", 8, 16) + "}", 16,
       "tensor '__pad.0' at byte 116: data_offsets [8, 16] overlap tensor 'a'");
  json("empty name", "{" + Entry("", "U8", "[1]", 0, 1) + "}", 1, "tensor '' at byte 12: empty tensor name");
  json("hostile name is escaped", "{" + Entry("a\\nb", "Q8", "[1]", 0, 1) + "}", 1,
       "tensor 'a\\x0Ab' at byte");
  return c;
}

TEST(SafetensorsRejectTest, Catalogue) {
  for (const BadFile& c : Catalogue()) {
    SCOPED_TRACE(c.label);
    Result<SafetensorsHeader> r = ParseSafetensorsHeader(c.bytes, c.file_size, kName);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), c.code) << r.status().ToString();
    EXPECT_THAT(r.status().message(), StartsWith(std::string(kName) + ": "));
    EXPECT_THAT(r.status().message(), HasSubstr(c.fragment));
  }
}

// kMaxSafetensorsTensors + 1 entries, and `extra` at the end. The count is
// checked before any entry is validated, so entries need not be well formed.
std::string TooManyEntriesHeader(std::string_view extra) {
  std::string text = "{";
  text.reserve(12 * (kMaxSafetensorsTensors + 1));
  char key[8];
  for (std::size_t i = 0; i <= kMaxSafetensorsTensors; ++i) {
    std::size_t v = i;
    for (int k = 0; k < 4; ++k, v /= 62)
      key[k] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"[v % 62];
    text += i ? ",\"" : "\"";
    text.append(key, 4);
    text += "\":0";
  }
  text += extra;
  text += "}";
  return text;
}

TEST(SafetensorsRejectTest, TooManyEntries) {
  Result<SafetensorsHeader> r = Parse(MakeFile(TooManyEntriesHeader("")));
  ASSERT_EQ(r.status().code(), StatusCode::kCorruption) << r.status().ToString();
  EXPECT_THAT(r.status().message(), HasSubstr("header at byte 8: 1000001 entries exceed the cap of 1000000"));
}

TEST(SafetensorsRejectTest, TooManyMembersStopsTheJsonParserEarly) {
  const std::string text = TooManyEntriesHeader(R"(,"__metadata__":{})");
  Result<SafetensorsHeader> r = Parse(MakeFile(text));
  ASSERT_EQ(r.status().code(), StatusCode::kCorruption) << r.status().ToString();
  EXPECT_THAT(r.status().message(),
              HasSubstr("at byte " + std::to_string(8 + text.size() - 18) + ": object with more than 1000001 members"));
}

// ---- must accept ----

TEST(SafetensorsAcceptTest, BasicFile) {
  const std::string text = "{\"__metadata__\":{\"format\":\"exlr8\",\"layer\":\"3\"}," +
                           Entry("w", "F16", "[2,3]", 16, 28) + "," + Entry("v", "I64", "[2]", 0, 16) +
                           "," + Entry("s", "BF16", "[]", 28, 30) + "}";
  std::vector<std::byte> f = MakeFile(text, 30);
  Result<SafetensorsHeader> r = Parse(f);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const SafetensorsHeader& h = *r;
  EXPECT_EQ(h.json_length(), text.size());
  EXPECT_EQ(h.data_start(), 8 + text.size());
  EXPECT_EQ(h.data_end(), 30u);
  EXPECT_EQ(h.padding_entries(), 0u);
  ASSERT_EQ(h.tensors().size(), 3u);
  // Sorted by begin, not by document order.
  EXPECT_EQ(h.tensors()[0].name, "v");
  EXPECT_EQ(h.tensors()[1].name, "w");
  EXPECT_EQ(h.tensors()[2].name, "s");
  const TensorInfo* w = h.Find("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->dtype, DType::kF16);
  EXPECT_EQ(w->shape, (std::vector<std::uint64_t>{2, 3}));
  EXPECT_EQ(w->begin, 16u);
  EXPECT_EQ(w->end, 28u);
  EXPECT_EQ(w->byte_size(), 12u);
  EXPECT_EQ(w->num_elements(), 6u);
  EXPECT_EQ(h.AbsoluteOffset(*w), 8 + text.size() + 16);
  EXPECT_EQ(h.Find("s")->num_elements(), 1u);  // rank 0: a scalar
  EXPECT_EQ(h.Find("s")->shape.size(), 0u);
  EXPECT_EQ(h.Find("x"), nullptr);
  EXPECT_EQ(h.Find(""), nullptr);
  ASSERT_EQ(h.metadata().size(), 2u);
  EXPECT_EQ(h.metadata().at("format"), "exlr8");
  EXPECT_EQ(h.metadata().at("layer"), "3");
}

TEST(SafetensorsAcceptTest, TrailingSpaces) {
  const std::string text = "{" + Entry("a", "U8", "[3]", 0, 3) + "}";
  std::vector<std::byte> f = MakeFile(text, 3, 5);
  Result<SafetensorsHeader> r = Parse(f);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->json_length(), text.size() + 5);
  EXPECT_EQ(r->AbsoluteOffset(*r->Find("a")), 8 + text.size() + 5);
}

TEST(SafetensorsAcceptTest, PaddingEntriesAreValidatedButHidden) {
  const std::string text = "{" + Entry("a", "U8", "[3]", 0, 3) + "," +
                           Entry("__pad.a", "U8", "[5]", 3, 8) + "," + Entry("b", "F32", "[2]", 8, 16) +
                           "," + Entry("__pad.end", "U8", "[16]", 16, 32) + "}";
  Result<SafetensorsHeader> r = Parse(MakeFile(text, 32));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->padding_entries(), 2u);
  EXPECT_EQ(r->data_end(), 32u);  // padding counts towards the bytes used
  ASSERT_EQ(r->tensors().size(), 2u);
  EXPECT_EQ(r->tensors()[0].name, "a");
  EXPECT_EQ(r->tensors()[1].name, "b");
  EXPECT_EQ(r->Find("__pad.a"), nullptr);
  EXPECT_TRUE(IsPaddingName("__pad.x"));
  EXPECT_FALSE(IsPaddingName("__pad"));
  EXPECT_FALSE(IsPaddingName("x.__pad.y"));
}

TEST(SafetensorsAcceptTest, HeaderOnlyFiles) {
  for (const char* text : {"{}", "{ }  ", R"({"__metadata__":{}})", R"({"__metadata__":{"a":"b"}})"}) {
    SCOPED_TRACE(text);
    Result<SafetensorsHeader> r = Parse(MakeFile(text));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(r->tensors().empty());
    EXPECT_EQ(r->data_end(), 0u);
  }
}

TEST(SafetensorsAcceptTest, EmptyTensorsHolesAndEveryDtype) {
  // Zero-size tensors at a boundary, a hole (tolerated), all dtypes.
  std::string text = "{" + Entry("z0", "U8", "[0]", 0, 0) + "," + Entry("z1", "F32", "[4,0]", 4, 4);
  std::uint64_t at = 4;
  for (const char* dt : {"BOOL", "U8", "I8", "F8_E4M3", "F8_E5M2", "I16", "U16", "F16", "BF16", "I32",
                         "U32", "F32", "F64", "I64", "U64"}) {
    const std::uint64_t size = 3 * DTypeSize(*DTypeFromName(dt));
    text += "," + Entry(std::string("t_") + dt, dt, "[3]", at, at + size);
    at += size;
  }
  text += "}";
  Result<SafetensorsHeader> r = Parse(MakeFile(text, at + 100));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->tensors().size(), 17u);
  EXPECT_EQ(r->data_end(), at);
  EXPECT_EQ(r->Find("t_F64")->dtype, DType::kF64);
}

TEST(SafetensorsAcceptTest, UnknownFileSizeChecksOnlyConsistency) {
  const std::string text = "{" + Entry("big", "U8", "[1000000]", 0, 1000000) + "}";
  std::vector<std::byte> f = MakeFile(text);  // no data at all
  EXPECT_EQ(Parse(f).status().code(), StatusCode::kCorruption);
  Result<SafetensorsHeader> r = ParseSafetensorsHeader(f, std::nullopt, kName);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->data_end(), 1000000u);
}

// ---- fixtures ----

std::vector<std::byte> ReadPrefix(const std::filesystem::path& p, std::size_t n) {
  std::ifstream in(p, std::ios::binary);
  std::vector<std::byte> buf(n);
  in.read(reinterpret_cast<char*>(buf.data()), static_cast<std::streamsize>(n));
  buf.resize(static_cast<std::size_t>(in.gcount()));
  return buf;
}

std::vector<std::filesystem::path> FixtureFiles() {
  std::vector<std::filesystem::path> files;
  const std::filesystem::path root = std::filesystem::path(EXLR8_SHARED_DIR) / "fixtures";
  for (const char* sub : {"exlr8-tiny", "golden"})
    for (const auto& e : std::filesystem::recursive_directory_iterator(root / sub))
      if (e.is_regular_file() && e.path().extension() == ".safetensors") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

TEST(SafetensorsFixtureTest, AllFixturesParse) {
  const std::vector<std::filesystem::path> files = FixtureFiles();
  ASSERT_GE(files.size(), 14u);
  for (const auto& path : files) {
    SCOPED_TRACE(path.string());
    const std::uint64_t size = std::filesystem::file_size(path);
    Result<std::uint64_t> need = SafetensorsHeaderSize(ReadPrefix(path, 8), size, path.string());
    ASSERT_TRUE(need.ok()) << need.status().ToString();
    std::vector<std::byte> prefix = ReadPrefix(path, static_cast<std::size_t>(*need));
    Result<SafetensorsHeader> h = ParseSafetensorsHeader(prefix, size, path.string());
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    EXPECT_FALSE(h->tensors().empty());
    EXPECT_EQ(h->data_start(), *need);
    // The fixtures cover their data section exactly.
    EXPECT_EQ(h->data_end(), size - h->data_start());
    for (std::size_t i = 1; i < h->tensors().size(); ++i)
      EXPECT_LE(h->tensors()[i - 1].end, h->tensors()[i].begin);
  }
}

TEST(SafetensorsFixtureTest, IndexFileContents) {
  const std::filesystem::path path = std::filesystem::path(EXLR8_SHARED_DIR) /
                                     "fixtures/exlr8-tiny/experts/exlr8-layer-003.index.safetensors";
  const std::uint64_t size = std::filesystem::file_size(path);
  Result<SafetensorsHeader> h = ParseSafetensorsHeader(ReadPrefix(path, 1 << 16), size, "index");
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->json_length(), 3448u);
  EXPECT_EQ(h->tensors().size(), 42u);
  const TensorInfo* idx = h->Find("k2.index");
  ASSERT_NE(idx, nullptr);
  EXPECT_EQ(idx->dtype, DType::kI64);
  EXPECT_EQ(idx->shape, (std::vector<std::uint64_t>{4, 3, 16, 2}));
  EXPECT_EQ(idx->begin, 0u);
  EXPECT_EQ(idx->end, 3072u);
  EXPECT_EQ(h->tensors().front().name, "k2.index");
  EXPECT_EQ(h->Find("k2.checksum")->dtype, DType::kU64);
  EXPECT_EQ(h->metadata().at("widths"), "2,3,4");
  EXPECT_EQ(h->metadata().at("layer"), "3");
}

// ---- incremental use ----

TEST(SafetensorsIncrementalTest, HeaderSizeNeedsEightBytes) {
  std::vector<std::byte> f = MakeFile("{}", 0, 6);
  for (std::size_t n = 0; n < 8; ++n) {
    Result<std::uint64_t> r = SafetensorsHeaderSize(std::span(f).first(n), std::nullopt, kName);
    EXPECT_EQ(r.status().code(), StatusCode::kNeedMore) << n;
    EXPECT_EQ(ParseSafetensorsHeader(std::span(f).first(n), std::nullopt, kName).status().code(),
              StatusCode::kNeedMore);
    // A known size that is large enough is still NeedMore, not Corruption.
    EXPECT_EQ(SafetensorsHeaderSize(std::span(f).first(n), 1000, kName).status().code(),
              StatusCode::kNeedMore);
  }
  Result<std::uint64_t> r = SafetensorsHeaderSize(std::span(f).first(8), std::nullopt, kName);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 16u);
}

TEST(SafetensorsIncrementalTest, EveryPrefixIsNeedMoreThenParses) {
  const std::string text = "{\"__metadata__\":{\"k\":\"v\"}," + Entry("a", "U8", "[3]", 0, 3) + "," +
                           Entry("b", "F32", "[2]", 4, 12) + "}";
  std::vector<std::byte> f = MakeFile(text, 64, 3);
  const std::size_t need = 8 + text.size() + 3;
  for (std::size_t n = 0; n < need; ++n) {
    Result<SafetensorsHeader> r = ParseSafetensorsHeader(std::span(f).first(n), f.size(), kName);
    ASSERT_EQ(r.status().code(), StatusCode::kNeedMore) << "prefix " << n;
    EXPECT_THAT(r.status().message(), StartsWith(kName));
  }
  Result<SafetensorsHeader> exact = ParseSafetensorsHeader(std::span(f).first(need), f.size(), kName);
  ASSERT_TRUE(exact.ok()) << exact.status().ToString();
  Result<SafetensorsHeader> whole = Parse(f);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(exact->tensors().size(), 2u);
  EXPECT_EQ(exact->data_start(), whole->data_start());
  EXPECT_EQ(exact->Find("b")->begin, 4u);
}

TEST(SafetensorsIncrementalTest, ChunkedFeedingOfFixtures) {
  // A remote reader appends chunks of random size and retries while the
  // parser says NeedMore; the result must match the one-shot parse.
  const std::uint64_t seed = 4242;
  std::mt19937_64 rng(seed);
  for (const auto& path : FixtureFiles()) {
    SCOPED_TRACE(path.string() + " seed " + std::to_string(seed));
    const std::uint64_t size = std::filesystem::file_size(path);
    const std::vector<std::byte> file = ReadPrefix(path, 64 << 10);
    std::vector<std::byte> buf;
    Result<SafetensorsHeader> r = NeedMoreError("start");
    int calls = 0;
    while (r.status().code() == StatusCode::kNeedMore) {
      ASSERT_LT(buf.size(), file.size()) << "still NeedMore with every byte given";
      const std::size_t chunk = 1 + rng() % 4096;
      const std::size_t take = std::min(chunk, file.size() - buf.size());
      buf.insert(buf.end(), file.begin() + static_cast<std::ptrdiff_t>(buf.size()),
                 file.begin() + static_cast<std::ptrdiff_t>(buf.size() + take));
      r = ParseSafetensorsHeader(buf, size, path.filename().string());
      ++calls;
    }
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    Result<SafetensorsHeader> once = ParseSafetensorsHeader(file, size, path.filename().string());
    ASSERT_TRUE(once.ok());
    EXPECT_EQ(r->data_start(), once->data_start());
    ASSERT_EQ(r->tensors().size(), once->tensors().size());
    for (std::size_t i = 0; i < r->tensors().size(); ++i) {
      EXPECT_EQ(r->tensors()[i].name, once->tensors()[i].name);
      EXPECT_EQ(r->tensors()[i].begin, once->tensors()[i].begin);
    }
    EXPECT_GE(calls, 1);
  }
}

}  // namespace
}  // namespace exlr8
