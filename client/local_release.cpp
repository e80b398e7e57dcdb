#include "client/local_release.h"

#include <algorithm>

#include "client/file_source.h"
#include "format/json.h"
#include "format/layout.h"
#include "format/manifest.h"
#include "format/safetensors.h"

namespace exlr8 {

namespace fs = std::filesystem;

namespace {
}

Result<LocalRelease> OpenLocalRelease(const fs::path& root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return NotFoundError(root.string() + ": not a directory");
  LocalRelease rel;
  rel.root = root;

  // files
  fs::recursive_directory_iterator it(root, fs::directory_options::skip_permission_denied, ec);
  if (ec) return IOError(root.string() + ": " + ec.message());
  for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) return IOError(root.string() + ": " + ec.message());
    const fs::path& p = it->path();
    if (it->is_directory() && p.filename().string().starts_with(".")) {
      it.disable_recursion_pending();
      continue;
    }
    if (!it->is_regular_file()) continue;
    ReleaseFile f;
    f.path = fs::relative(p, root).generic_string();
    if (f.path.starts_with(".")) continue;
    // A hub's file names are UTF-8 (its listing is JSON); a name that is not
    // could not be fetched, nor written into a JSON plan.
    if (!IsValidUtf8(f.path))
      return InvalidArgumentError(root.string() + ": file name '" + EscapeForMessage(f.path, 200) +
                                  "' is not valid UTF-8 (no hub could serve it; rename or remove it)");
    f.size = it->file_size();
    rel.inputs.files.push_back(std::move(f));
  }
  std::sort(rel.inputs.files.begin(), rel.inputs.files.end(),
            [](const ReleaseFile& a, const ReleaseFile& b) { return a.path < b.path; });

  // index files and width-file headers
  for (const auto& f : rel.inputs.files) {
    const ReleasePath rp = ClassifyReleasePath(f.path);
    if (rp.kind == ReleaseFileKind::kExpertIndex) {
      EXLR8_ASSIGN_OR_RETURN(auto src, FileByteSource::Open(root / f.path, f.path));
      EXLR8_ASSIGN_OR_RETURN(ExpertIndex ix, ExpertIndex::Read(*src, rp.layer));
      // Two halves sharing bytes (spec 4.4) are refused here too, not only
      // by the checks that read the width files.
      std::vector<int> ks = ix.widths();
      ks.insert(ks.end(), ix.shared_widths().begin(), ix.shared_widths().end());
      std::sort(ks.begin(), ks.end());
      ks.erase(std::unique(ks.begin(), ks.end()), ks.end());
      for (int k : ks) {  // (each covers the routed and the shared halves of K)
        Status disjoint = ix.SpanOfWidth(k).status();
        if (!disjoint.ok()) return disjoint.WithContext(f.path);
      }
      rel.geometry[rp.layer] = LayerGeometry::Of(ix);
      rel.inputs.indexes.emplace(rp.layer, std::move(ix));
    } else if (rp.kind == ReleaseFileKind::kExpertWidth) {
      EXLR8_ASSIGN_OR_RETURN(auto src, FileByteSource::Open(root / f.path, f.path));
      std::array<std::byte, 8> first{};
      if (src->size() < 8) return CorruptionError(f.path + ": " + std::to_string(src->size()) + " bytes, too short");
      EXLR8_RETURN_IF_ERROR(src->ReadAt(0, first));
      EXLR8_ASSIGN_OR_RETURN(std::uint64_t hb, SafetensorsHeaderSize(first, src->size(), f.path));
      rel.inputs.width_header_bytes[f.path] = hb;
    }
  }
  return rel;
}

Result<Manifest> LoadManifest(const LocalRelease& rel, std::string_view name_or_path) {
  fs::path path = IsManifestName(name_or_path) ? rel.root / ManifestPath(name_or_path) : fs::path(name_or_path);
  auto text = ReadWholeFile(path, kMaxManifestBytes);
  if (!text.ok()) {
    if (text.status().code() == StatusCode::kNotFound && IsManifestName(name_or_path))
      return NotFoundError("manifest '" + std::string(name_or_path) + "' not found (" + path.string() + ")");
    return text.status();
  }
  return ParseManifest(*text, IsManifestName(name_or_path) ? std::string(name_or_path) : path.string(), rel.geometry);
}

}  // namespace exlr8
