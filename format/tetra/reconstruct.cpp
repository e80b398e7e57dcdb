// One block's weights from its coordinates (golden.json's recipe, the Rust
// reference's reconstruct_shape_gain before the tail and un-rotation).
//
// Compiled with -ffp-contract=off (format/CMakeLists.txt): the recipe rounds
// every f64 product and quotient on its own, and the results must match the
// fixtures and the GPU bit for bit. With FMA available (-march=native, other
// targets) the compiler may otherwise fuse a multiply into a neighbouring
// add and round once, which changes low bits; the flag keeps this file exact
// under any future edit (adding the tail or a bias term) and any target.
#include <cmath>
#include <cstdint>

#include "format/tetra/word.h"

namespace exlr8::tetra {

void ReconstructBlock(const std::int8_t y[24], double centroid, double row_scale, float out[24]) {
  const std::uint32_t m = ShellIndex(y);
  if (m == 0) {
    for (int j = 0; j < kDim; ++j) out[j] = 0.0F;
    return;
  }
  const double scale = (centroid * row_scale) / std::sqrt(16.0 * static_cast<double>(m));
  for (int j = 0; j < kDim; ++j) out[j] = static_cast<float>(static_cast<double>(y[j]) * scale);
}

}  // namespace exlr8::tetra
