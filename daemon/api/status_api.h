// The REST routes of `exlr8d serve` (version 1): what the cache holds and
// what its pulls are doing. Each request reads a fresh read-only snapshot of
// the cache index (Cache::OpenReadOnly), so the API runs beside the pulls
// that own the cache (`exlr8d pull`, the systemd units) and never blocks or
// changes them.
//
//   GET /v1/health       {"status":"ok","cache":DIR,"version":V}
//   GET /v1/openapi.json schema/openapi.json, the description of every
//                        route (embedded at build time)
//   GET /v1/filesets     CacheReportJson: filesets, bytes cached, pins,
//                        each one's latest pull
//   GET /v1/pulls        {"pulls":[...]} newest first (at most 100)
//   GET /v1/pulls/{id}   one pull, with its fileset's repo and commit
//   GET /v1/ranks?repo=ORG/NAME&manifest=M&tp=N&rank=R[&revision=REV]
//                        {"rank":RankStatusJson}: whether that rank's plan
//                        is all verified in the cache (cached_rank.h)
//   GET /metrics         Prometheus text: AppendCacheMetrics and the jobs'
//                        (jobs_api.h)
// Other methods on these routes: 405. Any other path: 404 whose message
// lists every route (kApiRoutes), as schema/openapi.json's paths do. Starting and cancelling pulls
// (POST /v1/pulls, DELETE /v1/pulls/{id}, /v1/jobs) is daemon/serve/
// jobs_api.h, which hands every other request to this one.
//
// Errors are problem details carrying {"error":{"code":"NotFound",
// "message":"..."}} (api_server.h) with the HTTP status of the code (400,
// 404, 405 with Allow, 409, 500, 501, 503).
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "daemon/api/api_server.h"
#include "daemon/api/prometheus_text.h"

namespace exlr8 {

// Every path the server routes, comma-separated, in the order of
// schema/openapi.json's paths (tests/daemon/api/openapi_test.py compares
// the two).
inline constexpr std::string_view kApiRoutes =
    "/v1/health, /v1/openapi.json, /v1/filesets, /v1/ranks, /v1/pulls, /v1/pulls/{id}, /v1/verify, "
    "/v1/evict, /v1/jobs, /v1/jobs/{id}, /v1/stages, /v1/stages/{id}, /metrics";

class StatusApi {
 public:
  StatusApi(std::filesystem::path cache_dir, std::string version)
      : cache_dir_(std::move(cache_dir)), version_(std::move(version)) {}

  ApiResponse Handle(const ApiRequest& request) const;
  // The cache's part of GET /metrics (daemon/serve/jobs_api.h serves it):
  // per fileset its verified and release bytes, pins, last use and last
  // scrub; the cache's free and verified bytes; pulls by state.
  Status AppendCacheMetrics(PrometheusText* out) const;

 private:
  std::filesystem::path cache_dir_;
  std::string version_;
};

}  // namespace exlr8
