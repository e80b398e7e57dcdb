// libexlr8client's HTTP/1.1 client of `exlr8d serve`'s REST API
// (docs/OPERATIONS.md, "The REST API"; schema/openapi.json): one request
// per connection ("Connection: close"), over the server's Unix socket or a
// TCP host:port, POSIX sockets only. The whole exchange (connect, send,
// the answer) is bounded by a timeout; the answer by HttpLimits
// (http_response.h).
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "client/exlr8client/http_response.h"
#include "format/status.h"

namespace exlr8::rest {

// Where the server is: "unix:/run/exlr8d/api.sock" (or a bare absolute
// path), or "http://HOST:PORT[/PREFIX]" (HOST a name, an IPv4 address or
// "[IPv6]"; PORT default 80).
struct Endpoint {
  bool unix_socket = false;
  std::string path;       // the socket's path
  std::string host;       // for getaddrinfo (no brackets)
  std::string port;       // digits
  std::string authority;  // the Host field: "localhost" over a socket, else host:port as given
  std::string prefix;     // put before every request's path ("" or "/x", no trailing '/')
  std::string text;       // as given, for messages
};

// InvalidArgument naming what is wrong ("https is not served", "no port").
Result<Endpoint> ParseEndpoint(std::string_view text);

struct HttpRequest {
  std::string method;  // a token: GET, POST, DELETE, ...
  std::string path;    // "/v1/..." with its query, already encoded
  std::string body;    // sent as application/json when non-empty (or when method is POST/PUT/PATCH)
  std::string token;   // "": no Authorization field
};

// Sends `request` and reads the answer, whatever its status. Errors:
// InvalidArgument (a method, path or token that cannot be sent: a control
// character, a space), Unavailable (cannot connect, the connection failed,
// no whole answer within `timeout`: "cannot connect to unix:/x.sock: No
// such file or directory"), PermissionDenied (the socket's permissions),
// Corruption or ResourceExhausted (an answer the reader refuses, its
// message from HttpResponseParser, prefixed with the endpoint).
Result<HttpResponse> Exchange(const Endpoint& endpoint, const HttpRequest& request,
                              std::chrono::milliseconds timeout, const HttpLimits& limits = {});

// `s` percent-encoded for a query's value (unreserved characters kept).
std::string QueryEscape(std::string_view s);

}  // namespace exlr8::rest
