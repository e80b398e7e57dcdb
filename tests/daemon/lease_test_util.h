// A lessee for the tests of the holder (exlr8d-stage --hold): connects to
// the lease socket, reads the description to the end of the holder's
// stream, and keeps the connection open, which makes it a lessee until the
// returned descriptor closes.
#pragma once

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "daemon/base/posix.h"

namespace exlr8 {

// An invalid descriptor when the socket does not answer (or its path is
// too long for sockaddr_un).
inline UniqueFd ConnectAsLessee(const std::string& socket_path, std::string* description) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (!fd.valid() || socket_path.size() >= sizeof addr.sun_path) return UniqueFd();
  std::memcpy(addr.sun_path, socket_path.c_str(), socket_path.size() + 1);
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) return UniqueFd();
  char buf[4096];
  for (ssize_t n; (n = ::read(fd.get(), buf, sizeof buf)) > 0;) description->append(buf, static_cast<std::size_t>(n));
  return fd;
}

// Lease protocol v2's opening (schema/lease/PROTOCOL.md), for tests that
// need no mapping (a device image where the test links no CUDA): reads the
// description line, closes every descriptor that came with it and keeps the
// connection, a lessee until the returned descriptor closes. `*fds` counts
// the descriptors received. An invalid descriptor when the socket does not
// answer or the stream ends before the line's end.
inline UniqueFd ConnectAsLesseeV2(const std::string& socket_path, std::string* description, int* fds) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (!fd.valid() || socket_path.size() >= sizeof addr.sun_path) return UniqueFd();
  std::memcpy(addr.sun_path, socket_path.c_str(), socket_path.size() + 1);
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) return UniqueFd();
  *fds = 0;
  while (description->find('\n') == std::string::npos) {
    char buf[4096];
    alignas(cmsghdr) char control[CMSG_SPACE(18 * sizeof(int))];
    iovec iov{buf, sizeof buf};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    const ssize_t n = ::recvmsg(fd.get(), &msg, MSG_CMSG_CLOEXEC);
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); n >= 0 && c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (std::size_t i = 0; i < count; ++i) {
        int received = -1;
        std::memcpy(&received, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        ::close(received);
        ++*fds;
      }
    }
    if (n <= 0) return UniqueFd();
    description->append(buf, static_cast<std::size_t>(n));
  }
  description->resize(description->find('\n'));
  return fd;
}

}  // namespace exlr8
