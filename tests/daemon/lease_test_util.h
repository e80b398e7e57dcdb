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

}  // namespace exlr8
