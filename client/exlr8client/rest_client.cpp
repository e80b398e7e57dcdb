#include "client/exlr8client/rest_client.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>

#include "exlr8/exlr8client.h"

namespace exlr8::rest {
namespace {

using Clock = std::chrono::steady_clock;

// A descriptor closed on destruction.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_;
};

bool HasControlOrSpace(std::string_view s) {
  for (unsigned char c : s)
    if (c <= 0x20 || c == 0x7f) return true;
  return false;
}

bool IsToken(std::string_view s) {
  if (s.empty()) return false;
  for (unsigned char c : s)
    if (!(std::isalnum(c) || std::strchr("!#$%&'*+-.^_`|~", c) != nullptr) || c == 0) return false;
  return true;
}

// Milliseconds left before `deadline` (0 once passed), for poll.
int MsLeft(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : left > 0x7fffffff ? 0x7fffffff : static_cast<int>(left);
}

std::string ErrnoText(int e) { return std::strerror(e); }

Status ConnectError(const Endpoint& ep, int e, const std::string& where) {
  const std::string m = "cannot connect to " + ep.text + where + ": " + ErrnoText(e);
  return e == EACCES || e == EPERM ? PermissionDeniedError(m) : UnavailableError(m);
}

// Waits for `events` on fd until `deadline`: OK, or Unavailable for the
// timeout ("`what` took over N ms").
Status Wait(int fd, short events, Clock::time_point deadline, const Endpoint& ep, const char* what,
            std::chrono::milliseconds timeout) {
  while (true) {
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, MsLeft(deadline));
    if (n > 0) return Status::Ok();
    if (n == 0)
      return UnavailableError(std::string(what) + " " + ep.text + " took over " +
                              std::to_string(timeout.count()) + " ms (the timeout)");
    if (errno != EINTR) return UnavailableError(std::string("poll on ") + ep.text + ": " + ErrnoText(errno));
  }
}

// Connects a non-blocking socket of `family` to `addr` before `deadline`.
Result<int> ConnectOne(int family, const sockaddr* addr, socklen_t len, const Endpoint& ep,
                       Clock::time_point deadline, std::chrono::milliseconds timeout,
                       const std::string& where) {
  const int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return UnavailableError("socket for " + ep.text + ": " + ErrnoText(errno));
  Fd owned(fd);
  if (::connect(fd, addr, len) != 0) {
    if (errno != EINPROGRESS && errno != EAGAIN) return ConnectError(ep, errno, where);
    Status w = Wait(fd, POLLOUT, deadline, ep, "connecting to", timeout);
    if (!w.ok()) return w;
    int err = 0;
    socklen_t err_len = sizeof err;
    if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &err_len) != 0) err = errno;
    if (err != 0) return ConnectError(ep, err, where);
  }
  return owned.release();
}

}  // namespace

Result<Endpoint> ParseEndpoint(std::string_view text) {
  Endpoint ep;
  ep.text = std::string(text);
  if (text.empty())
    return InvalidArgumentError("the REST endpoint is empty (\"unix:PATH\" or \"http://HOST:PORT\")");
  if (text.rfind("unix:", 0) == 0 || text.front() == '/') {
    ep.unix_socket = true;
    ep.path = std::string(text.front() == '/' ? text : text.substr(5));
    if (ep.path.empty() || ep.path.front() != '/')
      return InvalidArgumentError("REST endpoint " + ep.text + ": the socket's path must be absolute");
    if (ep.path.size() + 1 > sizeof(sockaddr_un{}.sun_path))
      return InvalidArgumentError("REST endpoint " + ep.text + ": the socket's path is longer than " +
                                  std::to_string(sizeof(sockaddr_un{}.sun_path) - 1) + " bytes");
    if (ep.path.find('\0') != std::string::npos)
      return InvalidArgumentError("REST endpoint " + ep.text + ": a NUL in the path");
    ep.authority = "localhost";
    return ep;
  }
  if (text.rfind("https://", 0) == 0)
    return InvalidArgumentError("REST endpoint " + ep.text +
                                ": exlr8d serves plain HTTP on loopback, not https");
  if (text.rfind("http://", 0) != 0)
    return InvalidArgumentError("REST endpoint " + ep.text +
                                ": not \"unix:PATH\", an absolute path or \"http://HOST:PORT\"");
  std::string_view rest = text.substr(7);
  const std::size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  if (slash != std::string_view::npos) {
    std::string_view prefix = rest.substr(slash);
    while (!prefix.empty() && prefix.back() == '/') prefix.remove_suffix(1);
    ep.prefix = std::string(prefix);
  }
  if (HasControlOrSpace(authority) || HasControlOrSpace(ep.prefix) ||
      authority.find('@') != std::string_view::npos)
    return InvalidArgumentError("REST endpoint " + ep.text +
                                ": a space, control character or user in the URL");
  std::string_view host, port;
  if (!authority.empty() && authority.front() == '[') {
    const std::size_t close = authority.find(']');
    if (close == std::string_view::npos) return InvalidArgumentError("REST endpoint " + ep.text + ": no ']'");
    host = authority.substr(1, close - 1);
    std::string_view after = authority.substr(close + 1);
    if (!after.empty() && after.front() != ':')
      return InvalidArgumentError("REST endpoint " + ep.text + ": text after ']'");
    port = after.empty() ? std::string_view() : after.substr(1);
  } else {
    const std::size_t colon = authority.rfind(':');
    host = authority.substr(0, colon);
    port = colon == std::string_view::npos ? std::string_view() : authority.substr(colon + 1);
  }
  if (host.empty()) return InvalidArgumentError("REST endpoint " + ep.text + ": no host");
  if (port.empty()) port = "80";
  if (port.size() > 5 ||
      !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
      std::stoul(std::string(port)) == 0 || std::stoul(std::string(port)) > 65535)
    return InvalidArgumentError("REST endpoint " + ep.text + ": port \"" + std::string(port) +
                                "\" is not 1..65535");
  ep.host = std::string(host);
  ep.port = std::string(port);
  ep.authority = std::string(authority);
  return ep;
}

std::string QueryEscape(std::string_view s) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

Result<HttpResponse> Exchange(const Endpoint& ep, const HttpRequest& request,
                              std::chrono::milliseconds timeout, const HttpLimits& limits) {
  if (!IsToken(request.method))
    return InvalidArgumentError("the method \"" + request.method.substr(0, 40) + "\" is not an HTTP token");
  if (request.path.empty() || request.path.front() != '/' || HasControlOrSpace(request.path))
    return InvalidArgumentError("the path \"" + request.path.substr(0, 80) +
                                "\" must start with '/' and hold no space or control character");
  for (unsigned char c : request.token)
    if (c < 0x21 || c == 0x7f)
      return InvalidArgumentError("the API token holds a space or control character");

  const Clock::time_point deadline = Clock::now() + timeout;
  int fd = -1;
  if (ep.unix_socket) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, ep.path.c_str(), ep.path.size() + 1);
    auto c =
        ConnectOne(AF_UNIX, reinterpret_cast<const sockaddr*>(&addr), sizeof addr, ep, deadline, timeout, "");
    if (!c.ok()) return c.status();
    fd = *c;
  } else {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    addrinfo* found = nullptr;
    const int rc = ::getaddrinfo(ep.host.c_str(), ep.port.c_str(), &hints, &found);
    if (rc != 0)
      return UnavailableError("cannot connect to " + ep.text + ": cannot resolve " + ep.host + ": " +
                              ::gai_strerror(rc));
    Status last = UnavailableError("cannot connect to " + ep.text + ": no address");
    for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
      auto c = ConnectOne(a->ai_family, a->ai_addr, a->ai_addrlen, ep, deadline, timeout, "");
      if (c.ok()) {
        fd = *c;
      } else {
        last = c.status();
      }
    }
    ::freeaddrinfo(found);
    if (fd < 0) return last;
  }
  Fd conn(fd);

  std::string out;
  out.reserve(256 + request.body.size());
  out += request.method + " " + ep.prefix + request.path + " HTTP/1.1\r\n";
  out += "Host: " + ep.authority + "\r\n";
  out += "User-Agent: libexlr8client/" + std::to_string(EXLR8_CLIENT_VERSION_MAJOR) + "." +
         std::to_string(EXLR8_CLIENT_VERSION_MINOR) + "." + std::to_string(EXLR8_CLIENT_VERSION_PATCH);
  out += "\r\nAccept: application/json\r\nConnection: close\r\n";
  if (!request.token.empty()) out += "Authorization: Bearer " + request.token + "\r\n";
  const bool with_body = !request.body.empty() || request.method == "POST" || request.method == "PUT" ||
                         request.method == "PATCH";
  if (with_body) {
    out +=
        "Content-Type: application/json\r\nContent-Length: " + std::to_string(request.body.size()) + "\r\n";
  }
  out += "\r\n";
  out += request.body;

  for (std::size_t sent = 0; sent < out.size();) {
    const ssize_t n = ::send(fd, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      Status w = Wait(fd, POLLOUT, deadline, ep, "sending the request to", timeout);
      if (!w.ok()) return w;
      continue;
    }
    // The server may have answered and closed early (a 413, a 401): read that.
    if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) break;
    return UnavailableError("sending the request to " + ep.text + ": " + ErrnoText(errno));
  }

  HttpResponseParser parser(limits, request.method == "HEAD");
  char buf[16384];
  while (true) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n > 0) {
      Status s = parser.Feed(std::string_view(buf, static_cast<std::size_t>(n)));
      if (s.ok()) break;
      if (s.code() != StatusCode::kNeedMore)
        return Status(s.code(), "the answer from " + ep.text + ": " + s.message());
      continue;
    }
    if (n == 0) {
      Status s = parser.Finish();
      if (!s.ok()) return Status(s.code(), "the answer from " + ep.text + ": " + s.message());
      break;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      Status w = Wait(fd, POLLIN, deadline, ep, "waiting for the answer of", timeout);
      if (!w.ok()) return w;
      continue;
    }
    return UnavailableError("reading the answer from " + ep.text + ": " + ErrnoText(errno));
  }
  return parser.Take();
}

}  // namespace exlr8::rest
