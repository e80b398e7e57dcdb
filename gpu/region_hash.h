// XXH64 of many regions of device memory in one kernel launch: the in-place
// check of a staged rank image against its check table
// (docs/design/RANK_IMAGE.md, "Check table").
//
// Each RegionCheck names 1..4 (offset, length) segments of one device
// buffer, hashed in order as one XXH64 stream with seed 0 (gpu/xxh64.cuh),
// and the digest expected. Four adjacent threads of a warp hash one entry
// (one per XXH64 accumulator, so a 32-byte stripe is one memory sector).
//
// Errors found in an entry are data, not a Status: an entry whose segment
// count is not 1..4 or whose segment leaves the buffer is "invalid" (digest
// 0, never read outside the buffer) and counts as a mismatch too.
//
// Thread safety: stateless; calls from several threads on several streams
// are fine. Stream rules: EnqueueRegionHash only enqueues; the caller keeps
// the buffer, the checks and the outputs alive and unmodified until the
// stream has passed the launch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "format/status.h"
#include "gpu/stream.h"
#include "gpu/xxh64.cuh"

namespace exlr8 {

// One check: exactly the 80-byte check table entry (little-endian):
// digest u64, segment count u32 (1..4), reserved u32 (ignored), then four
// (offset u64, length u64) pairs, the unused ones zero. Offsets are from
// the hashed buffer's start.
struct RegionCheck {
  std::uint64_t digest;
  std::uint32_t segment_count;
  std::uint32_t reserved;
  xxh64::HashSegment segments[xxh64::kMaxSegments];
};
static_assert(sizeof(RegionCheck) == 80 && alignof(RegionCheck) == 8);
static_assert(offsetof(RegionCheck, segment_count) == 8 && offsetof(RegionCheck, segments) == 16);

// What one launch found. Indexes are entry numbers in the checks array;
// kNone when there is none.
struct RegionHashSummary {
  static constexpr std::uint64_t kNone = UINT64_MAX;
  std::uint64_t mismatches;      // entries whose digest differs (invalid ones included)
  std::uint64_t first_mismatch;  // lowest such entry
  std::uint64_t invalid;         // entries with a bad segment count or range
  std::uint64_t first_invalid;
};

// Enqueues on `stream`: reset *device_summary, then hash every entry of
// device_checks[0, count) over device_base[0, base_bytes), writing entry i's
// digest to device_digests[i] (when device_digests is not null) and the
// totals to *device_summary.
// REQUIRES: device_base is 8-byte aligned and device memory (any offset in
// [0, base_bytes) may be read, and the 8-byte-aligned words around it);
// device_checks, device_digests (count entries) and device_summary are
// device memory.
// Errors (nothing enqueued): InvalidArgument for a null or misaligned
// pointer where one is needed, or more than 2^36 entries; the runtime's error
// (cuda_check.h) when the launch fails.
Status EnqueueRegionHash(const void* device_base, std::size_t base_bytes, const RegionCheck* device_checks,
                         std::size_t count, std::uint64_t* device_digests, RegionHashSummary* device_summary,
                         CudaStreamView stream);

// The result of HashRegions: per entry the digest computed, and the summary.
struct RegionHashReport {
  std::vector<std::uint64_t> digests;
  RegionHashSummary summary{};
};

// Convenience for tests and one-off checks: copies `checks` (host memory)
// to the device, enqueues the hash on `stream`, waits for it and copies the
// results back. Same requirements and errors as EnqueueRegionHash, plus
// ResourceExhausted when the temporary device buffers cannot be allocated.
Result<RegionHashReport> HashRegions(const void* device_base, std::size_t base_bytes,
                                     std::span<const RegionCheck> checks, CudaStreamView stream);

}  // namespace exlr8
