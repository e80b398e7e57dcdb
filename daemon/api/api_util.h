// Helpers every route of the REST API shares: errors as problem details
// (api_server.h) with the HTTP status of their code, and ids in paths.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include "daemon/api/api_server.h"
#include "format/json.h"
#include "format/status.h"

namespace exlr8 {

// 400 InvalidArgument, 404 NotFound, 409 FailedPrecondition, 501
// Unimplemented, 503 Unavailable and ResourceExhausted, 500 otherwise (a
// PermissionDenied of a handler is the server's own file access failing).
int HttpStatusFor(StatusCode code);

// ProblemResponse(HttpStatusFor(code), ...): problem details whose "error"
// member is {"code":"NotFound","message":"..."}.
ApiResponse ErrorResponse(const Status& s);

// 405 naming the method, the path and the methods it allows, with the
// Allow header (RFC 9110 15.5.6). `allow`: "GET, HEAD", "POST", ...;
// `hint` (optional): said after them ("POST /v1/pulls starts a job").
ApiResponse MethodNotAllowed(std::string_view method, std::string_view path, std::string_view allow,
                             std::string_view hint = "");

// 202 with `body` and Location: `monitor` (where its progress is read).
ApiResponse Accepted(std::string body, std::string monitor);

// "12" -> 12; nullopt for anything but a positive decimal id.
std::optional<std::int64_t> ParsePositiveId(std::string_view text);

// The path of a target, without its query string.
std::string_view PathOf(std::string_view target);

// Request bodies (JSON objects; the server bounds their size).
// The body parsed: InvalidArgument unless it is a JSON object.
Result<JsonValue> ParseBody(std::string_view text);
// Refuses members other than `known` (a typo must not go unnoticed),
// naming the field and the known ones.
Status OnlyKnownFields(const JsonValue& body, std::initializer_list<std::string_view> known);
// A string member: absent -> `fallback`; present and not a string -> error.
Result<std::string> StringField(const JsonValue& body, const char* name, std::string fallback);
// A boolean member: absent -> `fallback`; present and not true/false -> error.
Result<bool> BoolField(const JsonValue& body, const char* name, bool fallback);
// An integer member in [0, 2^20]: absent -> `fallback`, or "missing NAME"
// without one.
Result<int> IntField(const JsonValue& body, const char* name, std::optional<int> fallback = std::nullopt);

}  // namespace exlr8
