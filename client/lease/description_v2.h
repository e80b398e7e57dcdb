// The lease description, version 2: what a lease holder tells each lessee
// about the rank image it holds (client/lease/image_layout.h), as one small
// JSON object; the per-tensor data travels in the binary tables. The
// format is schema/lease/description-v2.schema.json and docs in
// schema/lease/IMAGE.md; its shape:
//
//   {"version":2,"repo":R,"commit":C,"manifest":M,"tp":4,"rank":1,
//    "memory":{"kind":"device"|"host",
//              "device":{"uuid":"GPU-…","pci_bus_id":"0000:4E:00.0","ordinal_in_holder":0},
//              "allocations":[{"bytes":N,"handle":"fd"|"ipc:<128 hex digits>"}]},
//    "image":{"allocation":0,"header_offset":0,"bytes":N,"offset_table":O,
//             "offset_table_bytes":B,"layers":75,"experts":256,"halves":16},
//    "tables":{"bytes":T,"tensors":n,"checks":m,"strings":s},
//    "proof":{"commit":C,"hashed":{"regions":R,"bytes":B,"mismatches":0},
//             "decoded":{"halves":H,"of":N,"seed":S,"every_layer_width_projection":true,
//                        "tiles_bit_exact":true,"max_block_error":3.1e-7},
//             "dense_decoded":{"tensors":D,"mismatches":0},
//             "seconds":{"read":..,"upload":..,"hash":..,"decode":..},
//             "mismatch":null|{"tensor":i,"offset":O,"layer":L|null,"expert":E|null,
//                              "proj":"up"|null,"half":H|null,"name":S|null}},
//    "release_deadline_s":30}
//
// File descriptors travel with the description (SCM_RIGHTS), in this
// order: one per allocation whose handle is "fd", then the tables' sealed
// memfd. "device" is required for memory kind device and optional for host
// (a host image need not belong to a GPU).
//
// The parser is strict, as a lessee maps memory by what it reads: every
// field present with its type and range, unknown fields and duplicate keys
// refused, and across fields:
//   tp in [1, 2^31), rank < tp; repo, commit, manifest 1..4096 bytes;
//   kind host: every handle "fd"; kind device: "fd" or "ipc:" + 128 hex;
//   1..8 allocations, each of 1..2^62 bytes;
//   uuid "GPU-" or "MIG-" + 8-4-4-4-12 hex digits; pci_bus_id
//   DDDD[DDDD]:BB:DD.F in hex, F 0..7;
//   image.allocation names an allocation; header_offset a multiple of 256;
//   the image (header_offset + bytes) inside that allocation; bytes a
//   multiple of 256 of at least 4096; the offset table 256-aligned, inside
//   the image, after its header, of layers × (experts+1) × 3 × halves × 8
//   bytes; dims within image_layout.h's caps;
//   tables.bytes = the size those counts and the offset table make
//   (image_layout.h's file layout), counts within its caps;
//   proof.commit = commit; decoded.halves <= decoded.of; mismatches <=
//   regions; seconds finite and >= 0; max_block_error finite and >= 0;
//   mismatch null exactly when nothing mismatched (hashed and dense
//   mismatches 0 and tiles bit exact), its tensor < tables.tensors;
//   release_deadline_s in [1, 3600].
// JSON nesting and sizes are bounded before anything is built.
//
// Pure: text in, a value or an error out; safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "client/lease/image_layout.h"
#include "format/status.h"

namespace exlr8 {

// The longest description a lessee reads (a real one is about 1 KB).
inline constexpr std::size_t kMaxLeaseDescriptionV2Bytes = std::size_t{1} << 16;
inline constexpr std::size_t kMaxLeaseAllocations = 8;
inline constexpr std::uint64_t kMaxLeaseAllocationBytes = std::uint64_t{1} << 62;
inline constexpr std::uint32_t kMaxLeaseReleaseDeadlineS = 3600;

enum class LeaseMemoryKind : std::uint8_t { kDevice, kHost };
std::string_view LeaseMemoryKindName(LeaseMemoryKind k);  // "device", "host"

// The GPU that holds (device) or registered (host) the memory, named so
// that a lessee with another CUDA_VISIBLE_DEVICES finds it.
struct LeaseGpu {
  std::string uuid;        // "GPU-8-4-4-4-12" (nvidia-smi's form) or "MIG-…"
  std::string pci_bus_id;  // "0000:4E:00.0"
  int ordinal_in_holder = 0;
};

struct LeaseAllocation {
  std::uint64_t bytes = 0;
  std::string handle;  // "fd" (the next descriptor on the socket) or "ipc:<128 hex>"
  bool is_fd() const { return handle == "fd"; }
};

// Where the image sits in its allocation; offsets in `offset_table` are
// from the image's base (= the allocation's base + header_offset).
struct LeaseImageRef {
  std::uint32_t allocation = 0;
  std::uint64_t header_offset = 0;
  std::uint64_t bytes = 0;  // the header's allocation_bytes
  std::uint64_t offset_table = 0;
  std::uint64_t offset_table_bytes = 0;
  std::uint32_t layers = 0, experts = 0, halves = 0;
};

struct LeaseTablesRef {
  std::uint64_t bytes = 0;    // the tables memfd's size
  std::uint64_t tensors = 0;  // entries
  std::uint64_t checks = 0;
  std::uint64_t strings = 0;  // string pool bytes
};

// Where a check found a difference.
struct LeaseMismatch {
  std::uint64_t tensor = 0;  // index in the tensor table
  std::uint64_t offset = 0;  // byte offset in the image of the first differing byte or block
  std::optional<std::uint32_t> layer;
  std::optional<int> expert;  // kSharedExpert (-1) for the shared one
  std::optional<Proj> proj;
  std::optional<std::uint32_t> half;
  std::optional<std::string> name;  // dense and plain tensors
};

// What the holder checked in place, on the memory the lessee maps, before
// it leased the image (docs/design/RANK_IMAGE.md, "The proof of contents").
struct LeaseProof {
  std::string commit;  // the release commit checked: equal to the description's
  std::uint64_t hashed_regions = 0, hashed_bytes = 0, hashed_mismatches = 0;
  std::uint64_t decoded_halves = 0, decoded_of = 0, decoded_seed = 0;
  bool every_layer_width_projection = false;
  bool tiles_bit_exact = false;
  // The largest max|a-b| / max|b| over the 128 x 128 blocks reconstructed
  // on the GPU (decoded halves, dense TRELLIS matrices) against the CPU
  // reference; spec 9.3 allows 1e-5. 0 when nothing was reconstructed.
  double max_block_error = 0;
  // Dense matrices decoded on the GPU and compared with the CPU decoders.
  std::uint64_t dense_decoded_tensors = 0, dense_decoded_mismatches = 0;
  double seconds_read = 0, seconds_upload = 0, seconds_hash = 0, seconds_decode = 0;
  std::optional<LeaseMismatch> mismatch;
};

struct LeaseDescriptionV2 {
  std::string repo, commit, manifest;
  int tp = 1, rank = 0;
  LeaseMemoryKind memory_kind = LeaseMemoryKind::kDevice;
  std::optional<LeaseGpu> device;
  std::vector<LeaseAllocation> allocations;
  LeaseImageRef image;
  LeaseTablesRef tables;
  LeaseProof proof;
  std::uint32_t release_deadline_s = 30;
};

// The size of a tables file with these counts and offset table
// (image_layout.h's layout), or nullopt on overflow.
std::optional<std::uint64_t> ImageTablesFileBytes(std::uint64_t tensors, std::uint64_t checks,
                                                  std::uint64_t strings, std::uint64_t offset_table_bytes);

// The description as the holder sends it (the shape above, in that order).
// Writes what it is given: give one the parser accepts.
std::string WriteLeaseDescriptionV2(const LeaseDescriptionV2& d);

// The description's "proof" object alone, as WriteLeaseDescriptionV2 writes
// it inside the description (a lessee logs it).
std::string WriteLeaseProof(const LeaseProof& p);

// Parses under the rules above. Corruption for one that breaks any; the
// message starts with "lease description" (" from SOURCE" when `source` is
// not empty) and names the field by its path and the byte offset of its
// value ("lease description: 'memory.allocations[1].handle' at byte 210:
// ..."). A text whose "version" is not 2 is refused naming the version.
Result<LeaseDescriptionV2> ParseLeaseDescriptionV2(std::string_view text, std::string_view source = {});

// Whether the image's parsed header and tables are the ones the description
// names: dimensions, image and offset table placement, and the tables'
// counts. Corruption naming the first difference.
Status CheckLeaseImage(const LeaseDescriptionV2& d, const ImageHeader& header, const ImageTables& tables);

}  // namespace exlr8
