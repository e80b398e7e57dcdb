#include "daemon/api/status_api.h"

#include <algorithm>
#include <iterator>
#include <map>

#include "daemon/api/api_util.h"
#include "daemon/api/cache_report.h"
#include "daemon/api/query_string.h"
#include "daemon/cache/cache.h"
#include "format/json_writer.h"
#include "openapi_json.h"  // generated from schema/openapi.json

namespace exlr8 {

namespace {

constexpr std::size_t kMaxPulls = 100;

ApiResponse Json(std::string body) { return {200, std::move(body)}; }

// GET /v1/ranks's query: repo, manifest, tp and rank; revision optional.
Result<RankQuery> ParseRankQuery(std::string_view target) {
  EXLR8_ASSIGN_OR_RETURN(auto params, ParseQuery(target));
  static constexpr std::string_view kKnown[] = {"repo", "revision", "manifest", "tp", "rank"};
  for (const auto& [name, value] : params)
    if (std::find(std::begin(kKnown), std::end(kKnown), name) == std::end(kKnown))
      return InvalidArgumentError("unknown query parameter '" + name + "' (parameters: repo, revision, manifest, tp, "
                                  "rank)");
  auto required = [&](const char* name) -> Result<std::string> {
    auto it = params.find(name);
    if (it == params.end() || it->second.empty()) return InvalidArgumentError(std::string("missing ") + name);
    return it->second;
  };
  auto number = [&](const char* name, int low, int high) -> Result<int> {
    EXLR8_ASSIGN_OR_RETURN(std::string text, required(name));
    auto n = ParsePositiveId(text);
    if (text == "0") n = 0;
    if (!n || *n < low || *n > high)
      return InvalidArgumentError(std::string(name) + " must be an integer in [" + std::to_string(low) + ", " +
                                  std::to_string(high) + "], got '" + EscapeForMessage(text) + "'");
    return static_cast<int>(*n);
  };
  RankQuery q;
  EXLR8_ASSIGN_OR_RETURN(q.repo, required("repo"));
  EXLR8_ASSIGN_OR_RETURN(q.manifest, required("manifest"));
  if (auto it = params.find("revision"); it != params.end()) q.revision = it->second;
  if (q.revision.empty()) return InvalidArgumentError("revision must not be empty");
  EXLR8_ASSIGN_OR_RETURN(q.tp, number("tp", 1, 1 << 20));
  EXLR8_ASSIGN_OR_RETURN(q.rank, number("rank", 0, q.tp - 1));
  return q;
}

}  // namespace

ApiResponse StatusApi::Handle(const ApiRequest& req) const {
  const std::string_view path = PathOf(req.target);
  const bool is_pulls = path == "/v1/pulls" || path.rfind("/v1/pulls/", 0) == 0;
  if (path != "/v1/health" && path != "/v1/openapi.json" && path != "/v1/filesets" && path != "/v1/ranks" &&
      !is_pulls)
    return ErrorResponse(
        NotFoundError("no route " + EscapeForMessage(path) + "; routes: " + std::string(kApiRoutes)));
  if (req.method != "GET") return MethodNotAllowed(req.method, path, "GET, HEAD");
  if (path == "/v1/openapi.json") return Json(std::string(kOpenApiJson));
  if (path == "/v1/health") {
    JsonWriter w;
    w.BeginObject().Field("status", "ok").Field("cache", cache_dir_.string()).Field("version", version_).EndObject();
    return Json(std::move(w).Take());
  }
  if (path == "/v1/ranks") {
    auto query = ParseRankQuery(req.target);
    if (!query.ok()) return ErrorResponse(query.status());
    auto cache = Cache::OpenReadOnly(cache_dir_);
    if (!cache.ok() && cache.status().code() == StatusCode::kNotFound)
      return ErrorResponse(NotFoundError(query->repo + "@" + query->revision + " was never pulled into " +
                                         cache_dir_.string() + " (nothing was)"));
    if (!cache.ok()) return ErrorResponse(cache.status());
    auto status = CheckRankStatus(**cache, query->repo, query->revision, query->manifest, query->tp, query->rank);
    if (!status.ok()) return ErrorResponse(status.status());
    JsonWriter w;
    w.BeginObject().Key("rank").Raw(RankStatusJson(*query, *status)).EndObject();
    return Json(std::move(w).Take());
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
    JsonWriter w;
    w.BeginObject().Key("pulls").BeginArray();
    for (std::size_t i = 0; i < pulls->size() && i < kMaxPulls; ++i) w.Raw(PullJson((*pulls)[i]));
    w.EndArray().EndObject();
    return Json(std::move(w).Take());
  }
  auto pull = (*cache)->GetPull(*id);
  if (!pull.ok()) return ErrorResponse(pull.status());
  auto set = (*cache)->GetFileset(pull->spec.fileset);
  if (!set.ok()) return ErrorResponse(set.status());
  JsonWriter w;
  w.BeginObject().Field("repo", set->repo).Field("commit", set->commit).Key("pull").Raw(PullJson(*pull)).EndObject();
  return Json(std::move(w).Take());
}

Status StatusApi::AppendCacheMetrics(PrometheusText* out) const {
  PrometheusText& m = *out;
  m.Family("exlr8d_build_info", "gauge", "exlr8d's version, as a label.");
  m.Sample("exlr8d_build_info", {{"version", version_}}, std::uint64_t{1});
  auto cache = Cache::OpenReadOnly(cache_dir_);
  if (!cache.ok() && cache.status().code() == StatusCode::kNotFound) return Status::Ok();  // nothing pulled yet
  if (!cache.ok()) return cache.status();
  EXLR8_ASSIGN_OR_RETURN(CacheReport report, ReadCacheReport(**cache));
  EXLR8_ASSIGN_OR_RETURN(std::uint64_t verified, (*cache)->RecordedBytes());
  m.Family("exlr8d_cache_verified_bytes", "gauge", "Verified bytes the cache holds, all filesets.");
  m.Sample("exlr8d_cache_verified_bytes", {}, verified);
  if (auto free = (*cache)->FreeBytes(); free.ok()) {
    m.Family("exlr8d_cache_free_bytes", "gauge", "Free bytes on the cache's file system.");
    m.Sample("exlr8d_cache_free_bytes", {}, *free);
  }
  m.Family("exlr8d_cache_filesets", "gauge", "Filesets (repo, commit) in the cache.");
  m.Sample("exlr8d_cache_filesets", {}, static_cast<std::uint64_t>(report.filesets.size()));
  m.Family("exlr8d_fileset_verified_bytes", "gauge", "Verified bytes of the fileset in the cache.");
  m.Family("exlr8d_fileset_release_bytes", "gauge", "Bytes of the whole release (every file of the commit).");
  m.Family("exlr8d_fileset_pins", "gauge", "Pins on the fileset, live processes' (exlr8d-stage holding it) included; gc never evicts a pinned one.");
  m.Family("exlr8d_fileset_last_used_timestamp_seconds", "gauge", "When the fileset was last used (LRU order).");
  m.Family("exlr8d_fileset_last_verified_timestamp_seconds", "gauge",
           "When a scrub (exlr8d verify) last checked every recorded byte; absent if never.");
  m.Family("exlr8d_fileset_verify_failures", "gauge", "Checks that failed (and were forgotten) in the last scrub.");
  for (const FilesetInfo& s : report.filesets) {
    const PrometheusText::Labels labels = {{"repo", s.repo}, {"revision", s.revision}, {"commit", s.commit}};
    m.Sample("exlr8d_fileset_verified_bytes", labels, s.bytes_cached);
    m.Sample("exlr8d_fileset_release_bytes", labels, s.bytes_total);
    m.Sample("exlr8d_fileset_pins", labels, static_cast<std::uint64_t>(s.pins.size() + s.process_pins.size()));
    m.Sample("exlr8d_fileset_last_used_timestamp_seconds", labels, static_cast<double>(s.last_used_ms) / 1000.0);
    if (s.verified_ms) {
      m.Sample("exlr8d_fileset_last_verified_timestamp_seconds", labels, static_cast<double>(*s.verified_ms) / 1000.0);
      m.Sample("exlr8d_fileset_verify_failures", labels, s.verify_failures);
    }
  }
  EXLR8_ASSIGN_OR_RETURN(std::vector<PullInfo> pulls, (*cache)->ListPulls());
  std::map<std::string_view, std::uint64_t> by_state;
  for (PullState st : {PullState::kRunning, PullState::kDone, PullState::kFailed, PullState::kCancelled})
    by_state[PullStateName(st)] = 0;
  for (const PullInfo& p : pulls) ++by_state[PullStateName(p.state)];
  m.Family("exlr8d_pulls", "gauge", "Pulls recorded in the cache's index, by state (any process's).");
  for (const auto& [state, n] : by_state) m.Sample("exlr8d_pulls", {{"state", state}}, n);
  return Status::Ok();
}

}  // namespace exlr8
