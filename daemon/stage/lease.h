// The holder's description of a staged rank (the lease protocol is
// client/lease/: description.h has the format, lease_client.h the socket
// side a lessee uses, open_lease.h the mapping into a serving process).
//
// The holder (`exlr8d-stage --hold SOCKET`) keeps the staged buffers and
// serves this description on its Unix socket (lease_server.h) until told to
// stop; on SIGTERM it stops taking lessees and waits (--release-wait) for
// the connected ones to let go before the memory is freed.
#pragma once

#include <string>

#include "daemon/stage/lease_server.h"
#include "daemon/stage/rank_reader.h"
#include "format/status.h"
#include "gpu/upload.h"

namespace exlr8 {

// The description of `staged` (from `rank`, as asked by `request`), with
// the IPC handles of its two allocations. InvalidArgument when `staged`
// does not hold `rank`'s halves; the runtime's error when a handle cannot
// be exported.
Result<std::string> LeaseDescriptionJson(const RankRequest& request, const RankHalves& rank,
                                         const StagedHalves& staged, int device);

}  // namespace exlr8
