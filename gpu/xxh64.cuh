// XXH64 (xxHash's 64-bit hash, seed 0, bit for bit XXH64() of libxxhash)
// of a byte stream made of 1..4 segments of one buffer, split the way the
// GPU computes it: four lanes, lane i owning XXH64's accumulator v[i+1]
// (the 8 bytes at 32*s + 8*i of every full 32-byte stripe s), then one
// finish step (merge, length, the < 32-byte tail, avalanche).
//
//   v[i] = Xxh64Lane(base, segs, n, total, i)   for i in 0..3, in any order
//   h    = Xxh64Finish(v, base, segs, n, total)
//
// Everything is __host__ __device__ (plain inline C++ without nvcc), so the
// CPU tests run exactly the code the kernel (gpu/region_hash.cu) runs.
//
// Segments: the stream is segs[0] ‖ segs[1] ‖ ... ‖ segs[n-1], segment k
// being bytes [offset, offset + length) of `base`; a segment may be empty
// and a boundary may fall anywhere, inside a stripe or inside an 8-byte word
// (such words are gathered byte by byte; the words inside a segment are read
// as aligned 8-byte loads, two per word when the segment is misaligned).
//
// REQUIRES (not checked here: gpu/region_hash.cu checks the ranges):
//   - `base` is 8-byte aligned; every segment lies inside the buffer;
//   - the buffer may be read up to the next 8-byte boundary past each
//     segment's end and from the 8-byte boundary before its start (true of
//     any cudaMalloc / VMM allocation, whose size is a multiple of 256);
//   - total == sum of the n segment lengths; 1 <= n <= 4 (0 hashes "").
// Little-endian only (x86-64, aarch64 and every CUDA device).
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define EXLR8_HD __host__ __device__ __forceinline__
#else
#define EXLR8_HD inline
#endif

namespace exlr8::xxh64 {

// One piece of a hashed stream (also the check table's segment, 16 bytes).
struct HashSegment {
  std::uint64_t offset;
  std::uint64_t length;
};

inline constexpr int kMaxSegments = 4;
inline constexpr std::uint64_t kP1 = 0x9E3779B185EBCA87ull;
inline constexpr std::uint64_t kP2 = 0xC2B2AE3D27D4EB4Full;
inline constexpr std::uint64_t kP3 = 0x165667B19E3779F9ull;
inline constexpr std::uint64_t kP4 = 0x85EBCA77C2B2AE63ull;
inline constexpr std::uint64_t kP5 = 0x27D4EB2F165667C5ull;

EXLR8_HD std::uint64_t Rotl(std::uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

EXLR8_HD std::uint64_t Round(std::uint64_t acc, std::uint64_t input) {
  acc += input * kP2;
  acc = Rotl(acc, 31);
  return acc * kP1;
}

EXLR8_HD std::uint64_t MergeRound(std::uint64_t h, std::uint64_t v) {
  h ^= Round(0, v);
  return h * kP1 + kP4;
}

EXLR8_HD std::uint64_t Avalanche(std::uint64_t h) {
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  return h;
}

// Lane i's starting accumulator for seed 0.
EXLR8_HD std::uint64_t LaneInit(int lane) {
  return lane == 0 ? kP1 + kP2 : lane == 1 ? kP2 : lane == 2 ? 0 : std::uint64_t{0} - kP1;
}

// An aligned 8-byte load (read-only path on the device).
EXLR8_HD std::uint64_t LoadAligned64(const std::uint8_t* p) {
#if defined(__CUDA_ARCH__)
  return __ldg(reinterpret_cast<const unsigned long long*>(p));
#else
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
#endif
}

EXLR8_HD std::uint8_t LoadByte(const std::uint8_t* p) {
#if defined(__CUDA_ARCH__)
  return __ldg(p);
#else
  return *p;
#endif
}

// Folds `words` consecutive stripe words (8 bytes at a, a + 32, a + 64, ...)
// into `v`. `shift` = 8 * (a mod 8): 0 reads one aligned word each, else two
// aligned words are combined.
EXLR8_HD std::uint64_t FoldWords(std::uint64_t v, const std::uint8_t* a, std::uint64_t words) {
  constexpr int kBatch = 8;  // loads in flight per thread before the rounds
  const unsigned mis = static_cast<unsigned>(reinterpret_cast<std::uintptr_t>(a) & 7u);
  const std::uint8_t* p = a - mis;
  std::uint64_t w[kBatch];
  if (mis == 0) {
    for (; words >= kBatch; words -= kBatch, p += 32 * kBatch) {
      for (int k = 0; k < kBatch; ++k) w[k] = LoadAligned64(p + 32 * k);
      for (int k = 0; k < kBatch; ++k) v = Round(v, w[k]);
    }
    for (; words > 0; --words, p += 32) v = Round(v, LoadAligned64(p));
  } else {
    const unsigned lo = 8 * mis, hi = 64 - 8 * mis;
    for (; words >= kBatch; words -= kBatch, p += 32 * kBatch) {
      std::uint64_t x[kBatch];
      for (int k = 0; k < kBatch; ++k) {
        w[k] = LoadAligned64(p + 32 * k);
        x[k] = LoadAligned64(p + 32 * k + 8);
      }
      for (int k = 0; k < kBatch; ++k) v = Round(v, (w[k] >> lo) | (x[k] << hi));
    }
    for (; words > 0; --words, p += 32) v = Round(v, (LoadAligned64(p) >> lo) | (LoadAligned64(p + 8) << hi));
  }
  return v;
}

// Forward-only position in the stream: which segment holds stream offset p.
struct SegmentCursor {
  const std::uint8_t* base;
  const HashSegment* segs;
  int count;
  int k = 0;                // current segment
  std::uint64_t start = 0;  // stream offset of segment k's first byte

  // REQUIRES: p < total and p never decreases between calls.
  EXLR8_HD void Seek(std::uint64_t p) {
    while (p >= start + segs[k].length) {
      start += segs[k].length;
      ++k;
    }
  }
  // Bytes [p, p + n) of the stream (n <= 8), little-endian, gathered one by
  // one across segment boundaries. REQUIRES: p + n <= total.
  EXLR8_HD std::uint64_t Gather(std::uint64_t p, int n) {
    std::uint64_t out = 0;
    for (int b = 0; b < n; ++b) {
      Seek(p + b);
      out |= std::uint64_t{LoadByte(base + segs[k].offset + (p + b - start))} << (8 * b);
    }
    return out;
  }
};

// Lane `lane` (0..3): its accumulator after every full stripe of the stream.
EXLR8_HD std::uint64_t Xxh64Lane(const std::uint8_t* base, const HashSegment* segs, int count,
                                 std::uint64_t total, int lane) {
  std::uint64_t v = LaneInit(lane);
  const std::uint64_t stripes = total / 32;
  const std::uint64_t own = 8 * static_cast<std::uint64_t>(lane);
  SegmentCursor cur{base, segs, count};
  std::uint64_t s = 0;
  while (s < stripes) {
    const std::uint64_t p = 32 * s + own;
    cur.Seek(p);
    const std::uint64_t end = cur.start + segs[cur.k].length;
    if (p + 8 <= end) {
      // Every word of this lane that lies wholly inside segment k.
      std::uint64_t s_end = (end - own - 8) / 32 + 1;
      if (s_end > stripes) s_end = stripes;
      v = FoldWords(v, base + segs[cur.k].offset + (p - cur.start), s_end - s);
      s = s_end;
    } else {
      v = Round(v, cur.Gather(p, 8));  // the word straddles a boundary
      ++s;
    }
  }
  return v;
}

// The digest from the four lanes' accumulators.
EXLR8_HD std::uint64_t Xxh64Finish(const std::uint64_t v[4], const std::uint8_t* base,
                                   const HashSegment* segs, int count, std::uint64_t total) {
  std::uint64_t h;
  if (total >= 32) {
    h = Rotl(v[0], 1) + Rotl(v[1], 7) + Rotl(v[2], 12) + Rotl(v[3], 18);
    for (int i = 0; i < 4; ++i) h = MergeRound(h, v[i]);
  } else {
    h = kP5;  // seed 0
  }
  h += total;
  SegmentCursor cur{base, segs, count};
  std::uint64_t p = total / 32 * 32;
  for (; total - p >= 8; p += 8) {
    h ^= Round(0, cur.Gather(p, 8));
    h = Rotl(h, 27) * kP1 + kP4;
  }
  if (total - p >= 4) {
    h ^= cur.Gather(p, 4) * kP1;
    h = Rotl(h, 23) * kP2 + kP3;
    p += 4;
  }
  for (; p < total; ++p) {
    h ^= cur.Gather(p, 1) * kP5;
    h = Rotl(h, 11) * kP1;
  }
  return Avalanche(h);
}

// The whole hash in one thread: the four lanes one after the other.
EXLR8_HD std::uint64_t Xxh64Segments(const std::uint8_t* base, const HashSegment* segs, int count) {
  std::uint64_t total = 0;
  for (int i = 0; i < count; ++i) total += segs[i].length;
  std::uint64_t v[4];
  for (int i = 0; i < 4; ++i) v[i] = Xxh64Lane(base, segs, count, total, i);
  return Xxh64Finish(v, base, segs, count, total);
}

}  // namespace exlr8::xxh64
