// Who is at the other end of a loopback TCP connection, as the kernel
// says (Linux only). The REST API bounds connections per user with it.
#pragma once

#include <sys/types.h>

#include <boost/asio/ip/tcp.hpp>
#include <optional>

namespace exlr8 {

// The uid owning the client's end of a loopback TCP connection, from the
// kernel's socket table (sock_diag, the exact socket by its addresses);
// nullopt when the kernel does not say (the client already gone, no
// NETLINK_SOCK_DIAG). Waits at most 200 ms for the kernel's answer.
std::optional<uid_t> LoopbackPeerUid(const boost::asio::ip::tcp::endpoint& client,
                                     const boost::asio::ip::tcp::endpoint& server);

}  // namespace exlr8
