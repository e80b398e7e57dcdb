#include "format/reconstruct.h"

#include <cmath>
#include <cstddef>
#include <cstring>
#include <string>

namespace exlr8 {

namespace {

constexpr std::size_t kB = kBlock;

// Columns of the block are transformed in chunks of kChunk, copied into a
// contiguous buffer first: the block's row stride is a power of two (512 B
// for a gate/up half, 24 KiB for a GLM-5.3 down half), which would map all
// 128 rows of a column onto a few L1 sets.
constexpr std::size_t kChunk = 32;

// x = H' . x for 128 rows of kChunk columns each (H' = unnormalised
// Hadamard); every butterfly runs along a chunk row, which vectorises.
void FwhtColumnsChunk(float* x) {
  for (std::size_t h = 1; h < kB; h <<= 1)
    for (std::size_t i = 0; i < kB; i += 2 * h)
      for (std::size_t r = i; r < i + h; ++r) {
        float* __restrict a = x + r * kChunk;
        float* __restrict b = x + (r + h) * kChunk;
        for (std::size_t c = 0; c < kChunk; ++c) {
          const float p = a[c], q = b[c];
          a[c] = p + q;
          b[c] = p - q;
        }
      }
}

// x = x . H' for one row of 128: the three innermost stages as an 8-point
// transform per group, the rest as vectorisable butterflies.
void FwhtRow(float* __restrict x) {
  for (std::size_t g = 0; g < kB; g += 8) {
    float* y = x + g;
    const float a0 = y[0] + y[1], a1 = y[0] - y[1], a2 = y[2] + y[3], a3 = y[2] - y[3];
    const float a4 = y[4] + y[5], a5 = y[4] - y[5], a6 = y[6] + y[7], a7 = y[6] - y[7];
    const float b0 = a0 + a2, b1 = a1 + a3, b2 = a0 - a2, b3 = a1 - a3;
    const float b4 = a4 + a6, b5 = a5 + a7, b6 = a4 - a6, b7 = a5 - a7;
    y[0] = b0 + b4; y[1] = b1 + b5; y[2] = b2 + b6; y[3] = b3 + b7;
    y[4] = b0 - b4; y[5] = b1 - b5; y[6] = b2 - b6; y[7] = b3 - b7;
  }
  for (std::size_t h = 8; h < kB; h <<= 1)
    for (std::size_t i = 0; i < kB; i += 2 * h)
      for (std::size_t j = i; j < i + h; ++j) {
        const float p = x[j], q = x[j + h];
        x[j] = p + q;
        x[j + h] = p - q;
      }
}

// One 128 x 128 block at `blk` (row stride `stride`); u, v point at its
// 128-slices. Steps 2-4 run row by row on a row that stays in L1.
void ReconstructBlock(float* blk, std::size_t stride, const float* u, const float* v) {
  alignas(64) float chunk[kB * kChunk];
  for (std::size_t c0 = 0; c0 < kB; c0 += kChunk) {  // (1) H' . T (exact for E4M3 tiles)
    for (std::size_t r = 0; r < kB; ++r) std::memcpy(chunk + r * kChunk, blk + r * stride + c0, sizeof(float) * kChunk);
    FwhtColumnsChunk(chunk);
    for (std::size_t r = 0; r < kB; ++r) std::memcpy(blk + r * stride + c0, chunk + r * kChunk, sizeof(float) * kChunk);
  }
  alignas(64) float vs[kB];
  for (std::size_t c = 0; c < kB; ++c) vs[c] = v[c] * (1.0f / 128.0f);  // both 1/sqrt(128), exact
  for (std::size_t r = 0; r < kB; ++r) {
    float* __restrict row = blk + r * stride;
    const float ur = u[r];
    for (std::size_t c = 0; c < kB; ++c) row[c] *= ur;   // (2) row times u
    FwhtRow(row);                                         // (3) times H'
    for (std::size_t c = 0; c < kB; ++c) row[c] *= vs[c];  // (4) columns times v / 128
  }
}

}  // namespace

Status ReconstructBlocks(std::uint64_t rows, std::uint64_t cols, std::span<float> w, std::span<const float> u,
                         std::span<const float> v) {
  if (rows == 0 || cols == 0 || rows % kB != 0 || cols % kB != 0 || rows > (std::uint64_t{1} << 32) ||
      cols > (std::uint64_t{1} << 32))
    return InvalidArgumentError("reconstruct: shape " + std::to_string(rows) + " x " + std::to_string(cols) +
                                " is not a positive multiple of 128 on both sides");
  if (w.size() != rows * cols)
    return InvalidArgumentError("reconstruct: matrix holds " + std::to_string(w.size()) + " floats, expected " +
                                std::to_string(rows * cols));
  if (u.size() != rows || v.size() != cols)
    return InvalidArgumentError("reconstruct: vectors have " + std::to_string(u.size()) + " and " +
                                std::to_string(v.size()) + " entries, expected " + std::to_string(rows) +
                                " (input side) and " + std::to_string(cols) + " (output side)");
  const std::size_t stride = static_cast<std::size_t>(cols);
  for (std::size_t rb = 0; rb < rows; rb += kB)
    for (std::size_t cb = 0; cb < cols; cb += kB)
      ReconstructBlock(w.data() + rb * stride + cb, stride, u.data() + rb, v.data() + cb);
  return Status::Ok();
}

Status ReconstructHalf(HalfLayout layout, std::uint64_t hidden, std::span<float> w, std::span<const float> u,
                       std::span<const float> v) {
  if (layout == HalfLayout::kGateUp) return ReconstructBlocks(hidden, kB, w, u, v);
  return ReconstructBlocks(kB, hidden, w, u, v);
}

std::optional<std::size_t> FirstNonFinite(std::span<const float> w) {
  for (std::size_t i = 0; i < w.size(); ++i)
    if (!std::isfinite(w[i])) return i;
  return std::nullopt;
}

Status ExpandHiddenSideVector(std::span<const float> signs, std::span<const float> block_scales,
                              std::span<float> out) {
  if (signs.size() != out.size() || block_scales.size() * kB != out.size())
    return InvalidArgumentError("hidden-side vector: " + std::to_string(signs.size()) + " signs and " +
                                std::to_string(block_scales.size()) + " block scales for " +
                                std::to_string(out.size()) + " channels");
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = signs[i] * block_scales[i / kB];
  return Status::Ok();
}

}  // namespace exlr8
