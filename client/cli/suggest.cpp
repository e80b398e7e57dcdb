#include "client/cli/suggest.h"

#include <algorithm>
#include <cstddef>

namespace exlr8 {

namespace {

// Optimal string alignment distance (Damerau-Levenshtein without repeated
// edits of one substring): "--rpeo" is one swap from "--repo".
std::size_t EditDistance(std::string_view a, std::string_view b) {
  const std::size_t n = a.size(), m = b.size();
  std::vector<std::size_t> prev2(m + 1), prev(m + 1), cur(m + 1);
  for (std::size_t j = 0; j <= m; ++j) prev[j] = j;
  for (std::size_t i = 1; i <= n; ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= m; ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        cur[j] = std::min(cur[j], prev2[j - 2] + 1);
    }
    prev2.swap(prev);
    prev.swap(cur);
  }
  return prev[m];
}

std::size_t AllowedEdits(std::size_t length) { return length <= 4 ? 1 : length <= 8 ? 2 : 3; }

}  // namespace

std::optional<std::string> ClosestName(std::string_view typed, const std::vector<std::string>& candidates) {
  std::optional<std::string> best;
  std::size_t best_distance = AllowedEdits(typed.size()) + 1;
  for (const std::string& c : candidates) {
    // Names far longer or shorter than the typed one cannot be near it;
    // skipping them bounds the work on a long argument.
    const std::size_t gap = c.size() > typed.size() ? c.size() - typed.size() : typed.size() - c.size();
    if (gap >= best_distance) continue;
    const std::size_t d = EditDistance(typed, c);
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  return best;
}

std::string DidYouMean(std::string_view typed, const std::vector<std::string>& candidates,
                       std::string_view prefix) {
  const std::optional<std::string> name = ClosestName(typed, candidates);
  if (!name) return {};
  return " (did you mean '" + std::string(prefix) + *name + "'?)";
}

}  // namespace exlr8
