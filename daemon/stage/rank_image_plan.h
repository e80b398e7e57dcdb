// PlanRankImage: the layout of a TP rank's whole image (client/lease/
// image_layout.h, docs/design/RANK_IMAGE.md) made from the cache, with
// where each region's bytes come from.
//
// The plan is made again from the cache as ReadRankHalves does
// (OpenRankInCache): the manifest and the index files are hashed whole
// against the release's listing first. The image holds everything the
// rank's forward pass reads:
//   - each half the rank owns (routed, and every shared-expert half) at the
//     manifest's width, as a half record: trellis bytes (width file) ‖
//     128-element vector slice ‖ block row (index file), the bytes spec 5.3
//     hashes, with the release's k{K}.checksum as its check;
//   - each MoE layer's signs.in and signs.out (index file);
//   - every matrix of every dense and vocabulary file, its data tensors as
//     stored, with one check per spec 5.4 block (1..4 segments), and every
//     other tensor of those files but the `__pad.` ones (norms, biases) as a
//     plain tensor. Dense sharding is open (spec U-8): a rank holds them all.
//     Names are per file in the release, so a dense layer file's tensor `n`
//     is "layers.{L}.n" in the image; the vocabulary file's keep theirs.
// Signs and plain tensors have no digest of their own in the release: their
// check is the XXH64 of the cache's bytes, taken here from files the cache
// records as verified whole (their files' hashes were checked by the pull;
// the index files' again just now). RankImagePlan counts them, so the proof
// never calls them checked against the release.
//
// Every byte a region comes from must lie in its file's verified extents
// (a hole is an error, never a zero); the files stay mapped read-only
// (mapped_file.h) for the copy.
//
// No CUDA, no writes: a read-only view of the cache will do.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "client/lease/image_layout.h"
#include "daemon/cache/process_pin.h"
#include "daemon/stage/mapped_file.h"
#include "daemon/stage/rank_reader.h"
#include "format/status.h"

namespace exlr8 {

// `length` bytes of maps[map] at `offset`.
struct ImageSourcePiece {
  std::size_t map = 0;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
};

// Where a region's bytes come from: its pieces, concatenated in order, are
// the region (their lengths add up to the region's length).
struct ImageRegionSource {
  std::vector<ImageSourcePiece> pieces;
  // True for a region whose digest was computed here from the cache's
  // verified bytes (signs, plain tensors): the release has none for it.
  bool digest_from_cache = false;
};

struct RankImagePlan {
  std::string commit;
  ImageLayout layout;  // tables.tensors[i] is the region sources[i] fills
  std::vector<ImageRegionSource> sources;
  std::vector<std::unique_ptr<MappedFile>> maps;  // read-only
  std::vector<std::string> map_files;             // repo path of maps[i]
  // The region holding each check's first segment (tables.checks order).
  std::vector<std::uint32_t> check_region;
  std::uint64_t region_bytes = 0;  // the regions' lengths, summed
  // Regions (and their bytes) whose check digest came from the cache's
  // bytes rather than the release (signs, plain tensors).
  std::uint64_t regions_without_release_digest = 0;
  std::uint64_t bytes_without_release_digest = 0;
  std::unique_ptr<ProcessPin> pin;  // as RankHalves::pin
  std::string pin_error;

  // "experts/exlr8-layer-003.k2.safetensors at byte 8192": the file and
  // offset byte `offset` of region `tensor` comes from.
  std::string SourceOf(std::uint32_t tensor, std::uint64_t offset) const;
};

// Errors as ReadRankHalves's: NotFound naming what is not verified in the
// cache (a half, an index, dense or vocabulary file: "... run exlr8d pull");
// Corruption for a file whose size or hash changed, a dense file the format
// refuses (format/dense.h), or a dense block checksum run outside the
// matrix's data tensors; InvalidArgument for a bad request or what the
// layout cannot hold (naming the region); Cancelled once request.cancel is
// set. request.before_reading, progress and threads are not used here.
Result<RankImagePlan> PlanRankImage(const RankRequest& request);

}  // namespace exlr8
