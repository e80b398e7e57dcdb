#include "format/manifest.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "format/json.h"

namespace exlr8 {

namespace {

std::string WidthsString(const std::vector<int>& w) {
  std::string s;
  for (size_t i = 0; i < w.size(); ++i) s += (i ? "," : "") + std::to_string(w[i]);
  return s;
}

class ManifestReader {
 public:
  explicit ManifestReader(std::string_view name) : name_(name) {}

  Status Error(const JsonValue& v, const std::string& path, const std::string& what) const {
    return CorruptionError("manifest " + name_ + ": " + path + " at byte " + std::to_string(v.offset()) +
                           ": " + what);
  }

  // One width: an integer (or integral float) that is in `allowed`.
  Result<std::uint8_t> Width(const JsonValue& v, const std::string& path,
                             const std::vector<int>& allowed) const {
    if (!v.is_number()) return Error(v, path, "expected a width (integer)");
    const double d = v.as_double();
    if (!std::isfinite(d) || d != std::floor(d)) return Error(v, path, "width is not an integer");
    if (d < 0 || d > 255 || !std::binary_search(allowed.begin(), allowed.end(), static_cast<int>(d))) {
      // Print huge values as written, never through an out-of-range cast.
      char shown[32];
      std::snprintf(shown, sizeof shown, "%.17g", d);
      return Error(v, path,
                   std::string("width ") + shown + " is not stored (stored: " + WidthsString(allowed) + ")");
    }
    return static_cast<std::uint8_t>(d);
  }

  // A list of `n` widths, or one width expanded to n.
  Status WidthRow(const JsonValue& v, const std::string& path, std::uint32_t n,
                  const std::vector<int>& allowed, std::uint8_t* out) const {
    if (v.is_number()) {
      EXLR8_ASSIGN_OR_RETURN(std::uint8_t w, Width(v, path, allowed));
      std::fill(out, out + n, w);
      return Status::Ok();
    }
    if (!v.is_array())
      return Error(v, path, "expected a list of " + std::to_string(n) + " widths or one width");
    if (v.as_array().size() != n)
      return Error(v, path,
                   "has " + std::to_string(v.as_array().size()) + " entries, expected " + std::to_string(n));
    for (std::uint32_t i = 0; i < n; ++i) {
      EXLR8_ASSIGN_OR_RETURN(out[i], Width(v.as_array()[i], path + "[" + std::to_string(i) + "]", allowed));
    }
    return Status::Ok();
  }

  // A down width: one width, or a list of n equal widths.
  Result<std::uint8_t> DownWidth(const JsonValue& v, const std::string& path, std::uint32_t n,
                                 const std::vector<int>& allowed) const {
    if (v.is_number()) return Width(v, path, allowed);
    std::vector<std::uint8_t> row(n);
    EXLR8_RETURN_IF_ERROR(WidthRow(v, path, n, allowed, row.data()));
    for (std::uint32_t i = 1; i < n; ++i)
      if (row[i] != row[0])
        return Error(v, path, "down widths must be uniform per expert (LDLQ feedback crosses halves)");
    return row[0];
  }

  Result<const JsonValue*> Member(const JsonValue& obj, const std::string& path, std::string_view key) const {
    const JsonValue* m = obj.Find(key);
    if (!m) return Error(obj, path, "missing \"" + std::string(key) + "\"");
    return m;
  }

 private:
  std::string name_;
};

}  // namespace

LayerGeometry LayerGeometry::Of(const ExpertIndex& index) {
  return {index.experts(), index.halves_per_expert(), index.widths(), index.shared_widths()};
}

int LayerWidths::Width(int expert, Proj p, std::uint32_t h) const {
  if (expert == kSharedExpert) {
    switch (p) {
      case Proj::kGate:
        return shared_gate[h];
      case Proj::kUp:
        return shared_up[h];
      case Proj::kDown:
        return shared_down;
    }
  }
  const auto e = static_cast<std::size_t>(expert);
  switch (p) {
    case Proj::kGate:
      return gate[e * halves + h];
    case Proj::kUp:
      return up[e * halves + h];
    case Proj::kDown:
      return down[e];
  }
  return 0;
}

double Manifest::BitsPerWeight() const {
  double sum = 0, count = 0;
  for (const auto& [layer, lw] : layers_) {
    for (auto w : lw.gate) sum += w;
    for (auto w : lw.up) sum += w;
    for (auto w : lw.down) sum += static_cast<double>(w) * lw.halves;
    count +=
        static_cast<double>(lw.gate.size() + lw.up.size()) + static_cast<double>(lw.down.size()) * lw.halves;
  }
  return count > 0 ? sum / count : 0;
}

Result<Manifest> ParseManifest(std::string_view json, std::string_view name,
                               const std::map<int, LayerGeometry>& geometry) {
  Manifest m;
  m.name_ = std::string(name);
  ManifestReader r(name);
  // A DOM costs ~64 bytes per value: the default cap (50M values, ~3 GB)
  // would let a 100 MB manifest of junk take 5 GB. What
  // the geometry can use, twice over, plus room for small unknown keys.
  std::size_t needed = 16;
  for (const auto& [layer, geo] : geometry)
    needed += 3 * (static_cast<std::size_t>(geo.experts) + 1) * (static_cast<std::size_t>(geo.halves) + 1) + 16;
  JsonLimits limits;
  limits.max_elements = std::min<std::size_t>(limits.max_elements, 2 * needed + 4096);
  auto parsed = ParseJson(json, limits);
  if (!parsed.ok()) return parsed.status().WithContext("manifest " + std::string(name));
  const JsonValue& root = *parsed;
  if (!root.is_object()) return r.Error(root, "top level", "expected an object");
  EXLR8_ASSIGN_OR_RETURN(const JsonValue* layers, r.Member(root, "top level", "layers"));
  if (!layers->is_object()) return r.Error(*layers, "layers", "expected an object");

  for (const auto& [key, lv] : layers->as_object()) {
    const std::string path = "layers." + EscapeForMessage(key);
    int layer = -1;
    auto [p, ec] = std::from_chars(key.data(), key.data() + key.size(), layer);
    if (key.empty() || ec != std::errc() || p != key.data() + key.size() || layer < 0 ||
        (key.size() > 1 && key[0] == '0'))
      return r.Error(lv, path, "key is not a decimal layer number");
    auto g = geometry.find(layer);
    if (g == geometry.end()) return r.Error(lv, path, "layer " + EscapeForMessage(key) + " has no expert index file");
    const LayerGeometry& geo = g->second;
    if (!lv.is_object()) return r.Error(lv, path, "expected an object");

    LayerWidths lw;
    lw.experts = geo.experts;
    lw.halves = geo.halves;
    lw.gate.resize(static_cast<std::size_t>(geo.experts) * geo.halves);
    lw.up.resize(lw.gate.size());
    lw.down.resize(geo.experts);
    for (auto [pname, out] : {std::pair<std::string_view, std::uint8_t*>{"gate", lw.gate.data()},
                              std::pair<std::string_view, std::uint8_t*>{"up", lw.up.data()}}) {
      const std::string ppath = path + "." + std::string(pname);
      EXLR8_ASSIGN_OR_RETURN(const JsonValue* arr, r.Member(lv, path, pname));
      if (!arr->is_array())
        return r.Error(*arr, ppath, "expected a list of " + std::to_string(geo.experts) + " experts");
      if (arr->as_array().size() != geo.experts)
        return r.Error(*arr, ppath,
                       "has " + std::to_string(arr->as_array().size()) + " experts, expected " +
                           std::to_string(geo.experts));
      for (std::uint32_t e = 0; e < geo.experts; ++e)
        EXLR8_RETURN_IF_ERROR(r.WidthRow(arr->as_array()[e], ppath + "[" + std::to_string(e) + "]",
                                         geo.halves, geo.widths,
                                         out + static_cast<std::size_t>(e) * geo.halves));
    }
    {
      EXLR8_ASSIGN_OR_RETURN(const JsonValue* arr, r.Member(lv, path, "down"));
      if (!arr->is_array())
        return r.Error(*arr, path + ".down", "expected a list of " + std::to_string(geo.experts) + " widths");
      if (arr->as_array().size() != geo.experts)
        return r.Error(*arr, path + ".down",
                       "has " + std::to_string(arr->as_array().size()) + " experts, expected " +
                           std::to_string(geo.experts));
      for (std::uint32_t e = 0; e < geo.experts; ++e) {
        EXLR8_ASSIGN_OR_RETURN(
            lw.down[e], r.DownWidth(arr->as_array()[e], path + ".down[" + std::to_string(e) + "]", geo.halves,
                                    geo.widths));
      }
    }
    const JsonValue* shared = lv.Find("shared");
    if (geo.shared_widths.empty()) {
      if (shared) return r.Error(*shared, path + ".shared", "layer " + EscapeForMessage(key) + " has no shared expert");
    } else {
      if (!shared) return r.Error(lv, path, "missing \"shared\" (the layer has a shared expert)");
      if (!shared->is_object()) return r.Error(*shared, path + ".shared", "expected an object");
      lw.has_shared = true;
      lw.shared_gate.resize(geo.halves);
      lw.shared_up.resize(geo.halves);
      EXLR8_ASSIGN_OR_RETURN(const JsonValue* sg, r.Member(*shared, path + ".shared", "gate"));
      EXLR8_RETURN_IF_ERROR(
          r.WidthRow(*sg, path + ".shared.gate", geo.halves, geo.shared_widths, lw.shared_gate.data()));
      EXLR8_ASSIGN_OR_RETURN(const JsonValue* su, r.Member(*shared, path + ".shared", "up"));
      EXLR8_RETURN_IF_ERROR(
          r.WidthRow(*su, path + ".shared.up", geo.halves, geo.shared_widths, lw.shared_up.data()));
      EXLR8_ASSIGN_OR_RETURN(const JsonValue* sd, r.Member(*shared, path + ".shared", "down"));
      EXLR8_ASSIGN_OR_RETURN(lw.shared_down,
                             r.DownWidth(*sd, path + ".shared.down", geo.halves, geo.shared_widths));
    }
    m.layers_.emplace(layer, std::move(lw));
  }
  for (const auto& [layer, geo] : geometry)
    if (!m.layers_.contains(layer))
      m.warnings_.push_back("manifest " + std::string(name) + " has no entry for MoE layer " +
                            std::to_string(layer) + ": its experts will not be loaded");
  return m;
}

}  // namespace exlr8
