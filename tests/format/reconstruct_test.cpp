// Reconstruction (spec 9) against a direct fp64 evaluation of the formula.
#include "format/reconstruct.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <random>
#include <vector>

#include "format/trellis.h"

namespace exlr8 {
namespace {

// H[r][c] = (-1)^popcount(r & c) (unnormalised).
double HSign(std::size_t r, std::size_t c) { return (std::popcount(r & c) & 1) ? -1.0 : 1.0; }

// W = diag(u) B T B diag(v), evaluated literally in fp64 (spec 9.1).
std::vector<double> ReferenceW(std::size_t rows, std::size_t cols, const std::vector<float>& t,
                               const std::vector<float>& u, const std::vector<float>& v) {
  std::vector<double> x(rows * cols, 0.0), w(rows * cols, 0.0);
  for (std::size_t i = 0; i < rows; ++i)  // x = B T
    for (std::size_t a = i / 128 * 128; a < i / 128 * 128 + 128; ++a)
      for (std::size_t o = 0; o < cols; ++o) x[i * cols + o] += HSign(i % 128, a % 128) * t[a * cols + o];
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t o = 0; o < cols; ++o) {
      double s = 0;
      for (std::size_t b = o / 128 * 128; b < o / 128 * 128 + 128; ++b) s += x[i * cols + b] * HSign(b % 128, o % 128);
      w[i * cols + o] = s / 128.0 * u[i] * v[o];
    }
  return w;
}

// Per 128 x 128 block: max|a - b| <= 1e-5 * max|b| (spec 9.3).
void ExpectBlocksClose(std::size_t rows, std::size_t cols, const std::vector<float>& got,
                       const std::vector<double>& want) {
  for (std::size_t rb = 0; rb < rows; rb += 128)
    for (std::size_t cb = 0; cb < cols; cb += 128) {
      double max_diff = 0, max_ref = 0;
      for (std::size_t r = rb; r < rb + 128; ++r)
        for (std::size_t c = cb; c < cb + 128; ++c) {
          max_diff = std::max(max_diff, std::fabs(got[r * cols + c] - want[r * cols + c]));
          max_ref = std::max(max_ref, std::fabs(want[r * cols + c]));
        }
      EXPECT_LE(max_diff, 1e-5 * max_ref) << "block (" << rb << "," << cb << ")";
    }
}

std::vector<float> RandomTiles(std::size_t n, std::mt19937& rng) {
  std::vector<float> t(n);
  for (auto& x : t) x = CodebookF32()[rng() & 0xFFFF];
  return t;
}

std::vector<float> RandomVector(std::size_t n, std::mt19937& rng, bool signs) {
  std::uniform_real_distribution<float> d(0.01f, 2.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng) * ((signs && (rng() & 1)) ? -1.0f : 1.0f);
  return v;
}

TEST(Reconstruct, MatchesDirectFormulaOnGeneralShape) {
  const unsigned seed = 99;
  SCOPED_TRACE("seed 99");
  std::mt19937 rng(seed);
  const std::size_t rows = 256, cols = 384;
  auto t = RandomTiles(rows * cols, rng);
  const auto u = RandomVector(rows, rng, true), v = RandomVector(cols, rng, true);
  const auto want = ReferenceW(rows, cols, t, u, v);
  ASSERT_TRUE(ReconstructBlocks(rows, cols, t, u, v).ok());
  ExpectBlocksClose(rows, cols, t, want);
}

TEST(Reconstruct, HalfLayoutsMatchDirectFormula) {
  std::mt19937 rng(5);
  const std::uint64_t hidden = 256;
  for (HalfLayout layout : {HalfLayout::kGateUp, HalfLayout::kDown}) {
    const std::size_t rows = layout == HalfLayout::kGateUp ? hidden : 128;
    const std::size_t cols = layout == HalfLayout::kGateUp ? 128 : hidden;
    auto t = RandomTiles(rows * cols, rng);
    const auto u = RandomVector(rows, rng, true), v = RandomVector(cols, rng, true);
    const auto want = ReferenceW(rows, cols, t, u, v);
    ASSERT_TRUE(ReconstructHalf(layout, hidden, t, u, v).ok());
    ExpectBlocksClose(rows, cols, t, want);
  }
}

TEST(Reconstruct, AllZeroHalfSpec15Item9) {
  // An all-zero tile decodes to 1.875 everywhere: B T B = 240 at the first
  // element of every block, 0 elsewhere.
  std::mt19937 rng(11);
  const std::uint64_t hidden = 384;
  std::vector<float> w(hidden * 128, 1.875f);
  const auto u = RandomVector(hidden, rng, true), v = RandomVector(128, rng, true);
  ASSERT_TRUE(ReconstructHalf(HalfLayout::kGateUp, hidden, w, u, v).ok());
  for (std::size_t i = 0; i < hidden; ++i)
    for (std::size_t j = 0; j < 128; ++j) {
      const double want = (i % 128 == 0 && j == 0) ? 240.0 * u[i] * v[j] : 0.0;
      ASSERT_NEAR(w[i * 128 + j], want, 1e-6 * 240 * 4) << i << "," << j;
    }
}

TEST(Reconstruct, OrthogonalitySpec15Item10) {
  std::mt19937 rng(12);
  const std::size_t n = 128 * 128;
  auto t = RandomTiles(2 * n, rng);
  const auto original = t;
  const std::vector<float> ones_r(256, 1.0f), ones_c(128, 1.0f);
  ASSERT_TRUE(ReconstructBlocks(256, 128, t, ones_r, ones_c).ok());
  for (std::size_t b = 0; b < 2; ++b) {
    double nt = 0, nw = 0;
    for (std::size_t i = b * n; i < (b + 1) * n; ++i) {
      nt += double(original[i]) * original[i];
      nw += double(t[i]) * t[i];
    }
    EXPECT_NEAR(std::sqrt(nw), std::sqrt(nt), 1e-6 * std::sqrt(nt));
  }
  ASSERT_TRUE(ReconstructBlocks(256, 128, t, ones_r, ones_c).ok());
  for (std::size_t i = 0; i < 2 * n; ++i) ASSERT_NEAR(t[i], original[i], 1e-5) << i;
}

TEST(Reconstruct, RejectsBadShapesAndLeavesOutputAlone) {
  std::vector<float> w(128 * 256, 3.0f);
  const std::vector<float> u(128, 1.0f), v(256, 1.0f);
  EXPECT_EQ(ReconstructBlocks(128, 200, w, u, v).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ReconstructBlocks(0, 256, w, u, v).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ReconstructBlocks(256, 128, w, u, v).code(), StatusCode::kInvalidArgument);  // vectors swapped
  EXPECT_EQ(ReconstructBlocks(128, 256, std::span(w).first(100), u, v).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ReconstructHalf(HalfLayout::kGateUp, 256, w, u, v).code(), StatusCode::kInvalidArgument);
  for (float x : w) ASSERT_EQ(x, 3.0f);
  EXPECT_TRUE(ReconstructHalf(HalfLayout::kDown, 256, w, u, v).ok());
}

TEST(Reconstruct, ExpandHiddenSideVector) {
  const std::vector<float> signs = [] {
    std::vector<float> s(256);
    for (std::size_t i = 0; i < s.size(); ++i) s[i] = (i % 3 == 0) ? -1.0f : 1.0f;
    return s;
  }();
  const std::vector<float> blocks = {0.5f, 3.0f};
  std::vector<float> out(256);
  ASSERT_TRUE(ExpandHiddenSideVector(signs, blocks, out).ok());
  EXPECT_EQ(out[0], -0.5f);
  EXPECT_EQ(out[1], 0.5f);
  EXPECT_EQ(out[129], -3.0f);
  EXPECT_EQ(out[130], 3.0f);
  EXPECT_EQ(ExpandHiddenSideVector(signs, std::span(blocks).first(1), out).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace exlr8
