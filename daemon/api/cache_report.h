// What the cache holds and what its pulls are doing, as one snapshot: the
// data behind `exlr8d list` and the REST API's GET routes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "daemon/cache/cache.h"
#include "daemon/cache/cached_rank.h"
#include "format/status.h"

namespace exlr8 {

struct CacheReport {
  // Set by a reader that knows (`exlr8d list` falls back to a read-only view
  // only when a pull holds the cache); the API, which never locks, does not.
  std::optional<bool> owned_by_another_process;
  std::vector<FilesetInfo> filesets;      // most recently used first
  std::vector<std::optional<PullInfo>> latest_pull;  // per fileset
};

// Reads the report from `cache` (any mode).
Result<CacheReport> ReadCacheReport(Cache& cache);

// Bytes fetched per second between the pull's start and its last update
// (its last commit), or 0 before there is one.
std::uint64_t FetchRate(const PullInfo& pull);

// "2026-11-29T21:10:16Z" for a Unix time in milliseconds.
std::string UtcTime(std::int64_t ms);

// JSON objects (no trailing newline); "owned_by_another_process" only when
// known. The pull object carries its counters,
// bytes_per_second, started/updated/finished times and error.
std::string PullJson(const PullInfo& pull);
std::string CacheReportJson(const CacheReport& report);

// One rank's status (`exlr8d status --json`, GET /v1/ranks): what was asked
// for, then "commit", "complete", the counts of cached_rank.h and
// "first_missing" (null when complete).
struct RankQuery {
  std::string repo, revision = "main", manifest;
  int tp = 1, rank = 0;
};
std::string RankStatusJson(const RankQuery& query, const RankStatus& status);

}  // namespace exlr8
