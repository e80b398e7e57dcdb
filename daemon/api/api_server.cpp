#include "daemon/api/api_server.h"

#include <netinet/in.h>
#include <openssl/crypto.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <charconv>
#include <cstring>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include "daemon/api/api_token.h"
#include "daemon/api/loopback_peer.h"
#include "daemon/api/request_authority.h"
#include "daemon/api/api_util.h"
#include "format/json_writer.h"

namespace exlr8 {

namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using local = net::local::stream_protocol;

constexpr std::size_t kHeaderLimit = 8 * 1024;
constexpr std::size_t kBodyLimit = 64 * 1024;
constexpr std::string_view kServer = "exlr8d/0.1.0";

http::response<http::string_body> MakeResponse(unsigned version, bool keep_alive, const ApiResponse& a) {
  http::response<http::string_body> res{static_cast<http::status>(a.status), version};
  res.set(http::field::server, kServer);
  res.set(http::field::content_type, a.content_type);
  res.set(http::field::cache_control, "no-store");
  for (const auto& [name, value] : a.headers) res.insert(name, value);
  res.keep_alive(keep_alive);
  res.body() = a.body;
  res.prepare_payload();
  return res;
}

// What one listener admits, and its connections by peer. Used on the
// server's thread only (and by Stop once that thread is gone).
struct Listening {
  const ApiHandler* handler = nullptr;
  const ApiServerOptions* options = nullptr;
  bool tcp = false;        // the TCP listener: token, Host and body type checked
  std::uint16_t port = 0;  // the TCP listener's port: the one Origin allowed
  uid_t own_uid = 0;
  std::size_t open = 0;                                     // sessions alive
  std::map<std::string, std::size_t, std::less<>> by_peer;  // open sessions per peer key

  // Why a connection from `peer` is not admitted; empty: admitted (and
  // counted until Release(peer.key)).
  struct Peer {
    std::optional<uid_t> uid;
    std::string key;  // "uid 1001", "127.0.0.1"
  };
  std::string Admit(const Peer& peer) {
    const ApiServerOptions& o = *options;
    if (open >= o.max_connections)
      return "all " + std::to_string(o.max_connections) + " connections of this listener are in use";
    const bool exempt = peer.uid && (*peer.uid == 0 || *peer.uid == own_uid);
    if (!exempt) {
      if (open + o.reserved_connections >= o.max_connections)
        return "the last " + std::to_string(o.reserved_connections) + " of this listener's " +
               std::to_string(o.max_connections) + " connections are kept for root and the server's user";
      const auto it = by_peer.find(peer.key);
      if (it != by_peer.end() && it->second >= o.max_connections_per_peer)
        return peer.key + " has " + std::to_string(it->second) +
               " connections open on this listener (at most " + std::to_string(o.max_connections_per_peer) +
               " per peer)";
    }
    ++open;
    ++by_peer[peer.key];
    return "";
  }
  void Release(const std::string& key) {
    --open;
    if (auto it = by_peer.find(key); it != by_peer.end() && --it->second == 0) by_peer.erase(it);
  }

  // The answer to a request this listener refuses; nullopt: the handler's.
  std::optional<ApiResponse> Check(const http::request<http::string_body>& req) const {
    const ApiServerOptions& o = *options;
    // Where the request says it goes (DNS rebinding: a page of
    // attacker.example resolved to 127.0.0.1 sends Host: attacker.example).
    if (tcp) {
      const auto host_fields = req.count(http::field::host);
      if (host_fields > 1) return ProblemResponse(400, "InvalidArgument", "more than one Host header");
      if (host_fields == 0 && req.version() >= 11)
        return ProblemResponse(400, "InvalidArgument", "no Host header");
      if (host_fields == 1) {
        const std::string_view host = TrimFieldValue(req[http::field::host]);
        const auto split = SplitAuthority(host);
        if (!split || !HostNameAllowed(split->first, o.allowed_hosts))
          return ProblemResponse(
              403, "PermissionDenied",
              "Host '" + EscapeForMessage(host) +
                  "' is not allowed: name a loopback address, localhost or a host given with --allow-host");
      }
    }
    // Browsers only: a web page must never drive the API.
    if (req.count(http::field::origin) > 0) {
      const std::string_view origin = TrimFieldValue(req[http::field::origin]);
      std::optional<std::pair<std::string_view, unsigned>> split;
      if (tcp && origin.substr(0, 7) == "http://") split = SplitAuthority(origin.substr(7));
      const bool own = split && HostNameAllowed(split->first, o.allowed_hosts) &&
                       (split->second == 0 ? 80u : split->second) == port;
      if (!own)
        return ProblemResponse(403, "PermissionDenied",
                               "Origin '" + EscapeForMessage(origin) + "' is not allowed: " +
                                   (tcp ? "requests from web pages of other origins are refused"
                                        : "requests from web pages are refused on the Unix socket"));
    }
    if (const auto site = AsciiLower(TrimFieldValue(req["Sec-Fetch-Site"])); site == "cross-site" || site == "same-site")
      return ProblemResponse(403, "PermissionDenied",
                             "Sec-Fetch-Site '" + site +
                                 "' is not allowed: requests from web "
                                 "pages of other origins are refused");
    if (tcp) {
      const bool open_route =
          (req.method() == http::verb::get || req.method() == http::verb::head) &&
          std::find(o.open_paths.begin(), o.open_paths.end(), PathOf(req.target())) != o.open_paths.end();
      if (!open_route) {
        const std::string_view auth = TrimFieldValue(req[http::field::authorization]);
        std::string_view token;
        if (auth.size() > 7 && AsciiLower(auth.substr(0, 7)) == "bearer ") token = TrimFieldValue(auth.substr(7));
        const bool good = token.size() == o.tcp_token.size() &&
                          CRYPTO_memcmp(token.data(), o.tcp_token.data(), token.size()) == 0;
        if (!good) {
          ApiResponse r = ProblemResponse(
              401, "PermissionDenied",
              auth.empty()
                  ? "this request needs Authorization: Bearer TOKEN over TCP (the token of exlr8d serve's "
                    "--api-token-file, by default <cache>/exlr8d.api-token), or the Unix socket"
                  : "the bearer token is not this server's");
          r.headers.emplace_back("WWW-Authenticate", "Bearer realm=\"exlr8d\"");
          return r;
        }
      }
    }
    // A body a form can send (text/plain, form-urlencoded, multipart)
    // never reaches the handler over TCP; the socket keeps taking curl's
    // default form type as well.
    const bool has_body = !req.body().empty();
    const std::string_view type_field = req[http::field::content_type];
    const std::string type = AsciiLower(TrimFieldValue(type_field.substr(0, type_field.find(';'))));
    const bool json = type == "application/json";
    if (has_body && !json && (tcp || !(type.empty() || type == "application/x-www-form-urlencoded")))
      return ProblemResponse(415, "InvalidArgument",
                             (type_field.empty() ? std::string("a body without Content-Type")
                                                 : "Content-Type '" + EscapeForMessage(type_field) + "'") +
                                 " is not accepted: send the body as application/json");
    return std::nullopt;
  }
};

Listening::Peer PeerOf(local::socket& socket) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(socket.native_handle(), SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0)
    return {cred.uid, "uid " + std::to_string(cred.uid)};
  return {std::nullopt, "an unknown peer"};
}

Listening::Peer PeerOf(tcp::socket& socket) {
  beast::error_code ec1, ec2;
  const tcp::endpoint client = socket.remote_endpoint(ec1), server = socket.local_endpoint(ec2);
  if (ec1 || ec2) return {std::nullopt, "an unknown peer"};
  if (const auto uid = LoopbackPeerUid(client, server)) return {*uid, "uid " + std::to_string(*uid)};
  return {std::nullopt, client.address().to_string()};
}

// One connection: read a request, answer it, again while keep-alive.
template <class Protocol>
class Session : public std::enable_shared_from_this<Session<Protocol>> {
 public:
  Session(typename Protocol::socket&& socket, Listening* listening, std::string peer)
      : stream_(std::move(socket)), listening_(listening), peer_(std::move(peer)) {}
  ~Session() { listening_->Release(peer_); }

  // The first request's header is due within header_timeout of the accept.
  void Run() { ReadHeader(); }

 private:
  const ApiServerOptions& options() const { return *listening_->options; }

  // A kept-alive connection: the next request's first bytes, within
  // idle_timeout (unless a pipelined request already sent them).
  void DoRead() {
    if (buffer_.size() > 0) return ReadHeader();
    stream_.expires_after(options().idle_timeout);
    stream_.async_read_some(buffer_.prepare(kHeaderLimit),
                            beast::bind_front_handler(&Session::OnFirstBytes, this->shared_from_this()));
  }

  void OnFirstBytes(beast::error_code ec, std::size_t n) {
    if (ec) return Close();
    buffer_.commit(n);
    ReadHeader();
  }

  // The header, whole, within header_timeout (slowloris); then the body.
  void ReadHeader() {
    parser_.emplace();
    parser_->header_limit(kHeaderLimit);
    parser_->body_limit(kBodyLimit);
    stream_.expires_after(options().header_timeout);
    http::async_read_header(stream_, buffer_, *parser_,
                            beast::bind_front_handler(&Session::OnHeader, this->shared_from_this()));
  }

  void OnHeader(beast::error_code ec, std::size_t) {
    if (ec) return Fail(ec);
    if (parser_->is_done()) return OnRequest();
    stream_.expires_after(options().timeout);
    http::async_read(stream_, buffer_, *parser_,
                     beast::bind_front_handler(&Session::OnBody, this->shared_from_this()));
  }

  void OnBody(beast::error_code ec, std::size_t) {
    if (ec) return Fail(ec);
    OnRequest();
  }

  void Fail(beast::error_code ec) {
    if (ec == http::error::header_limit || ec == http::error::body_limit) {
      const bool header = ec == http::error::header_limit;
      return Send(MakeResponse(
          11, false,
          ProblemResponse(header ? 431 : 413, "InvalidArgument",
                          std::string("request ") + (header ? "header" : "body") + " too large")));
    }
    if (ec == http::error::end_of_stream || ec == beast::error::timeout || ec == net::error::connection_reset ||
        ec == net::error::eof)
      return Close();
    // not HTTP: say so once, then close
    Send(MakeResponse(11, false, ProblemResponse(400, "InvalidArgument", "malformed HTTP request")));
  }

  void OnRequest() {
    const auto& req = parser_->get();
    // A HEAD is answered as the GET of the same target, less its body (below).
    const bool head = req.method() == http::verb::head;
    ApiResponse answer;
    if (auto refusal = listening_->Check(req)) {
      answer = std::move(*refusal);
    } else {
      ApiRequest request{head ? std::string("GET") : std::string(req.method_string()),
                         std::string(req.target()), req.body()};
      try {
        answer = (*listening_->handler)(request);
      } catch (const std::exception& e) {  // a bug; the server keeps serving
        answer = ProblemResponse(500, "Internal", "handler failed");
      }
    }
    http::response<http::string_body> res = MakeResponse(req.version(), req.keep_alive(), answer);
    if (head) {
      // RFC 9110 9.3.2: the header a GET gets, no body. On a kept-alive
      // connection the body would be read as the next answer.
      const std::size_t length = res.body().size();
      res.body().clear();
      res.content_length(length);
    }
    Send(std::move(res));
  }

  void Send(http::response<http::string_body> res) {
    res_ = std::move(res);
    stream_.expires_after(options().timeout);
    http::async_write(stream_, res_, [self = this->shared_from_this()](beast::error_code ec, std::size_t) {
      if (ec || !self->res_.keep_alive()) return self->Close();
      self->DoRead();
    });
  }

  void Close() {
    beast::error_code ec;
    stream_.socket().shutdown(net::socket_base::shutdown_both, ec);
    stream_.socket().close(ec);
  }

  beast::basic_stream<Protocol> stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::response<http::string_body> res_;
  Listening* listening_;
  std::string peer_;  // its key in listening_->by_peer
};

// A connection over a bound: told why in a 503 if its socket takes it now,
// then closed, never waited for.
template <class Socket>
void Turn(Socket& socket, const std::string& why) {
  std::ostringstream text;
  text << MakeResponse(11, false, ProblemResponse(503, "ResourceExhausted", why));
  const std::string out = text.str();
  (void)::send(socket.native_handle(), out.data(), out.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  beast::error_code ignored;
  socket.shutdown(net::socket_base::shutdown_both, ignored);
  socket.close(ignored);
}

template <class Acceptor, class Protocol>
void DoAccept(Acceptor* acceptor, Listening* listening) {
  acceptor->async_accept([=](beast::error_code ec, typename Protocol::socket socket) {
    if (ec == net::error::operation_aborted || !acceptor->is_open()) return;
    if (ec) {
      // Out of descriptors (EMFILE, ENFILE) fails again at once: pause, or
      // the loop spins at 100% CPU and answers no one.
      auto timer = std::make_shared<net::steady_timer>(acceptor->get_executor(), std::chrono::milliseconds(100));
      timer->async_wait([acceptor, listening, timer](beast::error_code wait_ec) {
        if (!wait_ec && acceptor->is_open()) DoAccept<Acceptor, Protocol>(acceptor, listening);
      });
      return;
    }
    const Listening::Peer peer = PeerOf(socket);
    if (const std::string why = listening->Admit(peer); why.empty()) {
      std::make_shared<Session<Protocol>>(std::move(socket), listening, peer.key)->Run();
    } else {
      Turn(socket, why);
    }
    DoAccept<Acceptor, Protocol>(acceptor, listening);
  });
}

}  // namespace

ApiResponse ProblemResponse(int status, std::string_view code, std::string_view message) {
  const auto reason = http::obsolete_reason(static_cast<http::status>(status));
  JsonWriter w;
  w.BeginObject()
      .Field("type", "about:blank")
      .Field("title", std::string_view(reason.data(), reason.size()))
      .Field("status", status)
      .Field("detail", message)
      .Key("error")
      .BeginObject()
      .Field("code", code)
      .Field("message", message)
      .EndObject()
      .EndObject();
  return {status, std::move(w).Take(), "application/problem+json"};
}

struct ApiServer::Rep {
  ApiServerOptions options;
  ApiHandler handler;
  // Each listener's own bounds; they outlive every session: sessions go
  // with ioc, reset first.
  Listening tcp_listening, unix_listening;
  std::unique_ptr<net::io_context> ioc = std::make_unique<net::io_context>(1);
  std::optional<tcp::acceptor> tcp_acceptor;
  std::optional<local::acceptor> unix_acceptor;
  std::uint16_t port = 0;
  bool socket_created = false;
  std::thread thread;
  bool stopped = false;

  Status CheckOptions() const {
    const ApiServerOptions& o = options;
    if (o.unix_socket.empty() && o.tcp_address.empty())
      return InvalidArgumentError("no listener: give a Unix socket path or a loopback address");
    if (!o.tcp_address.empty()) {
      if (o.tcp_token.size() < kMinApiTokenLength)
        return InvalidArgumentError("the TCP listener needs a bearer token of at least " +
                                    std::to_string(kMinApiTokenLength) + " characters");
      for (char c : o.tcp_token)
        if (c <= ' ' || c > '~')
          return InvalidArgumentError("the bearer token must be printable ASCII without spaces");
    }
    if (o.max_connections == 0 || o.max_connections_per_peer == 0)
      return InvalidArgumentError("connection bounds must be at least 1");
    if (o.reserved_connections >= o.max_connections)
      return InvalidArgumentError("reserved_connections (" + std::to_string(o.reserved_connections) +
                                  ") must be below max_connections (" + std::to_string(o.max_connections) +
                                  ")");
    return Status::Ok();
  }

  Status ListenTcp() {
    const std::string where = "listen on " + options.tcp_address + ":" + std::to_string(options.tcp_port);
    beast::error_code ec;
    const auto ip = net::ip::make_address(options.tcp_address, ec);
    if (ec) return InvalidArgumentError(where + ": not an IP address");
    if (!ip.is_loopback())
      return InvalidArgumentError(where +
                                  ": not a loopback address (use 127.0.0.1 or ::1, or the Unix socket)");
    const tcp::endpoint ep(ip, options.tcp_port);
    tcp_acceptor.emplace(*ioc);
    tcp_acceptor->open(ep.protocol(), ec);
    if (!ec) tcp_acceptor->set_option(net::socket_base::reuse_address(true), ec);
    if (!ec) tcp_acceptor->bind(ep, ec);
    if (!ec) tcp_acceptor->listen(net::socket_base::max_listen_connections, ec);
    if (ec) return IOError(where + ": " + ec.message());
    port = tcp_acceptor->local_endpoint().port();
    return Status::Ok();
  }

  Status ListenUnix() {
    const std::string& path = options.unix_socket;
    if (path.size() >= sizeof(sockaddr_un{}.sun_path))
      return InvalidArgumentError("socket path '" + path + "' is longer than " +
                                  std::to_string(sizeof(sockaddr_un{}.sun_path) - 1) + " bytes");
    struct stat st;
    if (::lstat(path.c_str(), &st) == 0) {
      if (!S_ISSOCK(st.st_mode)) return FailedPreconditionError(path + " exists and is not a socket");
      local::socket probe(*ioc);
      beast::error_code ec;
      probe.connect(local::endpoint(path), ec);
      if (!ec) return FailedPreconditionError("another server answers on " + path);
      ::unlink(path.c_str());  // stale: its server is gone
    }
    beast::error_code ec;
    unix_acceptor.emplace(*ioc);
    const local::endpoint ep(path);
    unix_acceptor->open(ep.protocol(), ec);
    // The file bind creates takes the socket's mode (less the umask): set
    // before, so that it never exists with more than 0660, not even
    // between the bind and a chmod (a connection made then would outlive it).
    if (!ec && ::fchmod(unix_acceptor->native_handle(), 0660) != 0)
      ec = beast::error_code(errno, beast::system_category());
    if (!ec) unix_acceptor->bind(ep, ec);
    if (!ec) socket_created = true;
    // A umask may have taken the group's bits: give them back (never more).
    if (!ec && ::chmod(path.c_str(), 0660) != 0) ec = beast::error_code(errno, beast::system_category());
    if (!ec) unix_acceptor->listen(net::socket_base::max_listen_connections, ec);
    if (ec) return IOError("listen on " + path + ": " + ec.message());
    return Status::Ok();
  }
};

Result<std::unique_ptr<ApiServer>> ApiServer::Start(ApiServerOptions options, ApiHandler handler) {
  auto rep = std::make_unique<Rep>();
  rep->options = std::move(options);
  rep->handler = std::move(handler);
  EXLR8_RETURN_IF_ERROR(rep->CheckOptions());
  std::unique_ptr<ApiServer> server(new ApiServer(std::move(rep)));  // Stop() cleans up on any error below
  Rep& r = *server->rep_;
  if (!r.options.tcp_address.empty()) EXLR8_RETURN_IF_ERROR(r.ListenTcp());
  if (!r.options.unix_socket.empty()) EXLR8_RETURN_IF_ERROR(r.ListenUnix());
  for (Listening* l : {&r.tcp_listening, &r.unix_listening}) {
    l->handler = &r.handler;
    l->options = &r.options;
    l->port = r.port;
    l->own_uid = ::geteuid();
  }
  r.tcp_listening.tcp = true;
  if (r.tcp_acceptor) DoAccept<tcp::acceptor, tcp>(&*r.tcp_acceptor, &r.tcp_listening);
  if (r.unix_acceptor) DoAccept<local::acceptor, local>(&*r.unix_acceptor, &r.unix_listening);
  r.thread = std::thread([&r] { r.ioc->run(); });
  return server;
}

ApiServer::ApiServer(std::unique_ptr<Rep> rep) : rep_(std::move(rep)) {}

ApiServer::~ApiServer() { Stop(); }

std::uint16_t ApiServer::tcp_port() const { return rep_->port; }

void ApiServer::Stop() {
  Rep& r = *rep_;
  if (r.stopped) return;
  r.stopped = true;
  r.ioc->stop();
  if (r.thread.joinable()) r.thread.join();
  // The loop is gone: close the listeners, then drop every pending handler,
  // which closes the connections they hold, so clients see the end at once.
  r.tcp_acceptor.reset();
  r.unix_acceptor.reset();
  r.ioc.reset();
  if (r.socket_created) ::unlink(r.options.unix_socket.c_str());
}

}  // namespace exlr8
