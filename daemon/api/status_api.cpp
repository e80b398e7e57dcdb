#include "daemon/api/status_api.h"

#include <charconv>

#include "daemon/api/cache_report.h"
#include "daemon/cache/cache.h"
#include "format/json.h"

namespace exlr8 {

namespace {

constexpr std::size_t kMaxPulls = 100;

int HttpStatusFor(StatusCode code) {
  switch (code) {
    case StatusCode::kInvalidArgument: return 400;
    case StatusCode::kNotFound: return 404;
    case StatusCode::kFailedPrecondition: return 409;
    case StatusCode::kUnimplemented: return 501;
    case StatusCode::kUnavailable: return 503;
    default: return 500;
  }
}

ApiResponse Error(const Status& s) {
  std::string body = "{\"error\":{\"code\":";
  AppendJsonString(body, StatusCodeName(s.code()));
  body += ",\"message\":";
  AppendJsonString(body, s.message());
  return {HttpStatusFor(s.code()), body + "}}"};
}

ApiResponse Json(std::string body) { return {200, std::move(body)}; }

// "/v1/pulls/12" -> 12; nullopt for anything but a positive decimal id.
std::optional<std::int64_t> ParsePullId(std::string_view tail) {
  std::int64_t id = 0;
  auto [end, ec] = std::from_chars(tail.data(), tail.data() + tail.size(), id);
  if (ec != std::errc() || end != tail.data() + tail.size() || id <= 0) return std::nullopt;
  return id;
}

}  // namespace

ApiResponse StatusApi::Handle(const ApiRequest& req) const {
  std::string_view path = req.target;
  if (auto q = path.find('?'); q != std::string_view::npos) path = path.substr(0, q);
  const bool is_pulls = path == "/v1/pulls" || path.rfind("/v1/pulls/", 0) == 0;
  if (path != "/v1/health" && path != "/v1/filesets" && !is_pulls)
    return Error(NotFoundError("no route " + EscapeForMessage(path) +
                               "; routes: /v1/health, /v1/filesets, /v1/pulls, /v1/pulls/{id}"));
  if (req.method != "GET") {
    if (is_pulls && (req.method == "POST" || req.method == "DELETE"))
      return Error(UnimplementedError("starting and cancelling pulls through the API is not built yet; run "
                                      "'exlr8d pull' (or the exlr8d-pull@ systemd unit), which this API reports on"));
    ApiResponse r = Error(InvalidArgumentError("method " + EscapeForMessage(req.method) + " not allowed on " +
                                               std::string(path) + " (GET only)"));
    r.status = 405;
    return r;
  }
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
    id = ParsePullId(tail);
    if (!id) return Error(NotFoundError("no pull '" + EscapeForMessage(tail) + "' (ids are positive integers)"));
  }
  auto cache = Cache::OpenReadOnly(cache_dir_);
  if (!cache.ok() && cache.status().code() == StatusCode::kNotFound) {  // nothing pulled here yet
    if (path == "/v1/filesets") return Json("{\"filesets\":[]}");
    if (path == "/v1/pulls") return Json("{\"pulls\":[]}");
    return Error(NotFoundError("no pull " + std::to_string(*id) + ": nothing was pulled into " +
                               cache_dir_.string() + " yet"));
  }
  if (!cache.ok()) return Error(cache.status());
  if (path == "/v1/filesets") {
    auto report = ReadCacheReport(**cache);
    if (!report.ok()) return Error(report.status());
    return Json(CacheReportJson(*report));
  }
  if (path == "/v1/pulls") {
    auto pulls = (*cache)->ListPulls();
    if (!pulls.ok()) return Error(pulls.status());
    std::string body = "{\"pulls\":[";
    for (std::size_t i = 0; i < pulls->size() && i < kMaxPulls; ++i) body += (i ? "," : "") + PullJson((*pulls)[i]);
    return Json(body + "]}");
  }
  auto pull = (*cache)->GetPull(*id);
  if (!pull.ok()) return Error(pull.status());
  auto set = (*cache)->GetFileset(pull->spec.fileset);
  if (!set.ok()) return Error(set.status());
  std::string body = "{\"repo\":";
  AppendJsonString(body, set->repo);
  body += ",\"commit\":";
  AppendJsonString(body, set->commit);
  return Json(body + ",\"pull\":" + PullJson(*pull) + "}");
}

}  // namespace exlr8
