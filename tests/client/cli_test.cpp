// The `exlr8` command end to end: synth -> plan -> verify -> decode round trips
// for several geometries and dtype/layout choices, run as a real process, and
// its exit statuses (client/cli/cli.h).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "format/json.h"
#include "format/layout.h"
#include "tests/client/exlr8_command.h"

namespace exlr8 {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;


struct Geometry {
  const char* name;
  const char* options;
  int tp;
};

class CliRoundTrip : public ::testing::TestWithParam<Geometry> {};

TEST_P(CliRoundTrip, SynthPlanVerifyDecode) {
  TempDir dir;
  const std::string rel = (dir.path() / "rel").string();
  ProcessResult synth = Exlr8("synth " + rel + " --seed 9 --quiet " + GetParam().options);
  ASSERT_EQ(synth.status, 0) << synth.out;

  // Every rank's plan: the halves of all ranks add up to every routed half once.
  std::uint64_t routed = 0, shared = 0;
  const int tp = GetParam().tp;
  for (int r = 0; r < tp; ++r) {
    ProcessResult plan = Exlr8("plan " + rel + " --manifest home --tp " + std::to_string(tp) + " --rank " + std::to_string(r) +
                     " --json");
    ASSERT_EQ(plan.status, 0) << plan.out;
    auto json = ParseJson(plan.out);
    ASSERT_TRUE(json.ok()) << json.status().ToString();
    routed += *json->Find("totals")->Find("routed_halves")->as_uint64();
    shared = *json->Find("totals")->Find("shared_halves")->as_uint64();
    ProcessResult verify = Exlr8("verify " + rel + " --manifest home --tp " + std::to_string(tp) + " --rank " +
                       std::to_string(r) + " --quiet");
    EXPECT_EQ(verify.status, 0) << verify.out;
  }
  ProcessResult one = Exlr8("plan " + rel + " --manifest home --tp 1 --rank 0 --json");
  auto all = ParseJson(one.out);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(routed, *all->Find("totals")->Find("routed_halves")->as_uint64());
  EXPECT_EQ(shared, *all->Find("totals")->Find("shared_halves")->as_uint64());

  ProcessResult verify_all = Exlr8("verify " + rel);
  EXPECT_EQ(verify_all.status, 0) << verify_all.out;
  EXPECT_THAT(verify_all.out, HasSubstr("0 failures"));

  // Decode a half and a dense matrix; sizes follow the geometry.
  ProcessResult dec = Exlr8("decode " + rel + " --layer 3 --expert 0 --proj down --half 0 --width 3 --out " + rel + "/d.f32");
  EXPECT_EQ(dec.status, 0) << dec.out;
  ProcessResult dense = Exlr8("decode " + rel + " --dense dense/exlr8-vocab.safetensors --matrix lm_head --out " + rel +
                    "/lm.f32");
  EXPECT_EQ(dense.status, 0) << dense.out;
}

INSTANTIATE_TEST_SUITE_P(
    Geometries, CliRoundTrip,
    ::testing::Values(
        Geometry{"fixture_like", "", 4},
        Geometry{"wide_u64_bf16_packed",
                 "--hidden 384 --halves 3 --experts 5 --moe-layers 3,5 --widths 1,3,8 --shared-widths 3 "
                 "--index-dtype U64 --checksum-dtype I64 --vector-dtype BF16 --block-vector-dtype F16 "
                 "--alignment 1 --half-order shuffled",
                 3},
        Geometry{"projection_major_65536", "--hidden 128 --halves 16 --experts 3 --moe-layers 3-4 --widths 3,4 "
                                           "--shared-widths 4 --alignment 65536 --half-order projection "
                                           "--vector-dtype F32 --record-dtype I32",
                 7}),
    [](const auto& param_info) { return std::string(param_info.param.name); });

TEST(CliTest, VerifyNamesACorruptHalfAndExitsOne) {
  TempDir dir;
  const std::string rel = (dir.path() / "rel").string();
  ASSERT_EQ(Exlr8("synth " + rel + " --seed 2 --quiet").status, 0);
  // Flip a byte in the middle of the first K2 width file's data.
  const fs::path k2 = fs::path(rel) / ExpertWidthPath(3, 2);
  const auto size = fs::file_size(k2);
  {
    std::fstream f(k2, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(size - 5000));
    char c = 0;
    f.read(&c, 1);
    f.seekp(static_cast<std::streamoff>(size - 5000));
    c = static_cast<char>(c ^ 0x40);
    f.write(&c, 1);
  }
  ProcessResult v = Exlr8("verify " + rel);
  EXPECT_EQ(v.status, 1) << v.out;
  EXPECT_THAT(v.out, HasSubstr("MISMATCH experts/exlr8-layer-003.k2.safetensors offset"));
  EXPECT_THAT(v.out, ::testing::ContainsRegex("\\(L3 (e[0-9]+|shared) (gate|up|down) h[0-9]+ K2\\): xxh64 [0-9a-f]{16}, "
                                              "expected [0-9a-f]{16}"));
  EXPECT_THAT(v.out, HasSubstr("1 failures"));
}

// A width file holding only the shared expert (a width in shared_widths and
// not in widths) gets the header checks too.
TEST(CliTest, VerifyChecksTheHeaderOfAWidthFileOnlyTheSharedExpertUses) {
  TempDir dir;
  const std::string rel = (dir.path() / "rel").string();
  ASSERT_EQ(Exlr8("synth " + rel + " --seed 7 --quiet --moe-layers 3-4 --widths 2,3 --shared-widths 4").status, 0);
  ProcessResult v = Exlr8("verify " + rel);
  EXPECT_EQ(v.status, 0) << v.out;
  EXPECT_THAT(v.out, HasSubstr("verified 6 width-file headers"));  // k2, k3 and k4 of both layers
}

// The file offset of tensor `name`'s first byte in a safetensors file; 0
// (and a test failure) when it cannot be read.
std::uint64_t TensorDataOffset(const fs::path& file, const std::string& name) {
  std::ifstream f(file, std::ios::binary);
  std::uint64_t n = 0;
  f.read(reinterpret_cast<char*>(&n), 8);
  std::string header(n, ' ');
  f.read(header.data(), static_cast<std::streamsize>(n));
  auto parsed = ParseJson(header);
  EXPECT_TRUE(f && parsed.ok()) << file;
  const JsonValue* t = parsed.ok() ? parsed->Find(name) : nullptr;
  EXPECT_NE(t, nullptr) << name;
  return t ? 8 + n + *t->Find("data_offsets")->as_array()[0].as_uint64() : 0;
}

// A half the index places past the end of its width file is a failure
// named with its bytes, found before anything of its length is allocated.
TEST(CliTest, VerifyNamesAHalfPastTheEndOfItsFile) {
  TempDir dir;
  const std::string rel = (dir.path() / "rel").string();
  ASSERT_EQ(Exlr8("synth " + rel + " --seed 3 --quiet --moe-layers 3").status, 0);
  const fs::path index = fs::path(rel) / ExpertIndexPath(3);
  const std::uint64_t entry0 = TensorDataOffset(index, "k2.index");
  ASSERT_NE(entry0, 0u);
  std::fstream f(index, std::ios::in | std::ios::out | std::ios::binary);
  const std::uint64_t far = 1ull << 40;
  f.seekp(static_cast<std::streamoff>(entry0));
  f.write(reinterpret_cast<const char*>(&far), 8);  // [e0, gate, h0]'s offset
  f.close();
  ProcessResult v = Exlr8("verify " + rel + " --quiet");
  EXPECT_EQ(v.status, 1) << v.out;
  EXPECT_THAT(v.out, HasSubstr("MISMATCH L3 e0 gate h0 K2: experts/exlr8-layer-003.k2.safetensors bytes "
                               "[1099511627776, " +
                               std::to_string(far + 16 * 2 * 256) + ") lie past its end (" +
                               std::to_string(fs::file_size(fs::path(rel) / ExpertWidthPath(3, 2))) + " bytes)"));
}

// Two halves on the same bytes are refused by plan too, not only by the
// checks that read the width files.
TEST(CliTest, PlanRefusesHalvesThatOverlap) {
  TempDir dir;
  const std::string rel = (dir.path() / "rel").string();
  ASSERT_EQ(Exlr8("synth " + rel + " --seed 3 --quiet --moe-layers 3").status, 0);
  const fs::path index = fs::path(rel) / ExpertIndexPath(3);
  const std::uint64_t at = TensorDataOffset(index, "k2.index");
  ASSERT_NE(at, 0u);
  std::fstream f(index, std::ios::in | std::ios::out | std::ios::binary);
  std::uint64_t h0 = 0;
  f.seekg(static_cast<std::streamoff>(at));
  f.read(reinterpret_cast<char*>(&h0), 8);
  h0 += 100;  // [e0, gate, h1] now starts inside h0
  f.seekp(static_cast<std::streamoff>(at + 16));
  f.write(reinterpret_cast<const char*>(&h0), 8);
  f.close();
  ProcessResult p = Exlr8("plan " + rel + " --manifest home --tp 4 --rank 1");
  EXPECT_NE(p.status, 0) << p.out;
  EXPECT_THAT(p.out, HasSubstr("experts/exlr8-layer-003.index.safetensors"));
  EXPECT_THAT(p.out, HasSubstr("halves overlap: L3 e0 gate h0 K2"));
}

// A file name that is not UTF-8 could come from no hub and cannot be
// written into JSON: refused, named (escaped).
TEST(CliTest, PlanRefusesAFileNameThatIsNotUtf8) {
  TempDir dir;
  const std::string rel = (dir.path() / "rel").string();
  ASSERT_EQ(Exlr8("synth " + rel + " --seed 3 --quiet --moe-layers 3").status, 0);
  std::ofstream(fs::path(rel) / "bad\xff.txt") << "x";
  ProcessResult p = Exlr8("plan " + rel + " --manifest home --tp 4 --rank 1 --json");
  EXPECT_NE(p.status, 0) << p.out;
  EXPECT_THAT(p.out, HasSubstr("file name 'bad\\xFF.txt' is not valid UTF-8"));
}

// verify --manifest says what plan says of a manifest that leaves layers out.
TEST(CliTest, VerifyOfARankPrintsThePlansWarnings) {
  TempDir dir;
  const std::string rel = (dir.path() / "rel").string();
  ASSERT_EQ(Exlr8("synth " + rel + " --seed 3 --quiet --moe-layers 3-4").status, 0);
  const std::string manifest = (dir.path() / "empty.json").string();
  std::ofstream(manifest) << "{\"layers\":{}}";
  ProcessResult v = Exlr8("verify " + rel + " --manifest " + manifest + " --tp 4 --rank 1");
  EXPECT_EQ(v.status, 0) << v.out;
  EXPECT_THAT(v.out, HasSubstr("warning: "));
  EXPECT_THAT(v.out, HasSubstr("MoE layer 3"));
}

TEST(CliTest, ExitStatuses) {
  TempDir dir;
  EXPECT_EQ(Exlr8("").status, 2);
  EXPECT_EQ(Exlr8("frobnicate").status, 2);
  EXPECT_EQ(Exlr8("plan --help").status, 0);
  EXPECT_EQ(Exlr8("plan").status, 2);
  ProcessResult unknown = Exlr8("plan x --manifest home --tp 4 --rank 0 --bogus");
  EXPECT_EQ(unknown.status, 2);
  EXPECT_THAT(unknown.out, HasSubstr("unknown option '--bogus'"));
  ProcessResult missing = Exlr8("plan " + (dir.path() / "nope").string() + " --manifest home --tp 4 --rank 0");
  EXPECT_EQ(missing.status, 3);
  EXPECT_THAT(missing.out, HasSubstr("not a directory"));
  const std::string fixture = std::string(EXLR8_SHARED_DIR) + "/fixtures/exlr8-tiny";
  ProcessResult rank = Exlr8("plan " + fixture + " --manifest home --tp 4 --rank 9");
  EXPECT_EQ(rank.status, 2);
  EXPECT_THAT(rank.out, HasSubstr("--rank: 9 is outside [0, 3]"));
  ProcessResult manifest = Exlr8("plan " + fixture + " --manifest nope --tp 4 --rank 0");
  EXPECT_EQ(manifest.status, 3);
  EXPECT_THAT(manifest.out, HasSubstr("manifest 'nope' not found"));
  for (const char* c : {"plan", "verify", "decode", "synth"}) EXPECT_EQ(Exlr8(std::string(c) + " --help").status, 0) << c;
  // A stray word is named, not answered with the usage alone; a byte count
  // the pull takes ("1M") is taken here too; a bad one names its option.
  ProcessResult stray = Exlr8("plan " + fixture + " home --tp 4 --rank 0");
  EXPECT_EQ(stray.status, 2);
  EXPECT_THAT(stray.out, HasSubstr("unexpected argument 'home'"));
  EXPECT_EQ(Exlr8("plan " + fixture + " --manifest home --tp 4 --rank 0 --coalesce-gap 1M").status, 0);
  ProcessResult gap = Exlr8("plan " + fixture + " --manifest home --tp 4 --rank 0 --coalesce-gap 5Q");
  EXPECT_EQ(gap.status, 2);
  EXPECT_THAT(gap.out, HasSubstr("--coalesce-gap: '5Q': unknown unit"));
}

}  // namespace
}  // namespace exlr8
