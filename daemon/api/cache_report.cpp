#include "daemon/api/cache_report.h"

#include <ctime>

#include "format/json_writer.h"

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

namespace {

std::optional<std::string> MaybeUtcTime(const std::optional<std::int64_t>& ms) {
  return ms ? std::optional<std::string>(UtcTime(*ms)) : std::nullopt;
}

void WritePull(JsonWriter& w, const PullInfo& p) {
  const PullCounters& c = p.counters;
  w.BeginObject()
      .Field("id", p.id)
      .Field("manifest", p.spec.manifest)
      .Field("tp", p.spec.tp)
      .Field("rank", p.spec.rank)
      .Field("state", PullStateName(p.state))
      .Field("bytes_planned", c.bytes_planned)
      .Field("bytes_fetched", c.bytes_fetched)
      .Field("bytes_reused", c.bytes_reused)
      .Field("requests", c.requests)
      .Field("retries", c.retries)
      .Field("checksum_failures", c.checksum_failures)
      .Field("bytes_per_second", FetchRate(p))
      .Field("started", UtcTime(p.started_ms))
      .Field("updated", UtcTime(p.updated_ms))
      .Field("finished", MaybeUtcTime(p.finished_ms))
      .Field("error", p.error)
      .EndObject();
}

}  // namespace

std::string PullJson(const PullInfo& p) {
  JsonWriter w;
  WritePull(w, p);
  return std::move(w).Take();
}

std::string CacheReportJson(const CacheReport& r) {
  JsonWriter w;
  w.BeginObject();
  if (r.owned_by_another_process) w.Field("owned_by_another_process", *r.owned_by_another_process);
  w.Key("filesets").BeginArray();
  for (std::size_t i = 0; i < r.filesets.size(); ++i) {
    const FilesetInfo& s = r.filesets[i];
    w.BeginObject()
        .Field("repo", s.repo)
        .Field("revision", s.revision)
        .Field("commit", s.commit)
        .Field("kind", std::string(s.kind()))
        .Field("files", s.file_count)
        .Field("files_verified", s.files_verified)
        .Field("records", s.records)
        .Field("bytes_total", s.bytes_total)
        .Field("bytes_cached", s.bytes_cached)
        .Field("last_used", UtcTime(s.last_used_ms));
    w.Key("pins").BeginArray();
    for (const std::string& pin : s.pins) w.String(pin);
    w.EndArray();
    w.Key("process_pins").BeginArray();
    for (const auto& pin : s.process_pins) w.BeginObject().Field("holder", pin.holder).Field("pid", pin.pid).EndObject();
    w.EndArray();
    w.Key("verified");
    if (s.verified_ms) {
      w.BeginObject().Field("at", UtcTime(*s.verified_ms)).Field("failures", s.verify_failures).EndObject();
    } else {
      w.Null();
    }
    w.Key("latest_pull");
    if (r.latest_pull[i]) {
      WritePull(w, *r.latest_pull[i]);
    } else {
      w.Null();
    }
    w.EndObject();
  }
  w.EndArray().EndObject();
  return std::move(w).Take();
}

std::string RankStatusJson(const RankQuery& q, const RankStatus& st) {
  JsonWriter w;
  w.BeginObject()
      .Field("repo", q.repo)
      .Field("revision", q.revision)
      .Field("commit", st.commit)
      .Field("manifest", q.manifest)
      .Field("tp", q.tp)
      .Field("rank", q.rank)
      .Field("complete", st.complete())
      .Field("planned", st.planned)
      .Field("files", st.files)
      .Field("files_verified", st.files_verified)
      .Field("headers", st.headers)
      .Field("headers_verified", st.headers_verified)
      .Field("halves", st.halves)
      .Field("halves_verified", st.halves_verified)
      .Field("bytes_planned", st.bytes_planned)
      .Field("bytes_verified", st.bytes_verified)
      .Field("files_changed", st.files_changed)
      .Key("first_missing");
  if (st.first_missing.empty()) {
    w.Null();
  } else {
    w.String(st.first_missing);
  }
  w.EndObject();
  return std::move(w).Take();
}

}  // namespace exlr8
