#include "format/layout.h"

#include <charconv>
#include <cstdio>

namespace exlr8 {

namespace {
std::string Layer3(int layer) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%03d", layer);
  return buf;
}

// Parses a layer number written with at least three digits, the whole view.
std::optional<int> ParseLayer(std::string_view s) {
  if (s.size() < 3 || s.size() > 6) return std::nullopt;
  for (char c : s)
    if (c < '0' || c > '9') return std::nullopt;
  if (s.size() > 3 && s[0] == '0') return std::nullopt;  // "0003" is not how a writer pads
  int v = 0;
  std::from_chars(s.data(), s.data() + s.size(), v);
  return v;
}
}  // namespace

std::string ExpertIndexPath(int layer) { return "experts/exlr8-layer-" + Layer3(layer) + ".index.safetensors"; }
std::string ExpertWidthPath(int layer, int k) {
  return "experts/exlr8-layer-" + Layer3(layer) + ".k" + std::to_string(k) + ".safetensors";
}
std::string DensePath(int layer) { return "dense/exlr8-dense-" + Layer3(layer) + ".safetensors"; }
std::string VocabPath() { return "dense/exlr8-vocab.safetensors"; }
std::string ManifestPath(std::string_view name) { return "manifests/exlr8-manifest-" + std::string(name) + ".json"; }

bool IsManifestName(std::string_view arg) {
  return !arg.empty() && arg.find('/') == std::string_view::npos && !arg.ends_with(".json");
}

ReleasePath ClassifyReleasePath(std::string_view path) {
  ReleasePath r;
  constexpr std::string_view kExperts = "experts/exlr8-layer-";
  constexpr std::string_view kDense = "dense/exlr8-dense-";
  constexpr std::string_view kManifest = "manifests/exlr8-manifest-";
  constexpr std::string_view kSt = ".safetensors";
  if (path == "config.json") {
    r.kind = ReleaseFileKind::kConfig;
  } else if (path == VocabPath()) {
    r.kind = ReleaseFileKind::kVocab;
  } else if (path.starts_with(kExperts) && path.ends_with(kSt)) {
    std::string_view rest = path.substr(kExperts.size(), path.size() - kExperts.size() - kSt.size());
    auto dot = rest.find('.');
    if (dot == std::string_view::npos) return r;
    auto layer = ParseLayer(rest.substr(0, dot));
    std::string_view tail = rest.substr(dot + 1);
    if (!layer) return r;
    if (tail == "index") {
      r.kind = ReleaseFileKind::kExpertIndex;
      r.layer = *layer;
    } else if (tail.size() == 2 && tail[0] == 'k' && tail[1] >= '1' && tail[1] <= '8') {
      r.kind = ReleaseFileKind::kExpertWidth;
      r.layer = *layer;
      r.k = tail[1] - '0';
    }
  } else if (path.starts_with(kDense) && path.ends_with(kSt)) {
    auto layer = ParseLayer(path.substr(kDense.size(), path.size() - kDense.size() - kSt.size()));
    if (layer) {
      r.kind = ReleaseFileKind::kDense;
      r.layer = *layer;
    }
  } else if (path.starts_with(kManifest) && path.ends_with(".json")) {
    std::string_view name = path.substr(kManifest.size(), path.size() - kManifest.size() - 5);
    if (!name.empty() && name.find('/') == std::string_view::npos) {
      r.kind = ReleaseFileKind::kManifest;
      r.manifest = std::string(name);
    }
  }
  return r;
}

}  // namespace exlr8
