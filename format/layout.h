// File names of an EXLR8 v2 release (spec section 2), built and parsed in
// one place.
//
//   experts/exlr8-layer-LLL.index.safetensors   per MoE layer
//   experts/exlr8-layer-LLL.kK.safetensors      per MoE layer and width K
//   dense/exlr8-dense-LLL.safetensors           per layer
//   dense/exlr8-vocab.safetensors
//   manifests/exlr8-manifest-NAME.json
//
// LLL is the decimal layer number zero-padded to at least three digits; K is
// one decimal digit.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace exlr8 {

std::string ExpertIndexPath(int layer);
std::string ExpertWidthPath(int layer, int k);
std::string DensePath(int layer);
std::string VocabPath();
std::string ManifestPath(std::string_view name);

enum class ReleaseFileKind { kExpertIndex, kExpertWidth, kDense, kVocab, kManifest, kConfig, kOther };

struct ReleasePath {
  ReleaseFileKind kind = ReleaseFileKind::kOther;
  int layer = -1;          // index, width and dense files
  int k = 0;               // width files
  std::string manifest;    // manifest name
};

// Recognises the names above (exactly; "experts/exlr8-layer-3.k2.safetensors"
// with fewer than three digits is kOther). Never fails.
ReleasePath ClassifyReleasePath(std::string_view path);

// Whether a manifest argument names a manifest ("home") rather than a path
// ("./m.json", "manifests/x.json"): names have no '/' and no ".json" suffix.
bool IsManifestName(std::string_view arg);

}  // namespace exlr8
