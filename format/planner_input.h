// The planner's input for a release: its files, its parsed expert index
// files (with the layer geometry a manifest is checked against), the
// width files' header lengths where known, and the manifest. Assembled the
// same way wherever a rank is planned: a pull (from the hub's listing and
// the index files it fetched), the cache (from verified bytes,
// daemon/cache/cached_rank.h) and a release directory on disk
// (client/local_release.h).
//
// Pure: AssemblePlannerInput does no I/O of its own. The caller's callbacks
// hand it the bytes (a ByteSource per file, the manifest's text); it
// parses and checks them. Errors are the callbacks' own, or Corruption /
// InvalidArgument from the parsers, naming the file.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "format/byte_source.h"
#include "format/manifest.h"
#include "format/plan.h"
#include "format/status.h"

namespace exlr8 {

struct PlannerSources {
  // The bytes of an expert index file of the release (I/O is the caller's:
  // the cache, a local file). Required.
  std::function<Result<std::unique_ptr<ByteSource>>(const ReleaseFile& file)> open_index;
  // The bytes of a width file, whose first 8 bytes give its header length
  // (ReleaseInputs::width_header_bytes). Unset: the lengths are left to the
  // caller (a pull fetches the headers later; PlanOptions::defer_headers).
  std::function<Result<std::unique_ptr<ByteSource>>(const ReleaseFile& file)> open_width;
  // The manifest's JSON text, asked for once every index file is read.
  // Unset: no manifest is parsed (PlannerInput::manifest stays empty).
  std::function<Result<std::string>()> manifest_text;
  // The manifest's name in ParseManifest's errors.
  std::string manifest_name;
  // Also refuse an index file two of whose halves share bytes (spec 4.4),
  // checked for every width K it indexes (ExpertIndex::SpanOfWidth).
  bool check_width_spans = false;
};

struct PlannerInput {
  ReleaseInputs release;                  // files, parsed index files, header lengths
  std::map<int, LayerGeometry> geometry;  // per MoE layer, from the index files
  // The sources open_index returned, by path: the halves' checksum tails
  // are read from them after planning.
  std::map<std::string, std::unique_ptr<ByteSource>> index_sources;
  std::optional<Manifest> manifest;  // when PlannerSources::manifest_text is set
};

// Lists `files` as the planner's input and, in their order, reads each
// expert index file (and each width file's header length, with
// open_width); then parses the manifest against the index files' geometry.
Result<PlannerInput> AssemblePlannerInput(std::vector<ReleaseFile> files, const PlannerSources& sources);

}  // namespace exlr8
