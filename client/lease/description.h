// The lease description: what a lease holder (exlr8d-stage --hold) tells
// each lessee about the rank it holds, as one JSON object:
//   {"version":1,"repo":..,"commit":..,"manifest":..,"tp":N,"rank":R,
//    "device":D,"bytes":B,"halves_count":M,
//    "data_handle":HEX,"offsets_handle":HEX,
//    "halves":[{"layer":L,"expert":E,"proj":"gate","half":H,"k":K,
//               "hidden":X,"offset":O,"length":N}, ...]}
// data_handle is the CUDA IPC handle of the halves' allocation (B bytes),
// offsets_handle that of the pointer table (M uint64 byte offsets, entry i
// = halves[i].offset): a kernel addresses half i as base + table[i]
// (gpu/decode.cuh). An expert of -1 is the shared expert. Handles are 128
// hex digits (gpu/ipc.h).
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
// about 130 MB of text).
inline constexpr std::size_t kMaxLeaseDescriptionBytes = std::size_t{1} << 30;

struct LeasedHalf {
  HalfTag tag;
  std::uint64_t hidden = 0;
  std::uint64_t offset = 0;  // from the data allocation's base
  std::uint64_t length = 0;
};

struct LeaseDescription {
  std::string repo, commit, manifest;
  int tp = 0, rank = 0, device = 0;
  std::uint64_t bytes = 0;  // the data allocation's size
  std::vector<LeasedHalf> halves;
  std::string data_handle;     // IPC handle of the halves' allocation, hex
  std::string offsets_handle;  // IPC handle of the pointer table, hex
};

// The description as the holder sends it (the layout above, fields in that
// order, halves_count = halves.size()).
std::string WriteLeaseDescription(const LeaseDescription& d);

// Parses a description. Corruption for a malformed one; the message starts
// with "lease description" and, when `source` is not empty, " from SOURCE".
Result<LeaseDescription> ParseLeaseDescription(std::string_view text, std::string_view source = {});

}  // namespace exlr8
