// Spec 9.3's comparison of reconstructed weights: per 128 x 128 block,
// max|a - b| <= 1e-5 * max|b| (b the reference). (rows, cols) need not be
// multiples of 128. A NaN anywhere in a block fails it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace exlr8::testing {

// The number of blocks of the row-major rows x cols matrices outside the
// tolerance.
inline int BlocksOutsideTolerance(std::uint64_t rows, std::uint64_t cols, const float* got,
                                  const float* want) {
  int bad = 0;
  for (std::uint64_t rb = 0; rb < rows; rb += 128)
    for (std::uint64_t cb = 0; cb < cols; cb += 128) {
      double diff = 0, ref = 0;
      for (std::uint64_t r = rb; r < std::min(rows, rb + 128); ++r)
        for (std::uint64_t c = cb; c < std::min(cols, cb + 128); ++c) {
          diff = std::max(diff, std::fabs(double(got[r * cols + c]) - want[r * cols + c]));
          ref = std::max(ref, std::fabs(double(want[r * cols + c])));
        }
      if (!(diff <= 1e-5 * ref)) ++bad;
    }
  return bad;
}

inline int BlocksOutsideTolerance(std::uint64_t rows, std::uint64_t cols, const std::vector<float>& got,
                                  const std::vector<float>& want) {
  return BlocksOutsideTolerance(rows, cols, got.data(), want.data());
}

}  // namespace exlr8::testing
