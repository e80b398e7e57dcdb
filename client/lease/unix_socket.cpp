// UnixSocketAddress (declared in client/lease/lease_client.h), apart from
// the v1 lessee so that a v2 lessee (libexlr8client) links it alone.
#include <sys/socket.h>
#include <sys/un.h>

#include <cstring>
#include <string>

#include "client/lease/lease_client.h"

namespace exlr8 {

Result<sockaddr_un> UnixSocketAddress(const std::filesystem::path& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.native().size() + 1 > sizeof addr.sun_path)
    return InvalidArgumentError("socket path " + path.string() + " is longer than " +
                                std::to_string(sizeof addr.sun_path - 1) + " bytes");
  std::memcpy(addr.sun_path, path.c_str(), path.native().size() + 1);
  return addr;
}

}  // namespace exlr8
