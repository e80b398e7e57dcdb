// What the holder tells its lessees about a staged rank: the lease
// description (client/lease/description.h) of the halves read from the
// cache (rank_reader.h), at the offsets the upload placed them. Pure, no
// CUDA: the IPC handles are added by the caller (lease.h), so the
// description of a real rank is checked against the lessee's parser in
// tests without a GPU.
#pragma once

#include <cstdint>
#include <span>

#include "client/lease/description.h"
#include "daemon/stage/rank_reader.h"
#include "format/status.h"

namespace exlr8 {

// The description of `rank` (as asked by `request`) staged on `device` with
// half i at offsets[i] from the data allocation's base (StagedHalves::
// offsets()). data_bytes is where the last half ends, which is the size
// UploadHalves allocates; the handles are left empty. InvalidArgument when
// `offsets` does not hold one offset per half.
Result<LeaseDescription> DescribeStagedRank(const RankRequest& request, const RankHalves& rank,
                                            std::span<const std::uint64_t> offsets, int device);

}  // namespace exlr8
