#include "daemon/serve/stages_api.h"

#include <cstdio>

#include "daemon/api/api_util.h"
#include "daemon/api/cache_report.h"
#include "format/json.h"
#include "format/json_writer.h"

namespace exlr8 {

namespace {

constexpr std::string_view kStagesPath = "/v1/stages";
constexpr std::string_view kStagesPrefix = "/v1/stages/";

// 202 with Location: the stage, where its progress is read.
ApiResponse StageResponse(int status, const StageInfo& stage, bool forgotten = false) {
  JsonWriter w;
  w.BeginObject().Key("stage").Raw(StageJson(stage));
  if (forgotten) w.Field("forgotten", true);
  w.EndObject();
  std::string body = std::move(w).Take();
  if (status == 202) return Accepted(std::move(body), "/v1/stages/" + std::to_string(stage.id));
  return {status, std::move(body)};
}

// A string or a number of the holder's record as it was (a fraction to 6
// significant digits); anything else (the holder writes no other kind) as
// null.
void WriteScalar(JsonWriter& w, const JsonValue& value) {
  if (value.is_string()) {
    w.String(value.as_string());
  } else if (value.is_number() && value.as_int64()) {
    w.Int(*value.as_int64());
  } else if (value.is_number()) {
    char number[40];  // parsed JSON numbers are finite: %g writes no nan or inf
    std::snprintf(number, sizeof number, "%.6g", value.as_double());
    w.Raw(number);
  } else {
    w.Null();
  }
}

}  // namespace

std::string StageJson(const StageInfo& s) {
  const StageRequest& r = s.request;
  JsonWriter w;
  w.BeginObject()
      .Field("id", s.id)
      .Field("href", "/v1/stages/" + std::to_string(s.id))
      .Field("state", s.state)
      .Field("alive", s.alive)
      .Key("pid");
  if (s.pid > 0) {
    w.Int(s.pid);
  } else {
    w.Null();
  }
  w.Field("repo", r.repo)
      .Field("revision", r.revision)
      .Field("manifest", r.manifest)
      .Field("tp", r.tp)
      .Field("rank", r.rank)
      .Field("memory", r.memory)
      .Field("lease_version", r.lease)
      .Field("device", r.device)
      .Field("check", r.check)
      .Field("release_wait_s", r.release_wait_s)
      .Key("lease");
  if (s.lease.empty()) {
    w.Null();
  } else {
    w.String(s.lease.string());
  }
  // What it holds, once it says: the image's bytes and regions (lease v2),
  // the halves' bytes (v1).
  w.Key("held");
  if (s.held) {
    const std::optional<std::string> uuid =
        s.held->gpu_uuid.empty() ? std::nullopt : std::optional<std::string>(s.held->gpu_uuid);
    w.BeginObject()
        .Field("bytes", s.held->bytes)
        .Field("regions", s.held->regions)
        .Field("gpu_uuid", uuid)
        .EndObject();
  } else {
    w.Null();
  }
  w.Field("created", UtcTime(s.created_ms)).Field("error", s.error).Field("exit_status", s.exit_status);
  // What exlr8d-stage --lease v1 prints to its log, for API clients.
  w.Key("warning");
  if (r.lease == "v1") {
    w.String(
        "lease v1 is deprecated and goes in the next release: its holder stages the expert halves only; "
        "lease v2 (the default) holds the rank's whole image");
  } else {
    w.Null();
  }
  // What the holder wrote (its state.json), for the details: bytes, halves,
  // the device's name, the upload rate, its lessees' pids, when it last
  // changed.
  w.Key("holder");
  if (s.holder.is_object()) {
    w.BeginObject();
    for (const auto& [key, value] : s.holder.as_object()) {
      if (key == "state" || key == "pid" || key == "error" || key == "exit_status" || key == "lease") continue;
      w.Key(key);
      if (key == "updated" && value.is_number() && value.as_int64()) {
        w.String(UtcTime(*value.as_int64()));
      } else if (value.is_array()) {
        w.BeginArray();
        for (const JsonValue& e : value.as_array()) WriteScalar(w, e);
        w.EndArray();
      } else {
        WriteScalar(w, value);
      }
    }
    w.EndObject();
  } else {
    w.Null();
  }
  w.EndObject();
  return std::move(w).Take();
}

Result<StageRequest> ParseStageRequest(std::string_view text) {
  EXLR8_ASSIGN_OR_RETURN(JsonValue body, ParseBody(text));
  EXLR8_RETURN_IF_ERROR(OnlyKnownFields(body, {"repo", "revision", "manifest", "tp", "rank", "memory",
                                               "lease", "device", "check", "release_wait_s"}));
  StageRequest r;
  EXLR8_ASSIGN_OR_RETURN(r.repo, StringField(body, "repo", ""));
  if (r.repo.empty()) return InvalidArgumentError("missing repo (\"org/name\")");
  EXLR8_ASSIGN_OR_RETURN(r.revision, StringField(body, "revision", "main"));
  EXLR8_ASSIGN_OR_RETURN(r.manifest, StringField(body, "manifest", ""));
  EXLR8_ASSIGN_OR_RETURN(r.tp, IntField(body, "tp"));
  EXLR8_ASSIGN_OR_RETURN(r.rank, IntField(body, "rank"));
  EXLR8_ASSIGN_OR_RETURN(r.memory, StringField(body, "memory", "device"));
  EXLR8_ASSIGN_OR_RETURN(r.lease, StringField(body, "lease", "v2"));
  EXLR8_ASSIGN_OR_RETURN(r.device, IntField(body, "device", 0));
  EXLR8_ASSIGN_OR_RETURN(r.check, StringField(body, "check", ""));
  EXLR8_ASSIGN_OR_RETURN(r.release_wait_s, IntField(body, "release_wait_s", 30));
  EXLR8_RETURN_IF_ERROR(ValidateStageRequest(r));
  return r;
}

std::optional<ApiResponse> HandleStages(StageManager& stages, const ApiRequest& req) {
  const std::string_view path = PathOf(req.target);
  if (path == kStagesPath) {
    if (req.method == "POST") {
      auto request = ParseStageRequest(req.body);
      if (!request.ok()) return ErrorResponse(request.status());
      auto stage = stages.Start(*request);
      if (!stage.ok()) return ErrorResponse(stage.status());
      return StageResponse(202, *stage);
    }
    if (req.method != "GET") return MethodNotAllowed(req.method, path, "GET, HEAD, POST");
    auto list = stages.List();
    if (!list.ok()) return ErrorResponse(list.status());
    JsonWriter w;
    w.BeginObject().Key("stages").BeginArray();
    for (const StageInfo& stage : *list) w.Raw(StageJson(stage));
    w.EndArray().EndObject();
    return ApiResponse{200, std::move(w).Take()};
  }
  if (path.rfind(kStagesPrefix, 0) != 0) return std::nullopt;
  const std::string_view tail = path.substr(kStagesPrefix.size());
  const auto id = ParsePositiveId(tail);
  if (!id) return ErrorResponse(NotFoundError("no stage '" + EscapeForMessage(tail) + "' (ids are positive integers)"));
  if (req.method == "GET") {
    auto stage = stages.Get(*id);
    if (!stage.ok()) return ErrorResponse(stage.status());
    return StageResponse(200, *stage);
  }
  if (req.method == "DELETE") {
    bool forgotten = false;
    auto stage = stages.Release(*id, &forgotten);
    if (!stage.ok()) return ErrorResponse(stage.status());
    return StageResponse(forgotten ? 200 : 202, *stage, forgotten);
  }
  return MethodNotAllowed(req.method, path, "GET, HEAD, DELETE");
}

}  // namespace exlr8
