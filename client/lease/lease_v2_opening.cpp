#include "client/lease/lease_v2_opening.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "client/lease/lease_client.h"  // UnixSocketAddress, kMaxLeaseLessees

namespace exlr8 {

Status LeaseSocketError(int err, const std::string& what) {
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

namespace {

// A read-only shared mapping, unmapped on destruction.
struct Mapping {
  void* addr = MAP_FAILED;
  std::size_t bytes = 0;
  Mapping() = default;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() {
    if (addr != MAP_FAILED) ::munmap(addr, bytes);
  }
  const std::byte* data() const { return static_cast<const std::byte*>(addr); }
};

// Room for more descriptors than any description names, so that a holder
// sending too many is told so rather than cut short by the kernel.
constexpr std::size_t kCmsgFds = 2 * kMaxLeaseV2Fds;

// One recvmsg: bytes into `buf`, descriptors appended to `fds` (close on
// exec). Returns the byte count (0 at end of stream) or -1 with errno;
// `fds_came` says whether this message carried descriptors; a truncated
// control message is reported by `truncated`.
ssize_t ReceiveSome(int fd, char* buf, std::size_t size, int flags, LeaseV2Fds& fds, bool& fds_came,
                    bool& truncated, bool& other_cmsg) {
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kCmsgFds)];
  iovec iov{buf, size};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  fds_came = truncated = other_cmsg = false;
  const ssize_t n = ::recvmsg(fd, &msg, flags | MSG_CMSG_CLOEXEC);
  if (n < 0) return n;
  truncated = (msg.msg_flags & MSG_CTRUNC) != 0;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      const unsigned char* p = CMSG_DATA(c);
      for (std::size_t i = 0; i < count; ++i) {
        int received;
        std::memcpy(&received, p + i * sizeof(int), sizeof(int));
        fds.fds.push_back(received);
      }
      fds_came = true;
    } else {
      other_cmsg = true;
    }
  }
  return n;
}

std::string ByteCount(std::uint64_t n) { return std::to_string(n) + " bytes"; }

}  // namespace

LeaseV2Fds::~LeaseV2Fds() {
  for (int fd : fds) ::close(fd);
}

int ReceivedLeaseV2::allocation_fd(std::uint32_t i) const {
  std::size_t index = 0;
  for (std::uint32_t j = 0; j < i; ++j) index += description.allocations[j].is_fd() ? 1 : 0;
  return fds.fds[index];
}

LeaseV2Connection::LeaseV2Connection(LeaseV2Connection&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), lines_(std::move(other.lines_)), release_(other.release_) {}

LeaseV2Connection& LeaseV2Connection::operator=(LeaseV2Connection&& other) noexcept {
  if (this != &other) {
    Close();
    fd_ = std::exchange(other.fd_, -1);
    lines_ = std::move(other.lines_);
    release_ = other.release_;
  }
  return *this;
}

void LeaseV2Connection::Close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Result<std::optional<LeaseV2Release>> LeaseV2Connection::PollRelease() {
  if (release_) return release_;
  if (fd_ < 0) return FailedPreconditionError("lease socket: the lease is closed");
  for (;;) {
    if (std::optional<std::string> line = lines_.NextLine()) {
      EXLR8_ASSIGN_OR_RETURN(LeaseRelease r, ParseLeaseHolderLine(*line));
      release_ = LeaseV2Release{r.deadline_s, false};
      return release_;
    }
    char buf[512];
    LeaseV2Fds fds;
    bool fds_came = false, truncated = false, other = false;
    const ssize_t n = ReceiveSome(fd_, buf, sizeof buf, MSG_DONTWAIT, fds, fds_came, truncated, other);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return std::optional<LeaseV2Release>();
    if (n < 0) return LeaseSocketError(errno, "lease socket: read from the holder");
    if (fds_came || truncated || other)
      return CorruptionError("lease socket: the holder sent " + std::to_string(fds.fds.size()) +
                             " file descriptors (or other control data) after the description");
    if (n == 0) {
      release_ = LeaseV2Release{0, true};
      return release_;
    }
    EXLR8_RETURN_IF_ERROR(lines_.Append(std::string_view(buf, static_cast<std::size_t>(n))));
  }
}

Result<std::optional<LeaseV2Release>> LeaseV2Connection::WaitRelease(std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    EXLR8_ASSIGN_OR_RETURN(std::optional<LeaseV2Release> r, PollRelease());
    if (r) return r;
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
    if (left.count() <= 0) return std::optional<LeaseV2Release>();
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(std::min<long long>(left.count() + 1, 60'000))) < 0 && errno != EINTR)
      return LeaseSocketError(errno, "lease socket: poll");
  }
}

Result<ReceivedLeaseV2> ReceiveLeaseV2(const std::filesystem::path& path, std::chrono::milliseconds timeout) {
  const std::string where = "lease holder at " + path.string();
  EXLR8_ASSIGN_OR_RETURN(sockaddr_un addr, UnixSocketAddress(path));
  LeaseV2Connection conn;
  conn.fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (conn.fd_ < 0) return LeaseSocketError(errno, "socket");
  if (::connect(conn.fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0)
    return LeaseSocketError(errno, "connect to the " + where);
  // The whole description within `timeout`, however the holder drips it.
  const auto end = std::chrono::steady_clock::now() + timeout;
  const auto set_timeout = [&]() -> bool {
    const long long ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now()).count();
    if (ms <= 0) return false;
    timeval tv{};
    tv.tv_sec = static_cast<time_t>(ms / 1000);
    tv.tv_usec = static_cast<suseconds_t>((ms % 1000) * 1000);
    return ::setsockopt(conn.fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) == 0;
  };
  const std::string too_slow =
      "the " + where + " sent no whole description within " + std::to_string(timeout.count()) + " ms";

  // The description line; its descriptors ride on its first byte.
  LeaseV2Fds fds;
  LeaseLineReader reader(kMaxLeaseDescriptionV2Bytes);
  std::string seen;  // the start of what came, to name a v1 holder
  bool any_bytes = false;
  std::optional<std::string> line;
  while (!line) {
    char buf[1 << 14];
    bool fds_came = false, truncated = false, other = false;
    const std::size_t before = fds.fds.size();
    if (!set_timeout()) return UnavailableError(too_slow);
    const ssize_t n = ReceiveSome(conn.fd_, buf, sizeof buf, 0, fds, fds_came, truncated, other);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return UnavailableError(too_slow);
    if (n < 0) return LeaseSocketError(errno, "read the lease description from the " + where);
    if (truncated)
      return CorruptionError("lease description from " + path.string() + ": more than " +
                             std::to_string(kCmsgFds) + " file descriptors came with it");
    if (other)
      return CorruptionError("lease description from " + path.string() +
                             ": control data other than SCM_RIGHTS");
    if (fds_came && any_bytes)
      return CorruptionError("lease description from " + path.string() + ": " +
                             std::to_string(fds.fds.size() - before) +
                             " file descriptors came after its first byte (all must come with it)");
    if (n == 0) {
      if (!any_bytes)
        return UnavailableError("the " + where +
                                " closed the connection without a description (it is stopping, "
                                "or holds " +
                                std::to_string(kMaxLeaseLessees) + " lessees already)");
      Result<LeaseDescriptionV2> v1 = ParseLeaseV2Opening(seen, fds.fds.size(), path.string());
      if (!v1.ok() && v1.status().code() == StatusCode::kFailedPrecondition) return v1.status();
      return CorruptionError("lease description from " + path.string() + ": the holder closed after " +
                             ByteCount(seen.size()) + ", before the description's end of line");
    }
    any_bytes = true;
    const std::string_view got(buf, static_cast<std::size_t>(n));
    if (seen.size() < 64) seen.append(got.substr(0, 64 - seen.size()));
    if (Status s = reader.Append(got); !s.ok())
      return CorruptionError("lease description from " + path.string() + ": longer than " +
                             ByteCount(kMaxLeaseDescriptionV2Bytes) + " without its end of line");
    line = reader.NextLine();
  }
  timeval none{};
  (void)::setsockopt(conn.fd_, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof none);

  EXLR8_ASSIGN_OR_RETURN(LeaseDescriptionV2 d, ParseLeaseV2Opening(*line, fds.fds.size(), path.string()));
  conn.lines_ = std::move(reader);
  conn.lines_.set_max_line(kMaxLeaseHolderLineBytes);
  ReceivedLeaseV2 out{std::move(conn), std::move(d), std::move(fds)};
  return out;
}

Status CheckLeaseV2Memfd(int fd, std::uint64_t bytes, const std::string& what, const std::string& from) {
  // F_SEAL_FUTURE_WRITE (writes only through mappings made before it)
  // serves as F_SEAL_WRITE: a holder that registered its mapping keeps it.
  constexpr int kSeals = F_SEAL_SHRINK | F_SEAL_GROW;
  struct stat st {};
  if (::fstat(fd, &st) != 0) return LeaseSocketError(errno, from + "fstat " + what);
  if (!S_ISREG(st.st_mode)) return CorruptionError(from + what + " is not a regular file (a memfd)");
  if (static_cast<std::uint64_t>(st.st_size) != bytes)
    return CorruptionError(from + what + " has " + ByteCount(static_cast<std::uint64_t>(st.st_size)));
  const int seals = ::fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & kSeals) != kSeals || (seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE)) == 0)
    return CorruptionError(from + what + " is not sealed against shrinking, growing and writing (seals " +
                           std::to_string(seals) + ")");
  return Status::Ok();
}

Result<ImageTables> ReadLeaseV2Tables(int fd, const LeaseDescriptionV2& d, const std::string& from) {
  Mapping t;
  t.bytes = d.tables.bytes;
  t.addr = ::mmap(nullptr, t.bytes, PROT_READ, MAP_SHARED, fd, 0);
  if (t.addr == MAP_FAILED)
    return LeaseSocketError(errno, from + "map the tables (" + ByteCount(t.bytes) + ")");
  return ParseImageTables({t.data(), t.bytes}, d.image.bytes);
}

Result<ImageHeader> CheckLeaseV2Image(const LeaseDescriptionV2& d, const ImageTables& tables,
                                      std::span<const std::byte> header,
                                      std::span<const std::byte> offset_table, const std::string& from) {
  EXLR8_ASSIGN_OR_RETURN(ImageHeader h, ParseImageHeader(header));
  EXLR8_RETURN_IF_ERROR(CheckImageAgreement(h, tables));
  EXLR8_RETURN_IF_ERROR(CheckLeaseImage(d, h, tables));
  const std::vector<std::uint64_t>& table = tables.offset_table;
  if (offset_table.size() != table.size() * 8)
    return InvalidArgumentError(from + "the image's offset table has " + ByteCount(offset_table.size()) +
                                ", the tables' " + ByteCount(table.size() * 8));
  for (std::size_t i = 0; i < table.size(); ++i) {
    std::uint64_t v;
    std::memcpy(&v, offset_table.data() + i * 8, 8);
    if (v != table[i])
      return CorruptionError(from + "the image's offset table entry " + std::to_string(i) + " at byte " +
                             std::to_string(d.image.offset_table + i * 8) + " is " + std::to_string(v) +
                             ", the tables' " + std::to_string(table[i]));
  }
  return h;
}

}  // namespace exlr8
