#include "gpu/decode.cuh"

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <limits>
#include <string>
#include <utility>

#include "gpu/cuda_check.h"

namespace exlr8 {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr std::size_t kTableBytes = kCodebookSize;  // E4M3 byte table

struct KernelParams {
  const std::uint8_t* base;
  const std::uint64_t* offsets;
  std::uint64_t first_half;
  std::uint64_t total_tiles;  // count * tiles_per_half
  std::uint32_t tiles_per_half;
  std::uint32_t hidden;
  bool down;
  float* out_f32;
  std::uint8_t* out_e4m3;
  const float* cb_f32;
  const std::uint8_t* cb_e4m3;
};

// Per-warp tile buffer: the 8K stream words with the last word copied in
// front and the first behind, so every 16-bit state window (tail-biting
// included) is two consecutive words without a modulo.
template <int K>
constexpr int BufWords() { return 8 * K + 2; }

template <int K>
constexpr std::size_t SharedBytes(DecodeTableMode mode) {
  return (mode == DecodeTableMode::kSharedE4M3 ? kTableBytes : 0) +
         static_cast<std::size_t>(kWarps) * BufWords<K>() * sizeof(std::uint32_t);
}

__device__ __forceinline__ float E4M3BitsToFloat(std::uint8_t b) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(b), __NV_E4M3);
  return __half2float(__half(h));
}

template <int K, DecodeTableMode M>
__global__ void __launch_bounds__(kThreads) DecodeHalvesKernel(const KernelParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  const std::uint8_t* table = nullptr;
  std::uint32_t* bufs;
  if constexpr (M == DecodeTableMode::kSharedE4M3) {
    // table: 64 KiB, 16 bytes per thread per step
    const uint4* src = reinterpret_cast<const uint4*>(p.cb_e4m3);
    uint4* dst = reinterpret_cast<uint4*>(smem);
    for (int i = threadIdx.x; i < static_cast<int>(kTableBytes / 16); i += kThreads) dst[i] = __ldg(src + i);
    __syncthreads();
    table = smem;
    bufs = reinterpret_cast<std::uint32_t*>(smem + kTableBytes);
  } else {
    bufs = reinterpret_cast<std::uint32_t*>(smem);
  }

  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  std::uint32_t* buf = bufs + warp * BufWords<K>();
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * kWarps;
  const std::uint64_t half_elems = 128ull * p.hidden;

  // Lane g owns stream elements i = 8g + j; their tile positions (7.6).
  const int row0 = 2 * (lane & 3);
  const int col0 = lane >> 2;

  for (std::uint64_t tile = static_cast<std::uint64_t>(blockIdx.x) * kWarps + warp; tile < p.total_tiles;
       tile += stride) {
    const std::uint64_t half = tile / p.tiles_per_half;
    const std::uint32_t n = static_cast<std::uint32_t>(tile - half * p.tiles_per_half);
    const std::uint32_t* src = reinterpret_cast<const std::uint32_t*>(p.base + p.offsets[p.first_half + half]) +
                               static_cast<std::size_t>(n) * (8 * K);
    // LE u32 words: a native load on the (little-endian) GPU is U[q].
    __syncwarp();  // the previous tile's reads of buf are done
#pragma unroll
    for (int w = lane; w < 8 * K; w += 32) {
      const std::uint32_t v = __ldg(src + w);
      buf[1 + w] = v;
      if (w == 8 * K - 1) buf[0] = v;
      if (w == 0) buf[8 * K + 1] = v;
    }
    __syncwarp();

    // Output block of this tile (spec 8.1 / 8.2).
    std::uint64_t base_idx;
    std::uint32_t row_stride;
    if (p.down) {
      row_stride = p.hidden;
      base_idx = static_cast<std::uint64_t>(16 * ((n >> 3) & 7)) * p.hidden + 128ull * (n >> 6) + 16 * (n & 7);
    } else {
      row_stride = 128;
      base_idx = static_cast<std::uint64_t>(16 * (n >> 3)) * 128 + 16 * (n & 7);
    }
    base_idx += half * half_elems + static_cast<std::uint64_t>(row0) * row_stride + col0;

#pragma unroll
    for (int j = 0; j < 8; ++j) {
      // Stream bit b is buffer bit b + 32; state i ends at stream bit (i+1)K.
      const int q = (8 * lane + j + 1) * K + 16;
      const int w = q >> 5;
      const int sh = q & 31;
      const std::uint64_t x = (static_cast<std::uint64_t>(buf[w]) << 32) | buf[w + 1];
      const std::uint32_t s = static_cast<std::uint32_t>(x >> (48 - sh)) & 0xFFFFu;
      // (row, col) of element 8g + j minus (row0, col0): rows {0,1,8,9}, cols {0,8}
      const std::uint64_t idx = base_idx + static_cast<std::uint64_t>((j & 1) + 8 * ((j >> 1) & 1)) * row_stride +
                                8 * (j >> 2);
      if constexpr (M == DecodeTableMode::kSharedE4M3) {
        const std::uint8_t b = table[s];
        if (p.out_f32 != nullptr) p.out_f32[idx] = E4M3BitsToFloat(b);
        if (p.out_e4m3 != nullptr) p.out_e4m3[idx] = b;
      } else {
        if (p.out_f32 != nullptr) p.out_f32[idx] = __ldg(p.cb_f32 + s);
        if (p.out_e4m3 != nullptr) p.out_e4m3[idx] = __ldg(p.cb_e4m3 + s);
      }
    }
  }
}

template <int K, DecodeTableMode M>
Status LaunchK(const KernelParams& p, CudaStreamView stream) {
  auto* kernel = &DecodeHalvesKernel<K, M>;
  const std::size_t smem = SharedBytes<K>(M);
  if (smem > 48 * 1024)
    EXLR8_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  int device = 0, sms = 0, per_sm = 0;
  EXLR8_CUDA_TRY(cudaGetDevice(&device));
  EXLR8_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  EXLR8_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem));
  if (per_sm < 1) return InternalError("DecodeHalvesKernel: no block fits on a multiprocessor");
  const std::uint64_t wanted = (p.total_tiles + kWarps - 1) / kWarps;
  const std::uint64_t grid = std::min<std::uint64_t>(wanted, static_cast<std::uint64_t>(sms) * per_sm);
  kernel<<<static_cast<unsigned>(grid), kThreads, smem, stream.value()>>>(p);
  EXLR8_CUDA_TRY(cudaGetLastError());
  return Status::Ok();
}

template <DecodeTableMode M>
Status LaunchMode(int k, const KernelParams& p, CudaStreamView stream) {
  switch (k) {
    case 1: return LaunchK<1, M>(p, stream);
    case 2: return LaunchK<2, M>(p, stream);
    case 3: return LaunchK<3, M>(p, stream);
    case 4: return LaunchK<4, M>(p, stream);
    case 5: return LaunchK<5, M>(p, stream);
    case 6: return LaunchK<6, M>(p, stream);
    case 7: return LaunchK<7, M>(p, stream);
    case 8: return LaunchK<8, M>(p, stream);
    default: return InvalidArgumentError("LaunchDecodeHalves: width K=" + std::to_string(k) + " outside 1..8");
  }
}

}  // namespace

const char* DecodeTableModeName(DecodeTableMode mode) {
  switch (mode) {
    case DecodeTableMode::kGlobalF32: return "global-f32";
    case DecodeTableMode::kSharedE4M3: return "shared-e4m3";
  }
  return "unknown";
}

Result<DeviceCodebook> DeviceCodebook::Upload(CudaStreamView stream) {
  DeviceCodebook cb;
  EXLR8_ASSIGN_OR_RETURN(cb.f32_, DeviceBuffer::Allocate(kCodebookSize * sizeof(float)));
  EXLR8_ASSIGN_OR_RETURN(cb.e4m3_, DeviceBuffer::Allocate(kCodebookSize));
  const auto* f32 = reinterpret_cast<const std::byte*>(CodebookF32());
  const auto* e4m3 = reinterpret_cast<const std::byte*>(CodebookE4M3Bytes());
  EXLR8_RETURN_IF_ERROR(cb.f32_.CopyFromHostAsync({f32, kCodebookSize * sizeof(float)}, 0, stream));
  EXLR8_RETURN_IF_ERROR(cb.e4m3_.CopyFromHostAsync({e4m3, kCodebookSize}, 0, stream));
  EXLR8_RETURN_IF_ERROR(stream.Synchronize());
  return std::move(cb);  // nvcc's front end does not apply C++20 implicit move here
}

Status LaunchDecodeHalves(const HalfBatch& batch, const DecodeOutputs& out, const DeviceCodebook& codebook,
                          DecodeTableMode mode, CudaStreamView stream) {
  if (batch.k < kMinTrellisK || batch.k > kMaxTrellisK)
    return InvalidArgumentError("LaunchDecodeHalves: width K=" + std::to_string(batch.k) + " outside 1..8");
  if (batch.hidden == 0 || batch.hidden % kBlock != 0 || batch.hidden > (std::uint64_t{1} << 31))
    return InvalidArgumentError("LaunchDecodeHalves: length " + std::to_string(batch.hidden) +
                                " is not a positive multiple of 128 (max 2^31)");
  if (out.f32 == nullptr && out.e4m3 == nullptr)
    return InvalidArgumentError("LaunchDecodeHalves: no output requested (f32 and e4m3 both null)");
  if (batch.count == 0) return Status::Ok();
  if (batch.base == nullptr || batch.offsets == nullptr)
    return InvalidArgumentError("LaunchDecodeHalves: null base or offsets table");
  if (reinterpret_cast<std::uintptr_t>(batch.base) % 4 != 0)
    return InvalidArgumentError("LaunchDecodeHalves: base is not 4-byte aligned");
  // count * 128 * hidden output elements must be addressable.
  const std::uint64_t half_elems = kBlock * batch.hidden;
  if (batch.count > std::numeric_limits<std::uint64_t>::max() / half_elems / sizeof(float) ||
      batch.first_half > std::numeric_limits<std::uint64_t>::max() - batch.count)
    return InvalidArgumentError("LaunchDecodeHalves: " + std::to_string(batch.count) + " halves of length " +
                                std::to_string(batch.hidden) + " overflow the output size");
  KernelParams p{};
  p.base = reinterpret_cast<const std::uint8_t*>(batch.base);
  p.offsets = batch.offsets;
  p.first_half = batch.first_half;
  p.tiles_per_half = static_cast<std::uint32_t>(batch.hidden / 2);
  p.total_tiles = batch.count * p.tiles_per_half;
  p.hidden = static_cast<std::uint32_t>(batch.hidden);
  p.down = batch.layout == HalfLayout::kDown;
  p.out_f32 = out.f32;
  p.out_e4m3 = out.e4m3;
  p.cb_f32 = codebook.f32();
  p.cb_e4m3 = codebook.e4m3();
  if (p.cb_f32 == nullptr || p.cb_e4m3 == nullptr)
    return InvalidArgumentError("LaunchDecodeHalves: codebook not uploaded (moved from?)");
  switch (mode) {
    case DecodeTableMode::kGlobalF32: return LaunchMode<DecodeTableMode::kGlobalF32>(batch.k, p, stream);
    case DecodeTableMode::kSharedE4M3: return LaunchMode<DecodeTableMode::kSharedE4M3>(batch.k, p, stream);
  }
  return InvalidArgumentError("LaunchDecodeHalves: unknown table mode");
}

}  // namespace exlr8
