// The bytes of lease protocol v2 on the Unix socket (schema/lease/PROTOCOL.md
// is the format), without the socket: what a lessee reads is split into
// lines here, the first line is checked against the descriptors that came
// with it, and the holder's later lines are parsed. The socket side is
// host_lease.h (lessee) and daemon/stage/lease_server.h (holder).
//
//   holder -> lessee, on connect: one line, the v2 description
//     (WriteLeaseDescriptionV2) + "\n", at most kMaxLeaseDescriptionV2Bytes
//     before the "\n", its first byte carrying, in one SCM_RIGHTS message,
//     one descriptor per allocation whose handle is "fd" (allocation order)
//     and then the tables' memfd: kLeaseV2FdCount(d) descriptors.
//   holder -> lessee, later: lines of at most kMaxLeaseHolderLineBytes;
//     today only {"type":"release","deadline_s":D}, D in [0, 3600].
//   lessee -> holder: nothing; the lessee closes its connection to let go.
//
// Pure: bytes in, values out; safe from any thread on distinct objects.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "client/lease/description_v2.h"
#include "format/status.h"

namespace exlr8 {

// The longest line the holder sends after the description.
inline constexpr std::size_t kMaxLeaseHolderLineBytes = 256;
// The most descriptors a v2 description names: every allocation and the
// tables.
inline constexpr std::size_t kMaxLeaseV2Fds = kMaxLeaseAllocations + 1;

// The descriptors that travel with `d`: its "fd" allocations and the tables.
std::size_t LeaseV2FdCount(const LeaseDescriptionV2& d);

// Splits a byte stream into "\n"-terminated lines, each at most `max_line`
// bytes before its "\n". Not synchronized.
class LeaseLineReader {
 public:
  explicit LeaseLineReader(std::size_t max_line) : max_line_(max_line) {}
  void set_max_line(std::size_t max_line) { max_line_ = max_line; }
  // Adds received bytes. Corruption ("... longer than N bytes") once the
  // line being read passes max_line without its "\n"; the reader is then
  // spent (every later call fails the same).
  Status Append(std::string_view bytes);
  // The next whole line, without its "\n", or nullopt when none is whole.
  std::optional<std::string> NextLine();
  // Bytes received that are not yet part of a whole line.
  std::size_t pending() const { return buffer_.size() - start_; }

 private:
  std::size_t max_line_;
  std::string buffer_;
  std::size_t start_ = 0;
  std::size_t current_ = 0;  // bytes of the unfinished line
  bool failed_ = false;
};

// The first line a v2 holder sends, checked with the number of descriptors
// that came with it: ParseLeaseDescriptionV2 (source `source`), then
// Corruption naming both counts unless `fds_received` is LeaseV2FdCount.
// A v1 description (its "version" 1) is FailedPrecondition ("speaks lease
// protocol v1"), so that a lessee can say which holder it found.
Result<LeaseDescriptionV2> ParseLeaseV2Opening(std::string_view line, std::size_t fds_received,
                                               std::string_view source = {});

// A line the holder sends after the description.
struct LeaseRelease {
  std::uint32_t deadline_s = 0;  // the holder frees the memory this long after sending
};

// The holder's release line, exactly {"type":"release","deadline_s":D} with
// D a decimal in [0, kMaxLeaseReleaseDeadlineS] without leading zeros.
// Corruption quoting (a bounded prefix of) anything else.
Result<LeaseRelease> ParseLeaseHolderLine(std::string_view line);
// The line a holder sends, without its "\n".
std::string WriteLeaseReleaseLine(std::uint32_t deadline_s);

}  // namespace exlr8
