#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "gpu/cuda_check.h"
#include "gpu/dense_decode.cuh"
#include "gpu/float_load.cuh"

namespace exlr8 {

namespace {

using gpu_load::E4M3Value;
using gpu_load::LoadFloat;

// Names unique among gpu/'s .cu files (a unity build may join them).
constexpr int kDenseThreads = 256;
constexpr unsigned kDenseGridBlocks = 8192;
constexpr std::uint64_t kDenseBlock = 128;

struct DenseParams {
  const std::uint8_t* d0;
  const std::uint8_t* d1;
  DenseFormat format;
  bool side2;
  std::uint64_t out, inp;
  DType scale_dtype;
  float* w;
};

__global__ void DecodeDenseKernel(const DenseParams p) {
  const std::uint64_t n = p.out * p.inp;
  const std::uint64_t grid_cols = (p.inp + kDenseBlock - 1) / kDenseBlock;
  for (std::uint64_t e = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += static_cast<std::uint64_t>(gridDim.x) * blockDim.x) {
    const std::uint64_t o = e / p.inp, i = e % p.inp;
    float x;
    switch (p.format) {
      case DenseFormat::kInt4: {
        std::uint64_t byte, scale;
        if (p.side2) {
          const std::uint64_t blk = i / kDenseBlock, in_blk = i % kDenseBlock;
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
        x = __fmul_rn(E4M3Value(p.d0[e]),
                      LoadFloat(p.d1, p.scale_dtype, (o / kDenseBlock) * grid_cols + i / kDenseBlock));
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
      const std::uint64_t g = e / (kDenseBlock * out), r = e % (kDenseBlock * out), j = r / out, o = r % out;
      w[o * inp + g * kDenseBlock + j] = t[e];
    } else {  // entry g: row i (input), column j (output 128g + j)
      const std::uint64_t g = e / (inp * kDenseBlock), r = e % (inp * kDenseBlock), i = r / kDenseBlock,
                          j = r % kDenseBlock;
      w[(g * kDenseBlock + j) * inp + i] = t[e];
    }
  }
}

unsigned DenseGrid(std::uint64_t n) {
  return static_cast<unsigned>(
      std::clamp<std::uint64_t>((n + kDenseThreads - 1) / kDenseThreads, 1, kDenseGridBlocks));
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
  const DenseParams p{base + a.data[0],
                      base + a.data[1],
                      a.format,
                      a.side == DenseSide::kInput,
                      a.out,
                      a.inp,
                      a.scale_dtype,
                      w};
  DecodeDenseKernel<<<DenseGrid(a.out * a.inp), kDenseThreads, 0, stream.value()>>>(p);
  EXLR8_CUDA_TRY(cudaGetLastError());
  return Status::Ok();
}

Status LaunchTrellisEntriesToWeight(const float* entries, DenseSide side, std::uint64_t out,
                                    std::uint64_t inp, float* w, CudaStreamView stream) {
  if (out == 0 || inp == 0 || out % kDenseBlock != 0 || inp % kDenseBlock != 0 || out > kMaxDenseDim ||
      inp > kMaxDenseDim)
    return InvalidArgumentError("LaunchTrellisEntriesToWeight: dimensions " + std::to_string(out) + " x " +
                                std::to_string(inp) + " are not positive multiples of 128");
  if (entries == nullptr || w == nullptr)
    return InvalidArgumentError("LaunchTrellisEntriesToWeight: null pointer");
  EntriesToWeightKernel<<<DenseGrid(out * inp), kDenseThreads, 0, stream.value()>>>(
      entries, side == DenseSide::kInput, out, inp, w);
  EXLR8_CUDA_TRY(cudaGetLastError());
  return Status::Ok();
}

}  // namespace exlr8
