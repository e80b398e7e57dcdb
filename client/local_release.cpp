#include "client/local_release.h"

#include <algorithm>

#include "client/file_source.h"
#include "format/json.h"
#include "format/layout.h"
#include "format/manifest.h"
#include "format/planner_input.h"
#include "format/safetensors.h"

namespace exlr8 {

namespace fs = std::filesystem;

Result<LocalRelease> OpenLocalRelease(const fs::path& root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return NotFoundError(root.string() + ": not a directory");
  LocalRelease rel;
  rel.root = root;
  std::vector<ReleaseFile> files;

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
    files.push_back(std::move(f));
  }
  std::sort(files.begin(), files.end(),
            [](const ReleaseFile& a, const ReleaseFile& b) { return a.path < b.path; });

  // index files and width-file headers
  PlannerSources sources;
  const auto open = [&root](const ReleaseFile& f) -> Result<std::unique_ptr<ByteSource>> {
    EXLR8_ASSIGN_OR_RETURN(auto src, FileByteSource::Open(root / f.path, f.path));
    return std::unique_ptr<ByteSource>(std::move(src));
  };
  sources.open_index = open;
  sources.open_width = open;
  sources.check_width_spans = true;  // refused here too, not only by the checks that read the width files
  EXLR8_ASSIGN_OR_RETURN(PlannerInput input, AssemblePlannerInput(std::move(files), sources));
  rel.inputs = std::move(input.release);
  rel.geometry = std::move(input.geometry);
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
