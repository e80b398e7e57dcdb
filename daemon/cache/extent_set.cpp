#include "daemon/cache/extent_set.h"

#include <algorithm>

namespace exlr8 {

std::vector<Extent> NormalizeExtents(std::vector<Extent> extents) {
  std::erase_if(extents, [](const Extent& e) { return e.length == 0; });
  std::sort(extents.begin(), extents.end(),
            [](const Extent& a, const Extent& b) { return a.offset < b.offset; });
  std::vector<Extent> out;
  out.reserve(extents.size());
  for (const Extent& e : extents) {
    if (!out.empty() && e.offset <= out.back().end()) {
      out.back().length = std::max(out.back().end(), e.end()) - out.back().offset;
    } else {
      out.push_back(e);
    }
  }
  return out;
}

bool ExtentsCover(std::span<const Extent> have, Extent want) {
  if (want.length == 0) return true;
  // The last extent starting at or before want.offset is the only candidate:
  // normalized extents never touch, so coverage cannot continue into the next.
  auto it = std::upper_bound(have.begin(), have.end(), want.offset,
                             [](std::uint64_t off, const Extent& e) { return off < e.offset; });
  if (it == have.begin()) return false;
  --it;
  return it->end() >= want.end();
}

std::vector<Extent> MissingExtents(std::span<const Extent> have, Extent want) {
  std::vector<Extent> holes;
  std::uint64_t pos = want.offset;
  const std::uint64_t end = want.end();
  for (const Extent& e : have) {
    if (pos >= end) break;
    if (e.end() <= pos) continue;
    if (e.offset >= end) break;
    if (e.offset > pos) holes.push_back({pos, e.offset - pos});
    pos = std::max(pos, e.end());
  }
  if (pos < end) holes.push_back({pos, end - pos});
  return holes;
}

std::vector<Extent> SubtractExtents(std::span<const Extent> have, std::vector<Extent> remove) {
  remove = NormalizeExtents(std::move(remove));
  std::vector<Extent> out;
  std::size_t r = 0;
  for (const Extent& e : have) {
    std::uint64_t pos = e.offset;
    while (r < remove.size() && remove[r].end() <= pos) ++r;
    // Removals that start inside e cut it; the last may reach into the next.
    for (std::size_t i = r; i < remove.size() && remove[i].offset < e.end(); ++i) {
      if (remove[i].offset > pos) out.push_back({pos, remove[i].offset - pos});
      pos = std::max(pos, remove[i].end());
    }
    if (pos < e.end()) out.push_back({pos, e.end() - pos});
  }
  return out;
}

std::uint64_t TotalLength(std::span<const Extent> extents) {
  std::uint64_t total = 0;
  for (const Extent& e : extents) total += e.length;
  return total;
}

}  // namespace exlr8
