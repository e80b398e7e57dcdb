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

constexpr int kThreads = 512;
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

// Per-warp shared memory, in this order (16-byte aligned pieces):
//   byte tile : 16 x 16 E4M3 bytes, written out as 8-byte row pieces (byte
//               stores straight from the decode order were 45% slower on H200).
//               fp32 goes straight to global memory: each of a lane's 8 stores
//               fills whole 32-byte sectors, and staging it through shared
//               memory measured 5% slower.
//   words     : the 8K stream words with the last word copied in front and
//               the first behind, so every 16-bit state window (tail-biting
//               included) is two consecutive words without a modulo.
constexpr std::size_t kByteTileBytes = 256;
template <int K>
constexpr int BufWords() { return 8 * K + 2; }
template <int K>
constexpr std::size_t WarpBytes() {
  return kByteTileBytes + (BufWords<K>() * sizeof(std::uint32_t) + 15) / 16 * 16;
}

template <int K>
constexpr std::size_t SharedBytes(DecodeTableMode mode) {
  return (mode == DecodeTableMode::kSharedE4M3 ? kTableBytes : 0) + static_cast<std::size_t>(kWarps) * WarpBytes<K>();
}

__device__ __forceinline__ float E4M3BitsToFloat(std::uint8_t b) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(b), __NV_E4M3);
  return __half2float(__half(h));
}

template <int K, DecodeTableMode M>
__global__ void __launch_bounds__(kThreads) DecodeHalvesKernel(const KernelParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  const std::uint8_t* table = nullptr;
  unsigned char* warp_area;
  if constexpr (M == DecodeTableMode::kSharedE4M3) {
    // table: 64 KiB, 16 bytes per thread per step
    const uint4* src = reinterpret_cast<const uint4*>(p.cb_e4m3);
    uint4* dst = reinterpret_cast<uint4*>(smem);
    for (int i = threadIdx.x; i < static_cast<int>(kTableBytes / 16); i += kThreads) dst[i] = __ldg(src + i);
    __syncthreads();
    table = smem;
    warp_area = smem + kTableBytes;
  } else {
    warp_area = smem;
  }

  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  unsigned char* mine = warp_area + warp * WarpBytes<K>();
  std::uint8_t* btile = mine;
  std::uint32_t* buf = reinterpret_cast<std::uint32_t*>(mine + kByteTileBytes);
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * kWarps;
  const std::uint64_t half_elems = 128ull * p.hidden;
  const bool want_f32 = p.out_f32 != nullptr;
  const bool want_e4m3 = p.out_e4m3 != nullptr;

  // Decode phase: lane g owns stream elements i = 8g + j; tile position (7.6)
  // row = row0 + {0,1,8,9}[j%4], col = col0 + 8(j/4).
  const int row0 = 2 * (lane & 3);
  const int col0 = lane >> 2;
  // E4M3 store phase: lane l writes tile row l/2, bytes 8(l%2) .. 8(l%2)+7.
  const int srow = lane >> 1;
  const int scol = 8 * (lane & 1);

  for (std::uint64_t tile = static_cast<std::uint64_t>(blockIdx.x) * kWarps + warp; tile < p.total_tiles;
       tile += stride) {
    const std::uint64_t half = tile / p.tiles_per_half;
    const std::uint32_t n = static_cast<std::uint32_t>(tile - half * p.tiles_per_half);
    const std::uint32_t* src = reinterpret_cast<const std::uint32_t*>(p.base + p.offsets[p.first_half + half]) +
                               static_cast<std::size_t>(n) * (8 * K);
    __syncwarp();  // the previous tile's reads of buf and the tiles are done
    // LE u32 words: a native load on the (little-endian) GPU is U[q].
#pragma unroll
    for (int w = lane; w < 8 * K; w += 32) {
      const std::uint32_t v = __ldg(src + w);
      buf[1 + w] = v;
      if (w == 8 * K - 1) buf[0] = v;
      if (w == 0) buf[8 * K + 1] = v;
    }
    __syncwarp();

    // Output block of this tile (spec 8.1 / 8.2).
    std::uint64_t tile_idx;
    std::uint32_t row_stride;
    if (p.down) {
      row_stride = p.hidden;
      tile_idx = static_cast<std::uint64_t>(16 * ((n >> 3) & 7)) * p.hidden + 128ull * (n >> 6) + 16 * (n & 7);
    } else {
      row_stride = 128;
      tile_idx = static_cast<std::uint64_t>(16 * (n >> 3)) * 128 + 16 * (n & 7);
    }
    tile_idx += half * half_elems;

#pragma unroll
    for (int j = 0; j < 8; ++j) {
      // Stream bit b is buffer bit b + 32; state i ends at stream bit (i+1)K.
      const int q = (8 * lane + j + 1) * K + 16;
      const int w = q >> 5;
      const int sh = q & 31;
      const std::uint64_t x = (static_cast<std::uint64_t>(buf[w]) << 32) | buf[w + 1];
      const std::uint32_t s = static_cast<std::uint32_t>(x >> (48 - sh)) & 0xFFFFu;
      const int r = row0 + (j & 1) + 8 * ((j >> 1) & 1);
      const int c = col0 + 8 * (j >> 2);
      const std::uint64_t idx = tile_idx + static_cast<std::uint64_t>(r) * row_stride + c;
      if constexpr (M == DecodeTableMode::kSharedE4M3) {
        const std::uint8_t b = table[s];
        if (want_f32) p.out_f32[idx] = E4M3BitsToFloat(b);
        if (want_e4m3) btile[r * 16 + c] = b;
      } else {
        if (want_f32) p.out_f32[idx] = __ldg(p.cb_f32 + s);
        if (want_e4m3) btile[r * 16 + c] = __ldg(p.cb_e4m3 + s);
      }
    }
    if (want_e4m3) {  // uniform across the warp
      __syncwarp();
      const std::uint64_t idx = tile_idx + static_cast<std::uint64_t>(srow) * row_stride + scol;
      *reinterpret_cast<uint2*>(p.out_e4m3 + idx) = *reinterpret_cast<const uint2*>(btile + srow * 16 + scol);
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
  if (reinterpret_cast<std::uintptr_t>(out.f32) % 16 != 0 || reinterpret_cast<std::uintptr_t>(out.e4m3) % 8 != 0)
    return InvalidArgumentError("LaunchDecodeHalves: outputs must be 16-byte (fp32) / 8-byte (E4M3) aligned");
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
