#include "daemon/stage/holder_description.h"

#include <algorithm>
#include <string>

namespace exlr8 {

Result<LeaseDescription> DescribeStagedRank(const RankRequest& request, const RankHalves& rank,
                                            std::span<const std::uint64_t> offsets, int device) {
  if (offsets.size() != rank.halves.size())
    return InvalidArgumentError("the staged buffers hold " + std::to_string(offsets.size()) +
                                " halves, the rank " + std::to_string(rank.halves.size()));
  LeaseDescription d;
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
    d.halves.push_back({h.tag, h.hidden, offsets[i], h.length});
    d.data_bytes = std::max(d.data_bytes, offsets[i] + h.length);
  }
  return d;
}

}  // namespace exlr8
