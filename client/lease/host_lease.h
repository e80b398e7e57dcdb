// The lessee's side of lease protocol v2 (schema/lease/PROTOCOL.md) for a
// rank image in host memory: connect to the holder's Unix socket, take the
// description line and the descriptors that come with it, check them, map
// the image read-only, and hold the connection open while the image is
// used. The holder's side is daemon/stage/lease_server.h.
//
// Opening checks, each a named error (nothing leaks on any of them: every
// descriptor received is closed and every mapping unmapped):
//   the framing and the descriptor count (lease_v2_framing.h), every
//   descriptor a regular file (a memfd) of exactly the size the description
//   names and sealed against shrinking, growing and writing (F_SEAL_SHRINK
//   | F_SEAL_GROW and F_SEAL_WRITE or F_SEAL_FUTURE_WRITE: a shrink under a
//   mapping would be a SIGBUS here, a write a change under a proven image;
//   FUTURE_WRITE lets the holder keep a mapping it registered before
//   sealing), the tables parsed
//   (ParseImageTables), the image header parsed from the mapping
//   (ParseImageHeader), the three agreeing (CheckImageAgreement,
//   CheckLeaseImage), and the image's offset table equal to the tables'.
// The image's bytes are not hashed here: the description's proof says what
// the holder checked, and a lessee that wants to see for itself hashes
// Region(t) against t.xxh64.
//
// No CUDA. A description of device memory is Unimplemented here (it needs
// libexlr8client's CUDA part).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>

#include "client/lease/description_v2.h"
#include "client/lease/image_layout.h"
#include "client/lease/lease_v2_framing.h"
#include "client/lease/lease_v2_opening.h"
#include "format/status.h"

namespace exlr8 {

// An open v2 lease of a host image: the mapping and the connection that
// keeps it leased. Move-only; the destructor lets go (Close). Not
// synchronized: one owner at a time (const accessors may be shared while
// nobody calls a non-const member).
class HostLease {
 public:
  HostLease() = default;
  HostLease(HostLease&& other) noexcept;
  HostLease& operator=(HostLease&& other) noexcept;
  HostLease(const HostLease&) = delete;
  HostLease& operator=(const HostLease&) = delete;
  ~HostLease() { Close(); }

  bool is_open() const { return connection_.is_open(); }

  // The image's first byte (the allocation's base + header_offset), read
  // only. Valid until Close.
  const std::byte* base() const { return allocation_ + description_.image.header_offset; }
  // The mapped allocation holding the image, and its size.
  const std::byte* allocation() const { return allocation_; }
  std::uint64_t allocation_bytes() const { return allocation_bytes_; }
  std::uint64_t image_bytes() const { return description_.image.bytes; }
  // The image's bytes of a tensor entry (inside the image: the parser
  // checked it).
  std::span<const std::byte> Region(const ImageTensor& t) const { return {base() + t.offset, t.length}; }

  const LeaseDescriptionV2& description() const { return description_; }
  const ImageHeader& header() const { return header_; }
  // Tensors with their lookups: FindByName, FindHalf(layer, expert|
  // kSharedExpert, proj, half), FindSigns.
  const ImageTables& tables() const { return tables_; }
  // Base-relative offsets, index ImageTables::OffsetIndex; kImageAbsent
  // where the rank owns no half. The image holds the same table at
  // header().offset_table.offset (for kernels).
  std::span<const std::uint64_t> offset_table() const { return tables_.offset_table; }
  const LeaseProof& proof() const { return description_.proof; }

  // The connection: readable when the holder sent a line or went away.
  // For the caller's poll loop; read it only through PollRelease.
  int release_fd() const { return connection_.fd(); }
  // Reads what the holder sent, without blocking. A release once the
  // release line is whole (the same one on every later call); nullopt while
  // none came. A holder that closed its side (it died, or was stopped) is a
  // release with deadline 0 and holder_gone. Corruption for anything else
  // the holder sent (a line that is not a release, descriptors).
  using Release = LeaseV2Release;
  Result<std::optional<Release>> PollRelease() { return connection_.PollRelease(); }
  // PollRelease, waiting up to `timeout` (real time) for the release.
  Result<std::optional<Release>> WaitRelease(std::chrono::milliseconds timeout) {
    return connection_.WaitRelease(timeout);
  }

  // Lets go: unmaps the image, then closes the connection (the holder sees
  // the lessee gone only once nothing here maps its memory). Idempotent.
  void Close();

 private:
  friend Result<HostLease> OpenHostLease(ReceivedLeaseV2, const std::filesystem::path&);
  LeaseV2Connection connection_;
  const std::byte* allocation_ = nullptr;
  std::uint64_t allocation_bytes_ = 0;
  LeaseDescriptionV2 description_;
  ImageHeader header_;
  ImageTables tables_;
};

// Connects to the v2 holder at `path` and opens its lease (blocking; any
// thread). `timeout` bounds the wait for the description (real time).
// NotFound when no socket is there, PermissionDenied when it may not be
// used, IOError for the connect's other errors; Unavailable when the holder
// closed without a description (stopping, or full) or sent none in time;
// FailedPrecondition for a v1 holder; Unimplemented for device memory;
// Corruption for anything else it sent that breaks the rules above (the
// message names the field, descriptor index or size).
Result<HostLease> OpenHostLease(const std::filesystem::path& path,
                                std::chrono::milliseconds timeout = std::chrono::seconds(30));

// OpenHostLease on an opening already received from `path` (ReceiveLeaseV2:
// a caller that looks at the description's memory kind first, as
// libexlr8client does): the same checks and errors after the receipt.
// Every descriptor in `received` is closed on error.
Result<HostLease> OpenHostLease(ReceivedLeaseV2 received, const std::filesystem::path& path);

}  // namespace exlr8
