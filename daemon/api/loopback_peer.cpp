#include "daemon/api/loopback_peer.h"

#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

namespace exlr8 {

using tcp = boost::asio::ip::tcp;

std::optional<uid_t> LoopbackPeerUid(const tcp::endpoint& client, const tcp::endpoint& server) {
  if (client.address().is_v4() != server.address().is_v4()) return std::nullopt;
  const int fd = ::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
  if (fd < 0) return std::nullopt;
  const timeval wait{0, 200'000};  // the kernel answers at once; never hold the server's thread long
  (void)::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait);
  struct {
    nlmsghdr header;
    inet_diag_req_v2 req;
  } msg{};
  msg.header.nlmsg_len = sizeof msg;
  msg.header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  msg.header.nlmsg_flags = NLM_F_REQUEST;
  msg.req.sdiag_family = client.address().is_v4() ? AF_INET : AF_INET6;
  msg.req.sdiag_protocol = IPPROTO_TCP;
  msg.req.idiag_states = ~0u;
  // The client's socket: its own end is the source.
  msg.req.id.idiag_sport = htons(client.port());
  msg.req.id.idiag_dport = htons(server.port());
  if (client.address().is_v4()) {
    const auto c = client.address().to_v4().to_bytes(), s = server.address().to_v4().to_bytes();
    std::memcpy(msg.req.id.idiag_src, c.data(), c.size());
    std::memcpy(msg.req.id.idiag_dst, s.data(), s.size());
  } else {
    const auto c = client.address().to_v6().to_bytes(), s = server.address().to_v6().to_bytes();
    std::memcpy(msg.req.id.idiag_src, c.data(), c.size());
    std::memcpy(msg.req.id.idiag_dst, s.data(), s.size());
  }
  msg.req.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
  msg.req.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  std::optional<uid_t> uid;
  alignas(nlmsghdr) char buf[1024];
  if (::sendto(fd, &msg, sizeof msg, 0, reinterpret_cast<const sockaddr*>(&kernel), sizeof kernel) ==
      static_cast<ssize_t>(sizeof msg)) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    const auto* h = reinterpret_cast<const nlmsghdr*>(buf);
    if (n >= static_cast<ssize_t>(sizeof(nlmsghdr)) && NLMSG_OK(h, static_cast<unsigned>(n)) &&
        h->nlmsg_type == SOCK_DIAG_BY_FAMILY && h->nlmsg_len >= NLMSG_LENGTH(sizeof(inet_diag_msg))) {
      const auto* m = static_cast<const inet_diag_msg*>(NLMSG_DATA(h));
      if (m->id.idiag_sport == htons(client.port()) && m->id.idiag_dport == htons(server.port()))
        uid = m->idiag_uid;
    }
  }
  ::close(fd);
  return uid;
}

}  // namespace exlr8
