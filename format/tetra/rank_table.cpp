// The rank table (TETRA-LVQ5.md 2.5 step 5): every rank vector rho in
// {0..7}^8 with cost sum (2 rho_j + 1)^2 < 128, sorted by (cost, rho with
// rho_0 most significant); rows 0..2047 are the first 2048 of class 0,
// rows 2048..4095 the first 2048 of class 1. n0 is the number of class-0
// rows among the 2048 cheapest of both classes.
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "format/tetra/internal.h"

namespace exlr8::tetra::internal {

namespace {

inline constexpr int kMaxCost = 128;               // cost bound, exclusive
inline constexpr std::size_t kCandidates = 14674;  // vectors under the bound (spec)

struct RankCandidate {
  int cost;
  std::uint32_t key;  // RankLexKey
  std::uint32_t row;  // packed, rho_j in bits 4j..4j+3
};

// Appends every completion of rho_0..rho_{j-1} (packed in `row`, partial
// cost `cost`) whose total cost stays under the bound.
void EnumerateRanks(int j, int cost, std::uint32_t row, std::vector<RankCandidate>& out) {
  if (j == 8) {
    out.push_back({cost, RankLexKey(row), row});
    return;
  }
  const int remaining_min = 8 - j - 1;  // each later rank costs at least 1
  for (std::uint32_t rho = 0; rho < 8; ++rho) {
    const int c = cost + static_cast<int>((2 * rho + 1) * (2 * rho + 1));
    if (c + remaining_min >= kMaxCost) break;
    EnumerateRanks(j + 1, c, row | rho << (4 * j), out);
  }
}

}  // namespace

int RankCost(std::uint32_t row) {
  int cost = 0;
  for (int j = 0; j < 8; ++j) {
    const int rho = static_cast<int>(row >> (4 * j) & 0xF);
    cost += (2 * rho + 1) * (2 * rho + 1);
  }
  return cost;
}

int RankClass(std::uint32_t row) {
  int n = 0;
  for (int j = 0; j < 8; ++j) {
    const std::uint32_t rho = row >> (4 * j) & 0xF;
    n += (rho == 1 || rho == 2 || rho == 5 || rho == 6) ? 1 : 0;
  }
  return n & 1;
}

std::uint32_t RankLexKey(std::uint32_t row) {
  std::uint32_t key = 0;
  for (int j = 0; j < 8; ++j) key = key << 3 | (row >> (4 * j) & 7);
  return key;
}

Status BuildRankTable(Tables& t) {
  std::vector<RankCandidate> all;
  all.reserve(kCandidates);
  EnumerateRanks(0, 0, 0, all);
  if (all.size() != kCandidates)
    return InternalError("tetra rank table: " + std::to_string(all.size()) +
                         " rank vectors of cost < 128, expected " + std::to_string(kCandidates));
  std::sort(all.begin(), all.end(), [](const RankCandidate& a, const RankCandidate& b) {
    return std::pair(a.cost, a.key) < std::pair(b.cost, b.key);
  });
  std::size_t filled[2] = {0, 0};
  std::uint32_t n0 = 0;
  std::size_t overall = 0;
  for (const RankCandidate& c : all) {
    const int cls = RankClass(c.row);
    if (filled[cls] == kRankRows / 2) continue;
    if (overall++ < kRankRows / 2 && cls == 0) ++n0;
    t.rows[static_cast<std::size_t>(cls) * (kRankRows / 2) + filled[cls]++] = c.row;
  }
  if (filled[0] != kRankRows / 2 || filled[1] != kRankRows / 2)
    return InternalError("tetra rank table: only " + std::to_string(filled[0]) + " class-0 and " +
                         std::to_string(filled[1]) + " class-1 vectors, expected 2048 each");
  t.n0 = n0;
  return Status::Ok();
}

}  // namespace exlr8::tetra::internal
