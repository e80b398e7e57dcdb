// The planner: which files and byte ranges TP rank r of N needs under a
// manifest (spec section 13).
//
// Sharding rule (spec 13.1): half h of routed expert e in MoE layer L lives
// on rank (H*e + h + L) mod N, with H halves per expert (16 in GLM-5.3), for
// any N >= 1. Gate, up and down half h of an expert share a rank.
//
// Shared-expert policy (the format notes give no rule, U-11): replicated —
// every rank fetches all of the shared expert's halves at the manifest's
// widths. A kernel that shards it can still find its halves in the cache.
//
// What a plan holds, per file of the release:
//  - whole files: manifests, expert index files, dense and vocab files,
//    config.json and every other non-width file (dense sharding is an open
//    question, U-8, so dense files are fetched whole);
//  - width files the rank reads at least one half from: the safetensors
//    header range [0, 8 + N) (verified by parsing it and checking that every
//    indexed half lies inside the data section) and exactly the rank's halves,
//    each a range tagged with what it is ("L40 e7 gate h3 K3") and its XXH64,
//    which covers the range's bytes followed by the index-file runs in
//    `checksum_tail` (spec 5.3);
//  - width files the rank does not read are left out.
// `requests` are the byte ranges to ask a server for: the file's ranges
// sorted and merged when the gap between them is <= coalesce_gap (default 0:
// only exactly adjacent ranges merge).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "format/expert_index.h"
#include "format/manifest.h"
#include "format/status.h"

namespace exlr8 {

// One file of a release as listed locally or by a hub.
struct ReleaseFile {
  std::string path;
  std::uint64_t size = 0;
  std::optional<std::string> sha256;  // LFS sha256 (hex), when the hub gives one
  std::optional<std::string> git_sha1;  // git blob id of small files
};

// Everything the planner reads. Index files are parsed; width files are
// known by their size and header length (8 + N).
struct ReleaseInputs {
  std::vector<ReleaseFile> files;
  std::map<int, ExpertIndex> indexes;                    // by layer
  std::map<std::string, std::uint64_t> width_header_bytes;  // width file path -> 8 + N
};

struct PlanOptions {
  int tp = 1;    // N >= 1
  int rank = 0;  // 0 <= rank < N
  std::uint64_t coalesce_gap = 0;
  // Plan the halves before the width files' headers are known
  // (width_header_bytes is not read): each width file gets its halves only,
  // and the plan is `headers_pending` until AddWidthHeaders completes it.
  // Halves are located by the index file alone (absolute offsets, spec 3.5),
  // so a puller can fetch them while the headers are still on their way.
  bool defer_headers = false;
};

// What a range holds.
struct HalfTag {
  int layer = 0;
  int expert = 0;  // kSharedExpert for the shared expert
  Proj proj = Proj::kGate;
  std::uint32_t half = 0;
  int k = 0;
  std::string What() const;  // "L40 e7 gate h3 K3", "L40 shared up h3 K4"
};

struct PlanRange {
  enum class Kind : std::uint8_t { kHalf, kHeader };
  Kind kind = Kind::kHalf;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  HalfTag tag;                        // kHalf only
  std::uint64_t xxh64 = 0;            // kHalf only
  std::array<ByteRun, 2> checksum_tail{};  // kHalf only: runs of the index file
  std::string What() const;           // tag.What() or "header"
};

struct PlanFile {
  std::string path;
  std::uint64_t size = 0;
  bool whole = false;
  std::optional<std::string> sha256;
  std::optional<std::string> git_sha1;
  std::string index_path;            // width files: the index file their checksum tails come from
  std::vector<PlanRange> ranges;     // sorted by offset; empty for whole files
  std::vector<ByteRun> requests;     // coalesced ranges (whole files: one run of the file)
  std::uint64_t bytes() const;       // bytes this file contributes to the plan
};

// A file fetched whole: one request for all its bytes (none when empty),
// verified by `sha256` (LFS) or `git_sha1`.
PlanFile WholePlanFile(std::string path, std::uint64_t size, std::optional<std::string> sha256,
                       std::optional<std::string> git_sha1);

struct PlanTotals {
  std::uint64_t bytes = 0;            // everything the rank fetches (its requests' bytes)
  // What the rank keeps: whole files, headers and halves; less than `bytes`
  // by the other ranks' bytes a coalescing gap (PlanOptions) spans.
  std::uint64_t needed_bytes = 0;
  std::uint64_t whole_file_bytes = 0;
  std::uint64_t header_bytes = 0;
  std::uint64_t half_bytes = 0;       // routed + shared halves
  std::uint64_t routed_halves = 0;
  std::uint64_t shared_halves = 0;
  std::uint64_t requests = 0;
  std::uint64_t release_bytes = 0;    // size of every file of the release
  double rank_bits_per_weight = 0;    // mean K over the rank's routed halves
  double manifest_bits_per_weight = 0;  // mean K over all routed halves
};

struct Plan {
  int tp = 1;
  int rank = 0;
  std::uint64_t coalesce_gap = 0;
  std::string manifest;
  // Made with defer_headers and not yet completed by AddWidthHeaders: the
  // width files' header ranges are missing from files, requests and totals.
  bool headers_pending = false;
  std::vector<PlanFile> files;  // sorted by path
  PlanTotals totals;
  std::vector<std::string> warnings;
};

// Rank of half h of routed expert e in layer L at TP degree n.
// REQUIRES: n >= 1, layer >= 0.
inline int RankOfHalf(std::uint32_t halves_per_expert, std::uint32_t e, std::uint32_t h, int layer, int n) {
  return static_cast<int>((static_cast<std::uint64_t>(halves_per_expert) * e + h + static_cast<std::uint64_t>(layer)) %
                          static_cast<std::uint64_t>(n));
}

// Builds the plan. InvalidArgument for a bad tp/rank; Corruption when the
// inputs disagree (a width file the manifest needs is missing from `files`,
// its header length unknown, halves outside it).
Result<Plan> MakePlan(const ReleaseInputs& inputs, const Manifest& manifest, const PlanOptions& options);

// Completes a plan made with defer_headers: adds each width file's header
// range [0, 8 + N) from `width_header_bytes` (path -> 8 + N), checks that
// every half lies in the data section, and rebuilds the requests and
// totals. Corruption when a header length is missing, exceeds the file, or
// overlaps a half. REQUIRES: plan.headers_pending.
Status AddWidthHeaders(Plan& plan, const std::map<std::string, std::uint64_t>& width_header_bytes);

// Merges sorted ranges whose gap is <= gap. Exposed for tests.
std::vector<ByteRun> CoalesceRuns(std::vector<ByteRun> runs, std::uint64_t gap);

}  // namespace exlr8
