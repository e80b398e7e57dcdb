// The lease: a staged rank handed to a serving process on the same machine.
//
// The holder (`exlr8d-stage --hold SOCKET`) keeps the staged buffers and
// answers every connection to its Unix socket with one JSON description,
// then ends its side of the stream (lease_server.h) and keeps the
// connection open: a lessee holds it while it uses the memory, and the
// holder, when told to stop, waits for its lessees to close theirs:
//   {"version":1,"repo":..,"commit":..,"manifest":..,"tp":N,"rank":R,
//    "device":D,"bytes":B,"halves_count":M,
//    "data_handle":HEX,"offsets_handle":HEX,
//    "halves":[{"layer":L,"expert":E,"proj":"gate","half":H,"k":K,
//               "hidden":X,"offset":O,"length":N}, ...]}
// data_handle is the CUDA IPC handle of the halves' allocation,
// offsets_handle that of the pointer table (M uint64 byte offsets, entry i
// = halves[i].offset): a kernel addresses half i as base + table[i]
// (gpu/decode.cuh). An expert of -1 is the shared expert. The memory stays
// valid until the holder releases it: on SIGTERM it stops taking lessees
// and waits (--release-wait) for the connected ones to let go.
//
// A lessee lets go by closing the connection; it must not shut down its
// writing side before that (the holder reads end of stream as letting go:
// having shut down its own side, it cannot tell a half-close from a close).
//
// OpenLease is the serving process's side: it reads the description and
// maps both allocations into the calling process (on the same device); the
// LeasedRank keeps the connection, and destroying it unmaps, then lets go.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "daemon/base/posix.h"
#include "daemon/stage/lease_server.h"
#include "daemon/stage/rank_reader.h"
#include "format/status.h"
#include "gpu/ipc.h"
#include "gpu/upload.h"

namespace exlr8 {

// The description of `staged` (from `rank`, as asked by `request`).
Result<std::string> LeaseDescriptionJson(const RankRequest& request, const RankHalves& rank,
                                         const StagedHalves& staged, int device);

struct LeasedHalf {
  HalfTag tag;
  std::uint64_t hidden = 0;
  std::uint64_t offset = 0;  // from the data allocation's base
  std::uint64_t length = 0;
};

struct LeasedRank {
  // Declared first, so destroyed last: the mappings below are closed
  // before the holder learns that this lessee let go.
  UniqueFd connection;
  std::string repo, commit, manifest;
  int tp = 0, rank = 0, device = 0;
  std::uint64_t bytes = 0;
  std::vector<LeasedHalf> halves;
  IpcMapping data;     // base of the halves
  IpcMapping offsets;  // the pointer table: halves.size() uint64 offsets
};

// Connects to the holder at `path`, reads its description and maps the
// allocations. Corruption for a malformed description; FailedPrecondition
// when the holder staged on another device than the current one; the
// runtime's error when a handle cannot be opened.
Result<LeasedRank> OpenLease(const std::filesystem::path& path);

}  // namespace exlr8
