// The lessee's side of the lease socket: connect to a holder's Unix socket,
// read its description to the end of the holder's stream, and keep the
// connection open for as long as the leased memory is used.
//
// Protocol (the holder's side is daemon/stage/lease_server.h): the holder
// answers every connection with one description (description.h), then ends
// its side of the stream and keeps the connection open. A lessee holds it
// while it uses the memory; it lets go by closing the connection, and must
// not shut down its writing side before that (the holder reads end of
// stream as letting go: having shut down its own side, it cannot tell a
// half-close from a close). When told to stop, the holder takes no new
// lessees and waits for the connected ones to let go before it frees the
// memory.
//
// No CUDA: mapping the handles is open_lease.h's (CUDA builds only).
#pragma once

#include <sys/un.h>

#include <cstddef>
#include <filesystem>

#include "client/lease/description.h"
#include "format/status.h"

namespace exlr8 {

// Connections a holder keeps open at once; one more is closed unanswered.
inline constexpr std::size_t kMaxLeaseLessees = 256;

// The address of the Unix socket at `path`: InvalidArgument when the path
// does not fit (108 bytes on Linux). Shared by the holder and the lessee.
Result<sockaddr_un> UnixSocketAddress(const std::filesystem::path& path);

// An open connection to a holder: while it is open, its owner is a lessee.
// Move-only; the destructor closes it, which lets go of the lease. Not
// synchronized: one owner at a time.
class LeaseConnection {
 public:
  LeaseConnection() = default;
  explicit LeaseConnection(int fd) : fd_(fd) {}
  LeaseConnection(LeaseConnection&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  LeaseConnection& operator=(LeaseConnection&& other) noexcept;
  LeaseConnection(const LeaseConnection&) = delete;
  LeaseConnection& operator=(const LeaseConnection&) = delete;
  ~LeaseConnection() { Close(); }

  bool valid() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  // Lets go of the lease now. Idempotent.
  void Close();

 private:
  int fd_ = -1;
};

struct ReceivedLease {
  LeaseConnection connection;
  LeaseDescription description;
};

// Connects to the holder at `path` and reads its description (blocking; any
// thread). NotFound when no socket is there, the connect's error otherwise;
// Unavailable when the holder closed without a description (it is stopping,
// or holds its maximum of lessees); Corruption for a malformed or oversized
// description (ParseLeaseDescription, with `path` as its source).
Result<ReceivedLease> ReceiveLease(const std::filesystem::path& path);

}  // namespace exlr8
