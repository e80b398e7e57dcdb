// GPU trellis tile decode: the CUDA twin of format/trellis.h (spec 7 and 8).
//
// The kernel decodes whole expert halves (or dense TRELLIS runs), each a run
// of hidden/2 tiles of 32*K bytes, into T in (input, output) row-major order,
// bit for bit as DecodeHalfTiles does on the CPU:
//
//   bytes   : 8*K LE u32 words per tile, each read bit 31 -> bit 0     (7.1)
//   states  : S[i] = 16 stream bits ending at bit (i+1)K, tail-biting (7.2-7.3)
//   value   : codebook[S] (the 65,536-entry table, fp16-then-E4M3)    (7.4-7.5)
//   place   : stream index 8t+m -> tile (row, col)                    (7.6)
//             tile n -> T block per HalfLayout (kGateUp 8.1, kDown 8.2)
//
// One warp decodes one tile at a time (lane g owns stream elements 8g..8g+7;
// fp32 is stored directly, E4M3 bytes through a shared-memory tile as 8-byte
// row pieces); a persistent grid strides over every tile of the batch.
//
// Addressing: halves live anywhere in one device allocation `base`; a device
// table `offsets` gives the byte offset of each half (kernels read half i at
// base + offsets[i], i.e. ptr[e][h] = base + offsets[e * halves_per_expert + h]
// for the staging layout of gpu/upload.h). Half j of a batch (table entry
// first_half + j) is written to out + j * 128 * hidden.
//
// This header has no device code and may be included from .cpp files.
// Thread safety: launchers may be called from any host thread; they only
// enqueue work on the given stream.
#pragma once

#include <cstddef>
#include <cstdint>

#include "format/status.h"
#include "format/trellis.h"
#include "gpu/device_buffer.h"
#include "gpu/stream.h"

namespace exlr8 {

// Where the kernel reads the codebook from. Both give identical results.
enum class DecodeTableMode {
  // fp32 table (256 KiB) and E4M3 byte table (64 KiB) in global memory, read
  // through the read-only cache.
  kGlobalF32,
  // The 64 KiB E4M3 byte table copied into each block's shared memory; fp32
  // values come from the hardware E4M3 -> fp16 conversion (exact).
  kSharedE4M3,
};
const char* DecodeTableModeName(DecodeTableMode mode);

// The codebook in device memory, uploaded once and shared by all launches on
// the device it was uploaded to. Immutable after Upload(); move-only.
class DeviceCodebook {
 public:
  // Builds the host tables (CodebookF32 / CodebookE4M3Bytes) if needed and
  // copies them to the current device on `stream`, then synchronises the
  // stream (the host tables are static, but the call returns a ready table).
  // Errors: Unavailable without a device, ResourceExhausted, Internal.
  static Result<DeviceCodebook> Upload(CudaStreamView stream);

  const float* f32() const { return f32_.data_as<float>(); }
  const std::uint8_t* e4m3() const { return e4m3_.data_as<std::uint8_t>(); }

 private:
  DeviceBuffer f32_;
  DeviceBuffer e4m3_;
};

// A batch of halves to decode, all at one width and layout.
struct HalfBatch {
  const std::byte* base = nullptr;          // device memory holding the halves
  const std::uint64_t* offsets = nullptr;   // device array of byte offsets into base
  std::uint64_t first_half = 0;             // decode table entries [first_half,
  std::uint64_t count = 0;                  //                      first_half + count)
  int k = 0;                                // 1..8
  HalfLayout layout = HalfLayout::kGateUp;
  std::uint64_t hidden = 0;                 // the run's length: positive multiple of 128
};

// Device outputs; either may be null (not produced), not both. f32 must be
// 16-byte aligned and e4m3 8-byte aligned (cudaMalloc memory is). Each holds
// count * 128 * hidden elements; half j of the batch starts at j*128*hidden.
struct DecodeOutputs {
  float* f32 = nullptr;           // exact E4M3 values as fp32 (DecodeHalfTiles)
  std::uint8_t* e4m3 = nullptr;   // the same values as E4M3 bit patterns
};

// Enqueues the decode of `batch` on `stream`. Returns after the launch; the
// outputs are ready when the stream has passed it.
// REQUIRES: base, offsets and outputs are device memory of the current
//   device; every offsets[i] of the batch is a multiple of 4 and
//   offsets[i] + 16*k*hidden lies inside the allocation behind base (the
//   kernel cannot check device-side tables; gpu/upload.h builds valid ones);
//   `codebook` was uploaded to the current device; all stay alive until the
//   stream has passed the kernel.
// Errors: InvalidArgument for k outside 1..8, hidden 0 / not a multiple of
// 128 / above 2^31, no output, null base/offsets, a size overflow, or a
// misaligned base or output; Internal for a failed launch.
Status LaunchDecodeHalves(const HalfBatch& batch, const DecodeOutputs& out, const DeviceCodebook& codebook,
                          DecodeTableMode mode, CudaStreamView stream);

}  // namespace exlr8
