// "Did you mean": the known name closest to a misspelt one.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace exlr8 {

// The candidate nearest to `typed` by edit distance (insertions, deletions,
// substitutions and swaps of neighbours each cost 1), if it is near enough
// to be a typo: at most 1 edit for names up to 4 characters, 2 up to 8, 3
// beyond. On a tie the first candidate in `candidates`' order wins; an
// exact match is returned as is.
std::optional<std::string> ClosestName(std::string_view typed, const std::vector<std::string>& candidates);

// " (did you mean 'PREFIX<name>'?)" for ClosestName's answer, or "".
std::string DidYouMean(std::string_view typed, const std::vector<std::string>& candidates,
                       std::string_view prefix = {});

}  // namespace exlr8
