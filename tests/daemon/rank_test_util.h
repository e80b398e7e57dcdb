// The request for a rank of the test repo ("exlr8/test", manifest home) in a
// cache, shared by the stage tests (rank reader, GPU stage).
#pragma once

#include <filesystem>

#include "daemon/stage/rank_reader.h"

namespace exlr8 {

inline RankRequest TestRankRequest(const std::filesystem::path& cache, int tp, int rank) {
  RankRequest r;
  r.cache_dir = cache;
  r.repo = "exlr8/test";
  r.manifest = "home";
  r.tp = tp;
  r.rank = rank;
  return r;
}

}  // namespace exlr8
