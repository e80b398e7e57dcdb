#include "daemon/serve/jobs_api.h"

#include <algorithm>
#include <cmath>

#include "daemon/api/api_util.h"
#include "daemon/api/cache_report.h"
#include "daemon/api/query_string.h"
#include "daemon/serve/stages_api.h"
#include "format/json.h"
#include "format/json_writer.h"

namespace exlr8 {

namespace {

constexpr std::string_view kJobsPrefix = "/v1/jobs/";
constexpr std::string_view kPullsPrefix = "/v1/pulls/";

// 200 with the job, or 202 with Location: the job, where its progress is read.
ApiResponse JobResponse(int status, const JobSnapshot& job) {
  JsonWriter w;
  w.BeginObject().Key("job").Raw(JobJson(job)).EndObject();
  std::string body = std::move(w).Take();
  if (status == 202) return Accepted(std::move(body), "/v1/jobs/" + std::to_string(job.info.id));
  return {status, std::move(body)};
}

// "bytes_per_second":R,"eta_s":S (null while unknown),"elapsed_s":E
void WriteRate(JsonWriter& w, double rate, bool total_known, std::uint64_t left, double elapsed_s) {
  w.Field("bytes_per_second", static_cast<std::uint64_t>(rate)).Key("eta_s");
  if (rate > 0 && total_known) {
    w.Uint(static_cast<std::uint64_t>(std::ceil(static_cast<double>(left) / rate)));
  } else {
    w.Null();
  }
  w.Key("elapsed_s").Fixed(elapsed_s, 3);
}

void WriteProgress(JsonWriter& w, const PullProgress& p) {
  // Rate: bytes off the network over the time the attempt has run; ETA: what
  // is left to verify at that rate.
  const double rate = p.elapsed_s > 0 ? static_cast<double>(p.bytes_received) / p.elapsed_s : 0;
  const std::uint64_t have = p.bytes_reused + p.bytes_verified;
  const std::uint64_t left = p.bytes_planned > have ? p.bytes_planned - have : 0;
  w.BeginObject()
      .Field("phase", PullPhaseName(p.phase))
      .Field("bytes_planned", p.bytes_planned)
      .Field("bytes_reused", p.bytes_reused)
      .Field("bytes_verified", p.bytes_verified)
      .Field("bytes_received", p.bytes_received)
      .Field("ranges_total", p.ranges_total)
      .Field("ranges_done", p.ranges_done)
      .Field("requests", p.fetch.transfers)
      .Field("retries", p.fetch.retries)
      .Field("checksum_failures", p.checksum_failures);
  WriteRate(w, rate, p.bytes_planned > 0, left, p.elapsed_s);
  w.EndObject();
}

void WriteVerifyProgress(JsonWriter& w, const VerifyProgress& p) {
  const double rate = p.elapsed_s > 0 ? static_cast<double>(p.bytes_checked) / p.elapsed_s : 0;
  const std::uint64_t left = p.bytes_total > p.bytes_checked ? p.bytes_total - p.bytes_checked : 0;
  w.BeginObject()
      .Field("bytes_total", p.bytes_total)
      .Field("bytes_checked", p.bytes_checked)
      .Field("failures", p.failures);
  WriteRate(w, rate, p.bytes_total > 0, left, p.elapsed_s);
  w.EndObject();
}

}  // namespace

std::string JobJson(const JobSnapshot& s) {
  const JobInfo& j = s.info;
  const JobRequest& r = j.request;
  JsonWriter w;
  w.BeginObject()
      .Field("id", j.id)
      .Field("href", "/v1/jobs/" + std::to_string(j.id))
      .Field("kind", JobKindName(r.kind))
      .Field("state", JobStateName(j.state))
      .Field("repo", r.repo)
      .Field("revision", r.revision);
  if (r.kind == JobKind::kPull) {
    w.Field("manifest", r.manifest)
        .Field("tp", r.tp)
        .Field("rank", r.rank)
        .Field("endpoint", r.endpoint)
        .Field("pin", r.pin)
        .Field("make_room", r.make_room)
        .Field("pull", j.pull);
  }
  w.Field("attempts", j.attempts)
      .Field("error", j.error)
      .Field("created", UtcTime(j.created_ms))
      .Field("updated", UtcTime(j.updated_ms))
      .Key("finished");
  if (j.finished_ms) {
    w.String(UtcTime(*j.finished_ms));
  } else {
    w.Null();
  }
  if (!s.waiting.empty()) w.Field("waiting", s.waiting);
  if (s.cancel_requested) w.Field("cancel_requested", true);
  if (s.progress) WriteProgress(w.Key("progress"), *s.progress);
  if (s.verify_progress) WriteVerifyProgress(w.Key("progress"), *s.verify_progress);
  if (!j.result.empty()) {
    // Written by this server as JSON; shown as a string if it no longer parses.
    if (ParseJson(j.result).ok()) {
      w.Key("result").Raw(j.result);
    } else {
      w.Field("result", j.result);
    }
  }
  w.EndObject();
  return std::move(w).Take();
}

Result<JobRequest> ParseJobRequest(std::string_view text) {
  EXLR8_ASSIGN_OR_RETURN(JsonValue body, ParseBody(text));
  EXLR8_RETURN_IF_ERROR(OnlyKnownFields(body, {"repo", "revision", "manifest", "tp", "rank", "endpoint", "pin", "make_room"}));
  JobRequest r;
  EXLR8_ASSIGN_OR_RETURN(r.repo, StringField(body, "repo", ""));
  if (r.repo.empty()) return InvalidArgumentError("missing repo (\"org/name\")");
  EXLR8_ASSIGN_OR_RETURN(r.revision, StringField(body, "revision", "main"));
  EXLR8_ASSIGN_OR_RETURN(r.manifest, StringField(body, "manifest", ""));
  if (body.Find("manifest") == nullptr) {
    // The whole fileset (an LVQ5 repository): every file, no ranks.
    if (body.Find("tp") != nullptr || body.Find("rank") != nullptr)
      return InvalidArgumentError("tp and rank need a manifest (without one, the whole fileset is pulled)");
    r.tp = 1;
    r.rank = 0;
  } else {
    if (r.manifest.empty())
      return InvalidArgumentError("missing manifest (a name such as \"home\", or a repo path)");
    EXLR8_ASSIGN_OR_RETURN(r.tp, IntField(body, "tp"));
    EXLR8_ASSIGN_OR_RETURN(r.rank, IntField(body, "rank"));
  }
  EXLR8_ASSIGN_OR_RETURN(r.endpoint, StringField(body, "endpoint", ""));
  EXLR8_ASSIGN_OR_RETURN(r.pin, StringField(body, "pin", ""));
  EXLR8_ASSIGN_OR_RETURN(r.make_room, BoolField(body, "make_room", false));
  return r;
}

Result<JobRequest> ParseFilesetRequest(std::string_view text, JobKind kind) {
  EXLR8_ASSIGN_OR_RETURN(JsonValue body, ParseBody(text));
  EXLR8_RETURN_IF_ERROR(OnlyKnownFields(body, {"repo", "revision"}));
  JobRequest r;
  r.kind = kind;
  EXLR8_ASSIGN_OR_RETURN(r.repo, StringField(body, "repo", ""));
  if (r.repo.empty()) return InvalidArgumentError("missing repo (\"org/name\")");
  EXLR8_ASSIGN_OR_RETURN(r.revision, StringField(body, "revision", "main"));
  return r;
}

ApiResponse JobsApi::Metrics() const {
  PrometheusText m;
  if (Status s = status_.AppendCacheMetrics(&m); !s.ok()) return ErrorResponse(s);
  auto r = runner_.Metrics();
  if (!r.ok()) return ErrorResponse(r.status());
  m.Family("exlr8d_jobs", "gauge", "Jobs of exlr8d serve's queue, by state.");
  for (const auto& [state, n] : r->jobs_by_state) m.Sample("exlr8d_jobs", {{"state", state}}, n);
  m.Family("exlr8d_jobs_max_running", "gauge", "Jobs this server runs at once (--max-jobs).");
  m.Sample("exlr8d_jobs_max_running", {}, static_cast<std::uint64_t>(r->max_running));
  const RunnerTotals& t = r->totals;
  const std::pair<const char*, std::pair<std::uint64_t, const char*>> counters[] = {
      {"exlr8d_received_bytes_total", {t.bytes_received, "Bytes received from hubs and CDNs by this server's pulls."}},
      {"exlr8d_verified_bytes_total", {t.bytes_verified, "Bytes fetched, verified and recorded by this server's pulls."}},
      {"exlr8d_http_requests_total", {t.http_requests, "Range requests sent by this server's pulls, retries included."}},
      {"exlr8d_http_retries_total", {t.http_retries, "Range requests retried by this server's pulls."}},
      {"exlr8d_hub_resolves_total", {t.hub_resolves, "/resolve/ requests to the hub by this server's pulls."}},
      {"exlr8d_checksum_failures_total", {t.checksum_failures, "Fetched bytes that failed their checksum (refetched)."}},
      {"exlr8d_scrubbed_bytes_total", {t.scrub_bytes_checked, "Cached bytes checked again by this server's verify jobs."}},
      {"exlr8d_scrub_failures_total", {t.scrub_failures, "Checks that failed in this server's verify jobs (forgotten)."}},
  };
  for (const auto& [name, value] : counters) {
    m.Family(name, "counter", value.second);
    m.Sample(name, {}, value.first);
  }
  if (stages_ != nullptr) {
    auto stages = stages_->List();
    if (!stages.ok()) return ErrorResponse(stages.status());
    std::map<std::string, std::uint64_t> by_state;
    for (const StageInfo& s : *stages) ++by_state[s.state];
    m.Family("exlr8d_stages", "gauge", "Holders started by this server (POST /v1/stages), by state.");
    for (const auto& [state, n] : by_state) m.Sample("exlr8d_stages", {{"state", state}}, n);
    // Per live holder: the device memory it holds, and who uses it now.
    auto per_holder = [&](const char* name, const char* help, auto value) {
      m.Family(name, "gauge", help);
      for (const StageInfo& s : *stages) {
        if (!s.alive || (s.state != "holding" && s.state != "releasing") || !s.holder.is_object()) continue;
        const std::optional<std::uint64_t> v = value(s.holder);
        if (!v) continue;
        const std::string id = std::to_string(s.id), tp = std::to_string(s.request.tp),
                          rank = std::to_string(s.request.rank), device = std::to_string(s.request.device);
        m.Sample(name,
                 {{"stage", id}, {"repo", s.request.repo}, {"manifest", s.request.manifest}, {"tp", tp},
                  {"rank", rank}, {"device", device}},
                 *v);
      }
    };
    per_holder("exlr8d_stage_held_bytes",
               "Bytes a live holder keeps for its lessees: its rank's image (lease v2, GPU or host memory) "
               "or its halves (v1).",
               [](const JsonValue& h) -> std::optional<std::uint64_t> {
                 const JsonValue* bytes = h.Find("bytes");
                 return bytes != nullptr ? bytes->as_uint64() : std::nullopt;
               });
    per_holder("exlr8d_stage_lessees", "Processes holding a live holder's lease now.",
               [](const JsonValue& h) -> std::optional<std::uint64_t> {
                 const JsonValue* lessees = h.Find("lessees");
                 if (lessees == nullptr || !lessees->is_array()) return std::nullopt;
                 return static_cast<std::uint64_t>(lessees->as_array().size());
               });
  }
  // Each family's samples together, as the text format wants.
  auto per_job = [&](const char* name, const char* help, auto value) {
    m.Family(name, "gauge", help);
    for (const JobSnapshot& j : r->running) {
      const std::optional<std::uint64_t> v = value(j);
      if (!v) continue;
      const std::string id = std::to_string(j.info.id);
      m.Sample(name,
               {{"job_id", id}, {"kind", JobKindName(j.info.request.kind)}, {"repo", j.info.request.repo}},
               *v);
    }
  };
  per_job("exlr8d_job_planned_bytes", "A running job's bytes to do: a pull's plan, a scrub's recorded bytes.",
          [](const JobSnapshot& j) -> std::optional<std::uint64_t> {
            if (j.progress) return j.progress->bytes_planned;
            if (j.verify_progress) return j.verify_progress->bytes_total;
            return std::nullopt;
          });
  per_job("exlr8d_job_done_bytes", "A running job's bytes done: verified or reused, or checked.",
          [](const JobSnapshot& j) -> std::optional<std::uint64_t> {
            if (j.progress) return j.progress->bytes_verified + j.progress->bytes_reused;
            if (j.verify_progress) return j.verify_progress->bytes_checked;
            return std::nullopt;
          });
  return {200, m.text(), PrometheusText::kContentType};
}

ApiResponse JobsApi::Handle(const ApiRequest& req) const {
  const std::string_view path = PathOf(req.target);
  if (path == "/metrics") {
    if (req.method != "GET") return MethodNotAllowed(req.method, path, "GET, HEAD");
    return Metrics();
  }
  if ((path == "/v1/pulls" || path == "/v1/verify" || path == "/v1/evict") && req.method == "POST") {
    auto request = path == "/v1/pulls"    ? ParseJobRequest(req.body)
                   : path == "/v1/verify" ? ParseFilesetRequest(req.body, JobKind::kVerify)
                                          : ParseFilesetRequest(req.body, JobKind::kEvict);
    if (!request.ok()) return ErrorResponse(request.status());
    auto job = runner_.Submit(*request);
    if (!job.ok()) return ErrorResponse(job.status());
    return JobResponse(202, *job);
  }
  // The methods each job route takes: a known path with the wrong method is
  // a 405 naming the methods it takes, never "no route" nor a wrong list.
  if ((path == "/v1/verify" || path == "/v1/evict") && req.method != "POST")
    return MethodNotAllowed(req.method, path, "POST");
  if (path == "/v1/pulls" && req.method != "GET" && req.method != "POST")
    return MethodNotAllowed(req.method, path, "GET, HEAD, POST");
  if (path.rfind(kPullsPrefix, 0) == 0 && req.method != "GET" && req.method != "DELETE")
    return MethodNotAllowed(req.method, path, "GET, HEAD, DELETE");
  if (stages_ != nullptr)
    if (auto answer = HandleStages(*stages_, req)) return std::move(*answer);
  if (path.rfind(kPullsPrefix, 0) == 0 && req.method == "DELETE") {
    const std::string_view tail = path.substr(kPullsPrefix.size());
    const auto pull = ParsePositiveId(tail);
    if (!pull) return ErrorResponse(NotFoundError("no pull '" + EscapeForMessage(tail) + "'"));
    const auto job = runner_.RunningJobOfPull(*pull);
    if (!job) {
      // 404 for a pull the cache never had; 409 only for one it has that is
      // not running.
      ApiResponse known = status_.Handle({"GET", std::string(kPullsPrefix) + std::to_string(*pull), ""});
      if (known.status == 404) return known;
    }
    if (!job)
      return ErrorResponse(FailedPreconditionError(
          "pull " + std::to_string(*pull) + " is not running in this server (finished, or run by another process: "
          "stop that one, e.g. its exlr8d-pull@ unit)"));
    auto cancelled = runner_.Cancel(*job);
    if (!cancelled.ok()) return ErrorResponse(cancelled.status());
    return JobResponse(202, *cancelled);
  }
  if (path == "/v1/jobs") {
    if (req.method != "GET")
      return MethodNotAllowed(req.method, path, "GET, HEAD",
                              "POST /v1/pulls, /v1/verify or /v1/evict starts a job");
    // ?state=running: the jobs in one state (the list is the newest 100).
    auto params = ParseQuery(req.target);
    if (!params.ok()) return ErrorResponse(params.status());
    std::optional<JobState> state;
    for (const auto& [name, value] : *params) {
      if (name != "state")
        return ErrorResponse(InvalidArgumentError("unknown query parameter '" + EscapeForMessage(name) +
                                                  "' (parameters: state)"));
      for (JobState st : {JobState::kQueued, JobState::kRunning, JobState::kDone, JobState::kFailed,
                          JobState::kCancelled})
        if (value == JobStateName(st)) state = st;
      if (!state)
        return ErrorResponse(InvalidArgumentError("state must be queued, running, done, failed or cancelled, got '" +
                                                  EscapeForMessage(value) + "'"));
    }
    auto jobs = runner_.List(100, state);
    if (!jobs.ok()) return ErrorResponse(jobs.status());
    JsonWriter w;
    w.BeginObject().Key("jobs").BeginArray();
    for (const JobSnapshot& job : *jobs) w.Raw(JobJson(job));
    w.EndArray().EndObject();
    return {200, std::move(w).Take()};
  }
  if (path.rfind(kJobsPrefix, 0) == 0) {
    const std::string_view tail = path.substr(kJobsPrefix.size());
    const auto id = ParsePositiveId(tail);
    if (!id) return ErrorResponse(NotFoundError("no job '" + EscapeForMessage(tail) + "' (ids are positive integers)"));
    if (req.method == "GET") {
      auto job = runner_.Snapshot(*id);
      if (!job.ok()) return ErrorResponse(job.status());
      return JobResponse(200, *job);
    }
    if (req.method == "DELETE") {
      auto job = runner_.Cancel(*id);
      if (!job.ok()) return ErrorResponse(job.status());
      return JobResponse(202, *job);
    }
    return MethodNotAllowed(req.method, path, "GET, HEAD, DELETE");
  }
  return status_.Handle(req);
}

}  // namespace exlr8
