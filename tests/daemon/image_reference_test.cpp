// The CPU side of the device image's decode checks (image_reference.h)
// on a real cache: the sample, and the references against the format
// library's decoders run here on the release's own files.
#include "daemon/stage/image_reference.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>
#include <tuple>

#include "daemon/stage/rank_image_plan.h"
#include "format/byte_source.h"
#include "format/dense.h"
#include "format/expert_decode.h"
#include "format/expert_index.h"
#include "format/layout.h"
#include "format/trellis.h"
#include "tests/daemon/cache_test_util.h"
#include "tests/daemon/pull_test_util.h"
#include "tests/daemon/rank_test_util.h"

namespace exlr8 {
namespace {

using ::exlr8::testing::TempDir;

std::vector<std::byte> ReadRelease(const std::string& path) {
  std::ifstream in(TinyRelease() / path, std::ios::binary);
  std::vector<char> c((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> b(c.size());
  std::memcpy(b.data(), c.data(), c.size());
  return b;
}

TEST(ExactE4M3Byte, IsTheByteOfEveryE4M3Value) {
  for (unsigned b = 0; b < 256; ++b) {
    if (IsE4M3NaN(static_cast<std::uint8_t>(b))) continue;
    EXPECT_EQ(ExactE4M3Byte(E4M3ToFloat(static_cast<std::uint8_t>(b))), b) << "byte " << b;
    EXPECT_EQ(ExactE4M3Byte(E4M3ToFloat(static_cast<std::uint8_t>(b))),
              FloatToE4M3(E4M3ToFloat(static_cast<std::uint8_t>(b))));
  }
}

class ImageReferenceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    sim_ = StartSim(TinyRelease()).release();
    cache_ = new TempDir;
    ASSERT_TRUE(Pull(cache_->path(), Options(*sim_, "home", 3, 1)).ok());
  }
  static void TearDownTestSuite() {
    delete cache_;
    delete sim_;
  }
  static RankImagePlan Plan() {
    auto plan = PlanRankImage(TestRankRequest(cache_->path(), 3, 1));
    EXPECT_TRUE(plan.ok()) << plan.status().ToString();
    return std::move(*plan);
  }
  static inline hubsim::HubSim* sim_ = nullptr;
  static inline TempDir* cache_ = nullptr;
};

TEST_F(ImageReferenceTest, TheSampleCoversEveryLayerWidthAndProjectionAndIsSeeded) {
  const RankImagePlan plan = Plan();
  const ImageTables& t = plan.layout.tables;
  std::set<std::tuple<int, int, int>> groups;
  std::uint64_t halves = 0;
  for (const ImageTensor& x : t.tensors)
    if (x.kind == ImageRegionKind::kHalfRecord) {
      ++halves;
      groups.insert({x.layer, x.k, x.proj});
    }
  ASSERT_GT(halves, 0u);
  std::uint64_t of = 0;
  const auto a = ImageDecodeSample(t, false, 0.01, 7, &of);
  EXPECT_EQ(of, halves);
  std::set<std::tuple<int, int, int>> seen;
  for (std::uint32_t i : a) {
    ASSERT_EQ(t.tensors[i].kind, ImageRegionKind::kHalfRecord);
    seen.insert({t.tensors[i].layer, t.tensors[i].k, t.tensors[i].proj});
  }
  EXPECT_EQ(seen, groups);
  EXPECT_TRUE(std::is_sorted(a.begin(), a.end()));
  EXPECT_EQ(ImageDecodeSample(t, false, 0.01, 7, &of), a);
  EXPECT_NE(ImageDecodeSample(t, false, 0.01, 8, &of), a);
  EXPECT_GE(ImageDecodeSample(t, false, 0.5, 7, &of).size(), halves / 2);
  EXPECT_EQ(ImageDecodeSample(t, true, 0, 7, &of).size(), halves);
}

// ReferenceHalf (from the plan's cache pieces and the image's signs
// regions) equals DecodeExpertHalf on the release's own files, tiles and
// weights bit for bit: the same CPU code over the same bytes.
TEST_F(ImageReferenceTest, HalfReferenceEqualsTheFormatDecoder) {
  const RankImagePlan plan = Plan();
  const ImageTables& t = plan.layout.tables;
  std::uint64_t of = 0;
  int checked = 0;
  for (std::uint32_t i : ImageDecodeSample(t, false, 0.05, 3, &of)) {
    const ImageTensor& h = t.tensors[i];
    SCOPED_TRACE(h.What());
    const std::string index_path = ExpertIndexPath(h.layer);
    const std::vector<std::byte> index_bytes = ReadRelease(index_path);
    const SpanByteSource index_src(index_bytes, index_path);
    auto index = ExpertIndex::Read(index_src, h.layer);
    ASSERT_TRUE(index.ok()) << index.status().ToString();
    const int expert = h.expert == kImageSharedExpert ? kSharedExpert : h.expert;
    const Proj proj = static_cast<Proj>(h.proj);
    auto entry = index->Half(expert, proj, h.half, h.k);
    ASSERT_TRUE(entry.ok()) << entry.status().ToString();
    const std::vector<std::byte> width = ReadRelease(ExpertWidthPath(h.layer, h.k));
    const auto bytes = std::span<const std::byte>(width).subspan(entry->offset, entry->length);
    std::vector<float> want_tiles, want_weights;
    ASSERT_TRUE(DecodeExpertHalf(*index, index_src, bytes, expert, proj, h.half, h.k, DecodeStage::kTiles,
                                 true, &want_tiles)
                    .ok());
    ASSERT_TRUE(DecodeExpertHalf(*index, index_src, bytes, expert, proj, h.half, h.k, DecodeStage::kWeights,
                                 false, &want_weights)
                    .ok());
    std::vector<std::uint8_t> tiles(want_tiles.size());
    std::vector<float> weights(want_weights.size());
    ASSERT_TRUE(ReferenceHalf(plan, i, tiles, weights).ok());
    for (std::size_t e = 0; e < tiles.size(); ++e)
      ASSERT_EQ(std::bit_cast<std::uint32_t>(E4M3ToFloat(tiles[e])),
                std::bit_cast<std::uint32_t>(want_tiles[e]))
          << "tile element " << e;
    EXPECT_EQ(std::memcmp(weights.data(), want_weights.data(), weights.size() * 4), 0);
    ++checked;
  }
  EXPECT_GT(checked, 0);
  std::vector<std::uint8_t> small(3);
  std::vector<float> w(3);
  EXPECT_EQ(ReferenceHalf(plan, 0, small, w).code(), StatusCode::kInvalidArgument);
}

// Every matrix of every dense and vocabulary file is found, the default
// sample holds one of each format, and ReferenceDense is DecodeDenseMatrix
// of the release's file.
TEST_F(ImageReferenceTest, DenseMatricesAndTheirReferences) {
  const RankImagePlan plan = Plan();
  auto matrices = ImageDenseMatrices(plan.layout.tables);
  ASSERT_TRUE(matrices.ok()) << matrices.status().ToString();
  std::size_t expected = 0;
  std::set<DenseFormat> formats;
  for (const std::string file : {"dense/exlr8-dense-000.safetensors", "dense/exlr8-dense-003.safetensors",
                                 "dense/exlr8-dense-004.safetensors", "dense/exlr8-vocab.safetensors"}) {
    const std::vector<std::byte> bytes = ReadRelease(file);
    const SpanByteSource src(bytes, file);
    auto dense = DenseFile::Read(src);
    ASSERT_TRUE(dense.ok()) << dense.status().ToString();
    expected += dense->matrices().size();
    const std::string prefix = file.find("vocab") != std::string::npos
                                   ? ""
                                   : "layers." + std::to_string(std::stoi(file.substr(18, 3))) + ".";
    for (const DenseMatrix& dm : dense->matrices()) {
      SCOPED_TRACE(file + " " + dm.name);
      formats.insert(dm.record.format);
      const ImageDenseMatrix* m = nullptr;
      for (const ImageDenseMatrix& x : *matrices)
        if (x.name == prefix + dm.name) m = &x;
      ASSERT_NE(m, nullptr);
      EXPECT_EQ(m->format, dm.record.format);
      EXPECT_EQ(m->out, dm.record.out);
      EXPECT_EQ(m->inp, dm.record.inp);
      EXPECT_EQ(m->regions, dm.data.size());
      auto want = DecodeDenseMatrix(*dense, dm, src);
      ASSERT_TRUE(want.ok()) << want.status().ToString();
      auto got = ReferenceDense(plan, *m);
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      ASSERT_EQ(got->size(), want->size());
      EXPECT_EQ(std::memcmp(got->data(), want->data(), got->size() * 4), 0);
    }
  }
  EXPECT_EQ(matrices->size(), expected);
  EXPECT_EQ(formats.size(), 7u);  // the fixture has every format
  const auto sample = ImageDenseSample(*matrices, false, 5);
  std::set<DenseFormat> sampled;
  for (std::size_t i : sample) sampled.insert((*matrices)[i].format);
  EXPECT_EQ(sampled, formats);
  EXPECT_EQ(sample.size(), formats.size());
  EXPECT_EQ(ImageDenseSample(*matrices, true, 5).size(), matrices->size());
}

}  // namespace
}  // namespace exlr8
