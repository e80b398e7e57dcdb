// GPU decode vs the CPU reference: the acceptance check for gpu/decode.cuh.
//
// CheckGpuDecode uploads the halves (gpu/upload.h), decodes them on the GPU
// into fp32 and E4M3 bytes, copies both back and compares them bit for bit
// with format/trellis.h's DecodeHalfTiles (fp32) and with FloatToE4M3 of the
// reference values (bytes). The tolerance is zero: the decode is a table
// lookup of exact E4M3 values, so any difference is a bug. Output buffers are
// filled with 0xFF (an fp32 NaN pattern and E4M3 NaN, which the codebook never
// produces) before each decode, so an element the kernel fails to write is a
// mismatch too.
//
// Work is done in batches bounded by GpuCheckOptions::max_batch_weights so
// memory stays bounded whatever the input size.
// Thread safety: may be called from any thread; uses only `stream`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "format/status.h"
#include "format/trellis.h"
#include "gpu/decode.cuh"
#include "gpu/device.h"
#include "gpu/stream.h"

namespace exlr8 {

struct GpuDecodeMismatch {
  std::uint64_t half = 0;    // index into the caller's halves
  std::uint64_t index = 0;   // element index in the half's T (row * cols + col)
  std::uint64_t row = 0;     // T row (input side)
  std::uint64_t col = 0;     // T column (output side)
  bool in_e4m3 = false;      // found in the E4M3 output (else fp32)
  std::uint32_t gpu_bits = 0;  // fp32 bits, or the E4M3 byte
  std::uint32_t cpu_bits = 0;
  float gpu_value = 0;
  float cpu_value = 0;
};

struct GpuCheckReport {
  std::uint64_t halves = 0;
  std::uint64_t weights = 0;           // elements compared per output
  std::uint64_t f32_mismatches = 0;
  std::uint64_t e4m3_mismatches = 0;
  std::optional<GpuDecodeMismatch> first;  // first mismatch in (half, index) order, fp32 before E4M3
  double upload_seconds = 0;           // UploadHalves' transfer time
  double gpu_decode_seconds = 0;       // kernel time, CUDA events, all batches
  double cpu_decode_seconds = 0;       // DecodeHalfTiles, one thread, all halves

  bool ok() const { return f32_mismatches == 0 && e4m3_mismatches == 0; }
  // One line: counts, and the first mismatch with its position and values.
  std::string ToString() const;
};

struct GpuCheckOptions {
  DecodeTableMode mode = DecodeTableMode::kSharedE4M3;
  bool check_e4m3 = true;                          // also decode and compare E4M3 bytes
  std::uint64_t max_batch_weights = 64ull << 20;   // per-batch output elements (>= one half)
};

// Decodes `halves` (each 16*k*hidden bytes, spec 8) on the current device and
// compares with the CPU reference. A report with mismatches is still an OK
// Result: the caller decides (tests assert report.ok()).
// Errors: InvalidArgument for k outside 1..8, hidden 0 / not a multiple of
// 128, no halves, or a half of the wrong size (named by index); Unavailable
// "no CUDA device: ..." without a GPU; ResourceExhausted; Internal.
Result<GpuCheckReport> CheckGpuDecode(std::span<const std::span<const std::byte>> halves, int k, HalfLayout layout,
                                      std::uint64_t hidden, CudaStreamView stream,
                                      const GpuCheckOptions& options = {});

}  // namespace exlr8
