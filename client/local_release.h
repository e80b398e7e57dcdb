// A release directory on local disk (a checkout, a synthesized release, or a
// cache directory), read into what the planner needs.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <string_view>

#include "format/manifest.h"
#include "format/plan.h"
#include "format/status.h"

namespace exlr8 {

struct LocalRelease {
  std::filesystem::path root;
  ReleaseInputs inputs;                    // files, parsed index files, width-file header lengths
  std::map<int, LayerGeometry> geometry;  // per MoE layer
};

// Lists every regular file under `root` (skipping dot-directories such as
// .git and .cache), parses every expert index file and reads the header
// length of every width file. NotFound if root does not exist; Corruption
// (naming the file) for a malformed index or width-file header.
Result<LocalRelease> OpenLocalRelease(const std::filesystem::path& root);

// Loads a manifest by name ("home" -> manifests/exlr8-manifest-home.json
// under the root) or by path, and validates it against the release.
Result<Manifest> LoadManifest(const LocalRelease& release, std::string_view name_or_path);

}  // namespace exlr8
