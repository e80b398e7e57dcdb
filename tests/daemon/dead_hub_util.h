// Hubs that cannot be reached, on loopback, for the tests of what a pull
// does without its hub: a port that refuses connections and one where a
// connection is never answered (it times out).
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace exlr8::testing {

// A loopback port this object holds without listening: every connection to
// it is refused (RST), and no other process can start listening there
// while it is held.
class RefusingPort {
 public:
  RefusingPort() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd_ >= 0 && ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0)
      port_ = ntohs(a.sin_port);
  }
  ~RefusingPort() {
    if (fd_ >= 0) ::close(fd_);
  }
  RefusingPort(const RefusingPort&) = delete;
  RefusingPort& operator=(const RefusingPort&) = delete;

  int port() const { return port_; }  // 0 when it could not be had
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// A loopback port that listens with a backlog of 0 and never accepts, its
// queue filled by connections of its own: Linux drops the SYN of any
// further connection (the accept queue is full), so a client's connect
// times out, deterministically.
class SilentPort {
 public:
  SilentPort() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_, 0) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      return;
    // Connect until one connection is left unanswered for 300 ms.
    for (int i = 0; i < 16 && !full_; ++i) {
      const int c = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (c < 0) return;
      fillers_.push_back(c);
      if (::connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) continue;
      pollfd p{c, POLLOUT, 0};
      full_ = ::poll(&p, 1, 300) == 0;
    }
    if (full_) port_ = ntohs(a.sin_port);
  }
  ~SilentPort() {
    for (int c : fillers_) ::close(c);
    if (fd_ >= 0) ::close(fd_);
  }
  SilentPort(const SilentPort&) = delete;
  SilentPort& operator=(const SilentPort&) = delete;

  int port() const { return port_; }  // 0 when the queue could not be filled
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  int fd_ = -1;
  int port_ = 0;
  bool full_ = false;
  std::vector<int> fillers_;
};

}  // namespace exlr8::testing
