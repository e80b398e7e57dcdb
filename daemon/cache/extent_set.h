// Pure interval arithmetic over byte ranges of one file: merging verified
// extents, asking whether a range is covered, and listing the holes of a
// wanted range. No I/O; the cache keeps the persistent copy in SQLite.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace exlr8 {

// Bytes [offset, offset + length) of one file.
struct Extent {
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  std::uint64_t end() const { return offset + length; }
  friend bool operator==(const Extent&, const Extent&) = default;
};

// Sorts `extents` by offset and merges overlapping and adjacent ones; drops
// empty ones. The result is "normalized": sorted, disjoint, non-adjacent.
// REQUIRES: no extent wraps around (offset + length <= 2^64 - 1).
std::vector<Extent> NormalizeExtents(std::vector<Extent> extents);

// True if normalized `have` covers every byte of `want`. An empty `want` is
// always covered.
bool ExtentsCover(std::span<const Extent> have, Extent want);

// The holes of `want` that normalized `have` does not cover, in order.
std::vector<Extent> MissingExtents(std::span<const Extent> have, Extent want);

// The bytes of normalized `have` outside every extent of `remove` (any
// order, may overlap), normalized.
std::vector<Extent> SubtractExtents(std::span<const Extent> have, std::vector<Extent> remove);

// Sum of lengths.
std::uint64_t TotalLength(std::span<const Extent> extents);

}  // namespace exlr8
