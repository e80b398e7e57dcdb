#include <cuda_runtime.h>

#include <algorithm>
#include <limits>
#include <string>

#include "gpu/cuda_check.h"
#include "gpu/float_load.cuh"
#include "gpu/reconstruct.cuh"

namespace exlr8 {

namespace {

using gpu_load::E4M3Value;
using gpu_load::LoadFloat;

// Names unique among gpu/'s .cu files (a unity build may join them).
constexpr int kReconBlock = 128;
constexpr int kReconThreads = 256;
constexpr std::size_t kReconSmem = sizeof(float) * kReconBlock * kReconBlock;  // 64 KiB
constexpr std::uint64_t kReconMaxGrid = (std::uint64_t{1} << 31) - 1;

// Grid-stride launches: at most this many blocks.
constexpr unsigned kReconGridBlocks = 4096;

// x = H' . x along one dimension of the shared 128 x 128 block: every stage
// h (1, 2, .., 64) is 64 x 128 butterflies, all threads, then a barrier.
// `rows`: true transforms columns (pairs of rows), false rows (pairs of
// columns). Consecutive threads touch consecutive columns where they can.
__device__ __forceinline__ void Fwht(float* s, bool rows) {
#pragma unroll
  for (int h = 1; h < kReconBlock; h <<= 1) {
    for (int p = threadIdx.x; p < (kReconBlock / 2) * kReconBlock; p += kReconThreads) {
      int a, b;
      if (rows) {
        const int c = p & (kReconBlock - 1), q = p >> 7;
        const int r = (q / h) * 2 * h + (q % h);
        a = r * kReconBlock + c;
        b = (r + h) * kReconBlock + c;
      } else {
        const int q = p & (kReconBlock / 2 - 1), r = p >> 6;
        const int c = (q / h) * 2 * h + (q % h);
        a = r * kReconBlock + c;
        b = r * kReconBlock + c + h;
      }
      const float x = s[a], y = s[b];
      s[a] = __fadd_rn(x, y);
      s[b] = __fsub_rn(x, y);
    }
    __syncthreads();
  }
}

struct ReconstructParams {
  float* w;
  std::uint64_t rows, cols, rblocks, cblocks;
  const float* u;
  std::uint64_t u_stride;
  const float* v;
  std::uint64_t v_stride;
};

__global__ void __launch_bounds__(kReconThreads) ReconstructKernel(const ReconstructParams p) {
  extern __shared__ __align__(16) float s[];
  const std::uint64_t blk = blockIdx.x;
  const std::uint64_t per_matrix = p.rblocks * p.cblocks;
  const std::uint64_t j = blk / per_matrix;
  const std::uint64_t rb = (blk % per_matrix) / p.cblocks, cb = blk % p.cblocks;
  float* w = p.w + j * p.rows * p.cols + rb * kReconBlock * p.cols + cb * kReconBlock;
  const float* u = p.u + j * p.u_stride + rb * kReconBlock;
  const float* v = p.v + j * p.v_stride + cb * kReconBlock;
  for (int e = threadIdx.x; e < kReconBlock * kReconBlock; e += kReconThreads)
    s[e] = w[(e >> 7) * p.cols + (e & (kReconBlock - 1))];
  __syncthreads();
  Fwht(s, /*rows=*/true);  // (1) H' . T
  for (int e = threadIdx.x; e < kReconBlock * kReconBlock; e += kReconThreads)
    s[e] = __fmul_rn(s[e], u[e >> 7]);  // (2)
  __syncthreads();
  Fwht(s, /*rows=*/false);  // (3) . H'
  for (int e = threadIdx.x; e < kReconBlock * kReconBlock; e += kReconThreads) {
    const float vs = __fmul_rn(v[e & (kReconBlock - 1)], 1.0f / 128.0f);   // both 1/sqrt(128), exact
    w[(e >> 7) * p.cols + (e & (kReconBlock - 1))] = __fmul_rn(s[e], vs);  // (4)
  }
}

struct ExpandParams {
  const std::uint8_t* base;
  const HalfVectorRef* refs;
  std::uint64_t count, hidden;
  bool down;
  float* u;
  float* v;
};

__global__ void ExpandKernel(const ExpandParams p) {
  const std::uint64_t per = p.hidden + kReconBlock;
  const std::uint64_t total = p.count * per;
  for (std::uint64_t idx = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += static_cast<std::uint64_t>(gridDim.x) * blockDim.x) {
    const std::uint64_t j = idx / per, e = idx % per;
    const HalfVectorRef r = p.refs[j];
    if (e < p.hidden) {  // hidden side: signs times the block's scale
      const float x =
          __fmul_rn(LoadFloat(p.base + r.signs, static_cast<DType>(r.signs_dtype), e),
                    LoadFloat(p.base + r.block, static_cast<DType>(r.block_dtype), e / kReconBlock));
      (p.down ? p.v : p.u)[j * p.hidden + e] = x;
    } else {  // intermediate side: the record's slice
      const std::uint64_t i = e - p.hidden;
      (p.down ? p.u : p.v)[j * kReconBlock + i] =
          LoadFloat(p.base + r.slice, static_cast<DType>(r.slice_dtype), i);
    }
  }
}

__global__ void ConvertKernel(const std::uint8_t* src, DType dtype, std::uint64_t n, float* dst) {
  for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::uint64_t>(gridDim.x) * blockDim.x)
    dst[i] = LoadFloat(src, dtype, i);
}

__global__ void __launch_bounds__(kReconThreads)
    BlockErrorKernel(const float* a, const float* b, std::uint64_t rows, std::uint64_t cols,
                     std::uint64_t rblocks, std::uint64_t cblocks, BlockError* out) {
  __shared__ float sd[kReconThreads / 32], sr[kReconThreads / 32];
  const std::uint64_t blk = blockIdx.x;
  const std::uint64_t per_matrix = rblocks * cblocks;
  const std::uint64_t j = blk / per_matrix;
  const std::uint64_t rb = (blk % per_matrix) / cblocks, cb = blk % cblocks;
  const std::uint64_t origin = j * rows * cols + rb * kReconBlock * cols + cb * kReconBlock;
  float md = 0, mr = 0;
  for (int e = threadIdx.x; e < kReconBlock * kReconBlock; e += kReconThreads) {
    const std::uint64_t at = origin + static_cast<std::uint64_t>(e >> 7) * cols + (e & (kReconBlock - 1));
    const float x = a[at], y = b[at];
    float d = fabsf(x - y);
    if (!isfinite(d)) d = __int_as_float(0x7F800000);  // NaN or inf: +inf
    float r = fabsf(y);
    if (!isfinite(r)) r = __int_as_float(0x7F800000);
    md = fmaxf(md, d);
    mr = fmaxf(mr, r);
  }
  for (int o = 16; o > 0; o >>= 1) {
    md = fmaxf(md, __shfl_xor_sync(0xFFFFFFFFu, md, o));
    mr = fmaxf(mr, __shfl_xor_sync(0xFFFFFFFFu, mr, o));
  }
  if ((threadIdx.x & 31) == 0) {
    sd[threadIdx.x >> 5] = md;
    sr[threadIdx.x >> 5] = mr;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kReconThreads / 32; ++w) {
      md = fmaxf(md, sd[w]);
      mr = fmaxf(mr, sr[w]);
    }
    out[blk] = BlockError{md, mr};
  }
}

__device__ __forceinline__ void NoteMismatch(CompareResult* out, std::uint64_t i) {
  atomicAdd(&out->mismatches, 1ull);
  atomicMin(&out->first, static_cast<unsigned long long>(i));
}

__global__ void ResetKernel(CompareResult* out) { *out = CompareResult{}; }

__global__ void CompareTilesKernel(const float* f32, const std::uint8_t* e4m3, const std::uint8_t* ref,
                                   std::uint64_t n, CompareResult* out) {
  for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::uint64_t>(gridDim.x) * blockDim.x) {
    const std::uint8_t want = ref[i];
    if (e4m3[i] != want || __float_as_uint(f32[i]) != __float_as_uint(E4M3Value(want))) NoteMismatch(out, i);
  }
}

__global__ void CompareBitsKernel(const float* a, const float* b, std::uint64_t n, CompareResult* out) {
  for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::uint64_t>(gridDim.x) * blockDim.x)
    if (__float_as_uint(a[i]) != __float_as_uint(b[i])) NoteMismatch(out, i);
}

unsigned ReconGrid(std::uint64_t n) {
  return static_cast<unsigned>(
      std::clamp<std::uint64_t>((n + kReconThreads - 1) / kReconThreads, 1, kReconGridBlocks));
}

// The block grid of `count` rows x cols matrices, or an error naming `what`.
Result<std::uint64_t> BlockGrid(const char* what, std::uint64_t count, std::uint64_t rows,
                                std::uint64_t cols) {
  if (rows == 0 || cols == 0 || rows % kReconBlock != 0 || cols % kReconBlock != 0 ||
      rows > (std::uint64_t{1} << 31) || cols > (std::uint64_t{1} << 31))
    return InvalidArgumentError(std::string(what) + ": shape " + std::to_string(rows) + " x " +
                                std::to_string(cols) + " is not a positive multiple of 128 on both sides");
  const std::uint64_t per = (rows / kReconBlock) * (cols / kReconBlock);
  if (count > kReconMaxGrid / per)
    return InvalidArgumentError(std::string(what) + ": " + std::to_string(count) + " matrices of " +
                                std::to_string(rows) + " x " + std::to_string(cols) + " exceed one launch");
  return count * per;
}

bool IsFloatCode(DType d) { return d == DType::kF16 || d == DType::kBF16 || d == DType::kF32; }

}  // namespace

Status LaunchReconstructBlocks(const ReconstructBatch& b, CudaStreamView stream) {
  EXLR8_ASSIGN_OR_RETURN(const std::uint64_t grid,
                         BlockGrid("LaunchReconstructBlocks", b.count, b.rows, b.cols));
  if (b.count == 0) return Status::Ok();
  if (b.w == nullptr || b.u == nullptr || b.v == nullptr)
    return InvalidArgumentError("LaunchReconstructBlocks: null matrix or vector");
  EXLR8_CUDA_TRY(cudaFuncSetAttribute(ReconstructKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(kReconSmem)));
  const ReconstructParams p{b.w,        b.rows, b.cols,    b.rows / kReconBlock, b.cols / kReconBlock, b.u,
                            b.u_stride, b.v,    b.v_stride};
  ReconstructKernel<<<static_cast<unsigned>(grid), kReconThreads, kReconSmem, stream.value()>>>(p);
  EXLR8_CUDA_TRY(cudaGetLastError());
  return Status::Ok();
}

Status LaunchExpandHalfVectors(const std::byte* base, const HalfVectorRef* refs, std::uint64_t count,
                               HalfLayout layout, std::uint64_t hidden, float* u, float* v,
                               CudaStreamView stream) {
  if (hidden == 0 || hidden % kReconBlock != 0 || hidden > (std::uint64_t{1} << 31))
    return InvalidArgumentError("LaunchExpandHalfVectors: hidden " + std::to_string(hidden) +
                                " is not a positive multiple of 128");
  if (count == 0) return Status::Ok();
  if (base == nullptr || refs == nullptr || u == nullptr || v == nullptr)
    return InvalidArgumentError("LaunchExpandHalfVectors: null pointer");
  const ExpandParams p{
      reinterpret_cast<const std::uint8_t*>(base), refs, count, hidden, layout == HalfLayout::kDown, u, v};
  ExpandKernel<<<ReconGrid(count * (hidden + kReconBlock)), kReconThreads, 0, stream.value()>>>(p);
  EXLR8_CUDA_TRY(cudaGetLastError());
  return Status::Ok();
}

Status LaunchConvertToFloat(const std::byte* src, DType dtype, std::uint64_t n, float* dst,
                            CudaStreamView stream) {
  if (!IsFloatCode(dtype))
    return InvalidArgumentError("LaunchConvertToFloat: dtype " + std::string(DTypeName(dtype)) +
                                " is not F16, BF16 or F32");
  if (n == 0) return Status::Ok();
  if (src == nullptr || dst == nullptr) return InvalidArgumentError("LaunchConvertToFloat: null pointer");
  ConvertKernel<<<ReconGrid(n), kReconThreads, 0, stream.value()>>>(
      reinterpret_cast<const std::uint8_t*>(src), dtype, n, dst);
  EXLR8_CUDA_TRY(cudaGetLastError());
  return Status::Ok();
}

Status LaunchBlockErrors(const float* a, const float* b, std::uint64_t count, std::uint64_t rows,
                         std::uint64_t cols, BlockError* out, CudaStreamView stream) {
  EXLR8_ASSIGN_OR_RETURN(const std::uint64_t grid, BlockGrid("LaunchBlockErrors", count, rows, cols));
  if (count == 0) return Status::Ok();
  if (a == nullptr || b == nullptr || out == nullptr)
    return InvalidArgumentError("LaunchBlockErrors: null pointer");
  BlockErrorKernel<<<static_cast<unsigned>(grid), kReconThreads, 0, stream.value()>>>(
      a, b, rows, cols, rows / kReconBlock, cols / kReconBlock, out);
  EXLR8_CUDA_TRY(cudaGetLastError());
  return Status::Ok();
}

Status LaunchCompareTiles(const float* f32, const std::uint8_t* e4m3, const std::uint8_t* ref,
                          std::uint64_t n, CompareResult* out, CudaStreamView stream) {
  if (out == nullptr) return InvalidArgumentError("LaunchCompareTiles: null result");
  ResetKernel<<<1, 1, 0, stream.value()>>>(out);
  EXLR8_CUDA_TRY(cudaGetLastError());
  if (n == 0) return Status::Ok();
  if (f32 == nullptr || e4m3 == nullptr || ref == nullptr)
    return InvalidArgumentError("LaunchCompareTiles: null pointer");
  CompareTilesKernel<<<ReconGrid(n), kReconThreads, 0, stream.value()>>>(f32, e4m3, ref, n, out);
  EXLR8_CUDA_TRY(cudaGetLastError());
  return Status::Ok();
}

Status LaunchCompareBits(const float* a, const float* b, std::uint64_t n, CompareResult* out,
                         CudaStreamView stream) {
  if (out == nullptr) return InvalidArgumentError("LaunchCompareBits: null result");
  ResetKernel<<<1, 1, 0, stream.value()>>>(out);
  EXLR8_CUDA_TRY(cudaGetLastError());
  if (n == 0) return Status::Ok();
  if (a == nullptr || b == nullptr) return InvalidArgumentError("LaunchCompareBits: null pointer");
  CompareBitsKernel<<<ReconGrid(n), kReconThreads, 0, stream.value()>>>(a, b, n, out);
  EXLR8_CUDA_TRY(cudaGetLastError());
  return Status::Ok();
}

}  // namespace exlr8
