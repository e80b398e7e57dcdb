// gpu/region_hash.h on the device against libxxhash's XXH64 (seed 0) of the
// same bytes on the CPU. GPU tests skip when no CUDA device is visible.
#include "gpu/region_hash.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gpu/device.h"
#include "gpu/device_buffer.h"
#include "gpu/stream.h"

namespace exlr8 {
namespace {

constexpr const char* kNoGpu = "no CUDA device: GPU tests run on the device machine";

bool HaveGpu() {
  static const bool have = [] {
    auto n = CudaDeviceCount();
    return n.ok() && *n > 0;
  }();
  return have;
}

using Bytes = std::vector<std::uint8_t>;

// A host image and its device copy.
struct Image {
  Bytes host;
  DeviceBuffer device;
};

Image MakeImage(std::size_t n, std::mt19937_64& rng, CudaStreamView s) {
  Image im;
  im.host.resize(n);
  for (auto& b : im.host) b = static_cast<std::uint8_t>(rng());
  auto buf = DeviceBuffer::Allocate(n);
  EXPECT_TRUE(buf.ok()) << buf.status().ToString();
  im.device = std::move(buf).value();
  EXPECT_TRUE(im.device.CopyFromHostAsync(std::as_bytes(std::span(im.host)), 0, s).ok());
  EXPECT_TRUE(s.Synchronize().ok());
  return im;
}

std::uint64_t CpuDigest(const Bytes& host, const RegionCheck& c) {
  Bytes cat;
  for (std::uint32_t k = 0; k < c.segment_count; ++k)
    cat.insert(cat.end(), host.begin() + static_cast<std::ptrdiff_t>(c.segments[k].offset),
               host.begin() + static_cast<std::ptrdiff_t>(c.segments[k].offset + c.segments[k].length));
  return XXH64(cat.data(), cat.size(), 0);
}

// Splits [off, off + len) into `n` consecutive-or-scattered segments at
// random cut points; scattered: each piece is moved to a random place.
RegionCheck RandomEntry(std::uint64_t len, std::size_t image, std::mt19937_64& rng) {
  RegionCheck c{};
  c.segment_count = 1 + static_cast<std::uint32_t>(rng() % 4);
  std::vector<std::uint64_t> cuts{0, len};
  for (std::uint32_t k = 1; k < c.segment_count; ++k) cuts.push_back(len == 0 ? 0 : rng() % (len + 1));
  std::sort(cuts.begin(), cuts.end());
  for (std::uint32_t k = 0; k < c.segment_count; ++k) {
    const std::uint64_t l = cuts[k + 1] - cuts[k];
    c.segments[k] = {rng() % (image - l + 1), l};
  }
  return c;
}

// ---- without a GPU ----

TEST(RegionHash, RejectsBadArgumentsBeforeTouchingTheDevice) {
  const CudaStreamView s = CudaStreamView::LegacyDefault();
  RegionCheck* checks = reinterpret_cast<RegionCheck*>(std::uintptr_t{0x1000});
  auto* summary = reinterpret_cast<RegionHashSummary*>(std::uintptr_t{0x2000});
  const void* base = reinterpret_cast<const void*>(std::uintptr_t{0x3000});
  EXPECT_EQ(EnqueueRegionHash(base, 64, checks, 1, nullptr, nullptr, s).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(EnqueueRegionHash(base, 64, nullptr, 1, nullptr, summary, s).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(EnqueueRegionHash(nullptr, 64, checks, 1, nullptr, summary, s).code(),
            StatusCode::kInvalidArgument);
  const Status mis =
      EnqueueRegionHash(static_cast<const char*>(base) + 4, 64, checks, 1, nullptr, summary, s);
  EXPECT_EQ(mis.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(mis.message().find("aligned"), std::string::npos) << mis.message();
}

// ---- on the device ----

// Every stream length 0..300 (as 1..4 random segments at random alignments)
// plus large regions of GLM-5.3's half-record sizes, in one launch.
TEST(RegionHash, MatchesLibxxhashForEveryLengthAndSplit) {
  if (!HaveGpu()) GTEST_SKIP() << kNoGpu;
  std::mt19937_64 rng(26);
  auto stream = CudaStream::Create();
  ASSERT_TRUE(stream.ok()) << stream.status().ToString();
  const CudaStreamView s = stream->view();
  Image im = MakeImage(std::size_t{4} << 20, rng, s);
  std::vector<RegionCheck> checks;
  for (int rep = 0; rep < 4; ++rep)
    for (std::uint64_t len = 0; len <= 300; ++len) checks.push_back(RandomEntry(len, im.host.size(), rng));
  for (std::uint64_t len : {196608 + 704, 294912 + 704, 393216 + 704, 1 << 20, (1 << 20) + 31})
    for (int rep = 0; rep < 8; ++rep) checks.push_back(RandomEntry(len, im.host.size(), rng));
  for (auto& c : checks) c.digest = CpuDigest(im.host, c);

  auto r = HashRegions(im.device.data(), im.device.size(), checks, s);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (std::size_t i = 0; i < checks.size(); ++i) {
    std::uint64_t len = 0;
    for (std::uint32_t k = 0; k < checks[i].segment_count; ++k) len += checks[i].segments[k].length;
    ASSERT_EQ(r->digests[i], checks[i].digest)
        << "entry " << i << ": " << checks[i].segment_count << " segments, " << len << " bytes";
  }
  EXPECT_EQ(r->summary.mismatches, 0u);
  EXPECT_EQ(r->summary.first_mismatch, RegionHashSummary::kNone);
  EXPECT_EQ(r->summary.invalid, 0u);
}

// A byte flipped in device memory is found, and the summary names the one
// entry that covers it.
TEST(RegionHash, FlippedByteNamesItsEntry) {
  if (!HaveGpu()) GTEST_SKIP() << kNoGpu;
  std::mt19937_64 rng(27);
  auto stream = CudaStream::Create();
  ASSERT_TRUE(stream.ok()) << stream.status().ToString();
  const CudaStreamView s = stream->view();
  constexpr std::uint64_t kRegion = 300000;
  constexpr int kEntries = 40;
  Image im = MakeImage(kRegion * kEntries, rng, s);
  std::vector<RegionCheck> checks(kEntries);
  for (int i = 0; i < kEntries; ++i) {
    // Two segments: the region's second half first, then its first half.
    checks[i].segment_count = 2;
    checks[i].segments[0] = {i * kRegion + 149999, kRegion - 149999};
    checks[i].segments[1] = {i * kRegion, 149999};
    checks[i].digest = CpuDigest(im.host, checks[i]);
  }
  auto clean = HashRegions(im.device.data(), im.device.size(), checks, s);
  ASSERT_TRUE(clean.ok()) << clean.status().ToString();
  ASSERT_EQ(clean->summary.mismatches, 0u);

  for (std::uint64_t pos : {std::uint64_t{27} * kRegion + 149998, std::uint64_t{13} * kRegion + 299999}) {
    std::uint8_t flipped = im.host[pos] ^ 0x01;
    ASSERT_TRUE(im.device.CopyFromHostAsync(std::as_bytes(std::span(&flipped, 1)), pos, s).ok());
    auto r = HashRegions(im.device.data(), im.device.size(), checks, s);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    const std::uint64_t entry = pos / kRegion;
    EXPECT_EQ(r->summary.mismatches, 1u) << "flip at byte " << pos;
    EXPECT_EQ(r->summary.first_mismatch, entry) << "flip at byte " << pos;
    EXPECT_NE(r->digests[entry], checks[entry].digest);
    Bytes changed = im.host;
    changed[pos] = flipped;
    EXPECT_EQ(r->digests[entry], CpuDigest(changed, checks[entry]));
    ASSERT_TRUE(im.device.CopyFromHostAsync(std::as_bytes(std::span(&im.host[pos], 1)), pos, s).ok());
  }
}

// Entries that leave the buffer or have 0 or 5 segments are invalid: counted,
// named, digest 0, and nothing outside the buffer is read.
TEST(RegionHash, InvalidEntriesAreCountedNotRead) {
  if (!HaveGpu()) GTEST_SKIP() << kNoGpu;
  std::mt19937_64 rng(28);
  auto stream = CudaStream::Create();
  ASSERT_TRUE(stream.ok()) << stream.status().ToString();
  const CudaStreamView s = stream->view();
  Image im = MakeImage(4096, rng, s);
  std::vector<RegionCheck> checks(6);
  checks[0].segment_count = 1;
  checks[0].segments[0] = {0, 4096};
  checks[0].digest = CpuDigest(im.host, checks[0]);
  checks[1] = checks[0];
  checks[1].segments[0] = {1, 4096};  // one byte past the end
  checks[2] = checks[0];
  checks[2].segment_count = 0;
  checks[3] = checks[0];
  checks[3].segment_count = 5;
  checks[4] = checks[0];
  checks[4].segment_count = 2;
  checks[4].segments[1] = {UINT64_MAX - 10, 20};  // offset + length wraps
  checks[5] = checks[0];
  auto r = HashRegions(im.device.data(), im.device.size(), checks, s);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->summary.invalid, 4u);
  EXPECT_EQ(r->summary.first_invalid, 1u);
  EXPECT_EQ(r->summary.mismatches, 4u);
  EXPECT_EQ(r->summary.first_mismatch, 1u);
  EXPECT_EQ(r->digests[0], checks[0].digest);
  EXPECT_EQ(r->digests[5], checks[0].digest);
  for (int i = 1; i <= 4; ++i) EXPECT_EQ(r->digests[i], 0u) << "entry " << i;
}

}  // namespace
}  // namespace exlr8
