// The decoder against the reference loader's output on exlr8-tiny (spec 16):
// every dense matrix, every dense checksum, every expert half.
//
// EXLR8_GOLDEN_RELEASE=DIR runs the same checks on another copy of the
// release: scripts/safetensors_compat_test.sh points it at exlr8-tiny written
// again by Hugging Face's safetensors library (other tensor order, metadata
// first, halves moved), whose decoded values must still be the golden ones.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "format/byte_source.h"
#include "format/dense.h"
#include "format/expert_decode.h"
#include "format/expert_index.h"
#include "format/json.h"
#include "format/reconstruct.h"
#include "tests/format/block_tolerance.h"
#include "tests/format/golden_files.h"

namespace exlr8 {
namespace {

using testing::LoadedFile;
using testing::LoadSafetensors;
using testing::ReadWholeFile;
using testing::Sha256Hex;
using testing::SharedPath;

// A file of the release under test, by its path in the release.
std::string ReleasePath(const std::string& rel) {
  const char* dir = std::getenv("EXLR8_GOLDEN_RELEASE");
  return (dir != nullptr && *dir != '\0' ? std::string(dir) : SharedPath("fixtures/exlr8-tiny")) + "/" + rel;
}

const char* const kDenseFiles[] = {"exlr8-dense-000.safetensors", "exlr8-dense-003.safetensors",
                                   "exlr8-dense-004.safetensors", "exlr8-vocab.safetensors"};

class Golden : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto g = LoadSafetensors(SharedPath("fixtures/golden/exlr8-tiny.safetensors"));
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    golden_ = new LoadedFile(std::move(g).value());
    const auto text = ReadWholeFile(SharedPath("fixtures/golden/exlr8-tiny.json"));
    auto j = ParseJson(std::string_view(reinterpret_cast<const char*>(text.data()), text.size()));
    ASSERT_TRUE(j.ok()) << j.status().ToString();
    json_ = new JsonValue(std::move(j).value());
  }
  static void TearDownTestSuite() {
    delete golden_;
    delete json_;
  }
  static LoadedFile* golden_;
  static JsonValue* json_;
};
LoadedFile* Golden::golden_ = nullptr;
JsonValue* Golden::json_ = nullptr;

using ::exlr8::testing::BlocksOutsideTolerance;

TEST_F(Golden, EveryDenseMatrixDecodes) {
  const JsonValue* dense_json = json_->Find("dense");
  ASSERT_NE(dense_json, nullptr);
  std::size_t checked = 0;
  for (const char* name : kDenseFiles) {
    auto file = LoadSafetensors(ReleasePath(std::string("dense/") + name));
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    SpanByteSource src(file->bytes, name);
    auto dense = DenseFile::Parse(file->header, src);
    ASSERT_TRUE(dense.ok()) << dense.status().ToString();
    for (const DenseMatrix& m : dense->matrices()) {
      SCOPED_TRACE(std::string(name) + ": " + m.name + " (" + std::string(DenseFormatName(m.record.format)) +
                   ")");
      EXPECT_TRUE(VerifyDenseMatrix(*dense, m, src).ok());
      auto w = DecodeDenseMatrix(*dense, m, src);
      ASSERT_TRUE(w.ok()) << w.status().ToString();
      const std::string key = std::string("dense/") + name + "/" + m.name + ".weight";
      const TensorInfo* gt = golden_->header.Find(key);
      ASSERT_NE(gt, nullptr) << key;
      ASSERT_EQ(gt->shape, (std::vector<std::uint64_t>{m.record.out, m.record.inp}));
      const auto want = golden_->F32(key);
      ASSERT_EQ(w->size(), want.size());
      const JsonValue* entry = dense_json->Find(std::string(name) + ":" + m.name + ".weight");
      ASSERT_NE(entry, nullptr);
      const auto& shape = entry->Find("shape")->as_array();
      ASSERT_EQ(shape.size(), 2u);
      EXPECT_EQ(shape[0].as_uint64(), m.record.out);
      EXPECT_EQ(shape[1].as_uint64(), m.record.inp);
      if (m.record.format == DenseFormat::kTrellis) {
        EXPECT_EQ(BlocksOutsideTolerance(m.record.out, m.record.inp, *w, want), 0);
      } else {
        std::size_t diff = 0;
        for (std::size_t i = 0; i < want.size(); ++i)
          diff += std::bit_cast<std::uint32_t>((*w)[i]) != std::bit_cast<std::uint32_t>(want[i]);
        EXPECT_EQ(diff, 0u) << "elements differing bitwise";
        EXPECT_EQ(Sha256Hex(*w), entry->Find("sha256")->as_string());
      }
      ++checked;
    }
  }
  EXPECT_EQ(checked, dense_json->as_object().size());
}

TEST_F(Golden, DenseFilesSeparatePlainTensors) {
  auto file = LoadSafetensors(ReleasePath("dense/exlr8-dense-003.safetensors"));
  ASSERT_TRUE(file.ok());
  SpanByteSource src(file->bytes, "exlr8-dense-003.safetensors");
  auto dense = DenseFile::Parse(file->header, src);
  ASSERT_TRUE(dense.ok()) << dense.status().ToString();
  EXPECT_EQ(dense->matrices().size(), 4u);
  ASSERT_EQ(dense->plain().size(), 2u);
  EXPECT_NE(dense->FindPlain("input_layernorm.weight"), nullptr);
  const DenseTensor* bias = dense->FindPlain("mlp.gate.e_score_correction_bias");
  ASSERT_NE(bias, nullptr);
  auto v = ReadPlainTensorAsFloat(*bias, src);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->size(), 4u);
  const DenseMatrix* gate = dense->FindMatrix("mlp.gate");
  ASSERT_NE(gate, nullptr);
  EXPECT_EQ(gate->record.format, DenseFormat::kFp32);
  EXPECT_EQ(gate->num_blocks(), 1u);  // out = 4: one partial block
}

// A byte flipped anywhere a block's checksum covers is caught for that block
// (first byte of its first run, last byte of its last run), and only there
// unless the run is shared by every block.
TEST_F(Golden, DenseChecksumsDetectFlippedBytes) {
  for (const char* name : kDenseFiles) {
    auto file = LoadSafetensors(ReleasePath(std::string("dense/") + name));
    ASSERT_TRUE(file.ok());
    SpanByteSource src(file->bytes, name);
    auto dense = DenseFile::Parse(file->header, src);
    ASSERT_TRUE(dense.ok());
    for (const DenseMatrix& m : dense->matrices()) {
      for (std::uint64_t b = 0; b < m.num_blocks(); ++b) {
        SCOPED_TRACE(std::string(name) + ": " + m.name + " block " + std::to_string(b));
        auto runs = DenseBlockRuns(m, b);
        ASSERT_TRUE(runs.ok());
        for (std::uint64_t pos : {runs->front().offset, runs->back().offset + runs->back().length - 1}) {
          file->bytes[pos] ^= std::byte{0x01};
          Status s = VerifyDenseBlock(*dense, m, b, src);
          EXPECT_EQ(s.code(), StatusCode::kCorruption) << pos;
          EXPECT_NE(s.message().find(m.name), std::string::npos) << s.message();
          EXPECT_NE(s.message().find("block " + std::to_string(b)), std::string::npos) << s.message();
          file->bytes[pos] ^= std::byte{0x01};
        }
        EXPECT_TRUE(VerifyDenseBlock(*dense, m, b, src).ok());
      }
    }
  }
}

// One layer's index and width files in memory.
struct LayerFiles {
  std::vector<std::byte> index_bytes;
  std::unique_ptr<SpanByteSource> index_src;
  std::unique_ptr<ExpertIndex> index;
  std::map<int, std::vector<std::byte>> width_bytes;
};

std::string LayerPath(int layer, const std::string& suffix) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "experts/exlr8-layer-%03d.%s", layer, suffix.c_str());
  return ReleasePath(buf);
}

TEST_F(Golden, EveryExpertHalf) {
  const JsonValue* halves = json_->Find("halves");
  ASSERT_NE(halves, nullptr);
  std::map<int, LayerFiles> layers;
  std::size_t checked = 0, sampled = 0;
  for (const auto& [key, entry] : halves->as_object()) {
    SCOPED_TRACE(key);
    // "L/e/proj/h/K"
    std::vector<std::string> parts;
    for (std::size_t start = 0;;) {
      const std::size_t slash = key.find('/', start);
      parts.push_back(key.substr(start, slash - start));
      if (slash == std::string::npos) break;
      start = slash + 1;
    }
    ASSERT_EQ(parts.size(), 5u);
    const int layer = std::stoi(parts[0]);
    const int expert = parts[1] == "shared" ? kSharedExpert : std::stoi(parts[1]);
    const auto proj = ProjFromName(parts[2]);
    ASSERT_TRUE(proj.has_value());
    const auto h = static_cast<std::uint32_t>(std::stoul(parts[3]));
    const int k = std::stoi(parts[4]);

    LayerFiles& lf = layers[layer];
    if (!lf.index) {
      lf.index_bytes = ReadWholeFile(LayerPath(layer, "index.safetensors"));
      lf.index_src = std::make_unique<SpanByteSource>(lf.index_bytes, "index " + parts[0]);
      auto ix = ExpertIndex::Read(*lf.index_src, layer);
      ASSERT_TRUE(ix.ok()) << ix.status().ToString();
      lf.index = std::make_unique<ExpertIndex>(std::move(ix).value());
    }
    auto& wb = lf.width_bytes[k];
    if (wb.empty()) wb = ReadWholeFile(LayerPath(layer, "k" + std::to_string(k) + ".safetensors"));
    auto he = lf.index->Half(expert, *proj, h, k);
    ASSERT_TRUE(he.ok()) << he.status().ToString();
    ASSERT_LE(he->offset + he->length, wb.size());
    const auto bytes = std::span<const std::byte>(wb).subspan(he->offset, he->length);

    // tiles: bit-exact, checksum verified on the way
    std::vector<float> t;
    Status s = DecodeExpertHalf(*lf.index, *lf.index_src, bytes, expert, *proj, h, k, DecodeStage::kTiles,
                                /*verify=*/true, &t);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(Sha256Hex(t), entry.Find("tiles_sha256")->as_string());

    // weights: by value
    const HalfLayout layout = *proj == Proj::kDown ? HalfLayout::kDown : HalfLayout::kGateUp;
    const std::size_t rows = layout == HalfLayout::kGateUp ? lf.index->hidden() : 128;
    const std::size_t cols = layout == HalfLayout::kGateUp ? 128 : lf.index->hidden();
    std::vector<float> u, v, w = t;
    ASSERT_TRUE(lf.index->LoadHalfVectors(*lf.index_src, expert, *proj, h, k, &u, &v).ok());
    ASSERT_TRUE(ReconstructHalf(layout, lf.index->hidden(), w, u, v).ok());
    double absmax = 0, sumsq = 0;
    for (float x : w) {
      absmax = std::max(absmax, std::fabs(double(x)));
      sumsq += double(x) * x;
    }
    const double want_absmax = entry.Find("weights_absmax")->as_double();
    const double want_sumsq = entry.Find("weights_sumsq")->as_double();
    EXPECT_NEAR(absmax, want_absmax, 1e-5 * want_absmax);
    EXPECT_NEAR(sumsq, want_sumsq, 1e-5 * want_sumsq);

    const std::string name = parts[0] + "/" + parts[1] + "/" + parts[2] + "/" + parts[3] + "/" + parts[4];
    if (golden_->header.Find(name + "/tiles") != nullptr) {
      const auto gt = golden_->F32(name + "/tiles");
      ASSERT_EQ(gt.size(), t.size());
      EXPECT_EQ(std::memcmp(gt.data(), t.data(), t.size() * 4), 0);
      const auto gw = golden_->F32(name + "/weights");
      ASSERT_EQ(gw.size(), w.size());
      EXPECT_EQ(BlocksOutsideTolerance(rows, cols, w, gw), 0);
      ++sampled;
    }
    ++checked;
  }
  EXPECT_EQ(checked, halves->as_object().size());
  EXPECT_EQ(checked, 1344u);
  EXPECT_GT(sampled, 0u);
}

}  // namespace
}  // namespace exlr8
