// Device helpers shared by the .cu files that read stored tensors in place
// (reconstruct.cu, dense_decode.cu): little-endian loads at any alignment
// and exact conversions of stored floats and E4M3 bytes to fp32. Device
// code: include only from .cu files.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "format/dtype.h"

namespace exlr8::gpu_load {

// `bytes` (1..4) little-endian bytes at p, byte by byte (any alignment).
__device__ __forceinline__ std::uint32_t LoadLE(const std::uint8_t* p, int bytes) {
  std::uint32_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<std::uint32_t>(p[i]) << (8 * i);
  return v;
}

// Element i of a stored float vector of `dtype`, exactly as fp32; NaN for a
// dtype other than F16, BF16 or F32.
__device__ __forceinline__ float LoadFloat(const std::uint8_t* p, DType dtype, std::uint64_t i) {
  switch (dtype) {
    case DType::kF16: {
      __half_raw h;
      h.x = static_cast<unsigned short>(LoadLE(p + 2 * i, 2));
      return __half2float(__half(h));
    }
    case DType::kBF16:
      return __uint_as_float(LoadLE(p + 2 * i, 2) << 16);
    case DType::kF32:
      return __uint_as_float(LoadLE(p + 4 * i, 4));
    default:
      return __uint_as_float(0x7FC00000u);
  }
}

// The exact value of an E4M3 byte (NaN for 0x7F / 0xFF), as decode.cu has it.
__device__ __forceinline__ float E4M3Value(std::uint8_t b) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(b), __NV_E4M3);
  return __half2float(__half(h));
}

}  // namespace exlr8::gpu_load
