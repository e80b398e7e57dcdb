#include "format/planner_input.h"

#include <algorithm>
#include <array>

#include "format/expert_index.h"
#include "format/layout.h"
#include "format/safetensors.h"

namespace exlr8 {

namespace {

// Two halves sharing bytes (spec 4.4) are refused for every K the index
// holds (each SpanOfWidth covers the routed and the shared halves of K).
Status CheckWidthSpans(const ExpertIndex& ix, const std::string& path) {
  std::vector<int> ks = ix.widths();
  ks.insert(ks.end(), ix.shared_widths().begin(), ix.shared_widths().end());
  std::sort(ks.begin(), ks.end());
  ks.erase(std::unique(ks.begin(), ks.end()), ks.end());
  for (int k : ks) {
    Status disjoint = ix.SpanOfWidth(k).status();
    if (!disjoint.ok()) return disjoint.WithContext(path);
  }
  return Status::Ok();
}

Result<std::uint64_t> WidthHeaderBytes(const ByteSource& src, const std::string& path) {
  std::array<std::byte, 8> first{};
  if (src.size() < 8) return CorruptionError(path + ": " + std::to_string(src.size()) + " bytes, too short");
  EXLR8_RETURN_IF_ERROR(src.ReadAt(0, first));
  return SafetensorsHeaderSize(first, src.size(), path);
}

}  // namespace

Result<PlannerInput> AssemblePlannerInput(std::vector<ReleaseFile> files, const PlannerSources& sources) {
  if (!sources.open_index) return InternalError("AssemblePlannerInput: no open_index");
  PlannerInput in;
  in.release.files = std::move(files);
  for (const ReleaseFile& f : in.release.files) {
    const ReleasePath rp = ClassifyReleasePath(f.path);
    if (rp.kind == ReleaseFileKind::kExpertIndex) {
      EXLR8_ASSIGN_OR_RETURN(std::unique_ptr<ByteSource> src, sources.open_index(f));
      EXLR8_ASSIGN_OR_RETURN(ExpertIndex ix, ExpertIndex::Read(*src, rp.layer));
      if (sources.check_width_spans) EXLR8_RETURN_IF_ERROR(CheckWidthSpans(ix, f.path));
      in.geometry[rp.layer] = LayerGeometry::Of(ix);
      in.release.indexes.emplace(rp.layer, std::move(ix));
      in.index_sources[f.path] = std::move(src);
    } else if (rp.kind == ReleaseFileKind::kExpertWidth && sources.open_width) {
      EXLR8_ASSIGN_OR_RETURN(std::unique_ptr<ByteSource> src, sources.open_width(f));
      EXLR8_ASSIGN_OR_RETURN(std::uint64_t header_bytes, WidthHeaderBytes(*src, f.path));
      in.release.width_header_bytes[f.path] = header_bytes;
    }
  }
  if (sources.manifest_text) {
    EXLR8_ASSIGN_OR_RETURN(std::string text, sources.manifest_text());
    EXLR8_ASSIGN_OR_RETURN(Manifest manifest, ParseManifest(text, sources.manifest_name, in.geometry));
    in.manifest = std::move(manifest);
  }
  return in;
}

}  // namespace exlr8
