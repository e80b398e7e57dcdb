// The argument of libexlr8client's embedded kernel `exlr8client_half_weights`
// (half_weights.cu), shared by the kernel and its launcher
// (device_half_weights.cpp). Plain types only: compiled by nvcc and by the
// host compiler with the same layout.
#pragma once

#include <cstdint>

namespace exlr8::client {

struct HalfWeightsParams {
  const std::uint8_t* record;  // the half record's first byte (device)
  const std::uint8_t* signs;   // the layer's signs.in (gate/up) or signs.out (down) (device)
  float* out;                  // 128 x hidden fp32 (device)
  std::uint64_t hidden;        // a positive multiple of 128
  std::uint64_t slice_offset;  // from `record`: 128 elements of slice_dtype
  std::uint64_t block_offset;  // from `record`: hidden/128 elements of block_dtype
  std::uint32_t k;             // 1..8
  std::uint32_t down;          // 1: down (128 x hidden), 0: gate/up (hidden x 128)
  std::uint32_t slice_dtype, block_dtype, signs_dtype;  // DType values: F16, BF16, F32
  std::uint32_t reserved;
};

// The kernel's name in the module, its block size and its dynamic shared
// memory (one 128 x 128 fp32 block). Grid: hidden / 128 blocks.
inline constexpr const char* kHalfWeightsKernelName = "exlr8client_half_weights";
inline constexpr unsigned kHalfWeightsThreads = 256;
inline constexpr unsigned kHalfWeightsSmemBytes = 128 * 128 * 4;

}  // namespace exlr8::client
