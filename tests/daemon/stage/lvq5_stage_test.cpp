// `exlr8d-stage --repo ORG/NAME --memory host` (no --manifest) end to end,
// no GPU needed: the lvq5-tiny fixture pulled whole from the hub simulator
// into a real cache, staged by the real binary into a sealed memfd, leased
// over protocol v2 on a real Unix socket and opened with libexlr8client's C
// API, which finds every record of the file by name with the bytes the
// served layout asks for. The expectations come from the fixture file
// walked here with lvq5::ReadIndex (never from the fixture's names, counts
// or order), so another file, geometry or seed checks the same way.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "daemon/cache/cache.h"
#include "exlr8/exlr8client.h"
#include "format/byte_source.h"
#include "format/checksum.h"
#include "format/lvq5/index.h"
#include "format/lvq5/writer.h"
#include "format/tetra/served.h"
#include "tests/daemon/cache_test_util.h"
#include "tests/daemon/child_process.h"
#include "tests/daemon/pull_test_util.h"

namespace exlr8 {
namespace {

using ::exlr8::testing::TempDir;

fs::path Lvq5Tiny() { return fs::path(EXLR8_SHARED_DIR) / "fixtures" / "lvq5-tiny"; }

PullOptions FilesetOptions(const hubsim::HubSim& sim) {
  PullOptions o = Options(sim, "", 1, 0);
  o.repo = "lvq5/tiny";
  return o;
}

std::vector<std::byte> FileBytes(const fs::path& p) {
  const std::vector<char> c = ReadAll(p);
  std::vector<std::byte> out(c.size());
  std::memcpy(out.data(), c.data(), c.size());
  return out;
}

// What a region must hold: its bytes as staged, its dtype and format.
struct Expected {
  std::vector<std::byte> bytes;
  std::uint32_t dtype = 0;
  std::uint32_t format = 0;
};

// Every region the image of `file` must have, by name.
std::map<std::string, Expected> ExpectedRegions(const std::vector<std::byte>& file) {
  SpanByteSource source(file, "fixture");
  auto index = lvq5::ReadIndex(source);
  EXPECT_TRUE(index.ok()) << index.status().ToString();
  std::map<std::string, Expected> out;
  if (!index.ok()) return out;
  const auto part = [&](std::uint64_t offset, std::uint64_t length) {
    return std::vector<std::byte>(file.begin() + static_cast<std::ptrdiff_t>(offset),
                                  file.begin() + static_cast<std::ptrdiff_t>(offset + length));
  };
  for (const lvq5::MatrixRecord& m : index->matrices) {
    if (m.kind == lvq5::Kind::kTetra) {
      constexpr std::uint32_t kTetra = EXLR8_PLAIN_TETRA48;
      if (m.nblocks > 0) {
        std::vector<std::byte> served(m.d_out * tetra::ServedRowStride(m.nblocks));
        EXPECT_TRUE(tetra::DiskToServed(part(m.codes_offset, m.codes_length), m.nblocks, served).ok());
        out[m.name] = {served, EXLR8_DTYPE_U8, kTetra};
      }
      out[m.name + ".centroids"] = {part(m.centroids_offset, 8ull * m.n_centroids), EXLR8_DTYPE_F64, kTetra};
      out[m.name + ".row_scales"] = {part(m.row_scales_offset, 8ull * m.d_out), EXLR8_DTYPE_F64, kTetra};
      if (m.tail_cols > 0)
        out[m.name + ".tail"] = {part(m.tail_offset, 4ull * m.d_out * m.tail_cols), EXLR8_DTYPE_F32, kTetra};
    } else {
      constexpr std::uint32_t kInt4 = EXLR8_PLAIN_INT4G128;
      out[m.name] = {part(m.packed_offset, m.packed_length), EXLR8_DTYPE_U8, kInt4};
      out[m.name + ".scales"] = {part(m.scales_offset, 2 * m.groups), EXLR8_DTYPE_F16, kInt4};
      out[m.name + ".biases"] = {part(m.biases_offset, 2 * m.groups), EXLR8_DTYPE_F16, kInt4};
    }
  }
  for (const lvq5::RawTensor& t : index->raw) {
    if (t.tag == lvq5::RawTag::kF16) {
      out[t.name] = {part(t.data_offset, t.data_length), EXLR8_DTYPE_F16, EXLR8_PLAIN_F16};
    } else {
      out[t.name] = {part(t.data_offset, t.data_length), EXLR8_DTYPE_U8, EXLR8_PLAIN_QUANT};
      out[t.name + ".scales"] = {part(t.scales_offset, 2 * t.groups), EXLR8_DTYPE_F16, EXLR8_PLAIN_QUANT};
      out[t.name + ".biases"] = {part(t.biases_offset, 2 * t.groups), EXLR8_DTYPE_F16, EXLR8_PLAIN_QUANT};
    }
  }
  return out;
}

std::vector<std::string> StageArgs(const fs::path& cache) {
  return {"--cache", cache.string(), "--repo", "lvq5/tiny", "--memory", "host"};
}

// Pulls the release in `dir` (repo lvq5/tiny), stages it with --memory host
// --hold, opens the lease with the C API and checks every region against
// the LVQ5 file `bin` of the release.
void StageAndCheckWithTheCLibrary(const fs::path& dir, const std::string& bin) {
  TempDir cache, run;
  auto sim = StartSim(dir, "", {}, {"lvq5/tiny"});
  auto pulled = Pull(cache.path(), FilesetOptions(*sim));
  ASSERT_TRUE(pulled.ok()) << pulled.status().ToString();
  const std::vector<std::byte> file = FileBytes(dir / bin);
  const std::map<std::string, Expected> expected = ExpectedRegions(file);
  ASSERT_FALSE(expected.empty());

  const fs::path sock = run.path() / "lease.sock";
  std::vector<std::string> args = StageArgs(cache.path());
  args.insert(args.end(), {"--hold", sock.string(), "--release-wait", "20"});
  ChildProcess stage("exlr8d-stage", args, (run.path() / "stage.err").string());
  ASSERT_TRUE(stage.ReadUntil("holding:")) << stage.printed();
  EXPECT_NE(stage.printed().find("0 mismatches"), std::string::npos) << stage.printed();

  exlr8_lease* lease = nullptr;
  ASSERT_EQ(exlr8_lease_open(sock.c_str(), nullptr, &lease), EXLR8_OK);
  std::uint64_t count = 0;
  ASSERT_EQ(exlr8_lease_tensor_count(lease, &count), EXLR8_OK);
  // The tables name every record's parts and nothing else (blobs stay on
  // the host).
  EXPECT_EQ(count, expected.size());
  for (const auto& [name, want] : expected) {
    std::uint64_t i = 0;
    ASSERT_EQ(exlr8_lease_find_by_name(lease, name.c_str(), &i), EXLR8_OK) << name;
    exlr8_tensor t{};
    t.struct_size = sizeof t;
    ASSERT_EQ(exlr8_lease_tensor(lease, i, &t), EXLR8_OK) << name;
    EXPECT_EQ(t.kind, static_cast<std::uint32_t>(EXLR8_TENSOR_PLAIN)) << name;
    EXPECT_EQ(t.dtype, want.dtype) << name;
    EXPECT_EQ(t.format, want.format) << name;
    ASSERT_EQ(t.length, want.bytes.size()) << name;
    EXPECT_EQ(std::memcmp(t.data, want.bytes.data(), t.length), 0) << name;
    EXPECT_EQ(t.xxh64, Xxh64::Hash(want.bytes)) << name;
  }
  SpanByteSource source(file, "fixture");
  auto index = lvq5::ReadIndex(source);
  ASSERT_TRUE(index.ok());
  for (const lvq5::Blob& b : index->blobs) {
    std::uint64_t i = 0;
    EXPECT_EQ(exlr8_lease_find_by_name(lease, b.name.c_str(), &i), EXLR8_NOT_FOUND) << b.name;
  }
  exlr8_lease_free(lease);
  stage.Send(SIGTERM);
  ASSERT_TRUE(stage.ReadUntil("released after 1 lease(s)")) << stage.printed();
  EXPECT_EQ(stage.Signal(0), 0) << stage.ReadAll();
}

TEST(Lvq5StageTest, TheCLibraryFindsEveryRecordWithItsStagedBytes) {
  StageAndCheckWithTheCLibrary(Lvq5Tiny(), "tiny-sealed.bin");
}

// Another geometry than the fixture's, every kind: Tetra records with and
// without a tail and with an odd number of blocks per row (served rows
// padded), Int4G128, raw f16 of rank 0..3, raw q4 and q8 of other groups.
TEST(Lvq5StageTest, AnotherGeometryWithEveryKindIsStagedByteExact) {
  TempDir release;
  lvq5::FileSpec spec;
  spec.tetra.push_back(lvq5::RandomTetra("a.w", 7, 53, 11));  // 2 blocks, tail 5
  spec.tetra.push_back(lvq5::RandomTetra("b.w", 3, 72, 12));  // 3 blocks, no tail
  spec.tetra.push_back(lvq5::RandomTetra("c.w", 1, 24, 13));  // 1 block
  spec.int4.push_back(lvq5::RandomInt4G128("d.w", 2, 256, 14));
  spec.raw.push_back(lvq5::RandomRawF16("e.scalar", {}, 15));
  spec.raw.push_back(lvq5::RandomRawF16("f.norm", {2, 3, 5}, 16));
  spec.raw.push_back(lvq5::RandomRawQuant("g.emb", {5, 100}, 4, 32, 17));
  spec.raw.push_back(lvq5::RandomRawQuant("h.head", {3, 40}, 8, 16, 18));
  spec.blobs.push_back({"tokenizer.json", "{\"v\": 1}"});
  auto bytes = lvq5::WriteFile(spec);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  std::ofstream(release.path() / "model.bin", std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes->data()), static_cast<std::streamsize>(bytes->size()));
  StageAndCheckWithTheCLibrary(release.path(), "model.bin");
}

TEST(Lvq5StageTest, ACorruptedCacheFileIsRefusedBeforeStaging) {
  TempDir cache, run;
  auto sim = StartSim(Lvq5Tiny(), "", {}, {"lvq5/tiny"});
  ASSERT_TRUE(Pull(cache.path(), FilesetOptions(*sim)).ok());
  std::string damaged;
  {
    auto c = Cache::Open(cache.path());
    ASSERT_TRUE(c.ok());
    auto sets = (*c)->ListFilesets();
    ASSERT_TRUE(sets.ok() && sets->size() == 1u);
    auto id = (*c)->FindFile((*sets)[0].id, "tiny-sealed.bin");
    ASSERT_TRUE(id.ok());
    auto records = (*c)->Records(*id);
    ASSERT_TRUE(records.ok() && !records->empty());
    const FileRecord& r = records->back();  // a blob, which is not staged: still refused
    damaged = r.name;
    std::fstream f(*(*c)->DataPath(*id), std::ios::binary | std::ios::in | std::ios::out);
    f.seekg(static_cast<std::streamoff>(r.offset + r.length / 2));
    char ch = 0;
    f.get(ch);
    f.seekp(static_cast<std::streamoff>(r.offset + r.length / 2));
    f.put(static_cast<char>(ch ^ 0x5a));
    ASSERT_TRUE(f.good());
  }
  const fs::path err = run.path() / "stage.err";
  ChildProcess stage("exlr8d-stage", StageArgs(cache.path()), err.string());
  EXPECT_EQ(stage.Signal(0), 3) << stage.ReadAll();
  std::ifstream in(err);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("'" + damaged + "'"), std::string::npos) << text;
  EXPECT_NE(text.find("XXH64"), std::string::npos) << text;
}

TEST(Lvq5StageTest, TpOrRankWithoutAManifestIsRefused) {
  TempDir cache, run;
  std::vector<std::string> args = StageArgs(cache.path());
  args.insert(args.end(), {"--tp", "2", "--rank", "0"});
  ChildProcess stage("exlr8d-stage", args, (run.path() / "stage.err").string());
  EXPECT_EQ(stage.Signal(0), 2);
}

std::string StageError(const std::vector<std::string>& args, const fs::path& err, int* code) {
  ChildProcess stage("exlr8d-stage", args, err.string());
  *code = stage.Signal(0);
  std::ifstream in(err);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST(Lvq5StageTest, AnExlr8FilesetOrOneNeverPulledIsNotStagedWhole) {
  TempDir cache, run;
  auto sim = StartSim(TinyRelease());
  ASSERT_TRUE(Pull(cache.path(), Options(*sim, "home", 1, 0)).ok());
  int code = 0;
  std::string text = StageError(StageArgs(cache.path()), run.path() / "a.err", &code);
  EXPECT_NE(code, 0);
  EXPECT_NE(text.find("never pulled"), std::string::npos) << text;
  std::vector<std::string> args = StageArgs(cache.path());
  args[3] = "exlr8/test";
  text = StageError(args, run.path() / "b.err", &code);
  EXPECT_NE(code, 0);
  EXPECT_NE(text.find("no LVQ5 file"), std::string::npos) << text;
}

// The device kind (the default): exit 4 naming the missing device here; on
// a GPU machine it stages, hashes every region and checks every Tetra word
// of the fixture on the GPU against the CPU reference, and exits 0
// (tests/gpu/lvq5_device_image_test checks it in process).
TEST(Lvq5StageTest, TheDeviceKindStagesOrSaysThereIsNoGpu) {
  TempDir cache, run;
  auto sim = StartSim(Lvq5Tiny(), "", {}, {"lvq5/tiny"});
  ASSERT_TRUE(Pull(cache.path(), FilesetOptions(*sim)).ok());
  std::vector<std::string> args = StageArgs(cache.path());
  args.back() = "device";
  ChildProcess stage("exlr8d-stage", args, (run.path() / "c.err").string());
  const int code = stage.Signal(0);
  const std::string out = stage.ReadAll();
  std::ifstream in(run.path() / "c.err");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (code == 4) {
    EXPECT_NE(text.find("no CUDA device"), std::string::npos) << text;
  } else {
    EXPECT_EQ(code, 0) << out << text;
    EXPECT_NE(out.find("equal to the CPU reference"), std::string::npos) << out;
    EXPECT_NE(out.find(" 0 sampled"), std::string::npos) << out;  // the fixture is < 1 GB: every word
    EXPECT_NE(out.find("ok (not held"), std::string::npos) << out;
  }
}

}  // namespace
}  // namespace exlr8
