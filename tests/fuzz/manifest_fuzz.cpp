// Fuzz target for the manifest parser (format/manifest.h), against a fixed
// geometry: MoE layers 3 and 4, 4 experts, 2 halves, routed widths 2/3/4,
// shared widths 3/4.
//
// Invariants: no crash, hang or sanitizer report; errors are Corruption naming
// the manifest; an accepted manifest has the geometry's sizes and only stored
// widths everywhere.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "format/manifest.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::map<int, exlr8::LayerGeometry> kGeometry = {
      {3, {4, 2, {2, 3, 4}, {3, 4}}},
      {4, {4, 2, {2, 3, 4}, {3, 4}}},
  };
  auto m = exlr8::ParseManifest(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz", kGeometry);
  if (!m.ok()) {
    EXLR8_FUZZ_CHECK(m.status().code() == exlr8::StatusCode::kCorruption);
    EXLR8_FUZZ_CHECK(m.status().message().find("manifest fuzz") != std::string::npos);
    return 0;
  }
  for (const auto& [layer, lw] : m->layers()) {
    const auto& geo = kGeometry.at(layer);
    EXLR8_FUZZ_CHECK(lw.gate.size() == 8 && lw.up.size() == 8 && lw.down.size() == 4);
    auto stored = [](const std::vector<int>& w, int k) { return std::find(w.begin(), w.end(), k) != w.end(); };
    for (auto k : lw.gate) EXLR8_FUZZ_CHECK(stored(geo.widths, k));
    for (auto k : lw.up) EXLR8_FUZZ_CHECK(stored(geo.widths, k));
    for (auto k : lw.down) EXLR8_FUZZ_CHECK(stored(geo.widths, k));
    EXLR8_FUZZ_CHECK(lw.has_shared);
    EXLR8_FUZZ_CHECK(stored(geo.shared_widths, lw.shared_down));
  }
  const double bpw = m->BitsPerWeight();
  EXLR8_FUZZ_CHECK(m->layers().empty() ? bpw == 0 : (bpw >= 2 && bpw <= 4));
  return 0;
}
