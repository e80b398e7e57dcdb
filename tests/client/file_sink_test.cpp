// Tests of client/file_sink.h (DirectoryReleaseSink) and client/cmd_synth.h
// (`exlr8 synth`), on real files in a temporary directory.
#include "client/file_sink.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "client/cmd_synth.h"
#include "client/local_release.h"
#include "format/layout.h"
#include "format/plan.h"
#include "tests/support/files.h"
#include "tests/support/temp_dir.h"

namespace exlr8 {
namespace {

namespace fs = std::filesystem;

using testing::ReadFileBytes;
using testing::ReadFileText;
using testing::TempDir;

std::span<const std::byte> AsBytes(const std::string& s) { return std::as_bytes(std::span<const char>(s)); }

bool HasTempFiles(const fs::path& root) {
  for (const auto& e : fs::recursive_directory_iterator(root))
    if (e.path().filename().string().find(".tmp.") != std::string::npos) return true;
  return false;
}

TEST(DirectoryReleaseSink, WritesFilesAndCreatesDirectories) {
  TempDir dir;
  DirectoryReleaseSink sink((dir.path() / "release").string());
  ASSERT_TRUE(sink.WriteFile("experts/sub/a.bin", AsBytes("hello")).ok());
  ASSERT_TRUE(sink.WriteFile("config.json", AsBytes("{}")).ok());
  EXPECT_EQ(ReadFileText(dir.path() / "release/experts/sub/a.bin"), "hello");
  // rewriting replaces (also with a shorter file)
  ASSERT_TRUE(sink.WriteFile("experts/sub/a.bin", AsBytes("hi")).ok());
  EXPECT_EQ(ReadFileText(dir.path() / "release/experts/sub/a.bin"), "hi");
  ASSERT_TRUE(sink.WriteFile("empty", {}).ok());
  EXPECT_EQ(fs::file_size(dir.path() / "release/empty"), 0u);
  EXPECT_FALSE(HasTempFiles(dir.path()));
}

TEST(DirectoryReleaseSink, SparseFileHasItsSizeExtentsAndHoles) {
  TempDir dir;
  DirectoryReleaseSink sink(dir.path().string());
  const std::string head = "HEAD", mid = "MIDDLE";
  const std::uint64_t total = 64ull << 20;
  const SparseExtent xs[] = {{0, AsBytes(head)}, {40ull << 20, AsBytes(mid)}};
  ASSERT_TRUE(sink.WriteSparseFile("w/sparse.safetensors", xs, total).ok());
  const fs::path p = dir.path() / "w/sparse.safetensors";
  EXPECT_EQ(fs::file_size(p), total);
  std::ifstream in(p, std::ios::binary);
  char buf[8] = {};
  in.read(buf, 4);
  EXPECT_EQ(std::string(buf, 4), "HEAD");
  in.seekg(1000);
  in.read(buf, 8);
  EXPECT_EQ(std::string(buf, 8), std::string(8, '\0'));
  in.seekg(40ll << 20);
  in.read(buf, 6);
  EXPECT_EQ(std::string(buf, 6), "MIDDLE");
  struct stat st {};
  ASSERT_EQ(::stat(p.c_str(), &st), 0);
  // Holes take no space on file systems with sparse files (all usual ones).
  EXPECT_LT(static_cast<std::uint64_t>(st.st_blocks) * 512, total / 4) << "file is not sparse";
  EXPECT_FALSE(HasTempFiles(dir.path()));
}

TEST(DirectoryReleaseSink, RejectsBadPaths) {
  TempDir dir;
  DirectoryReleaseSink sink((dir.path() / "root").string());
  for (const char* bad : {"", "/etc/passwd", "../escape", "a/../../b", "a//b", "./a", "a/.", "a/"}) {
    Status s = sink.WriteFile(bad, AsBytes("x"));
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << "'" << bad << "'";
  }
  EXPECT_EQ(sink.WriteFile(std::string_view("a\0b", 3), AsBytes("x")).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(fs::exists(dir.path() / "escape"));
  EXPECT_TRUE(CheckRelativePath("experts/exlr8-layer-003.k2.safetensors").ok());
}

TEST(DirectoryReleaseSink, RejectsBadExtents) {
  TempDir dir;
  DirectoryReleaseSink sink(dir.path().string());
  const std::string x = "abcd";
  const SparseExtent overlap[] = {{0, AsBytes(x)}, {2, AsBytes(x)}};
  EXPECT_EQ(sink.WriteSparseFile("f", overlap, 100).code(), StatusCode::kInvalidArgument);
  const SparseExtent past[] = {{98, AsBytes(x)}};
  EXPECT_EQ(sink.WriteSparseFile("f", past, 100).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(fs::exists(dir.path() / "f"));
}

TEST(DirectoryReleaseSink, IOErrorsNameThePath) {
  TempDir dir;
  // the root is a regular file: no directory can be created under it
  const fs::path file = dir.path() / "not-a-dir";
  std::ofstream(file) << "x";
  DirectoryReleaseSink sink(file.string());
  Status s = sink.WriteFile("experts/a.bin", AsBytes("x"));
  EXPECT_EQ(s.code(), StatusCode::kIOError);
  EXPECT_NE(s.message().find("not-a-dir"), std::string::npos) << s.message();
  // a directory where the file should go
  DirectoryReleaseSink sink2(dir.path().string());
  fs::create_directories(dir.path() / "taken");
  Status s2 = sink2.WriteFile("taken", AsBytes("x"));
  EXPECT_EQ(s2.code(), StatusCode::kIOError) << s2.ToString();
  EXPECT_NE(s2.message().find("taken"), std::string::npos) << s2.message();
  EXPECT_FALSE(HasTempFiles(dir.path()));
}

// The directory sink writes exactly what the memory sink holds.
TEST(DirectoryReleaseSink, MatchesTheMemorySink) {
  TempDir dir;
  SynthOptions o = TinyFixtureGeometry();
  o.index_only = true;
  MemoryReleaseSink mem;
  ASSERT_TRUE(SynthesizeRelease(o, mem).ok());
  DirectoryReleaseSink disk(dir.path().string());
  ASSERT_TRUE(SynthesizeRelease(o, disk).ok());
  for (const auto& [path, f] : mem.files()) {
    SCOPED_TRACE(path);
    auto expect = mem.ReadAll(path);
    ASSERT_TRUE(expect.ok());
    const std::vector<std::byte> got = ReadFileBytes(dir.path() / path);
    ASSERT_EQ(got.size(), expect->size());
    EXPECT_EQ(0, std::memcmp(got.data(), expect->data(), got.size()));
  }
}

// ---------------------------------------------------------------------------
// exlr8 synth
// ---------------------------------------------------------------------------

TEST(CmdSynth, ParsesLayerLists) {
  EXPECT_EQ(*ParseLayerList("3-5"), (std::vector<int>{3, 4, 5}));
  EXPECT_EQ(*ParseLayerList("0,2,7-8"), (std::vector<int>{0, 2, 7, 8}));
  EXPECT_TRUE(ParseLayerList("none")->empty());
  for (const char* bad : {"5-3", "a", "1,,2", "-1", "1000", "3-"})
    EXPECT_EQ(ParseLayerList(bad).status().code(), StatusCode::kInvalidArgument) << bad;
}

TEST(CmdSynth, ParsesOptions) {
  auto o = ParseSynthOptions({"--preset", "glm53", "--seed", "9", "--moe-layers", "3-5", "--index-only",
                              "--vector-dtype", "BF16", "--alignment", "64Ki", "--half-order", "shuffled",
                              "--no-pair-align", "--home-mix", "half"});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->hidden, 6144u);
  EXPECT_EQ(o->experts, 256u);
  EXPECT_EQ(o->seed, 9u);
  EXPECT_EQ(o->moe_layers, (std::vector<int>{3, 4, 5}));
  EXPECT_EQ(o->num_hidden_layers, 78);
  EXPECT_TRUE(o->index_only);
  EXPECT_EQ(o->vector_dtype, DType::kBF16);
  EXPECT_EQ(o->width_alignment, 65536u);
  EXPECT_EQ(o->half_order, HalfOrder::kShuffled);
  EXPECT_FALSE(o->align_pairs);
  EXPECT_EQ(o->home_mix, ManifestMix::kRandomPerHalf);

  auto t = ParseSynthOptions({"--seed", "1", "--moe-layers", "3,9"});  // tiny: layers grow num_hidden_layers
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->num_hidden_layers, 10);
  EXPECT_FALSE(t->index_only);

  for (std::vector<std::string> bad : std::vector<std::vector<std::string>>{
           {},                                       // no seed
           {"--seed", "x"},                          // bad seed
           {"--seed", "1", "--hidden", "200"},       // not a multiple of 128
           {"--seed", "1", "--index-dtype", "F16"},  // not allowed
           {"--seed", "1", "--vector-dtype", "F99"},
           {"--seed", "1", "--widths", "2,,3"},
           {"--seed", "1", "--preset", "huge"},
           {"--seed", "1", "--half-order", "random"},
           {"--seed", "1", "--alignment", "3"},
           {"--seed", "1", "--bogus"},
       }) {
    EXPECT_EQ(ParseSynthOptions(bad).status().code(), StatusCode::kInvalidArgument) << ::testing::PrintToString(bad);
  }
}

TEST(CmdSynth, HelpListsEveryOption) {
  EXPECT_EQ(RunSynth({"--help"}), 0);
  const std::string usage = SynthUsage();
  for (const char* opt : {"--seed", "--preset", "--index-only", "--hidden", "--halves", "--experts", "--moe-layers",
                          "--dense-layers", "--num-layers", "--widths", "--shared-widths", "--vocab", "--index-dtype",
                          "--checksum-dtype", "--vector-dtype", "--block-vector-dtype", "--signs-dtype",
                          "--record-dtype", "--int4-scale-dtype", "--fp8-scale-dtype", "--alignment",
                          "--no-pair-align", "--half-order", "--home-mix", "--max-file-bytes", "--sync", "--quiet",
                          "--help"})
    EXPECT_NE(usage.find(opt), std::string::npos) << opt;
}

TEST(CmdSynth, ExitStatuses) {
  TempDir dir;
  EXPECT_EQ(RunSynth({}), 2);                                   // no OUT
  EXPECT_EQ(RunSynth({(dir.path() / "x").string()}), 2);        // no seed
  EXPECT_EQ(RunSynth({"a", "b", "--seed", "1"}), 2);            // two OUTs
  const fs::path file = dir.path() / "file";
  std::ofstream(file) << "x";
  EXPECT_EQ(RunSynth({(file / "sub").string(), "--seed", "1", "--quiet"}), 4);  // I/O error
}

// End to end: synthesize an index-only release on disk, then plan it with
// the same code `exlr8 plan` uses.
TEST(CmdSynth, WritesAReleaseThePlannerAccepts) {
  TempDir dir;
  const fs::path out = dir.path() / "release";
  ASSERT_EQ(RunSynth({out.string(), "--seed", "5", "--experts", "6", "--moe-layers", "3-6", "--index-only",
                      "--alignment", "64Ki", "--quiet"}),
            0);
  EXPECT_TRUE(fs::exists(out / "config.json"));
  EXPECT_TRUE(fs::exists(out / ExpertWidthPath(6, 4)));
  EXPECT_FALSE(HasTempFiles(out));
  auto release = OpenLocalRelease(out);
  ASSERT_TRUE(release.ok()) << release.status().ToString();
  EXPECT_EQ(release->inputs.indexes.size(), 4u);
  auto manifest = LoadManifest(*release, "home");
  ASSERT_TRUE(manifest.ok()) << manifest.status().ToString();
  PlanOptions po;
  po.tp = 4;
  po.rank = 1;
  auto plan = MakePlan(release->inputs, *manifest, po);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  // at TP 4 every rank holds 4 of each expert's 16 halves, 3 projections
  EXPECT_EQ(plan->totals.routed_halves, 4u * 6 * 4 * 3);
}

}  // namespace
}  // namespace exlr8
