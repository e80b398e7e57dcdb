// GPU reconstruction of weights from decoded trellis tiles (spec 9.1-9.3),
// the CUDA twin of format/reconstruct.h, and the device-side comparisons the
// in-place check of a rank image uses (daemon/stage/device_image_check.h).
//
//   LaunchReconstructBlocks   W = diag(u) . B . T . B . diag(v) in place, per
//                             128 x 128 block in shared memory, in fp32, with
//                             ReconstructBlocks' operation order: (1) H'.T by
//                             radix-2 butterflies over the rows (stages 1, 2,
//                             .., 64), (2) row r times u[r], (3) each row
//                             times H' (same stages), (4) column c times
//                             v[c] * (1/128). The butterflies are the CPU's in
//                             the CPU's order, so results normally agree bit
//                             for bit; the contract is spec 9.3's tolerance.
//   LaunchExpandHalfVectors   a half record's u and v (spec 9.2) read in place
//                             from the image: the record's slice and block
//                             row and the layer's signs, each in its stored
//                             dtype (F16, BF16, F32: spec U-5), exactly as
//                             ExpandHiddenSideVector computes them.
//   LaunchConvertToFloat      a stored float vector in place -> fp32 (exact).
//   LaunchBlockErrors         per 128 x 128 block: max|a-b| and max|b| (a NaN
//                             or infinite difference reads as +inf).
//   LaunchCompareTiles / LaunchCompareBits  bit-exact element comparisons
//                             that count mismatches and keep the first index.
//
// This header has no device code and may be included from .cpp files.
// Thread safety: launchers only enqueue work on the given stream; callable
// from any host thread. Every pointer is device memory of the current device
// and must stay alive until the stream has passed the launch.
#pragma once

#include <cstddef>
#include <cstdint>

#include "format/dtype.h"
#include "format/status.h"
#include "format/trellis.h"
#include "gpu/stream.h"

namespace exlr8 {

// `count` matrices of rows x cols fp32, matrix j at w + j*rows*cols
// (row-major, (input, output)), each with its input-side vector at
// u + j*u_stride (rows entries) and output-side vector at v + j*v_stride
// (cols entries); a stride of 0 shares one vector between all matrices.
struct ReconstructBatch {
  float* w = nullptr;
  std::uint64_t count = 0;
  std::uint64_t rows = 0, cols = 0;  // positive multiples of 128
  const float* u = nullptr;
  std::uint64_t u_stride = 0;
  const float* v = nullptr;
  std::uint64_t v_stride = 0;
};

// Enqueues the in-place reconstruction. Errors: InvalidArgument for a shape
// that is not a positive multiple of 128 on both sides (or above 2^31), a
// null pointer with count > 0, or a block count above 2^31 - 1; Internal for
// a failed launch.
Status LaunchReconstructBlocks(const ReconstructBatch& batch, CudaStreamView stream);

// Where a half record's vectors lie in the image (byte offsets from base).
// `slice` holds 128 elements of slice_dtype (svh for gate/up, suh for
// down), `block` hidden/128 elements of block_dtype (su_block / sv_block),
// `signs` hidden elements of signs_dtype (the layer's signs.in for gate/up,
// signs.out for down). Dtypes are DType values of F16, BF16 or F32.
struct HalfVectorRef {
  std::uint64_t slice = 0;
  std::uint64_t block = 0;
  std::uint64_t signs = 0;
  std::uint8_t slice_dtype = 0, block_dtype = 0, signs_dtype = 0;
  std::uint8_t reserved[5] = {};
};

// For `count` halves (refs: device array) of `layout` and `hidden`, writes
// u (count x rows) and v (count x cols) as ReconstructHalf takes them:
//   gate/up: u[i] = signs.in[i] * su_block[i/128] (hidden), v = svh slice (128)
//   down:    u = suh slice (128), v[o] = signs.out[o] * sv_block[o/128] (hidden)
// Reads bytes only (any alignment). Errors: InvalidArgument for hidden not a
// positive multiple of 128, a null pointer with count > 0; Internal for a
// failed launch. A dtype other than F16/BF16/F32 in a ref yields NaN there
// (the caller validated the tables).
Status LaunchExpandHalfVectors(const std::byte* base, const HalfVectorRef* refs, std::uint64_t count,
                               HalfLayout layout, std::uint64_t hidden, float* u, float* v,
                               CudaStreamView stream);

// `n` elements of `dtype` (F16, BF16 or F32, little-endian, any alignment)
// at src, exactly as fp32 into dst. InvalidArgument for another dtype.
Status LaunchConvertToFloat(const std::byte* src, DType dtype, std::uint64_t n, float* dst,
                            CudaStreamView stream);

// max|a - b| and max|b| over one 128 x 128 block.
struct BlockError {
  float max_diff = 0;
  float max_ref = 0;
};

// For `count` matrices of rows x cols (a: computed, b: reference; both laid
// out as in ReconstructBatch), writes one BlockError per 128 x 128 block to
// out[(j * rows/128 + rb) * cols/128 + cb]. Same argument errors as
// LaunchReconstructBlocks.
Status LaunchBlockErrors(const float* a, const float* b, std::uint64_t count, std::uint64_t rows,
                         std::uint64_t cols, BlockError* out, CudaStreamView stream);

// What a bit-exact comparison found: how many elements differ and the
// index of the first that does (UINT64_MAX when none).
struct CompareResult {
  unsigned long long mismatches = 0;
  unsigned long long first = ~0ull;
};

// Decoded tiles against the reference's E4M3 bytes: element i differs when
// e4m3[i] != ref[i] or the bits of f32[i] are not those of the E4M3 value
// ref[i]. `out` (device) is reset by the launch.
Status LaunchCompareTiles(const float* f32, const std::uint8_t* e4m3, const std::uint8_t* ref,
                          std::uint64_t n, CompareResult* out, CudaStreamView stream);

// fp32 bit patterns of a and b, element by element; `out` reset by the launch.
Status LaunchCompareBits(const float* a, const float* b, std::uint64_t n, CompareResult* out,
                         CudaStreamView stream);

}  // namespace exlr8
