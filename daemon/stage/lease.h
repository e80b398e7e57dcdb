// The lease: a staged rank handed to a serving process on the same machine.
//
// The holder (`exlr8d-stage --hold SOCKET`) keeps the staged buffers and
// answers every connection to its Unix socket with one JSON description,
// then closes it:
//   {"version":1,"repo":..,"commit":..,"manifest":..,"tp":N,"rank":R,
//    "device":D,"bytes":B,"halves_count":M,
//    "data_handle":HEX,"offsets_handle":HEX,
//    "halves":[{"layer":L,"expert":E,"proj":"gate","half":H,"k":K,
//               "hidden":X,"offset":O,"length":N}, ...]}
// data_handle is the CUDA IPC handle of the halves' allocation,
// offsets_handle that of the pointer table (M uint64 byte offsets, entry i
// = halves[i].offset): a kernel addresses half i as base + table[i]
// (gpu/decode.cuh). An expert of -1 is the shared expert. The memory stays
// valid until the holder stops (SIGTERM), so a serving unit orders itself
// after the holder and the holder outlives it.
//
// OpenLease is the serving process's side: it reads the description and
// maps both allocations into the calling process (on the same device).
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "daemon/stage/rank_reader.h"
#include "format/status.h"
#include "gpu/ipc.h"
#include "gpu/upload.h"

namespace exlr8 {

// The description of `staged` (from `rank`, as asked by `request`).
Result<std::string> LeaseDescriptionJson(const RankRequest& request, const RankHalves& rank,
                                         const StagedHalves& staged, int device);

// Serves `description` on a Unix socket at `path` (mode 0660; a stale
// socket file is replaced) until Stop(). One thread; each connection gets
// the description and is closed.
class LeaseServer {
 public:
  static Result<std::unique_ptr<LeaseServer>> Start(const std::filesystem::path& path, std::string description);
  ~LeaseServer();  // Stop()
  LeaseServer(const LeaseServer&) = delete;
  LeaseServer& operator=(const LeaseServer&) = delete;
  void Stop();
  std::uint64_t served() const;

  struct Rep;

 private:
  explicit LeaseServer(std::unique_ptr<Rep> rep);
  std::unique_ptr<Rep> rep_;
};

struct LeasedHalf {
  HalfTag tag;
  std::uint64_t hidden = 0;
  std::uint64_t offset = 0;  // from the data allocation's base
  std::uint64_t length = 0;
};

struct LeasedRank {
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
