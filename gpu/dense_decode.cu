#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "gpu/cuda_check.h"
#include "gpu/dense_decode.cuh"

namespace exlr8 {

namespace {

constexpr int kThreads = 256;
constexpr unsigned kMaxBlocks = 8192;
constexpr std::uint64_t kB = 128;

__device__ __forceinline__ std::uint32_t LoadLE(const std::uint8_t* p, int bytes) {
  std::uint32_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<std::uint32_t>(p[i]) << (8 * i);
  return v;
}

__device__ __forceinline__ float LoadFloat(const std::uint8_t* p, DType dtype, std::uint64_t i) {
  switch (dtype) {
    case DType::kF16: {
      __half_raw h;
      h.x = static_cast<unsigned short>(LoadLE(p + 2 * i, 2));
      return __half2float(__half(h));
    }
    case DType::kBF16:
      return __uint_as_float(LoadLE(p + 2 * i, 2) << 16);
    default:
      return __uint_as_float(LoadLE(p + 4 * i, 4));
  }
}

__device__ __forceinline__ float E4M3Value(std::uint8_t b) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(b), __NV_E4M3);
  return __half2float(__half(h));
}

struct Params {
  const std::uint8_t* d0;
  const std::uint8_t* d1;
  DenseFormat format;
  bool side2;
  std::uint64_t out, inp;
  DType scale_dtype;
  float* w;
};

__global__ void DecodeDenseKernel(const Params p) {
  const std::uint64_t n = p.out * p.inp;
  const std::uint64_t grid_cols = (p.inp + kB - 1) / kB;
  for (std::uint64_t e = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += static_cast<std::uint64_t>(gridDim.x) * blockDim.x) {
    const std::uint64_t o = e / p.inp, i = e % p.inp;
    float x;
    switch (p.format) {
      case DenseFormat::kInt4: {
        std::uint64_t byte, scale;
        if (p.side2) {
          const std::uint64_t blk = i / kB, in_blk = i % kB;
          byte = (blk * p.out + o) * 64 + in_blk / 2;
          scale = (blk * p.out + o) * 4 + in_blk / 32;
        } else {
          byte = o * (p.inp / 2) + i / 2;
          scale = o * (p.inp / 32) + i / 32;
        }
        const unsigned b = p.d0[byte];
        const int nib = static_cast<int>((i & 1) ? (b >> 4) : (b & 0xF));
        x = __fmul_rn(static_cast<float>(nib - 8), LoadFloat(p.d1, p.scale_dtype, scale));
        break;
      }
      case DenseFormat::kMxfp8: {
        const unsigned ex = p.d1[o * (p.inp / 32) + i / 32];
        // 2^(ex - 127); ex 0 is the subnormal 2^-127.
        const float s = ex == 0 ? __uint_as_float(0x00400000u) : __uint_as_float(ex << 23);
        x = __fmul_rn(E4M3Value(p.d0[e]), s);
        break;
      }
      case DenseFormat::kFp8Block:
        x = __fmul_rn(E4M3Value(p.d0[e]), LoadFloat(p.d1, p.scale_dtype, (o / kB) * grid_cols + i / kB));
        break;
      case DenseFormat::kFp8Row:
        x = __fmul_rn(E4M3Value(p.d0[e]), LoadFloat(p.d1, p.scale_dtype, o));
        break;
      case DenseFormat::kBf16:
        x = LoadFloat(p.d0, DType::kBF16, e);
        break;
      default:  // FP32
        x = LoadFloat(p.d0, DType::kF32, e);
        break;
    }
    p.w[e] = x;
  }
}

__global__ void EntriesToWeightKernel(const float* t, bool side2, std::uint64_t out, std::uint64_t inp,
                                      float* w) {
  const std::uint64_t n = out * inp;
  for (std::uint64_t e = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += static_cast<std::uint64_t>(gridDim.x) * blockDim.x) {
    if (side2) {  // e indexes entries: g, row j (input 128g + j), column o
      const std::uint64_t g = e / (kB * out), r = e % (kB * out), j = r / out, o = r % out;
      w[o * inp + g * kB + j] = t[e];
    } else {  // entry g: row i (input), column j (output 128g + j)
      const std::uint64_t g = e / (inp * kB), r = e % (inp * kB), i = r / kB, j = r % kB;
      w[(g * kB + j) * inp + i] = t[e];
    }
  }
}

unsigned Grid(std::uint64_t n) {
  return static_cast<unsigned>(std::clamp<std::uint64_t>((n + kThreads - 1) / kThreads, 1, kMaxBlocks));
}

}  // namespace

Status LaunchDecodeDense(const DenseDecodeArgs& a, float* w, CudaStreamView stream) {
  if (a.format == DenseFormat::kTrellis)
    return InvalidArgumentError("LaunchDecodeDense: TRELLIS decodes through LaunchDecodeHalves");
  if (a.out == 0 || a.inp == 0 || a.out > kMaxDenseDim || a.inp > kMaxDenseDim)
    return InvalidArgumentError("LaunchDecodeDense: dimensions " + std::to_string(a.out) + " x " +
                                std::to_string(a.inp));
  const bool scaled =
      a.format != DenseFormat::kBf16 && a.format != DenseFormat::kFp32 && a.format != DenseFormat::kMxfp8;
  if (scaled && a.scale_dtype != DType::kF16 && a.scale_dtype != DType::kBF16 && a.scale_dtype != DType::kF32)
    return InvalidArgumentError("LaunchDecodeDense: scale dtype " + std::string(DTypeName(a.scale_dtype)) +
                                " is not F16, BF16 or F32");
  if (a.base == nullptr || w == nullptr) return InvalidArgumentError("LaunchDecodeDense: null pointer");
  const auto* base = reinterpret_cast<const std::uint8_t*>(a.base);
  const Params p{base + a.data[0],
                 base + a.data[1],
                 a.format,
                 a.side == DenseSide::kInput,
                 a.out,
                 a.inp,
                 a.scale_dtype,
                 w};
  DecodeDenseKernel<<<Grid(a.out * a.inp), kThreads, 0, stream.value()>>>(p);
  EXLR8_CUDA_TRY(cudaGetLastError());
  return Status::Ok();
}

Status LaunchTrellisEntriesToWeight(const float* entries, DenseSide side, std::uint64_t out,
                                    std::uint64_t inp, float* w, CudaStreamView stream) {
  if (out == 0 || inp == 0 || out % kB != 0 || inp % kB != 0 || out > kMaxDenseDim || inp > kMaxDenseDim)
    return InvalidArgumentError("LaunchTrellisEntriesToWeight: dimensions " + std::to_string(out) + " x " +
                                std::to_string(inp) + " are not positive multiples of 128");
  if (entries == nullptr || w == nullptr)
    return InvalidArgumentError("LaunchTrellisEntriesToWeight: null pointer");
  EntriesToWeightKernel<<<Grid(out * inp), kThreads, 0, stream.value()>>>(entries, side == DenseSide::kInput,
                                                                          out, inp, w);
  EXLR8_CUDA_TRY(cudaGetLastError());
  return Status::Ok();
}

}  // namespace exlr8
