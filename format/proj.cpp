// ProjName and ProjFromName (declared in format/expert_index.h), apart from
// the expert index reader so that a lessee (libexlr8client) links them
// without the safetensors parser.
#include <array>
#include <cstddef>
#include <optional>
#include <string_view>

#include "format/expert_index.h"

namespace exlr8 {

namespace {

constexpr std::array<std::string_view, kProjCount> kProjNames = {"gate", "up", "down"};
static_assert(kProjNames.size() == static_cast<std::size_t>(Proj::kDown) + 1);

}  // namespace

std::string_view ProjName(Proj p) { return kProjNames[static_cast<std::size_t>(p)]; }

std::optional<Proj> ProjFromName(std::string_view name) {
  for (std::size_t i = 0; i < kProjNames.size(); ++i)
    if (kProjNames[i] == name) return static_cast<Proj>(i);
  return std::nullopt;
}

}  // namespace exlr8
