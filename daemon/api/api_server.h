// ApiServer: the HTTP/1.1 front of `exlr8d serve`, on a Unix socket and/or a
// loopback TCP port, with one handler for every request.
//
// Built on Boost.Beast (async, one io_context thread): keep-alive, requests
// bounded (8 KiB of header, 64 KiB of body: 431/413 and the connection is
// closed), every read and write under a timeout, so a stuck or hostile
// client costs one idle socket, never a thread; connections are bounded
// (ApiServerOptions::max_connections), and a failed accept (out of
// descriptors) is tried again after a pause, not in a loop. The handler runs on the
// server's thread, one request at a time; it must be quick (the status
// routes read a SQLite snapshot).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

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
};

using ApiHandler = std::function<ApiResponse(const ApiRequest&)>;

struct ApiServerOptions {
  // Path of the Unix socket to create (mode 0660); empty: none. A stale
  // socket file left by a dead server is replaced; one a live server
  // answers on is an error (FailedPrecondition).
  std::string unix_socket;
  // Loopback TCP listener ("127.0.0.1", "::1", any 127.0.0.0/8 address);
  // empty: none. Anything else is InvalidArgument: the API has no
  // authentication, so it never listens beyond this machine.
  std::string tcp_address;
  std::uint16_t tcp_port = 0;  // 0: any free port (see ApiServer::tcp_port)
  std::chrono::seconds timeout{10};  // per read and per write
  // Connections open at once, both listeners together; one more is closed
  // at once. Each costs a descriptor, which the pulls need too (found by
  // review: 1,024 idle connections used up the process's descriptors and
  // failed the running pull).
  std::size_t max_connections = 256;
};

class ApiServer {
 public:
  // Binds the listeners and starts serving on a thread of its own.
  // InvalidArgument (neither listener, a non-loopback address), IOError
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
