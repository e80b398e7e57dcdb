#include "daemon/api/api_util.h"

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
  std::string body = "{\"error\":{\"code\":";
  AppendJsonString(body, StatusCodeName(s.code()));
  body += ",\"message\":";
  AppendJsonString(body, s.message());
  return {HttpStatusFor(s.code()), body + "}}"};
}

ApiResponse MethodNotAllowed(std::string_view method, std::string_view path, std::string_view allowed) {
  ApiResponse r = ErrorResponse(InvalidArgumentError("method " + EscapeForMessage(method) + " not allowed on " +
                                                     std::string(path) + " (" + std::string(allowed) + ")"));
  r.status = 405;
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

}  // namespace exlr8
