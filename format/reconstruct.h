// Reconstruction of weights from decoded trellis tiles (spec section 9).
//
// For T of shape k x n in (input, output) orientation, input-side vector u
// (length k) and output-side vector v (length n):
//
//   W = diag(u) . B_k . T . B_n . diag(v)
//
// B_k is block-diagonal with k/128 copies of H, the 128 x 128 Sylvester
// Hadamard matrix scaled by 1/sqrt(128) (H[r][c] = (-1)^popcount(r & c) /
// sqrt(128), H . H = I). Every 128 x 128 block of W depends only on the same
// block of T and the matching 128-slices of u and v, so halves and dense
// TRELLIS entries reconstruct independently and blocks can be done in any
// order.
//
// Operation order (spec 9.3): (1) H . T per 128-row block, (2) scale row i by
// u[i], (3) every 128-column block times H, (4) scale column o by v[o]. Here
// both 1/sqrt(128) factors are applied together as one exact 1/128 in step 4
// and steps 1 and 3 are fast Walsh-Hadamard transforms in fp32. Step 1 on
// E4M3 tile values is exact; the result differs from a plain fp32 matrix
// product only by summation order, inside the spec's tolerance (per 128 x 128
// block: max|a - b| <= 1e-5 * max|b|). It is not bit-identical to other
// implementations and must not be compared by digest.
//
// Thread safety: pure functions; distinct outputs may be computed in parallel.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "format/status.h"
#include "format/trellis.h"

namespace exlr8 {

// In place: `w` holds T (rows x cols, row-major, (input, output)) on entry and
// W on return. u has `rows` entries, v has `cols` entries.
// Errors: InvalidArgument if rows or cols is 0 or not a multiple of 128, or
// a span has the wrong length. `w` is untouched on error.
Status ReconstructBlocks(std::uint64_t rows, std::uint64_t cols, std::span<float> w,
                         std::span<const float> u, std::span<const float> v);

// An expert half (or a dense TRELLIS entry) after DecodeHalfTiles:
//   kGateUp: w is hidden x 128, u = input side (hidden), v = output side (128)
//   kDown  : w is 128 x hidden, u = input side (128), v = output side (hidden)
// Same errors as ReconstructBlocks.
Status ReconstructHalf(HalfLayout layout, std::uint64_t hidden, std::span<float> w,
                       std::span<const float> u, std::span<const float> v);

// The index of the first element of `w` that is not finite, or nullopt.
// Reconstruction multiplies finite tiles by finite vectors, yet the result
// can overflow fp32 when a vector holds absurd values (a file can checksum
// fine and still do so): callers reject such weights as Corruption instead
// of handing infinities on (spec U-10's rule, applied to what scales yield).
std::optional<std::size_t> FirstNonFinite(std::span<const float> w);

// Hidden-side vector of spec 9.2: out[i] = signs[i] * block_scales[i / 128]
// (gate/up u from signs.in and su_block; down v from signs.out and sv_block).
// Errors: InvalidArgument unless signs.size() == out.size() and
// block_scales.size() * 128 == out.size().
Status ExpandHiddenSideVector(std::span<const float> signs, std::span<const float> block_scales,
                              std::span<float> out);

}  // namespace exlr8
