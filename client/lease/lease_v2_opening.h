// The socket side of a lease protocol v2 lessee shared by both memory kinds
// (schema/lease/PROTOCOL.md): connect, take the description line and the
// descriptors on its first byte, check the tables memfd and parse it, check
// an image header and offset table against the tables, and afterwards read
// the holder's release line. OpenHostLease (host_lease.h) and
// OpenDeviceLease (device_lease.h, the CUDA part) build on it; a serving
// process uses those, not this.
//
// No CUDA. Errors are those the two openers document (NotFound,
// PermissionDenied, IOError, Unavailable, FailedPrecondition, Corruption),
// each message naming the holder's path and the field, descriptor or byte.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "client/lease/description_v2.h"
#include "client/lease/image_layout.h"
#include "client/lease/lease_v2_framing.h"
#include "format/status.h"

namespace exlr8 {

// What the holder said after the description.
struct LeaseV2Release {
  std::uint32_t deadline_s = 0;  // the holder frees the memory this long after sending
  bool holder_gone = false;      // it closed its side (died, or stopped) instead
};

struct ReceivedLeaseV2;
Result<ReceivedLeaseV2> ReceiveLeaseV2(const std::filesystem::path& path, std::chrono::milliseconds timeout);

// A lessee's open connection to a v2 holder after the opening: holding it
// open keeps the lease. Move-only; the destructor closes it. Not
// synchronized: one owner at a time.
class LeaseV2Connection {
 public:
  LeaseV2Connection() = default;
  LeaseV2Connection(LeaseV2Connection&& other) noexcept;
  LeaseV2Connection& operator=(LeaseV2Connection&& other) noexcept;
  LeaseV2Connection(const LeaseV2Connection&) = delete;
  LeaseV2Connection& operator=(const LeaseV2Connection&) = delete;
  ~LeaseV2Connection() { Close(); }

  bool is_open() const { return fd_ >= 0; }
  int fd() const { return fd_; }

  // Reads what the holder sent, without blocking: the release once its
  // line is whole (the same one on every later call), nullopt while none
  // came; a holder that closed its side is a release with deadline 0 and
  // holder_gone. Corruption for any other line or for descriptors;
  // FailedPrecondition once closed.
  Result<std::optional<LeaseV2Release>> PollRelease();
  // PollRelease, waiting up to `timeout` (real time) for the release.
  Result<std::optional<LeaseV2Release>> WaitRelease(std::chrono::milliseconds timeout);
  // Closes the socket (the holder then counts this lessee gone). Idempotent.
  void Close();

 private:
  friend Result<ReceivedLeaseV2> ReceiveLeaseV2(const std::filesystem::path&, std::chrono::milliseconds);
  int fd_ = -1;
  LeaseLineReader lines_{kMaxLeaseHolderLineBytes};
  std::optional<LeaseV2Release> release_;
};

// Descriptors received, closed on destruction unless taken out of `fds`.
struct LeaseV2Fds {
  std::vector<int> fds;
  LeaseV2Fds() = default;
  LeaseV2Fds(LeaseV2Fds&& other) noexcept : fds(std::move(other.fds)) { other.fds.clear(); }
  LeaseV2Fds& operator=(LeaseV2Fds&&) = delete;
  LeaseV2Fds(const LeaseV2Fds&) = delete;
  LeaseV2Fds& operator=(const LeaseV2Fds&) = delete;
  ~LeaseV2Fds();
};

// The opening as received: the description has passed ParseLeaseV2Opening
// (so the descriptor count is the one it names).
struct ReceivedLeaseV2 {
  LeaseV2Connection connection;
  LeaseDescriptionV2 description;
  LeaseV2Fds fds;  // the "fd" allocations' in allocation order, then the tables'
  int tables_fd() const { return fds.fds.back(); }
  // The descriptor of allocation `i` (REQUIRES: its handle is "fd").
  int allocation_fd(std::uint32_t i) const;
};

// Connects to the v2 holder at `path` and receives its opening within
// `timeout` (real time). NotFound when no socket is there,
// PermissionDenied when it may not be used, IOError for other socket
// errors; Unavailable when the holder closed without a description or sent
// none in time; FailedPrecondition for a v1 holder; Corruption for framing
// the protocol refuses. Every descriptor received is closed on error.
Result<ReceivedLeaseV2> ReceiveLeaseV2(const std::filesystem::path& path, std::chrono::milliseconds timeout);

// OK when `fd` is a regular file (a memfd) of exactly `bytes`, sealed
// against shrinking, growing and writing (F_SEAL_WRITE or
// F_SEAL_FUTURE_WRITE). Corruption naming `what` otherwise ("lease from
// P: file descriptor 1 (tables.bytes 4608) has 4096 bytes").
Status CheckLeaseV2Memfd(int fd, std::uint64_t bytes, const std::string& what, const std::string& from);

// `what` and errno `err`'s text: NotFound for ENOENT, PermissionDenied for
// EACCES and EPERM, IOError otherwise.
Status LeaseSocketError(int err, const std::string& what);

// Maps the tables memfd read-only, parses it (ParseImageTables against the
// description's image size) and unmaps it.
Result<ImageTables> ReadLeaseV2Tables(int fd, const LeaseDescriptionV2& d, const std::string& from);

// The image's header parsed from `header` (its first kImageHeaderBytes or
// more), checked against the tables and the description
// (CheckImageAgreement, CheckLeaseImage), and the image's offset table
// (`offset_table`, the header's offset_table section's bytes) equal to the
// tables' (Corruption naming the first entry that differs and its byte).
// InvalidArgument when `offset_table` is not the description's size.
Result<ImageHeader> CheckLeaseV2Image(const LeaseDescriptionV2& d, const ImageTables& tables,
                                      std::span<const std::byte> header,
                                      std::span<const std::byte> offset_table, const std::string& from);

}  // namespace exlr8
