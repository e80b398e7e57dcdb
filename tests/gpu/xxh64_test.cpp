// gpu/xxh64.cuh run on the CPU (it is __host__ __device__): the four-lane
// split, the segment and stripe bookkeeping and the tail, compared with
// libxxhash's XXH64(seed 0) of the concatenated bytes. No GPU needed.
#include "gpu/xxh64.cuh"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstdint>
#include <random>
#include <vector>

namespace exlr8::xxh64 {
namespace {

using Bytes = std::vector<std::uint8_t>;

// A buffer whose size is a multiple of 8 (the aligned loads may read to the
// next 8-byte boundary), 8-byte aligned (std::vector of uint64 storage).
struct Buffer {
  explicit Buffer(std::size_t n, std::mt19937_64& rng) : words((n + 7) / 8 + 1) {
    for (auto& w : words) w = rng();
  }
  const std::uint8_t* data() const { return reinterpret_cast<const std::uint8_t*>(words.data()); }
  std::size_t size() const { return words.size() * 8; }
  std::vector<std::uint64_t> words;
};

Bytes Concat(const Buffer& b, const std::vector<HashSegment>& segs) {
  Bytes out;
  for (const auto& s : segs) out.insert(out.end(), b.data() + s.offset, b.data() + s.offset + s.length);
  return out;
}

std::uint64_t Reference(const Bytes& bytes) { return XXH64(bytes.data(), bytes.size(), 0); }

std::uint64_t Ours(const Buffer& b, const std::vector<HashSegment>& segs) {
  return Xxh64Segments(b.data(), segs.data(), static_cast<int>(segs.size()));
}

TEST(Xxh64Host, EmptyInputMatchesLibxxhash) {
  std::mt19937_64 rng(1);
  Buffer b(64, rng);
  EXPECT_EQ(Ours(b, {}), XXH64(nullptr, 0, 0));
  EXPECT_EQ(Ours(b, {{5, 0}}), XXH64(nullptr, 0, 0));
}

// Every length 0..300 at every start alignment 0..7: one segment.
TEST(Xxh64Host, EveryLengthAndAlignmentOneSegment) {
  std::mt19937_64 rng(2);
  Buffer b(320, rng);
  for (std::uint64_t len = 0; len <= 300; ++len)
    for (std::uint64_t off = 0; off < 8; ++off) {
      const std::vector<HashSegment> segs{{off, len}};
      ASSERT_EQ(Ours(b, segs), Reference(Concat(b, segs))) << "length " << len << " offset " << off;
    }
}

// Two segments with the boundary at every position of a 0..300-byte stream,
// the second segment at another alignment: words straddling the boundary.
TEST(Xxh64Host, EveryBoundaryPositionTwoSegments) {
  std::mt19937_64 rng(3);
  Buffer b(1024, rng);
  for (std::uint64_t len = 0; len <= 300; len += 7)
    for (std::uint64_t cut = 0; cut <= len; ++cut) {
      const std::vector<HashSegment> segs{{3, cut}, {512 + (cut % 8), len - cut}};
      ASSERT_EQ(Ours(b, segs), Reference(Concat(b, segs))) << "length " << len << " cut " << cut;
    }
}

// Random 1..4 segments (some empty), random offsets and lengths, incl. large.
TEST(Xxh64Host, RandomSegmentSplitsMatchLibxxhash) {
  std::mt19937_64 rng(4);
  Buffer b(1 << 20, rng);
  for (int iter = 0; iter < 400; ++iter) {
    const int n = 1 + static_cast<int>(rng() % 4);
    std::vector<HashSegment> segs;
    for (int k = 0; k < n; ++k) {
      const std::uint64_t max_len = iter % 10 == 0 ? 200000 : 300;
      const std::uint64_t len = rng() % 5 == 0 ? 0 : rng() % (max_len + 1);
      const std::uint64_t off = rng() % (b.size() - 8 - len);
      segs.push_back({off, len});
    }
    ASSERT_EQ(Ours(b, segs), Reference(Concat(b, segs))) << "iteration " << iter;
  }
}

// The lanes are independent: any order gives the same digest (the kernel
// runs them in four threads and merges after a shuffle).
TEST(Xxh64Host, LanesAreIndependentOfOrder) {
  std::mt19937_64 rng(5);
  Buffer b(4096, rng);
  const std::vector<HashSegment> segs{{1, 1000}, {2001, 77}, {3000, 1001}};
  const std::uint64_t total = 2078;
  std::uint64_t v[4];
  for (int i = 3; i >= 0; --i) v[i] = Xxh64Lane(b.data(), segs.data(), 3, total, i);
  EXPECT_EQ(Xxh64Finish(v, b.data(), segs.data(), 3, total), Reference(Concat(b, segs)));
}

// A half record of GLM-5.3's K4 (393,216 + 704 bytes) changes digest with a
// single flipped bit anywhere, the last byte included.
TEST(Xxh64Host, LargeRegionAndFlippedBit) {
  std::mt19937_64 rng(6);
  Buffer b(393920 + 64, rng);
  const std::vector<HashSegment> segs{{0, 393920}};
  const std::uint64_t good = Ours(b, segs);
  ASSERT_EQ(good, Reference(Concat(b, segs)));
  for (std::uint64_t pos :
       {std::uint64_t{0}, std::uint64_t{31}, std::uint64_t{200001}, std::uint64_t{393919}}) {
    auto* bytes = reinterpret_cast<std::uint8_t*>(b.words.data());
    bytes[pos] ^= 0x10;
    EXPECT_NE(Ours(b, segs), good) << "flip at " << pos;
    EXPECT_EQ(Ours(b, segs), Reference(Concat(b, segs)));
    bytes[pos] ^= 0x10;
  }
}

}  // namespace
}  // namespace exlr8::xxh64
