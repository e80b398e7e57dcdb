// The codec against lvq5-tiny's golden.json: for every Tetra record of
// tiny-sealed.bin, the SHA-256 of its decoded coordinates (DecodeDiskWords)
// and of its reconstructed f32 rows (ReconstructBlock, then the tail).
// The file is walked here with a minimal test-only reader (spec 1.1-1.5);
// the real reader, with every rule checked, is format/lvq5/.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "format/json.h"
#include "format/tetra/tables.h"
#include "format/tetra/word.h"
#include "tests/format/golden_files.h"

namespace exlr8::tetra {
namespace {

using testing::ReadWholeFile;
using testing::Sha256Hex;
using testing::SharedPath;

// A little-endian cursor that fails the test on reading past the end.
struct Cursor {
  const std::vector<std::byte>& bytes;
  std::size_t at = 0;
  bool Need(std::size_t n) const { return n <= bytes.size() && at <= bytes.size() - n; }
  template <typename T>
  T Read() {
    T v{};
    if (Need(sizeof v)) std::memcpy(&v, bytes.data() + at, sizeof v);
    at += sizeof v;
    return v;
  }
};

TEST(TetraGolden, TinySealedRecordsDecodeAndReconstructToGolden) {
  ASSERT_TRUE(TablesStatus().ok()) << TablesStatus().ToString();
  const auto file = ReadWholeFile(SharedPath("fixtures/lvq5-tiny/tiny-sealed.bin"));
  const auto text = ReadWholeFile(SharedPath("fixtures/lvq5-tiny/golden.json"));
  ASSERT_FALSE(file.empty());
  auto golden = ParseJson(std::string_view(reinterpret_cast<const char*>(text.data()), text.size()));
  ASSERT_TRUE(golden.ok()) << golden.status().ToString();
  std::size_t want_tetra = 0;
  for (const auto& member : golden.value().as_object()) {
    const JsonValue* kind = member.second.Find("kind");
    if (kind != nullptr && kind->is_string() && kind->as_string() == "tetra") ++want_tetra;
  }
  ASSERT_GT(want_tetra, 0U);

  Cursor c{file, 0};
  ASSERT_TRUE(c.Need(32));
  ASSERT_EQ(std::memcmp(file.data(), "LVQ5", 4), 0);
  c.at = 4;
  const auto matrices = c.Read<std::uint32_t>();
  EXPECT_EQ(c.Read<std::uint64_t>(), kBallMapFingerprint);
  EXPECT_EQ(c.Read<std::uint64_t>(), kTetraMapFingerprint);
  c.at = 32;
  std::size_t checked = 0;
  for (std::uint32_t r = 0; r < matrices; ++r) {
    const auto name_len = c.Read<std::uint32_t>();
    ASSERT_TRUE(c.Need(name_len)) << "record " << r;
    const std::string name(reinterpret_cast<const char*>(file.data() + c.at), name_len);
    c.at += name_len;
    const auto d_out = c.Read<std::uint32_t>(), d_in = c.Read<std::uint32_t>();
    c.Read<std::uint32_t>();  // shell_cap
    const auto kind = c.Read<std::uint32_t>(), n_cent = c.Read<std::uint32_t>();
    c.Read<std::uint64_t>();  // rotation seed
    c.Read<std::uint32_t>();  // has_rotation
    if (kind == 2) {
      const auto payload = c.Read<std::uint64_t>();
      ASSERT_TRUE(c.Need(payload)) << name;
      c.at += payload;
      continue;
    }
    ASSERT_EQ(kind, 1U) << name;
    ASSERT_EQ(n_cent, 2U) << name;
    const std::size_t nblocks = d_in / 24, tail_cols = d_in % 24;
    const double centroids[2] = {c.Read<double>(), c.Read<double>()};
    std::vector<double> row_scale(d_out);
    for (auto& s : row_scale) s = c.Read<double>();
    std::vector<float> tail(std::size_t{d_out} * tail_cols);
    for (auto& v : tail) v = c.Read<float>();
    const auto code_len = c.Read<std::uint64_t>();
    ASSERT_EQ(code_len, 6ULL * d_out * nblocks) << name;
    ASSERT_TRUE(c.Need(code_len)) << name;
    const std::span<const std::byte> codes(file.data() + c.at, code_len);
    c.at += code_len;

    std::vector<std::int8_t> coords(24 * std::size_t{d_out} * nblocks);
    DecodeDiskWords(BuiltTables(), codes, coords);
    std::vector<float> weights;
    weights.reserve(std::size_t{d_out} * d_in);
    for (std::size_t i = 0; i < d_out; ++i) {
      for (std::size_t j = 0; j < nblocks; ++j) {
        const std::size_t block = i * nblocks + j;
        const std::uint64_t gain = WordFromDisk(codes.data() + 6 * block) >> 47;
        float out[24];
        ReconstructBlock(coords.data() + 24 * block, centroids[gain], row_scale[i], out);
        weights.insert(weights.end(), out, out + 24);
      }
      weights.insert(weights.end(), tail.begin() + i * tail_cols, tail.begin() + (i + 1) * tail_cols);
    }
    const JsonValue* g = golden.value().Find(name);
    ASSERT_NE(g, nullptr) << name;
    ASSERT_NE(g->Find("coords_sha256"), nullptr) << name;
    EXPECT_EQ(Sha256Hex(coords), g->Find("coords_sha256")->as_string()) << name;
    EXPECT_EQ(Sha256Hex(weights), g->Find("weights_sha256")->as_string()) << name;
    ++checked;
  }
  EXPECT_EQ(checked, want_tetra);
}

}  // namespace
}  // namespace exlr8::tetra
