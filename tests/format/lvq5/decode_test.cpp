// The LVQ5 decoders (format/lvq5/decode.h): every digest of the fixture's
// golden.json reproduced, and written files of other geometries decoded
// back to what was written.
#include "format/lvq5/decode.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "format/dtype.h"
#include "format/json.h"
#include "format/lvq5/index.h"
#include "format/lvq5/writer.h"
#include "format/tetra/tables.h"
#include "format/tetra/word.h"
#include "tests/format/lvq5/lvq5_files.h"

namespace exlr8::lvq5 {
namespace {

using namespace exlr8::lvq5::testing;

// SHA-256 over the chunks a decoder hands out.
class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new()) { EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr); }
  ~Sha256() { EVP_MD_CTX_free(ctx_); }
  void Update(const void* p, std::size_t n) { EVP_DigestUpdate(ctx_, p, n); }
  std::string Hex() {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned len = 0;
    EVP_DigestFinal_ex(ctx_, md, &len);
    std::string out;
    char buf[3];
    for (unsigned i = 0; i < len; ++i) {
      std::snprintf(buf, sizeof buf, "%02x", md[i]);
      out += buf;
    }
    return out;
  }

 private:
  EVP_MD_CTX* ctx_;
};

struct Fixture {
  std::vector<std::byte> bytes = ReadBytes(FixtureDir() / "tiny-sealed.bin");
  SpanByteSource src{bytes, "tiny-sealed.bin"};
  JsonValue golden;
  Fixture() {
    auto text = ReadBytes(FixtureDir() / "golden.json");
    auto j = ParseJson(std::string_view(reinterpret_cast<const char*>(text.data()), text.size()));
    EXPECT_TRUE(j.ok()) << j.status().ToString();
    if (j.ok()) golden = *j;
  }
};

std::string FloatDigest(const std::function<Status(const FloatSink&)>& decode, std::uint64_t* count) {
  Sha256 h;
  *count = 0;
  Status s = decode([&](std::span<const float> v) {
    h.Update(v.data(), v.size_bytes());
    *count += v.size();
    return Status::Ok();
  });
  EXPECT_TRUE(s.ok()) << s.ToString();
  return h.Hex();
}

TEST(Lvq5Decode, FileSizeAndDigestMatchGolden) {
  Fixture f;
  const JsonValue* file = f.golden.Find("_file");
  ASSERT_NE(file, nullptr);
  EXPECT_EQ(f.bytes.size(), *file->Find("size")->as_uint64());
  Sha256 h;
  h.Update(f.bytes.data(), f.bytes.size());
  EXPECT_EQ(h.Hex(), file->Find("sha256")->as_string());
  auto ix = ReadIndex(f.src);
  ASSERT_TRUE(ix.ok()) << ix.status().ToString();
  EXPECT_EQ(ix->matrices.size(), *file->Find("records")->as_uint64());
}

TEST(Lvq5Decode, EveryGoldenDigestIsReproduced) {
  Fixture f;
  auto ix = ReadIndex(f.src);
  ASSERT_TRUE(ix.ok()) << ix.status().ToString();
  int checked = 0;
  for (const auto& [name, entry] : f.golden.as_object()) {
    if (name == "_file") continue;
    SCOPED_TRACE(name);
    const std::string& kind = entry.Find("kind")->as_string();
    std::uint64_t n = 0;
    if (kind == "tetra" || kind == "int4g128") {
      const MatrixRecord* m = ix->FindMatrix(name);
      ASSERT_NE(m, nullptr);
      EXPECT_EQ(m->kind, kind == "tetra" ? Kind::kTetra : Kind::kInt4G128);
      EXPECT_EQ(m->d_out, *entry.Find("d_out")->as_uint64());
      EXPECT_EQ(m->d_in, *entry.Find("d_in")->as_uint64());
      EXPECT_EQ(FloatDigest([&](const FloatSink& s) { return DecodeMatrix(f.src, *m, s); }, &n),
                entry.Find("weights_sha256")->as_string());
      EXPECT_EQ(n, std::uint64_t{m->d_out} * m->d_in);
      ++checked;
      if (kind == "tetra") {
        Sha256 h;
        std::uint64_t coords = 0;
        Status s = DecodeTetraCoords(f.src, *m, [&](std::span<const std::int8_t> v) {
          h.Update(v.data(), v.size());
          coords += v.size();
          return Status::Ok();
        });
        ASSERT_TRUE(s.ok()) << s.ToString();
        EXPECT_EQ(coords, std::uint64_t{m->d_out} * m->nblocks * 24);
        EXPECT_EQ(h.Hex(), entry.Find("coords_sha256")->as_string());
        ++checked;
      }
    } else {
      const RawTensor* t = ix->FindRaw(name);
      ASSERT_NE(t, nullptr);
      std::vector<std::uint64_t> dims;
      for (const auto& d : entry.Find("dims")->as_array()) dims.push_back(*d.as_uint64());
      EXPECT_EQ(t->dims, dims);
      EXPECT_EQ(t->tag, kind == "raw_f16" ? RawTag::kF16 : RawTag::kQuant);
      if (kind == "raw_q4") {
        EXPECT_EQ(t->bits, 4u);
        EXPECT_EQ(t->group, *entry.Find("group")->as_uint64());
      }
      EXPECT_EQ(FloatDigest([&](const FloatSink& s) { return DecodeRaw(f.src, *t, s); }, &n),
                entry.Find("weights_sha256")->as_string());
      EXPECT_EQ(n, t->count);
      ++checked;
    }
  }
  EXPECT_EQ(checked, 6 * 2 + 4 + 3);
}

TEST(Lvq5Decode, FixtureBlobIsTheConfig) {
  Fixture f;
  auto ix = ReadIndex(f.src);
  ASSERT_TRUE(ix.ok());
  const Blob* b = ix->FindBlob("config.json");
  ASSERT_NE(b, nullptr);
  std::string got;
  ASSERT_TRUE(ReadBlobBytes(f.src, *b, [&](std::span<const std::byte> v) {
                got.append(reinterpret_cast<const char*>(v.data()), v.size());
                return Status::Ok();
              }).ok());
  EXPECT_EQ(got.size(), b->length);
  EXPECT_TRUE(ParseJson(got).ok());
}

template <typename T>
std::vector<T> Collect(
    const std::function<Status(const std::function<Status(std::span<const T>)>&)>& decode) {
  std::vector<T> out;
  Status s = decode([&](std::span<const T> v) {
    out.insert(out.end(), v.begin(), v.end());
    return Status::Ok();
  });
  EXPECT_TRUE(s.ok()) << s.ToString();
  return out;
}

float Affine(std::uint16_t scale, std::uint32_t q, std::uint16_t bias) {
  volatile float prod = HalfToFloat(scale) * static_cast<float>(q);  // no contraction
  return prod + HalfToFloat(bias);
}

struct Geometry {
  std::uint32_t d_out, d_in;
};

// Tetra records at other geometries: d_in < 24, d_in % 24 != 0, rows of 1.
TEST(Lvq5Decode, WrittenTetraRecordsDecodeToTheirWords) {
  const auto& tables = tetra::BuiltTables();
  for (Geometry g : {Geometry{1, 1}, Geometry{2, 23}, Geometry{1, 24}, Geometry{3, 25}, Geometry{4, 71},
                     Geometry{5, 96}}) {
    SCOPED_TRACE(std::to_string(g.d_out) + "x" + std::to_string(g.d_in));
    FileSpec spec;
    spec.tetra.push_back(RandomTetra("t", g.d_out, g.d_in, 100 + g.d_in));
    const TetraRecordSpec& w = spec.tetra[0];
    auto bytes = WriteFile(spec);
    ASSERT_TRUE(bytes.ok());
    SpanByteSource src(*bytes, "t.bin");
    auto ix = ReadIndex(src);
    ASSERT_TRUE(ix.ok()) << ix.status().ToString();
    const MatrixRecord& m = ix->matrices[0];
    auto coords = Collect<std::int8_t>([&](const Int8Sink& s) { return DecodeTetraCoords(src, m, s); });
    auto weights = Collect<float>([&](const FloatSink& s) { return DecodeTetraWeights(src, m, s); });
    const std::uint32_t nb = g.d_in / 24, tail = g.d_in % 24;
    ASSERT_EQ(coords.size(), std::size_t{g.d_out} * nb * 24);
    ASSERT_EQ(weights.size(), std::size_t{g.d_out} * g.d_in);
    for (std::uint32_t i = 0; i < g.d_out; ++i) {
      for (std::uint32_t j = 0; j < nb; ++j) {
        const std::uint64_t word = w.words[i * nb + j];
        std::int8_t y[24];
        tetra::DecodeCoords(tables, word, y);
        std::int64_t sq = 0;
        for (int t = 0; t < 24; ++t) {
          ASSERT_EQ(coords[(i * nb + j) * 24 + t], y[t]);
          sq += y[t] * y[t];
        }
        // golden.json's recipe, written out independently.
        const double c = w.centroids[(word >> 47) & 1];
        const double scale = sq == 0 ? 0.0 : (c * w.row_scales[i]) / std::sqrt(static_cast<double>(sq));
        for (int t = 0; t < 24; ++t)
          ASSERT_EQ(weights[std::size_t{i} * g.d_in + j * 24 + t], static_cast<float>(y[t] * scale));
      }
      for (std::uint32_t t = 0; t < tail; ++t)
        ASSERT_EQ(weights[std::size_t{i} * g.d_in + nb * 24 + t], w.tail[i * tail + t]);
    }
  }
}

TEST(Lvq5Decode, WrittenInt4G128AndRawTensorsDecodeBack) {
  FileSpec spec;
  spec.int4.push_back(RandomInt4G128("one_row", 1, 128, 7));
  spec.int4.push_back(RandomInt4G128("m", 3, 384, 8));
  spec.raw.push_back(RandomRawF16("scalar", {}, 9));
  spec.raw.push_back(RandomRawF16("v", {2, 3, 4}, 10));
  spec.raw.push_back(RandomRawQuant("q4_odd", {3, 7}, 4, 3, 11));  // odd rows straddle bytes
  spec.raw.push_back(RandomRawQuant("q8", {2, 10}, 8, 4, 12));
  spec.raw.push_back(RandomRawQuant("q4_empty", {0, 8}, 4, 4, 13));
  auto bytes = WriteFile(spec);
  ASSERT_TRUE(bytes.ok());
  SpanByteSource src(*bytes, "m.bin");
  auto ix = ReadIndex(src);
  ASSERT_TRUE(ix.ok()) << ix.status().ToString();
  for (std::size_t k = 0; k < spec.int4.size(); ++k) {
    const auto& w = spec.int4[k];
    auto got = Collect<float>([&](const FloatSink& s) { return DecodeMatrix(src, ix->matrices[k], s); });
    ASSERT_EQ(got.size(), std::size_t{w.d_out} * w.d_in);
    for (std::size_t e = 0; e < got.size(); ++e) {
      const std::uint32_t q = (w.packed[e / 2] >> (4 * (e & 1))) & 0xF;
      const std::size_t g = e / 128;  // d_in % 128 == 0: groups are consecutive
      ASSERT_EQ(got[e], Affine(w.scales[g], q, w.biases[g])) << w.name << " " << e;
    }
  }
  for (std::size_t k = 0; k < spec.raw.size(); ++k) {
    const auto& t = spec.raw[k];
    SCOPED_TRACE(t.name);
    auto got = Collect<float>([&](const FloatSink& s) { return DecodeRaw(src, ix->raw[k], s); });
    ASSERT_EQ(got.size(), ix->raw[k].count);
    if (t.tag == RawTag::kF16) {
      for (std::size_t e = 0; e < got.size(); ++e) ASSERT_EQ(got[e], HalfToFloat(t.f16[e]));
      continue;
    }
    const std::uint64_t row_len = t.dims.back(), per_row = (row_len + t.group - 1) / t.group;
    for (std::size_t e = 0; e < got.size(); ++e) {
      const std::uint32_t q = t.bits == 8 ? t.packed[e] : (t.packed[e / 2] >> (4 * (e & 1))) & 0xF;
      const std::size_t g = (e / row_len) * per_row + (e % row_len) / t.group;
      ASSERT_EQ(got[e], Affine(t.scales[g], q, t.biases[g])) << e;
    }
  }
}

TEST(Lvq5Decode, LargeRecordsArriveInBoundedChunks) {
  FileSpec spec;
  spec.int4.push_back(RandomInt4G128("big", 20, 128 * 512, 3));  // 1.3 M values
  auto bytes = WriteFile(spec);
  ASSERT_TRUE(bytes.ok());
  SpanByteSource src(*bytes, "big.bin");
  auto ix = ReadIndex(src);
  ASSERT_TRUE(ix.ok());
  std::uint64_t total = 0, chunks = 0;
  ASSERT_TRUE(DecodeMatrix(src, ix->matrices[0], [&](std::span<const float> v) {
                EXPECT_LE(v.size(), kDecodeChunkValues);
                total += v.size();
                ++chunks;
                return Status::Ok();
              }).ok());
  EXPECT_EQ(total, 20u * 128 * 512);
  EXPECT_GE(chunks, 2u);
  // A failing sink stops the decoder with its status.
  Status s = DecodeMatrix(src, ix->matrices[0], [](std::span<const float>) { return IOError("disk full"); });
  EXPECT_EQ(s.code(), StatusCode::kIOError);
}

}  // namespace
}  // namespace exlr8::lvq5
