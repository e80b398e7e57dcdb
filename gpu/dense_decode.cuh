// GPU decoding of dense matrices (spec 10.3) read in place from device
// memory: the CUDA twin of format/dense.h's DecodeDenseMatrix for the
// formats that need no trellis (INT4, MXFP8, FP8_BLOCK, FP8_ROW, BF16,
// FP32), with the same fp32 products (bit for bit), and the transpose that
// turns reconstructed TRELLIS entries (spec 8.3, decoded with
// gpu/decode.cuh and reconstructed with gpu/reconstruct.cuh) into the HF
// weight.
//
// This header has no device code and may be included from .cpp files.
// Launchers only enqueue work on `stream`; pointers are device memory of the
// current device and stay alive until the stream has passed the launch.
#pragma once

#include <cstddef>
#include <cstdint>

#include "format/dense.h"
#include "format/dtype.h"
#include "format/status.h"
#include "gpu/stream.h"

namespace exlr8 {

// A non-TRELLIS dense matrix in device memory: its data tensors in table
// order (INT4 q4, s4; MXFP8 fp8, e8m0; FP8_BLOCK / FP8_ROW fp8, scale;
// BF16 bf16; FP32 fp32) at base + data[t], laid out as format/dense.h says.
struct DenseDecodeArgs {
  const std::byte* base = nullptr;
  DenseFormat format = DenseFormat::kFp32;
  DenseSide side = DenseSide::kReplicated;
  std::uint64_t out = 0, inp = 0;
  std::uint64_t data[2] = {0, 0};
  DType scale_dtype = DType::kF32;  // s4 / scale: F16, BF16 or F32
};

// Writes the (out, inp) fp32 HF weight to w, element (o, i) at o*inp + i:
// INT4 (nibble - 8) * s4, MXFP8 e4m3 * 2^(e8m0 - 127), FP8_BLOCK / FP8_ROW
// e4m3 * scale, BF16 / FP32 as stored. Bytes the CPU decoder refuses (E4M3
// NaN, E8M0 255) come out as NaN / infinity here: a comparison with the
// CPU's result then fails. Reads bytes only (any alignment).
// Errors: InvalidArgument for TRELLIS, a zero dimension, a scale dtype other
// than F16/BF16/F32 where the format has one, null pointers; Internal for a
// failed launch.
Status LaunchDecodeDense(const DenseDecodeArgs& args, float* w, CudaStreamView stream);

// The reconstructed entries of a TRELLIS matrix (entry g at
// entries + g * 128 * len, as ReconstructBlocks leaves it) written into the
// (out, inp) HF weight w: side 2 entry g is 128 x out (input rows 128g..),
// side 0/1 entry g is inp x 128 (output columns 128g..). InvalidArgument
// for dimensions that are not positive multiples of 128 or null pointers.
Status LaunchTrellisEntriesToWeight(const float* entries, DenseSide side, std::uint64_t out,
                                    std::uint64_t inp, float* w, CudaStreamView stream);

}  // namespace exlr8
