// libexlr8client's embedded kernel: one expert half's weights from its half
// record, in place in a leased image (spec 9.4). Compiled to a fatbin at
// build time (client/exlr8client/CMakeLists.txt), embedded in the library as
// bytes and loaded through the CUDA driver (device_half_weights.cpp): no
// CUDA runtime, no host code here.
//
// One block per 128 x 128 block b of W (b < hidden / 128: the rows of a
// gate/up half, the columns of a down half):
//   1. decode the block's 64 tiles into shared memory (spec 7, 8.1/8.2:
//      tile n = 64b + 8i + j sits at block-local rows 16i, cols 16j in both
//      layouts); the codebook value of a state is computed as 7.4/7.5 say
//      (fp16 sum of the two masked halves, RNE to E4M3), not read from a
//      table, so the module needs no data uploaded;
//   2. u and v of the block (spec 9.2) from the record's slice and block
//      row and the layer's signs, each in its stored dtype, as
//      ExpandHiddenSideVector computes them (sign * block scale);
//   3. format/reconstruct.h's order (9.3): H'.T over the rows, times u,
//      . H' over the columns, times v / 128 -- the butterflies of
//      gpu/reconstruct.cu's ReconstructKernel, copied (that file's kernels
//      sit in an anonymous namespace behind runtime launchers), so results
//      normally equal the CPU's bit for bit; the contract is 9.3's tolerance.
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "client/exlr8client/kernels/half_weights_params.h"
#include "gpu/float_load.cuh"

namespace {

using exlr8::DType;
using exlr8::client::HalfWeightsParams;

constexpr int kB = 128;
constexpr int kThreads = static_cast<int>(exlr8::client::kHalfWeightsThreads);

// Spec 7.4 / 7.5: the decoded value of trellis state s.
__device__ __forceinline__ float CodebookValue(std::uint32_t s) {
  std::uint32_t x = s * 0xCBAC1FEDu;
  x = (x & 0x8FFF8FFFu) ^ 0x3B603B60u;
  __half_raw lo, hi;
  lo.x = static_cast<unsigned short>(x & 0xFFFFu);
  hi.x = static_cast<unsigned short>(x >> 16);
  const __half f = __hadd(__half(lo), __half(hi));  // RNE binary16 add
  const __nv_fp8_storage_t e =
      __nv_cvt_halfraw_to_fp8(static_cast<__half_raw>(f), __NV_SATFINITE, __NV_E4M3);  // RNE, clamp +-448
  return exlr8::gpu_load::E4M3Value(static_cast<std::uint8_t>(e));
}

// x = H' . x along one dimension of the shared block (gpu/reconstruct.cu's
// Fwht): `rows` true transforms columns (pairs of rows), false rows.
__device__ __forceinline__ void Fwht(float* s, bool rows) {
#pragma unroll
  for (int h = 1; h < kB; h <<= 1) {
    for (int p = threadIdx.x; p < (kB / 2) * kB; p += kThreads) {
      int a, b;
      if (rows) {
        const int c = p & (kB - 1), q = p >> 7;
        const int r = (q / h) * 2 * h + (q % h);
        a = r * kB + c;
        b = (r + h) * kB + c;
      } else {
        const int q = p & (kB / 2 - 1), r = p >> 6;
        const int c = (q / h) * 2 * h + (q % h);
        a = r * kB + c;
        b = r * kB + c + h;
      }
      const float x = s[a], y = s[b];
      s[a] = __fadd_rn(x, y);
      s[b] = __fsub_rn(x, y);
    }
    __syncthreads();
  }
}

}  // namespace

extern "C" __global__ void __launch_bounds__(kThreads) exlr8client_half_weights(const HalfWeightsParams p) {
  extern __shared__ __align__(16) float s[];
  __shared__ float u[kB], v[kB];
  const std::uint64_t b = blockIdx.x;
  const int k = static_cast<int>(p.k);
  const bool down = p.down != 0;

  // 2. the block's vectors: the hidden side is sign * block scale.
  for (int i = threadIdx.x; i < kB; i += kThreads) {
    const float hidden_side = __fmul_rn(
        exlr8::gpu_load::LoadFloat(p.signs, static_cast<DType>(p.signs_dtype), b * kB + i),
        exlr8::gpu_load::LoadFloat(p.record + p.block_offset, static_cast<DType>(p.block_dtype), b));
    const float slice =
        exlr8::gpu_load::LoadFloat(p.record + p.slice_offset, static_cast<DType>(p.slice_dtype), i);
    u[i] = down ? slice : hidden_side;
    v[i] = down ? hidden_side : slice;
  }

  // 1. decode: element e = (tile t of the block, stream index q).
  const std::uint32_t words = 8u * static_cast<std::uint32_t>(k);  // per tile
  const std::uint32_t bits = 32u * words;                          // 256 K
  for (int e = threadIdx.x; e < 64 * 256; e += kThreads) {
    const int t = e >> 8, q = e & 255;
    const std::uint64_t n = 64 * b + t;
    const std::uint32_t* w = reinterpret_cast<const std::uint32_t*>(p.record) + n * words;
    // State q: stream bits [(q+1)K - 16, (q+1)K) mod 256K, first bit most
    // significant; stream bit i is bit 31 - i%32 of LE word i/32 (7.1-7.3).
    const std::uint32_t first = (static_cast<std::uint32_t>(q + 1) * k + bits - 16) % bits;
    const std::uint32_t w0 = first >> 5, sh = first & 31;
    const std::uint64_t x = (static_cast<std::uint64_t>(w[w0]) << 32) | w[(w0 + 1) % words];
    const std::uint32_t state = static_cast<std::uint32_t>(x >> (48 - sh)) & 0xFFFFu;
    // 7.6: stream index q = 8 tt + m -> tile (row, col).
    const int tt = q >> 3, m = q & 7;
    const int row = 2 * (tt & 3) + (m & 1) + 8 * ((m >> 1) & 1);
    const int col = (tt >> 2) + 8 * (m >> 2);
    s[(16 * (t >> 3) + row) * kB + 16 * (t & 7) + col] = CodebookValue(state);
  }
  __syncthreads();

  // 3. W = diag(u) . H' . T . H' . diag(v), in 9.3's order.
  Fwht(s, /*rows=*/true);
  for (int e = threadIdx.x; e < kB * kB; e += kThreads) s[e] = __fmul_rn(s[e], u[e >> 7]);
  __syncthreads();
  Fwht(s, /*rows=*/false);
  const std::uint64_t cols = down ? p.hidden : kB;
  float* out = p.out + (down ? b * kB : b * kB * kB);
  for (int e = threadIdx.x; e < kB * kB; e += kThreads) {
    const float vs = __fmul_rn(v[e & (kB - 1)], 1.0f / 128.0f);  // both 1/sqrt(128), exact
    out[static_cast<std::uint64_t>(e >> 7) * cols + (e & (kB - 1))] = __fmul_rn(s[e], vs);
  }
}
