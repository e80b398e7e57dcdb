#include "daemon/serve/stages_api.h"

#include <cstdio>

#include "daemon/api/api_util.h"
#include "daemon/api/cache_report.h"
#include "format/json.h"

namespace exlr8 {

namespace {

constexpr std::string_view kStagesPath = "/v1/stages";
constexpr std::string_view kStagesPrefix = "/v1/stages/";

// 202 with Location: the stage, where its progress is read.
ApiResponse StageResponse(int status, const StageInfo& stage, bool forgotten = false) {
  std::string body = "{\"stage\":" + StageJson(stage) + (forgotten ? ",\"forgotten\":true}" : "}");
  if (status == 202) return Accepted(std::move(body), "/v1/stages/" + std::to_string(stage.id));
  return {status, std::move(body)};
}

// A string or a number of the holder's record as it was; anything else
// (the holder writes no other kind) as null.
void AppendScalar(std::string& out, const JsonValue& value) {
  if (value.is_string()) {
    AppendJsonString(out, value.as_string());
  } else if (value.is_number() && value.as_int64()) {
    out += std::to_string(*value.as_int64());
  } else if (value.is_number()) {
    char number[40];
    std::snprintf(number, sizeof number, "%.6g", value.as_double());
    out += number;
  } else {
    out += "null";
  }
}

}  // namespace

std::string StageJson(const StageInfo& s) {
  const StageRequest& r = s.request;
  std::string o = "{\"id\":" + std::to_string(s.id) + ",\"href\":\"/v1/stages/" + std::to_string(s.id) + "\"";
  auto text = [&o](const char* key, std::string_view value) {
    o += std::string(",\"") + key + "\":";
    AppendJsonString(o, value);
  };
  text("state", s.state);
  o += std::string(",\"alive\":") + (s.alive ? "true" : "false");
  o += ",\"pid\":" + (s.pid > 0 ? std::to_string(s.pid) : std::string("null"));
  text("repo", r.repo);
  text("revision", r.revision);
  text("manifest", r.manifest);
  o += ",\"tp\":" + std::to_string(r.tp) + ",\"rank\":" + std::to_string(r.rank) +
       ",\"device\":" + std::to_string(r.device);
  text("check", r.check);
  o += ",\"release_wait_s\":" + std::to_string(r.release_wait_s);
  o += ",\"lease\":";
  if (s.lease.empty()) {
    o += "null";
  } else {
    AppendJsonString(o, s.lease.string());
  }
  text("created", UtcTime(s.created_ms));
  text("error", s.error);
  o += ",\"exit_status\":" + (s.exit_status ? std::to_string(*s.exit_status) : std::string("null"));
  // What the holder wrote (its state.json), for the details: bytes, halves,
  // the device's name, the upload rate, its lessees' pids, when it last
  // changed.
  o += ",\"holder\":";
  if (s.holder.is_object()) {
    std::string details = "{";
    for (const auto& [key, value] : s.holder.as_object()) {
      if (key == "state" || key == "pid" || key == "error" || key == "exit_status" || key == "lease") continue;
      if (details.size() > 1) details += ',';
      AppendJsonString(details, key);
      details += ':';
      if (key == "updated" && value.is_number() && value.as_int64()) {
        AppendJsonString(details, UtcTime(*value.as_int64()));
      } else if (value.is_array()) {
        details += '[';
        for (std::size_t i = 0; i < value.as_array().size(); ++i) {
          if (i > 0) details += ',';
          AppendScalar(details, value.as_array()[i]);
        }
        details += ']';
      } else {
        AppendScalar(details, value);
      }
    }
    o += details + "}";
  } else {
    o += "null";
  }
  return o + "}";
}

Result<StageRequest> ParseStageRequest(std::string_view text) {
  EXLR8_ASSIGN_OR_RETURN(JsonValue body, ParseBody(text));
  EXLR8_RETURN_IF_ERROR(OnlyKnownFields(
      body, {"repo", "revision", "manifest", "tp", "rank", "device", "check", "release_wait_s"}));
  StageRequest r;
  EXLR8_ASSIGN_OR_RETURN(r.repo, StringField(body, "repo", ""));
  if (r.repo.empty()) return InvalidArgumentError("missing repo (\"org/name\")");
  EXLR8_ASSIGN_OR_RETURN(r.revision, StringField(body, "revision", "main"));
  EXLR8_ASSIGN_OR_RETURN(r.manifest, StringField(body, "manifest", ""));
  EXLR8_ASSIGN_OR_RETURN(r.tp, IntField(body, "tp"));
  EXLR8_ASSIGN_OR_RETURN(r.rank, IntField(body, "rank"));
  EXLR8_ASSIGN_OR_RETURN(r.device, IntField(body, "device", 0));
  EXLR8_ASSIGN_OR_RETURN(r.check, StringField(body, "check", "64"));
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
    std::string body = "{\"stages\":[";
    for (std::size_t i = 0; i < list->size(); ++i) body += (i ? "," : "") + StageJson((*list)[i]);
    return ApiResponse{200, body + "]}"};
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
