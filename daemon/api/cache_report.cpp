#include "daemon/api/cache_report.h"

#include <ctime>

#include "format/json.h"

namespace exlr8 {

Result<CacheReport> ReadCacheReport(Cache& cache) {
  CacheReport r;
  EXLR8_ASSIGN_OR_RETURN(r.filesets, cache.ListFilesets());
  for (const FilesetInfo& s : r.filesets) {
    EXLR8_ASSIGN_OR_RETURN(std::vector<PullInfo> pulls, cache.ListPulls(s.id));  // newest first
    r.latest_pull.push_back(pulls.empty() ? std::nullopt : std::optional<PullInfo>(std::move(pulls.front())));
  }
  return r;
}

std::uint64_t FetchRate(const PullInfo& p) {
  const std::int64_t ms = p.updated_ms - p.started_ms;
  return ms > 0 ? p.counters.bytes_fetched * 1000 / static_cast<std::uint64_t>(ms) : 0;
}

std::string UtcTime(std::int64_t ms) {
  const std::time_t t = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string PullJson(const PullInfo& p) {
  std::string o = "{\"id\":" + std::to_string(p.id) + ",\"manifest\":";
  AppendJsonString(o, p.spec.manifest);
  o += ",\"tp\":" + std::to_string(p.spec.tp) + ",\"rank\":" + std::to_string(p.spec.rank) + ",\"state\":";
  AppendJsonString(o, PullStateName(p.state));
  const PullCounters& c = p.counters;
  o += ",\"bytes_planned\":" + std::to_string(c.bytes_planned) + ",\"bytes_fetched\":" +
       std::to_string(c.bytes_fetched) + ",\"bytes_reused\":" + std::to_string(c.bytes_reused) +
       ",\"requests\":" + std::to_string(c.requests) + ",\"retries\":" + std::to_string(c.retries) +
       ",\"checksum_failures\":" + std::to_string(c.checksum_failures) +
       ",\"bytes_per_second\":" + std::to_string(FetchRate(p)) + ",\"started\":";
  AppendJsonString(o, UtcTime(p.started_ms));
  o += ",\"updated\":";
  AppendJsonString(o, UtcTime(p.updated_ms));
  o += ",\"finished\":";
  if (p.finished_ms) {
    AppendJsonString(o, UtcTime(*p.finished_ms));
  } else {
    o += "null";
  }
  o += ",\"error\":";
  AppendJsonString(o, p.error);
  return o + "}";
}

std::string CacheReportJson(const CacheReport& r) {
  std::string o = "{";
  if (r.owned_by_another_process)
    o += std::string("\"owned_by_another_process\":") + (*r.owned_by_another_process ? "true," : "false,");
  o += "\"filesets\":[";
  for (std::size_t i = 0; i < r.filesets.size(); ++i) {
    const FilesetInfo& s = r.filesets[i];
    if (i > 0) o += ',';
    o += "{\"repo\":";
    AppendJsonString(o, s.repo);
    o += ",\"revision\":";
    AppendJsonString(o, s.revision);
    o += ",\"commit\":";
    AppendJsonString(o, s.commit);
    o += ",\"files\":" + std::to_string(s.file_count) + ",\"bytes_total\":" + std::to_string(s.bytes_total) +
         ",\"bytes_cached\":" + std::to_string(s.bytes_cached) + ",\"last_used\":";
    AppendJsonString(o, UtcTime(s.last_used_ms));
    o += ",\"pins\":[";
    for (std::size_t p = 0; p < s.pins.size(); ++p) {
      if (p > 0) o += ',';
      AppendJsonString(o, s.pins[p]);
    }
    o += "],\"process_pins\":[";
    for (std::size_t p = 0; p < s.process_pins.size(); ++p) {
      if (p > 0) o += ',';
      o += "{\"holder\":";
      AppendJsonString(o, s.process_pins[p].holder);
      o += ",\"pid\":" + std::to_string(s.process_pins[p].pid) + "}";
    }
    o += "],\"verified\":";
    if (s.verified_ms) {
      o += "{\"at\":";
      AppendJsonString(o, UtcTime(*s.verified_ms));
      o += ",\"failures\":" + std::to_string(s.verify_failures) + "}";
    } else {
      o += "null";
    }
    o += ",\"latest_pull\":" + (r.latest_pull[i] ? PullJson(*r.latest_pull[i]) : std::string("null")) + "}";
  }
  return o + "]}";
}

std::string RankStatusJson(const RankQuery& q, const RankStatus& st) {
  std::string o = "{\"repo\":";
  AppendJsonString(o, q.repo);
  o += ",\"revision\":";
  AppendJsonString(o, q.revision);
  o += ",\"commit\":";
  AppendJsonString(o, st.commit);
  o += ",\"manifest\":";
  AppendJsonString(o, q.manifest);
  o += ",\"tp\":" + std::to_string(q.tp) + ",\"rank\":" + std::to_string(q.rank);
  o += std::string(",\"complete\":") + (st.complete() ? "true" : "false");
  o += std::string(",\"planned\":") + (st.planned ? "true" : "false");
  auto count = [&o](const char* name, std::uint64_t value) { o += std::string(",\"") + name + "\":" + std::to_string(value); };
  count("files", st.files);
  count("files_verified", st.files_verified);
  count("headers", st.headers);
  count("headers_verified", st.headers_verified);
  count("halves", st.halves);
  count("halves_verified", st.halves_verified);
  count("bytes_planned", st.bytes_planned);
  count("bytes_verified", st.bytes_verified);
  count("files_changed", st.files_changed);
  o += ",\"first_missing\":";
  if (st.first_missing.empty()) {
    o += "null";
  } else {
    AppendJsonString(o, st.first_missing);
  }
  return o + "}";
}

}  // namespace exlr8
