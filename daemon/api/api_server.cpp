#include "daemon/api/api_server.h"

#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <atomic>
#include <optional>
#include <thread>

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
  res.keep_alive(keep_alive);
  res.body() = a.body;
  res.prepare_payload();
  return res;
}

// One connection: read a request, answer it, again while keep-alive.
// What the acceptors share: the handler, the limits, the open count.
struct Listening {
  const ApiHandler* handler = nullptr;
  std::chrono::seconds timeout{10};
  std::size_t max_connections = 0;
  std::atomic<std::size_t> open{0};  // sessions alive
};

template <class Protocol>
class Session : public std::enable_shared_from_this<Session<Protocol>> {
 public:
  Session(typename Protocol::socket&& socket, Listening* listening)
      : stream_(std::move(socket)), handler_(listening->handler), timeout_(listening->timeout), listening_(listening) {
    listening_->open.fetch_add(1);
  }
  ~Session() { listening_->open.fetch_sub(1); }

  void Run() { DoRead(); }

 private:
  void DoRead() {
    parser_.emplace();
    parser_->header_limit(kHeaderLimit);
    parser_->body_limit(kBodyLimit);
    stream_.expires_after(timeout_);
    http::async_read(stream_, buffer_, *parser_,
                     beast::bind_front_handler(&Session::OnRead, this->shared_from_this()));
  }

  void OnRead(beast::error_code ec, std::size_t) {
    if (ec == http::error::header_limit || ec == http::error::body_limit) {
      const bool header = ec == http::error::header_limit;
      return Send(MakeResponse(11, false,
                               {header ? 431 : 413, std::string("{\"error\":{\"code\":\"InvalidArgument\",\"message\":"
                                                                "\"request ") +
                                                        (header ? "header" : "body") + " too large\"}}"}));
    }
    if (ec == http::error::end_of_stream || ec == beast::error::timeout || ec == net::error::connection_reset ||
        ec == net::error::eof)
      return Close();
    if (ec) {  // not HTTP: say so once, then close
      return Send(MakeResponse(11, false, {400, "{\"error\":{\"code\":\"InvalidArgument\",\"message\":"
                                                "\"malformed HTTP request\"}}"}));
    }
    const auto& req = parser_->get();
    // A HEAD is answered as the GET of the same target, less its body (below).
    const bool head = req.method() == http::verb::head;
    ApiRequest request{head ? std::string("GET") : std::string(req.method_string()), std::string(req.target()),
                       req.body()};
    ApiResponse answer;
    try {
      answer = (*handler_)(request);
    } catch (const std::exception& e) {  // a bug; the server keeps serving
      answer = {500, "{\"error\":{\"code\":\"Internal\",\"message\":\"handler failed\"}}"};
    }
    http::response<http::string_body> res = MakeResponse(req.version(), req.keep_alive(), answer);
    if (head) {
      // RFC 9110 9.3.2: the header a GET gets, no body. On a kept-alive
      // connection the body would be read as the next answer (found by
      // review: every HEAD got a 405 with its JSON body).
      const std::size_t length = res.body().size();
      res.body().clear();
      res.content_length(length);
    }
    Send(std::move(res));
  }

  void Send(http::response<http::string_body> res) {
    res_ = std::move(res);
    stream_.expires_after(timeout_);
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
  const ApiHandler* handler_;
  std::chrono::seconds timeout_;
  Listening* listening_;
};

template <class Acceptor, class Protocol>
void DoAccept(Acceptor* acceptor, Listening* listening) {
  acceptor->async_accept([=](beast::error_code ec, typename Protocol::socket socket) {
    if (ec == net::error::operation_aborted || !acceptor->is_open()) return;
    if (ec) {
      // Out of descriptors (EMFILE, ENFILE) fails again at once: pause, or
      // the loop spins at 100% CPU and answers no one (found by review).
      auto timer = std::make_shared<net::steady_timer>(acceptor->get_executor(), std::chrono::milliseconds(100));
      timer->async_wait([acceptor, listening, timer](beast::error_code wait_ec) {
        if (!wait_ec && acceptor->is_open()) DoAccept<Acceptor, Protocol>(acceptor, listening);
      });
      return;
    }
    if (listening->open.load() < listening->max_connections) {
      std::make_shared<Session<Protocol>>(std::move(socket), listening)->Run();
    } else {
      beast::error_code ignored;
      socket.close(ignored);  // over the bound: closed unanswered
    }
    DoAccept<Acceptor, Protocol>(acceptor, listening);
  });
}

}  // namespace

struct ApiServer::Rep {
  ApiServerOptions options;
  ApiHandler handler;
  Listening listening;  // outlives every session: they go with ioc, reset first
  std::unique_ptr<net::io_context> ioc = std::make_unique<net::io_context>(1);
  std::optional<tcp::acceptor> tcp_acceptor;
  std::optional<local::acceptor> unix_acceptor;
  std::uint16_t port = 0;
  bool socket_created = false;
  std::thread thread;
  bool stopped = false;

  Status ListenTcp() {
    const std::string where = "listen on " + options.tcp_address + ":" + std::to_string(options.tcp_port);
    beast::error_code ec;
    const auto ip = net::ip::make_address(options.tcp_address, ec);
    if (ec) return InvalidArgumentError(where + ": not an IP address");
    if (!ip.is_loopback())
      return InvalidArgumentError(where + ": not a loopback address (the API has no authentication; use "
                                          "127.0.0.1 or ::1, or the Unix socket)");
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
    if (!ec) unix_acceptor->bind(ep, ec);
    if (!ec) socket_created = true;
    if (!ec) unix_acceptor->listen(net::socket_base::max_listen_connections, ec);
    if (ec) return IOError("listen on " + path + ": " + ec.message());
    ::chmod(path.c_str(), 0660);
    return Status::Ok();
  }
};

Result<std::unique_ptr<ApiServer>> ApiServer::Start(ApiServerOptions options, ApiHandler handler) {
  if (options.unix_socket.empty() && options.tcp_address.empty())
    return InvalidArgumentError("no listener: give a Unix socket path or a loopback address");
  auto rep = std::make_unique<Rep>();
  rep->options = std::move(options);
  rep->handler = std::move(handler);
  std::unique_ptr<ApiServer> server(new ApiServer(std::move(rep)));  // Stop() cleans up on any error below
  Rep& r = *server->rep_;
  if (!r.options.tcp_address.empty()) EXLR8_RETURN_IF_ERROR(r.ListenTcp());
  if (!r.options.unix_socket.empty()) EXLR8_RETURN_IF_ERROR(r.ListenUnix());
  r.listening.handler = &r.handler;
  r.listening.timeout = r.options.timeout;
  r.listening.max_connections = r.options.max_connections;
  if (r.tcp_acceptor) DoAccept<tcp::acceptor, tcp>(&*r.tcp_acceptor, &r.listening);
  if (r.unix_acceptor) DoAccept<local::acceptor, local>(&*r.unix_acceptor, &r.listening);
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
