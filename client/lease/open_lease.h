// The serving process's side of a lease (CUDA builds only): receive the
// description (lease_client.h) and map both allocations into this process
// on the current device (gpu/ipc.h). Links the CUDA runtime and nothing of
// the daemon.
#pragma once

#include <filesystem>

#include "client/lease/description.h"
#include "client/lease/lease_client.h"
#include "format/status.h"
#include "gpu/ipc.h"

namespace exlr8 {

struct LeasedRank {
  // Declared first, so destroyed last: the mappings below are closed
  // before the holder learns that this lessee let go.
  LeaseConnection connection;
  std::string repo, commit, manifest;
  int tp = 0, rank = 0, device = 0;
  std::uint64_t bytes = 0;
  std::vector<LeasedHalf> halves;
  IpcMapping data;     // base of the halves
  IpcMapping offsets;  // the pointer table: halves.size() uint64 offsets
};

// Connects to the holder at `path`, reads its description and maps the
// allocations; the LeasedRank keeps the connection, and destroying it
// unmaps, then lets go. Errors: those of ReceiveLease (Corruption for a
// malformed description, before anything is mapped); FailedPrecondition
// when the holder staged on another device than the current one; the
// runtime's error when a handle cannot be opened.
Result<LeasedRank> OpenLease(const std::filesystem::path& path);

}  // namespace exlr8
