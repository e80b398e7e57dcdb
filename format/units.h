// Human-readable byte counts for messages and summaries.
#pragma once

#include <cstdint>
#include <string>

namespace exlr8 {

// "512 B", "1.23 GB": decimal units (10^3 steps), as the spec's sizes.
std::string HumanBytes(std::uint64_t bytes);

}  // namespace exlr8
