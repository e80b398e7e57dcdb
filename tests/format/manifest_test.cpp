#include "format/manifest.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "format/layout.h"
#include "tests/format/test_util.h"

namespace exlr8 {
namespace {

using ::exlr8::testing::ReadText;
using ::exlr8::testing::TinyRelease;
using ::testing::HasSubstr;

std::map<int, LayerGeometry> TinyGeometry() {
  LayerGeometry g{4, 16, {2, 3, 4}, {3, 4}};
  return {{3, g}, {4, g}};
}

// A manifest for the tiny geometry, with parts replaceable for broken cases.
std::string Manifest3(const std::string& gate0 = "[2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2]",
                      const std::string& down = "[2,3,4,3]",
                      const std::string& shared = R"({"gate":4,"up":[3,3,3,3,3,3,3,3,3,3,3,3,3,3,3,3],"down":4})") {
  return R"({"layers":{"3":{"gate":[)" + gate0 + R"(,3,4,2],"up":[4,4,4,4],"down":)" + down + R"(,"shared":)" + shared +
         R"(}}})";
}

TEST(ManifestTest, ParsesFixtureManifests) {
  for (const char* name : {"home", "down1", "up1"}) {
    auto m = ParseManifest(ReadText(TinyRelease() / ManifestPath(name)), name, TinyGeometry());
    ASSERT_TRUE(m.ok()) << name << ": " << m.status().ToString();
    EXPECT_EQ(m->layers().size(), 2u);
    EXPECT_TRUE(m->warnings().empty());
    const LayerWidths& l3 = m->layers().at(3);
    EXPECT_EQ(l3.gate.size(), 64u);
    EXPECT_EQ(l3.down.size(), 4u);
    EXPECT_TRUE(l3.has_shared);
  }
  // Spot values from the fixture's home manifest (layer 3): gate[0] = [2,2,4,3,...], down = [2,3,3,2].
  auto home = ParseManifest(ReadText(TinyRelease() / ManifestPath("home")), "home", TinyGeometry());
  ASSERT_TRUE(home.ok());
  EXPECT_EQ(home->layers().at(3).Width(0, Proj::kGate, 2), 4);
  EXPECT_EQ(home->layers().at(3).Width(0, Proj::kGate, 3), 3);
  EXPECT_EQ(home->layers().at(3).Width(2, Proj::kDown, 9), 3);
  EXPECT_EQ(home->layers().at(3).Width(kSharedExpert, Proj::kDown, 0), 4);
  auto up1 = ParseManifest(ReadText(TinyRelease() / ManifestPath("up1")), "up1", TinyGeometry());
  auto down1 = ParseManifest(ReadText(TinyRelease() / ManifestPath("down1")), "down1", TinyGeometry());
  EXPECT_GT(up1->BitsPerWeight(), home->BitsPerWeight());
  EXPECT_LT(down1->BitsPerWeight(), home->BitsPerWeight());
}

TEST(ManifestTest, ScalarsExpandAndBitsPerWeightCountsEveryHalf) {
  auto m = ParseManifest(Manifest3(), "t", TinyGeometry());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const LayerWidths& l = m->layers().at(3);
  EXPECT_EQ(l.Width(1, Proj::kGate, 15), 3);
  EXPECT_EQ(l.Width(3, Proj::kUp, 0), 4);
  EXPECT_EQ(l.Width(kSharedExpert, Proj::kGate, 5), 4);
  // gate: 2*16 + 3*16 + 4*16 + 2*16 = 176; up: 4*64 = 256; down: (2+3+4+3)*16 = 192
  EXPECT_DOUBLE_EQ(m->BitsPerWeight(), (176.0 + 256 + 192) / 192);
  ASSERT_EQ(m->warnings().size(), 1u);  // layer 4 absent
  EXPECT_THAT(m->warnings()[0], HasSubstr("no entry for MoE layer 4"));
}

struct BrokenManifest {
  const char* name;
  std::string json;
  const char* expect;
};

class BrokenManifestTest : public ::testing::TestWithParam<BrokenManifest> {};

TEST_P(BrokenManifestTest, Rejected) {
  auto m = ParseManifest(GetParam().json, "bad", TinyGeometry());
  ASSERT_FALSE(m.ok()) << GetParam().name;
  EXPECT_EQ(m.status().code(), StatusCode::kCorruption);
  EXPECT_THAT(m.status().message(), HasSubstr(GetParam().expect));
  EXPECT_THAT(m.status().message(), HasSubstr("manifest bad"));
}

INSTANTIATE_TEST_SUITE_P(
    Catalogue, BrokenManifestTest,
    ::testing::Values(
        BrokenManifest{"not_json", "{layers", "at byte"},
        BrokenManifest{"not_object", "[1]", "expected an object"},
        BrokenManifest{"no_layers", "{}", "missing \"layers\""},
        BrokenManifest{"unstored_width", Manifest3("[2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,5]"),
                       "layers.3.gate[0][15] at byte"},
        BrokenManifest{"unstored_width_msg", Manifest3("5"), "width 5 is not stored (stored: 2,3,4)"},
        BrokenManifest{"short_row", Manifest3("[2,2,2]"), "has 3 entries, expected 16"},
        BrokenManifest{"fractional", Manifest3("2.5"), "width is not an integer"},
        // a width beyond int64 is named as a double in the message, never cast to an integer
        BrokenManifest{"huge_width", Manifest3("318446744073709551616"), "width 3.1844674407370955e+20 is not stored"},
        BrokenManifest{"string_width", Manifest3("\"2\""), "expected a list of 16 widths or one width"},
        BrokenManifest{"down_count", Manifest3("2", "[2,3,4]"), "has 3 experts, expected 4"},
        BrokenManifest{"down_nonuniform", Manifest3("2", "[2,3,4,[3,3,3,3,3,3,3,3,3,3,3,3,3,3,3,4]]"),
                       "uniform per expert"},
        BrokenManifest{"shared_unstored", Manifest3("2", "[2,3,4,3]", R"({"gate":2,"up":3,"down":4})"),
                       "layers.3.shared.gate"},
        BrokenManifest{"shared_missing_down", Manifest3("2", "[2,3,4,3]", R"({"gate":3,"up":3})"),
                       "missing \"down\""},
        BrokenManifest{"layer_without_index", R"({"layers":{"7":{}}})", "layer 7 has no expert index file"},
        BrokenManifest{"padded_key", R"({"layers":{"03":{}}})", "not a decimal layer number"},
        BrokenManifest{"duplicate_key", R"({"layers":{"3":{},"3":{}}})", "duplicate"},
        BrokenManifest{"gate_not_list", R"({"layers":{"3":{"gate":7,"up":[],"down":[]}}})",
                       "expected a list of 4 experts"}),
    [](const auto& param_info) { return std::string(param_info.param.name); });

// What a manifest may hold is bounded by the geometry (twice what it can
// use, plus a little), not by the parser's general cap of 50M values.
TEST(ManifestTest, ValuesAreCappedByTheGeometry) {
  std::string junk = "[0";
  for (int i = 0; i < 20000; ++i) junk += ",0";
  junk += "]";
  const std::string text = Manifest3();
  const std::string big = text.substr(0, text.size() - 1) + ",\"x\":" + junk + "}";
  auto m = ParseManifest(big, "t", TinyGeometry());
  ASSERT_EQ(m.status().code(), StatusCode::kCorruption);
  EXPECT_THAT(m.status().message(), HasSubstr("manifest t"));
  EXPECT_THAT(m.status().message(), HasSubstr("values"));
  const std::string small = text.substr(0, text.size() - 1) + ",\"x\":[0,0,0,0]}";
  auto ok = ParseManifest(small, "t", TinyGeometry());
  EXPECT_TRUE(ok.ok()) << ok.status().ToString();
  // The fixture's own, and a GLM-sized geometry's cap, are far above what they use.
  EXPECT_TRUE(ParseManifest(ReadText(TinyRelease() / ManifestPath("home")), "home", TinyGeometry()).ok());
}

// Names from the manifest reach messages escaped: no terminal control
// bytes, no forged lines.
TEST(ManifestTest, KeysInMessagesAreEscaped) {
  auto m = ParseManifest(R"({"layers":{"3\u001b[31mRED\nFAKE: ok":{}}})", "t", TinyGeometry());
  ASSERT_EQ(m.status().code(), StatusCode::kCorruption);
  EXPECT_THAT(m.status().message(), HasSubstr("layers.3\\x1B[31mRED\\x0AFAKE: ok"));
  EXPECT_EQ(m.status().message().find('\x1b'), std::string::npos);
  EXPECT_EQ(m.status().message().find('\n'), std::string::npos);
}

TEST(ManifestTest, AcceptsIntegralFloatsLikeTheLoader) {
  auto m = ParseManifest(Manifest3("3.0"), "t", TinyGeometry());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->layers().at(3).Width(0, Proj::kGate, 0), 3);
}

}  // namespace
}  // namespace exlr8
