#include "client/lease/lease_client.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace exlr8 {

namespace {

// The errno of a failed socket call as a Status (NotFound for a missing
// socket file, PermissionDenied for one the caller may not use).
Status SocketError(int err, const std::string& what) {
  std::string msg = what + ": " + ::strerrordesc_np(err);
  switch (err) {
    case ENOENT:
      return NotFoundError(std::move(msg));
    case EACCES:
    case EPERM:
      return PermissionDeniedError(std::move(msg));
    default:
      return IOError(std::move(msg));
  }
}

}  // namespace

LeaseConnection& LeaseConnection::operator=(LeaseConnection&& other) noexcept {
  if (this != &other) {
    Close();
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

void LeaseConnection::Close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Result<ReceivedLease> ReceiveLease(const std::filesystem::path& path) {
  EXLR8_ASSIGN_OR_RETURN(sockaddr_un addr, UnixSocketAddress(path));
  LeaseConnection connection(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!connection.valid()) return SocketError(errno, "socket");
  if (::connect(connection.fd(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0)
    return SocketError(errno, "connect to the lease holder at " + path.string());
  // The holder sends the description, then ends its side of the stream;
  // the connection stays open while the lease is used (the holder's count
  // of lessees).
  std::string text;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(connection.fd(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return SocketError(errno, "read the lease description from " + path.string());
    if (n == 0) break;
    text.append(buf, static_cast<std::size_t>(n));
    if (text.size() > kMaxLeaseDescriptionBytes)
      return CorruptionError("lease description from " + path.string() + " is larger than " +
                             std::to_string(kMaxLeaseDescriptionBytes) + " bytes");
  }
  if (text.empty())
    return UnavailableError("the lease holder at " + path.string() +
                            " closed the connection without a description (it is stopping, or holds " +
                            std::to_string(kMaxLeaseLessees) + " lessees already)");
  EXLR8_ASSIGN_OR_RETURN(LeaseDescription description, ParseLeaseDescription(text, path.string()));
  return ReceivedLease{std::move(connection), std::move(description)};
}

}  // namespace exlr8
