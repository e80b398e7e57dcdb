// Manifests, manifests/exlr8-manifest-NAME.json (spec section 11): the width
// chosen for every routed gate/up half, every routed down projection, and the
// shared expert.
//
//   { "layers": { "3": { "gate": [[K x H] x E], "up": [[K x H] x E],
//                        "down": [K x E],
//                        "shared": {"gate": [K x H], "up": [K x H], "down": K} }, ... } }
//
// A gate/up entry may be one integer (uniform width); a down entry may be a
// list of H equal integers. Widths may be written 3.0 (the reference loader
// casts); anything else non-integral is rejected. Unknown keys are ignored.
//
// Parsing needs the geometry of each layer (from its index file) because a
// manifest alone cannot say whether its widths are stored or its lengths
// right. Validation (spec 11.2), each failure a Corruption naming the
// manifest, the JSON path (layers.3.gate[2][5]) and the byte offset:
// top-level object with object "layers"; keys are decimal layer numbers that
// have an index file; E entries, H widths each; every width stored for that
// layer (routed: widths, shared: shared_widths); "shared" present exactly
// when the layer has a shared expert. A MoE layer with no key is allowed (the
// spec says it has nothing to load) but recorded in warnings().
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "format/expert_index.h"
#include "format/status.h"

namespace exlr8 {

// The largest manifest file a reader takes (a GLM-5.3 manifest is about
// 0.3 MB; twice the values any geometry can use are refused while parsing).
inline constexpr std::uint64_t kMaxManifestBytes = 256ull << 20;

// What a manifest is checked against, per MoE layer.
struct LayerGeometry {
  std::uint32_t experts = 0;
  std::uint32_t halves = 0;
  std::vector<int> widths;         // routed, ascending
  std::vector<int> shared_widths;  // empty: no shared expert
  static LayerGeometry Of(const ExpertIndex& index);
};

// Widths of one layer.
struct LayerWidths {
  std::uint32_t experts = 0;
  std::uint32_t halves = 0;
  std::vector<std::uint8_t> gate;  // [e * halves + h]
  std::vector<std::uint8_t> up;    // [e * halves + h]
  std::vector<std::uint8_t> down;  // [e]
  bool has_shared = false;
  std::vector<std::uint8_t> shared_gate;  // [h]
  std::vector<std::uint8_t> shared_up;    // [h]
  std::uint8_t shared_down = 0;

  // Width of half h of projection p of expert e (or kSharedExpert).
  // REQUIRES: indices in range; has_shared for kSharedExpert.
  int Width(int expert, Proj p, std::uint32_t h) const;
};

class Manifest {
 public:
  const std::map<int, LayerWidths>& layers() const { return layers_; }
  const std::vector<std::string>& warnings() const { return warnings_; }
  const std::string& name() const { return name_; }
  // Mean K over all routed halves of all layers (spec 11.3; the shared
  // expert is not part of the average). 0 for an empty manifest.
  double BitsPerWeight() const;

 private:
  friend Result<Manifest> ParseManifest(std::string_view, std::string_view, const std::map<int, LayerGeometry>&);
  std::string name_;
  std::map<int, LayerWidths> layers_;
  std::vector<std::string> warnings_;
};

// Parses and validates manifest JSON. `name` is used in errors ("home" or a
// path). `geometry` maps every MoE layer of the release to its geometry.
Result<Manifest> ParseManifest(std::string_view json, std::string_view name,
                               const std::map<int, LayerGeometry>& geometry);

}  // namespace exlr8
