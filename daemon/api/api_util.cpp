#include "daemon/api/api_util.h"

#include <algorithm>
#include <charconv>

#include "format/json.h"

namespace exlr8 {

int HttpStatusFor(StatusCode code) {
  switch (code) {
    case StatusCode::kInvalidArgument: return 400;
    case StatusCode::kNotFound: return 404;
    case StatusCode::kFailedPrecondition: return 409;
    case StatusCode::kUnimplemented: return 501;
    case StatusCode::kUnavailable: return 503;
    case StatusCode::kResourceExhausted: return 503;  // a full queue or disk: later
    default: return 500;
  }
}

ApiResponse ErrorResponse(const Status& s) {
  return ProblemResponse(HttpStatusFor(s.code()), StatusCodeName(s.code()), s.message());
}

ApiResponse MethodNotAllowed(std::string_view method, std::string_view path, std::string_view allow,
                             std::string_view hint) {
  ApiResponse r = ProblemResponse(405, StatusCodeName(StatusCode::kInvalidArgument),
                                  "method " + EscapeForMessage(method) + " not allowed on " +
                                      EscapeForMessage(path) + " (allowed: " + std::string(allow) +
                                      (hint.empty() ? "" : "; " + std::string(hint)) + ")");
  r.headers.emplace_back("Allow", std::string(allow));
  return r;
}

ApiResponse Accepted(std::string body, std::string monitor) {
  ApiResponse r{202, std::move(body)};
  r.headers.emplace_back("Location", std::move(monitor));
  return r;
}

std::optional<std::int64_t> ParsePositiveId(std::string_view text) {
  std::int64_t id = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), id);
  if (ec != std::errc() || end != text.data() + text.size() || id <= 0) return std::nullopt;
  return id;
}

std::string_view PathOf(std::string_view target) {
  if (auto q = target.find('?'); q != std::string_view::npos) target = target.substr(0, q);
  return target;
}

// Refuses members other than `known` (a typo must not go unnoticed).
Status OnlyKnownFields(const JsonValue& body, std::initializer_list<std::string_view> known) {
  for (const auto& member : body.as_object()) {
    if (std::find(known.begin(), known.end(), member.first) != known.end()) continue;
    std::string names;
    for (std::string_view k : known) names += (names.empty() ? "" : ", ") + std::string(k);
    return InvalidArgumentError("unknown field '" + EscapeForMessage(member.first) + "' (fields: " + names + ")");
  }
  return Status::Ok();
}

Result<JsonValue> ParseBody(std::string_view text) {
  JsonLimits limits;
  limits.max_depth = 4;
  auto parsed = ParseJson(text, limits);
  if (!parsed.ok()) return InvalidArgumentError("the body is not a JSON object: " + parsed.status().message());
  if (!parsed->is_object()) return InvalidArgumentError("the body must be a JSON object");
  return parsed;
}

// A string field: absent -> `fallback`; present and not a string -> error.
Result<std::string> StringField(const JsonValue& body, const char* name, std::string fallback) {
  const JsonValue* v = body.Find(name);
  if (v == nullptr) return fallback;
  if (!v->is_string()) return InvalidArgumentError(std::string(name) + " must be a string");
  return v->as_string();
}

Result<bool> BoolField(const JsonValue& body, const char* name, bool fallback) {
  const JsonValue* v = body.Find(name);
  if (v == nullptr) return fallback;
  if (!v->is_bool()) return InvalidArgumentError(std::string(name) + " must be true or false");
  return v->as_bool();
}

Result<int> IntField(const JsonValue& body, const char* name, std::optional<int> fallback) {
  const JsonValue* v = body.Find(name);
  if (v == nullptr && fallback) return *fallback;
  if (v == nullptr) return InvalidArgumentError("missing " + std::string(name));
  const auto n = v->is_number() ? v->as_int64() : std::nullopt;
  if (!n || *n < 0 || *n > (1 << 20))
    return InvalidArgumentError(std::string(name) + " must be an integer in [0, 1048576]");
  return static_cast<int>(*n);
}

}  // namespace exlr8
