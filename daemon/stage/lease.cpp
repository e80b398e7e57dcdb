#include "daemon/stage/lease.h"

#include <algorithm>

#include "client/lease/description.h"
#include "gpu/ipc.h"

namespace exlr8 {

Result<std::string> LeaseDescriptionJson(const RankRequest& request, const RankHalves& rank,
                                         const StagedHalves& staged, int device) {
  if (staged.num_halves() != rank.halves.size())
    return InvalidArgumentError("the staged buffers hold " + std::to_string(staged.num_halves()) +
                                " halves, the rank " + std::to_string(rank.halves.size()));
  LeaseDescription d;
  EXLR8_ASSIGN_OR_RETURN(d.data_handle, ExportIpcHandle(staged.device_base()));
  EXLR8_ASSIGN_OR_RETURN(d.offsets_handle, ExportIpcHandle(staged.device_offsets()));
  d.repo = request.repo;
  d.commit = rank.commit;
  d.manifest = request.manifest;
  d.tp = request.tp;
  d.rank = request.rank;
  d.device = device;
  d.bytes = rank.total_bytes;
  d.halves.reserve(rank.halves.size());
  for (std::size_t i = 0; i < rank.halves.size(); ++i) {
    const RankHalf& h = rank.halves[i];
    d.halves.push_back({h.tag, h.hidden, staged.offsets()[i], h.length});
    d.data_bytes = std::max(d.data_bytes, staged.offsets()[i] + staged.sizes()[i]);
  }
  return WriteLeaseDescription(d);
}

}  // namespace exlr8
