#include "daemon/api/status_api.h"

#include "daemon/api/api_util.h"
#include "daemon/api/cache_report.h"
#include "daemon/cache/cache.h"
#include "format/json.h"

namespace exlr8 {

namespace {

constexpr std::size_t kMaxPulls = 100;

ApiResponse Json(std::string body) { return {200, std::move(body)}; }

}  // namespace

ApiResponse StatusApi::Handle(const ApiRequest& req) const {
  const std::string_view path = PathOf(req.target);
  const bool is_pulls = path == "/v1/pulls" || path.rfind("/v1/pulls/", 0) == 0;
  if (path != "/v1/health" && path != "/v1/filesets" && !is_pulls)
    return ErrorResponse(NotFoundError("no route " + EscapeForMessage(path) +
                                       "; routes: /v1/health, /v1/filesets, /v1/pulls, /v1/pulls/{id}, /v1/jobs, "
                                       "/v1/jobs/{id}"));
  if (req.method != "GET") return MethodNotAllowed(req.method, path, "GET only");
  if (path == "/v1/health") {
    std::string body = "{\"status\":\"ok\",\"cache\":";
    AppendJsonString(body, cache_dir_.string());
    body += ",\"version\":";
    AppendJsonString(body, version_);
    return Json(body + "}");
  }
  std::optional<std::int64_t> id;
  if (path.rfind("/v1/pulls/", 0) == 0) {
    const std::string_view tail = path.substr(std::string_view("/v1/pulls/").size());
    id = ParsePositiveId(tail);
    if (!id)
      return ErrorResponse(NotFoundError("no pull '" + EscapeForMessage(tail) + "' (ids are positive integers)"));
  }
  auto cache = Cache::OpenReadOnly(cache_dir_);
  if (!cache.ok() && cache.status().code() == StatusCode::kNotFound) {  // nothing pulled here yet
    if (path == "/v1/filesets") return Json("{\"filesets\":[]}");
    if (path == "/v1/pulls") return Json("{\"pulls\":[]}");
    return ErrorResponse(NotFoundError("no pull " + std::to_string(*id) + ": nothing was pulled into " +
                                       cache_dir_.string() + " yet"));
  }
  if (!cache.ok()) return ErrorResponse(cache.status());
  if (path == "/v1/filesets") {
    auto report = ReadCacheReport(**cache);
    if (!report.ok()) return ErrorResponse(report.status());
    return Json(CacheReportJson(*report));
  }
  if (path == "/v1/pulls") {
    auto pulls = (*cache)->ListPulls();
    if (!pulls.ok()) return ErrorResponse(pulls.status());
    std::string body = "{\"pulls\":[";
    for (std::size_t i = 0; i < pulls->size() && i < kMaxPulls; ++i) body += (i ? "," : "") + PullJson((*pulls)[i]);
    return Json(body + "]}");
  }
  auto pull = (*cache)->GetPull(*id);
  if (!pull.ok()) return ErrorResponse(pull.status());
  auto set = (*cache)->GetFileset(pull->spec.fileset);
  if (!set.ok()) return ErrorResponse(set.status());
  std::string body = "{\"repo\":";
  AppendJsonString(body, set->repo);
  body += ",\"commit\":";
  AppendJsonString(body, set->commit);
  return Json(body + ",\"pull\":" + PullJson(*pull) + "}");
}

}  // namespace exlr8
