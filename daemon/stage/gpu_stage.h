// StageOnGpu: a rank's verified halves (rank_reader.h) into one device
// allocation with the pointer table the kernels use (gpu/upload.h), then two
// checks before anything may use them:
//  - round trip: a sample of halves copied back from the device equals the
//    bytes that were verified (what the kernels will read is what the cache
//    holds);
//  - decode: the same sample decoded on the GPU equals the CPU reference
//    decoder (format/trellis.h) bit for bit, in fp32 and E4M3
//    (gpu/check.h, grouped by width, layout and hidden size).
// lease.h hands the kept buffers to a serving process.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

#include "daemon/stage/rank_reader.h"
#include "format/status.h"
#include "gpu/upload.h"

namespace exlr8 {

struct GpuStageOptions {
  int device = 0;
  // Halves checked (round trip and decode), spread evenly over the rank:
  // 0 none, kAllHalves every one.
  static constexpr std::size_t kAllHalves = std::numeric_limits<std::size_t>::max();
  std::size_t check_halves = 64;
  UploadOptions upload;
  // Set while staging runs (exlr8d-stage told to stop): the upload and the
  // checks stop within a half, and StageOnGpu returns Cancelled, keeping
  // nothing. Null: never.
  const std::atomic<bool>* cancel = nullptr;
};

struct GpuStageReport {
  std::string device;              // "NVIDIA H200 (device 0, ...)"
  UploadStats upload;              // bytes, device bytes, transfer time
  std::uint64_t halves = 0;        // staged
  std::uint64_t checked_halves = 0;
  std::uint64_t checked_weights = 0;
  std::uint64_t round_trip_mismatches = 0;  // halves whose bytes came back different
  std::uint64_t decode_mismatches = 0;      // elements, fp32 + E4M3
  std::string first_mismatch;               // "" when none
  double gpu_decode_seconds = 0;
  double cpu_decode_seconds = 0;
  bool ok() const { return round_trip_mismatches == 0 && decode_mismatches == 0; }
};

// Errors: Unavailable without a CUDA device; InvalidArgument for a bad
// device or no halves; ResourceExhausted when device memory runs out;
// Cancelled once options.cancel is set. A
// report with mismatches is an OK Result: the caller decides (ok()).
// `keep`, if given, receives the staged buffers (to lease them); otherwise
// they are freed on return.
Result<GpuStageReport> StageOnGpu(const RankHalves& rank, const GpuStageOptions& options,
                                  StagedHalves* keep = nullptr);

}  // namespace exlr8
