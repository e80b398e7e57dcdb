#include "daemon/stage/lease.h"

#include "client/lease/description.h"
#include "daemon/stage/holder_description.h"
#include "gpu/ipc.h"

namespace exlr8 {

Result<std::string> LeaseDescriptionJson(const RankRequest& request, const RankHalves& rank,
                                         const StagedHalves& staged, int device) {
  EXLR8_ASSIGN_OR_RETURN(LeaseDescription d, DescribeStagedRank(request, rank, staged.offsets(), device));
  EXLR8_ASSIGN_OR_RETURN(d.data_handle, ExportIpcHandle(staged.device_base()));
  EXLR8_ASSIGN_OR_RETURN(d.offsets_handle, ExportIpcHandle(staged.device_offsets()));
  return WriteLeaseDescription(d);
}

}  // namespace exlr8
