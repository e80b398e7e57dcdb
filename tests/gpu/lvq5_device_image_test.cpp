// An LVQ5 fileset's image in device memory (daemon/stage/lvq5_device_image.h)
// on a real GPU: pulled from the hub simulator into a real cache, staged in
// process, and checked against the host image built from the same cache,
// the file walked here (lvq5::ReadIndex) and the CPU reference. Skips
// without a CUDA device (run on the GPU machine:
//   build/tests/gpu_lvq5_device_image_test).
#include "daemon/stage/lvq5_device_image.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <vector>

#include "client/lease/description_v2.h"
#include "format/byte_source.h"
#include "format/lvq5/index.h"
#include "format/lvq5/writer.h"
#include "gpu/device.h"
#include "tests/daemon/cache_test_util.h"
#include "tests/daemon/pull_test_util.h"

namespace exlr8 {
namespace {

using ::exlr8::testing::TempDir;

bool HaveGpu() {
  auto n = CudaDeviceCount();
  return n.ok() && *n > 0;
}

#define SKIP_WITHOUT_GPU() \
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device: GPU tests run on the device machine"

fs::path Lvq5Tiny() { return fs::path(EXLR8_SHARED_DIR) / "fixtures" / "lvq5-tiny"; }

RankRequest Lvq5Request(const fs::path& cache) {
  RankRequest r;
  r.cache_dir = cache;
  r.repo = "lvq5/tiny";
  r.manifest = "";
  return r;
}

// Pulls the release in `dir` as lvq5/tiny into `cache`.
void PullRelease(const fs::path& dir, const fs::path& cache) {
  auto sim = StartSim(dir, "", {}, {"lvq5/tiny"});
  PullOptions o = Options(*sim, "", 1, 0);
  o.repo = "lvq5/tiny";
  auto pulled = Pull(cache, o);
  ASSERT_TRUE(pulled.ok()) << pulled.status().ToString();
}

// A generated release of another geometry: d_out 300 (a 1 % sample is 3
// rows), odd block counts, tails, an Int4G128 record and raw tensors.
void WriteOtherRelease(const fs::path& dir) {
  lvq5::FileSpec spec;
  spec.tetra.push_back(lvq5::RandomTetra("a.w", 300, 77, 21));  // 3 blocks, tail 5
  spec.tetra.push_back(lvq5::RandomTetra("b.w", 5, 48, 22));
  spec.int4.push_back(lvq5::RandomInt4G128("c.w", 2, 128, 23));
  spec.raw.push_back(lvq5::RandomRawF16("d.norm", {77}, 24));
  spec.blobs.push_back({"config.json", "{}"});
  auto bytes = lvq5::WriteFile(spec);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  std::ofstream(dir / "model.bin", std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes->data()), static_cast<std::streamsize>(bytes->size()));
}

struct TetraTotals {
  std::uint64_t records = 0, rows = 0, words = 0, sampled_rows = 0;
};

TetraTotals Totals(const fs::path& file) {
  const std::vector<char> c = ReadAll(file);
  SpanByteSource src({reinterpret_cast<const std::byte*>(c.data()), c.size()}, file.string());
  auto index = lvq5::ReadIndex(src);
  EXPECT_TRUE(index.ok()) << index.status().ToString();
  TetraTotals t;
  if (!index.ok()) return t;
  for (const lvq5::MatrixRecord& m : index->matrices) {
    if (m.kind != lvq5::Kind::kTetra || m.nblocks == 0) continue;
    ++t.records;
    t.rows += m.d_out;
    t.words += std::uint64_t{m.d_out} * m.nblocks;
    t.sampled_rows += std::max<std::uint64_t>(1, static_cast<std::uint64_t>(std::ceil(0.01 * m.d_out)));
  }
  return t;
}

void StageAndCompare(const fs::path& release, const std::string& bin, bool force_ipc) {
  SCOPED_TRACE(bin + (force_ipc ? " ipc" : " vmm"));
  TempDir cache;
  PullRelease(release, cache.path());
  if (::testing::Test::HasFatalFailure()) return;
  Lvq5DeviceOptions o;
  o.image.force_ipc = force_ipc;
  auto dev = StageDeviceLvq5Image(Lvq5Request(cache.path()), o);
  ASSERT_TRUE(dev.ok()) << dev.status().ToString();
  auto host = BuildHostLvq5Image(Lvq5Request(cache.path()));
  ASSERT_TRUE(host.ok()) << host.status().ToString();
  // The device bytes are the host image's, every word was decoded (< 1 GB).
  std::vector<std::byte> back(dev->image.image_bytes());
  ASSERT_EQ(cudaMemcpy(back.data(), dev->image.data(), back.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(back.size(), host->image.bytes().size());
  EXPECT_EQ(std::memcmp(back.data(), host->image.bytes().data(), back.size()), 0);
  const TetraTotals want = Totals(release / bin);
  EXPECT_GT(want.words, 0u);
  EXPECT_EQ(dev->tetra_records_full, want.records);
  EXPECT_EQ(dev->tetra_records_sampled, 0u);
  EXPECT_EQ(dev->tetra_rows_checked, want.rows);
  EXPECT_EQ(dev->tetra_words_checked, want.words);
  const LeaseProof& p = dev->image.proof;
  EXPECT_EQ(p.hashed_regions, dev->image.plan.layout.tables.checks.size());
  EXPECT_EQ(p.hashed_mismatches, 0u);
  EXPECT_EQ(p.dense_decoded_tensors, want.records);
  // The description a lessee gets parses.
  RankRequest described = Lvq5Request(cache.path());
  described.manifest = kLvq5LeaseManifest;
  const std::string json = WriteLeaseDescriptionV2(DescribeDeviceImage(dev->image, described));
  auto parsed = ParseLeaseDescriptionV2(json);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString() << "\n" << json;
  EXPECT_EQ(parsed->memory_kind, LeaseMemoryKind::kDevice);
  EXPECT_EQ(parsed->tables.tensors, dev->image.plan.layout.tables.tensors.size());
}

TEST(Lvq5DeviceImage, TheFixtureIsStagedHashedAndEveryWordDecodedOnTheGpu) {
  SKIP_WITHOUT_GPU();
  StageAndCompare(Lvq5Tiny(), "tiny-sealed.bin", false);
  StageAndCompare(Lvq5Tiny(), "tiny-sealed.bin", true);
}

TEST(Lvq5DeviceImage, AnotherGeometryIsStagedAndEveryWordDecoded) {
  SKIP_WITHOUT_GPU();
  TempDir release;
  WriteOtherRelease(release.path());
  if (HasFatalFailure()) return;
  StageAndCompare(release.path(), "model.bin", false);
}

// Past the budget of full decodes, a seeded ceil(1 %) of each record's rows
// is decoded and compared.
TEST(Lvq5DeviceImage, BeyondTheBudgetASeededSampleOfRowsIsDecoded) {
  SKIP_WITHOUT_GPU();
  TempDir release, cache;
  WriteOtherRelease(release.path());
  PullRelease(release.path(), cache.path());
  if (HasFatalFailure()) return;
  Lvq5DeviceOptions o;
  o.full_check_code_bytes = 0;
  auto dev = StageDeviceLvq5Image(Lvq5Request(cache.path()), o);
  ASSERT_TRUE(dev.ok()) << dev.status().ToString();
  const TetraTotals want = Totals(release.path() / "model.bin");
  EXPECT_EQ(dev->tetra_records_full, 0u);
  EXPECT_EQ(dev->tetra_records_sampled, want.records);
  EXPECT_EQ(dev->tetra_rows_checked, want.sampled_rows);
  EXPECT_EQ(dev->image.proof.decoded_seed, o.image.seed);
}

// A byte of the codes changed on the device after staging: the decode check
// alone (no hash) finds it and names the record and the row.
TEST(Lvq5DeviceImage, AChangedCodeByteOnTheDeviceFailsTheDecodeCheck) {
  SKIP_WITHOUT_GPU();
  TempDir release, cache;
  WriteOtherRelease(release.path());
  PullRelease(release.path(), cache.path());
  if (HasFatalFailure()) return;
  Lvq5DeviceOptions o;
  auto dev = StageDeviceLvq5Image(Lvq5Request(cache.path()), o);
  ASSERT_TRUE(dev.ok()) << dev.status().ToString();
  const ImageTensor* codes = dev->image.plan.layout.tables.FindByName("a.w");
  ASSERT_NE(codes, nullptr);
  const std::uint64_t stride = codes->shape[1];
  // Row 2, block 1, the label's lowest byte: another label, another point.
  const std::uint64_t at = codes->offset + 2 * stride + 6;
  std::byte b{};
  std::byte* dst = const_cast<std::byte*>(dev->image.data()) + at;
  ASSERT_EQ(cudaMemcpy(&b, dst, 1, cudaMemcpyDeviceToHost), cudaSuccess);
  b ^= std::byte{0x01};
  ASSERT_EQ(cudaMemcpy(dst, &b, 1, cudaMemcpyHostToDevice), cudaSuccess);
  const Status s = CheckLvq5TetraDecode(*dev, o);
  EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find("'a.w'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("row 2 block 1"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace exlr8
