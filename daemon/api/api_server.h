// ApiServer: the HTTP/1.1 front of `exlr8d serve`, on a Unix socket and/or a
// loopback TCP port, with one handler for every request.
//
// Built on Boost.Beast (async, one io_context thread): keep-alive, requests
// bounded (8 KiB of header, 64 KiB of body: 431/413 and the connection is
// closed), and every phase of a connection under a deadline of its own (the
// wait for a request on a kept-alive connection, the whole header, the body,
// each answer), so a stuck or hostile client costs one idle socket, never a
// thread. Connections are bounded per listener and per peer (below), and a
// failed accept (out of descriptors) is tried again after a pause, not in a
// loop. The handler runs on the server's thread, one request at a time; it
// must be quick (the status routes read a SQLite snapshot).
//
// Access (docs/OPERATIONS.md, "Who may use the API"): the Unix socket's
// mode (0660, set before it can be connected to) and group are its
// credential. The TCP listener, which every local user can reach, answers
// only requests with `Authorization: Bearer <tcp_token>`, except GET/HEAD of
// `open_paths`; its requests must name a loopback literal, `localhost` or an
// allowed host in `Host` (DNS rebinding), and a request with a body must be
// `application/json` (an HTML form cannot send that; the socket takes
// curl's default form type too). A request with an `Origin` is refused on
// the socket, and over TCP unless it is http://<allowed host>:<the
// listener's port>; `Sec-Fetch-Site: cross-site` or `same-site` is refused
// on both: only a browser sends those, and a web page must never drive the
// API. Refusals (400, 401, 403, 415) never reach the handler. Bodyless
// requests are not type-checked: no route acts on an empty body.
//
// Errors, the server's own and ErrorResponse's (api_util.h), are RFC 9457
// problem details (application/problem+json) that carry the older
// {"error":{"code","message"}} as an extension member:
//   {"type":"about:blank","title":"Forbidden","status":403,"detail":MSG,
//    "error":{"code":"PermissionDenied","message":MSG}}
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "format/status.h"

namespace exlr8 {

struct ApiRequest {
  std::string method;  // "GET", ...
  std::string target;  // "/v1/pulls?x=1"
  std::string body;
};

struct ApiResponse {
  int status = 200;
  std::string body;  // JSON unless content_type says otherwise
  std::string content_type = "application/json";
  // More header fields (Allow, Location, WWW-Authenticate), as given.
  std::vector<std::pair<std::string, std::string>> headers = {};
};

// An error answer: problem details (above) with `status`, `code` (a
// StatusCodeName) and `message`, which is escaped as JSON needs.
ApiResponse ProblemResponse(int status, std::string_view code, std::string_view message);

using ApiHandler = std::function<ApiResponse(const ApiRequest&)>;

struct ApiServerOptions {
  // Path of the Unix socket to create (mode 0660); empty: none. A stale
  // socket file left by a dead server is replaced; one a live server
  // answers on is an error (FailedPrecondition).
  std::string unix_socket;
  // Loopback TCP listener ("127.0.0.1", "::1", any 127.0.0.0/8 address);
  // empty: none. Anything else is InvalidArgument: every user of this
  // machine can reach it, so it is never reachable from beyond it.
  std::string tcp_address;
  std::uint16_t tcp_port = 0;  // 0: any free port (see ApiServer::tcp_port)
  std::chrono::seconds timeout{10};  // to read a request's body, and to write an answer
  // REQUIRED with tcp_address: the bearer token of the TCP listener
  // (printable ASCII, no spaces, at least 16 characters; InvalidArgument
  // otherwise). Compared in constant time.
  std::string tcp_token = {};
  // Paths (no query) whose GET and HEAD need no token over TCP: what they
  // answer must reveal nothing (e.g. "/v1/health").
  std::vector<std::string> open_paths = {};
  // Host names a TCP request's Host may name, besides loopback literals and
  // "localhost" (compared without case; any port).
  std::vector<std::string> allowed_hosts = {};
  // From a connection's accept, or a kept-alive one's first byte of a
  // request, to the end of that request's header (slowloris).
  std::chrono::seconds header_timeout{10};
  // A kept-alive connection waiting for its next request is closed after this.
  std::chrono::seconds idle_timeout{30};
  // Connections open at once on each listener (the Unix socket's and the
  // TCP port's are counted apart, so filling one never locks out the
  // other); one more is closed at once. Each costs a descriptor, which
  // the pulls need too: idle connections must not use up the process's
  // descriptors and fail a running pull.
  std::size_t max_connections = 256;
  // Of a listener's connections, at most this many per peer: per uid, from
  // SO_PEERCRED on the socket, and on TCP from the kernel's socket table
  // (sock_diag: the uid owning the client's end); a TCP peer whose uid is
  // unknown counts per address. Root and the server's own uid are exempt.
  std::size_t max_connections_per_peer = 32;
  // Of a listener's connections, the last this many only root and the
  // server's own uid may take, so other users together cannot fill it.
  std::size_t reserved_connections = 16;
};

class ApiServer {
 public:
  // Binds the listeners and starts serving on a thread of its own.
  // InvalidArgument (neither listener, a non-loopback address, a TCP
  // listener without a usable token, a per-peer bound of 0), IOError
  // (bind/listen failed), FailedPrecondition (a live server on the socket).
  static Result<std::unique_ptr<ApiServer>> Start(ApiServerOptions options, ApiHandler handler);
  ~ApiServer();  // Stop()
  ApiServer(const ApiServer&) = delete;
  ApiServer& operator=(const ApiServer&) = delete;

  // The bound TCP port (0 without a TCP listener).
  std::uint16_t tcp_port() const;
  // Idempotent: closes the listeners and connections, joins the thread and
  // removes the socket file.
  void Stop();

  struct Rep;

 private:
  explicit ApiServer(std::unique_ptr<Rep> rep);
  std::unique_ptr<Rep> rep_;
};

}  // namespace exlr8
