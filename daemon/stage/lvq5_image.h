// The image of a pulled LVQ5 fileset (exlr8d-stage --repo ORG/NAME without
// --manifest): every tensor a serving process reads, in the lease v2 image
// layout (client/lease/image_layout.h) an EXLR8 rank uses, so the same
// client library and Python package open both (docs/LVQ5.md "Staging").
//
// Regions, all plain tensors of the dense section, named after the record
// (format/lvq5/index.h) with a suffix per part, tagged with ImagePlainFormat:
//   Tetra record N     N (U8 [d_out, ServedRowStride(nblocks)]: the codes
//                      transcoded to the served layout of spec 2.7, rows
//                      padded to 8 bytes; absent when nblocks is 0),
//                      N.centroids (F64 [n_centroids]), N.row_scales (F64
//                      [d_out]), N.tail (F32 [d_out, tail_cols]; absent when
//                      tail_cols is 0): TETRA48, out = d_out, inp = d_in
//   Int4G128 record N  N (U8 [packed bytes]), N.scales, N.biases (F16
//                      [groups]): INT4G128, out = d_out, inp = d_in
//   raw f16 tensor N   N (F16, the tensor's dims, rank <= 4): F16
//   raw quant tensor N N (U8 [packed bytes]), N.scales, N.biases (F16
//                      [groups]): QUANT, k = bits, inp = group
// Blobs (tokenizer, config) stay on the host: they are not in the image.
// Every region has one check entry over its bytes as staged: the XXH64 of
// the transcoded codes for Tetra codes (computed here on the CPU from the
// verified file), of the file's bytes for the rest.
//
// Before anything is planned, every LVQ5 file of the fileset must be
// verified whole in the cache (its SHA-256 checked by the pull) and each
// record's bytes must still hash to the cache's record index (XXH64): a
// file changed on disk since is refused (Corruption, naming the file and
// the record) before any byte is staged. Offsets come from lvq5::ReadIndex
// over the verified file, cross-checked against the record index.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "client/lease/image_layout.h"
#include "daemon/cache/process_pin.h"
#include "daemon/stage/host_image.h"
#include "daemon/stage/mapped_file.h"
#include "daemon/stage/rank_reader.h"
#include "format/status.h"

namespace exlr8 {

// The lease v2 description's "manifest" of an LVQ5 fileset's image (the
// field is required; an LVQ5 fileset has no EXLR8 manifest): tp 1, rank 0.
inline constexpr char kLvq5LeaseManifest[] = "lvq5-whole-fileset";

// Where region i's bytes come from: `length` bytes of maps[map] at
// `offset`; with tetra_nblocks > 0 they are disk code rows of that many
// blocks, transcoded (tetra::DiskToServed) into the region.
struct Lvq5RegionSource {
  std::size_t map = 0;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  std::uint64_t tetra_nblocks = 0;
};

struct Lvq5ImagePlan {
  std::string commit;
  ImageLayout layout;  // tables.tensors[i] is filled from sources[i]; check i covers region i
  std::vector<Lvq5RegionSource> sources;
  std::vector<std::unique_ptr<MappedFile>> maps;  // read-only
  std::vector<std::string> map_files;             // repo path of maps[i]
  std::uint64_t region_bytes = 0;
  std::uint64_t records = 0;  // matrix records and raw tensors staged
  std::uint64_t tetra_records = 0;
  std::uint64_t blobs = 0;  // left on the host
  std::uint64_t blob_bytes = 0;
  std::unique_ptr<ProcessPin> pin;  // as RankHalves::pin
  std::string pin_error;
};

// The plan of request.repo@request.revision (request.manifest empty; tp 1,
// rank 0). Errors: NotFound when the fileset was never pulled, has no LVQ5
// file, or an LVQ5 file is not verified whole ("run exlr8d pull");
// Corruption for a file whose size, record XXH64 or structure no longer
// matches the cache's record index (naming the file and record);
// InvalidArgument for what the image tables cannot hold (a name twice
// across files, a raw tensor of rank > 4, naming it); Cancelled.
Result<Lvq5ImagePlan> PlanLvq5Image(const RankRequest& request);

// The sealed host image (memory kind host) of the plan: as
// BuildHostRankImage (host_image.h), the Tetra codes transcoded while the
// memfd is filled, then every check hashed on the CPU. Same errors as
// PlanLvq5Image, plus Corruption naming the region when a check fails.
// With `keep` set, the plan's maps, sources and file names are moved into
// *keep (and its layout copied) for a later check against the file (the
// device kind's decode check); its pin stays with the image.
Result<HostRankImage> BuildHostLvq5Image(const RankRequest& request, Lvq5ImagePlan* keep = nullptr);

}  // namespace exlr8
