#include "client/lease/open_lease.h"

#include <cuda_runtime.h>

#include <string>
#include <utility>

namespace exlr8 {

Result<LeasedRank> OpenLease(const std::filesystem::path& path) {
  EXLR8_ASSIGN_OR_RETURN(ReceivedLease received, ReceiveLease(path));
  LeaseDescription& d = received.description;
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess) current = -1;
  if (current != d.device)
    return FailedPreconditionError("the rank is staged on device " + std::to_string(d.device) +
                                   ", this process uses device " + std::to_string(current));
  LeasedRank out;
  EXLR8_ASSIGN_OR_RETURN(out.data, IpcMapping::Open(d.data_handle));
  EXLR8_ASSIGN_OR_RETURN(out.offsets, IpcMapping::Open(d.offsets_handle));
  out.repo = std::move(d.repo);
  out.commit = std::move(d.commit);
  out.manifest = std::move(d.manifest);
  out.tp = d.tp;
  out.rank = d.rank;
  out.device = d.device;
  out.bytes = d.bytes;
  out.halves = std::move(d.halves);
  out.connection = std::move(received.connection);
  return out;
}

}  // namespace exlr8
