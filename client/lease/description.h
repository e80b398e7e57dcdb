// The lease description: what a lease holder (exlr8d-stage --hold) tells
// each lessee about the rank it holds, as one JSON object:
//   {"version":1,"repo":..,"commit":..,"manifest":..,"tp":N,"rank":R,
//    "device":D,"bytes":B,"data_bytes":A,"halves_count":M,
//    "data_handle":HEX,"offsets_handle":HEX,
//    "halves":[{"layer":L,"expert":E,"proj":"gate","half":H,"k":K,
//               "hidden":X,"offset":O,"length":N}, ...]}
// data_handle is the CUDA IPC handle of the halves' allocation (A bytes:
// the halves, B bytes in all, each at its offset, with alignment padding
// between them), offsets_handle that of the pointer table (M uint64 byte
// offsets, entry i = halves[i].offset): a kernel addresses half i as
// base + table[i] (gpu/decode.cuh). An expert of -1 is the shared expert.
// Handles are 128 hex digits (gpu/ipc.h).
//
// The parser is strict, since a lessee addresses GPU memory by what it
// reads: every field must be present with its type and range,
//   tp in [1, 2^31), rank in [0, tp), device in [0, 2^31),
//   layer, k in [0, 2^31) and [1, 2^31), expert in [-1, 2^31),
//   half in [0, 2^32), hidden and length >= 1,
//   proj one of gate, up, down,
//   repo, commit, manifest non-empty, at most kMaxLeaseTextBytes,
// and, across fields: halves_count = the halves' number (at most
// kMaxLeaseHalves), bytes = the sum of their lengths, each half inside the
// allocation (offset + length <= data_bytes, no overflow; a description
// without data_bytes, from a holder that predates it, has its allocation
// end where its last half ends, as that holder allocated), no two halves
// overlapping or naming the same (layer, expert, proj, half). Unknown
// fields and duplicate keys are refused: a field added to the protocol
// comes with a new version. JSON nesting and sizes are
// bounded before anything is built (format/json.h limits), so hostile text
// costs at most a bounded multiple of its length.
//
// Pure: text in, a LeaseDescription or an error out; no I/O, no CUDA, safe
// to call from any thread. The socket side is lease_client.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "format/plan.h"
#include "format/status.h"

namespace exlr8 {

// The largest description a lessee reads (a rank of a 1M-half release is
// about 140 MB of text).
inline constexpr std::size_t kMaxLeaseDescriptionBytes = std::size_t{1} << 30;
// The most halves one description may hold (GLM-5.3's whole release at
// TP 1 is about a million).
inline constexpr std::size_t kMaxLeaseHalves = std::size_t{1} << 22;
// The longest repo, commit or manifest.
inline constexpr std::size_t kMaxLeaseTextBytes = 4096;
// An IPC handle's length in hex digits (64 bytes).
inline constexpr std::size_t kLeaseHandleHexDigits = 128;

struct LeasedHalf {
  HalfTag tag;
  std::uint64_t hidden = 0;
  std::uint64_t offset = 0;  // from the data allocation's base
  std::uint64_t length = 0;
};

struct LeaseDescription {
  std::string repo, commit, manifest;
  int tp = 0, rank = 0, device = 0;
  std::uint64_t bytes = 0;       // the halves' payload: the sum of their lengths
  std::uint64_t data_bytes = 0;  // the data allocation's size, padding included
  std::vector<LeasedHalf> halves;
  std::string data_handle;     // IPC handle of the halves' allocation, hex
  std::string offsets_handle;  // IPC handle of the pointer table, hex
};

// The description as the holder sends it (the layout above, fields in that
// order, halves_count = halves.size()). Writes what it is given: a holder
// that wants its lessees to accept it gives a description the parser takes.
std::string WriteLeaseDescription(const LeaseDescription& d);

// Parses a description under the rules above. Corruption for one that
// breaks any; the message starts with "lease description" (" from SOURCE"
// when `source` is not empty) and names the field and the byte offset of
// its value in `text`, or, for a half, its index and offset
// ("halves[3] 'proj' at byte 812: ...").
Result<LeaseDescription> ParseLeaseDescription(std::string_view text, std::string_view source = {});

}  // namespace exlr8
