// The lessee's side of lease protocol v2 (schema/lease/PROTOCOL.md) for a
// rank image in device memory, in a serving process (the CUDA part of the
// client, exlr8d::lease_open): connect to the holder's Unix socket, take the
// description line and its descriptors (the same opening as OpenHostLease,
// lease_v2_opening.h), find the holder's GPU in this process by its UUID,
// import the image's allocation read-only, and hold the connection open
// while the image is used. The holder's side is daemon/stage/lease_server.h.
//
// Opening checks, each a named error; nothing leaks on any of them (every
// descriptor received is closed, the tables unmapped, an import released):
//   the framing and descriptor count (lease_v2_framing.h); the tables'
//   descriptor a sealed memfd of tables.bytes (as for a host image; the
//   allocations' descriptors are CUDA's, checked by the import); the tables
//   parsed (ParseImageTables); the GPU found by UUID (an ordinal of this
//   process: another CUDA_VISIBLE_DEVICES finds the same GPU under another
//   number); the image's allocation imported with its description's size
//   (a "fd" handle: gpu/vmm.h ImportedDeviceMemory, read-only; an
//   "ipc:<hex>" handle: gpu/ipc.h IpcMapping); the image's header copied to
//   the host and parsed (ParseImageHeader), the three agreeing
//   (CheckImageAgreement, CheckLeaseImage), and the image's offset table
//   (copied back once) equal to the tables'.
// The image's bytes are not hashed here: the description's proof says what
// the holder checked; a lessee that wants to see for itself hashes the
// tables' check entries on the GPU (gpu/region_hash.h) against Base().
//
// Only the allocation holding the image is imported; other allocations a
// description may name are not used by this version.
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
#include "client/lease/lease_v2_opening.h"
#include "format/status.h"
#include "gpu/ipc.h"
#include "gpu/vmm.h"

namespace exlr8 {

struct DeviceLeaseOptions {
  // Bounds the wait for the whole description (real time).
  std::chrono::milliseconds timeout = std::chrono::seconds(30);
};

// An open v2 lease of a device image: the imported allocation and the
// connection that keeps it leased. Move-only; the destructor lets go
// (Close). Not synchronized: one owner at a time (const accessors may be
// shared while nobody calls a non-const member). Pointers are device
// pointers on device(), mapped read-only: a kernel that writes them
// faults.
class DeviceLease {
 public:
  DeviceLease() = default;
  DeviceLease(DeviceLease&& other) noexcept;
  DeviceLease& operator=(DeviceLease&& other) noexcept;
  DeviceLease(const DeviceLease&) = delete;
  DeviceLease& operator=(const DeviceLease&) = delete;
  ~DeviceLease() { Close(); }

  bool is_open() const { return connection_.is_open(); }

  // The CUDA ordinal of the holder's GPU in this process (found by UUID).
  int device() const { return device_; }
  // The imported allocation (device memory) and its size (the
  // description's memory.allocations[image.allocation].bytes).
  const std::byte* allocation() const { return allocation_; }
  std::uint64_t allocation_bytes() const { return allocation_bytes_; }
  // The image's first byte (allocation() + image.header_offset), device
  // memory. Valid until Close.
  const std::byte* base() const { return allocation_ + description_.image.header_offset; }
  std::uint64_t image_bytes() const { return description_.image.bytes; }
  // A tensor's bytes, device memory (inside the image: the parser checked).
  const std::byte* Region(const ImageTensor& t) const { return base() + t.offset; }
  // The offset table inside the image (device memory; entries are
  // base-relative offsets, kImageAbsent where the rank owns no half), for
  // kernels: index ImageTables::OffsetIndex. Equal to offset_table().
  const std::uint64_t* device_offset_table() const {
    return reinterpret_cast<const std::uint64_t*>(base() + description_.image.offset_table);
  }

  const LeaseDescriptionV2& description() const { return description_; }
  const ImageHeader& header() const { return header_; }
  // Tensors and check entries with their lookups (host memory).
  const ImageTables& tables() const { return tables_; }
  std::span<const std::uint64_t> offset_table() const { return tables_.offset_table; }
  const LeaseProof& proof() const { return description_.proof; }

  // The connection, and the holder's release line: as HostLease.
  int release_fd() const { return connection_.fd(); }
  using Release = LeaseV2Release;
  Result<std::optional<Release>> PollRelease() { return connection_.PollRelease(); }
  Result<std::optional<Release>> WaitRelease(std::chrono::milliseconds timeout) {
    return connection_.WaitRelease(timeout);
  }

  // Lets go: releases the import (which waits for the device: the caller
  // should have finished or synchronized its work on the image first), then
  // closes the connection, so the holder sees the lessee gone only once
  // nothing here maps its memory. Idempotent.
  void Close();

 private:
  friend Result<DeviceLease> OpenDeviceLease(const std::filesystem::path&, const DeviceLeaseOptions&);
  LeaseV2Connection connection_;
  ImportedDeviceMemory imported_;  // a "fd" handle
  IpcMapping ipc_;                 // an "ipc:" handle
  int device_ = -1;
  const std::byte* allocation_ = nullptr;
  std::uint64_t allocation_bytes_ = 0;
  LeaseDescriptionV2 description_;
  ImageHeader header_;
  ImageTables tables_;
};

// Connects to the v2 holder at `path` and opens its device lease (blocking;
// any thread; the calling thread's current device is left as it was).
// Errors: those of OpenHostLease's opening (NotFound, PermissionDenied,
// IOError, Unavailable, FailedPrecondition for a v1 holder, Corruption for
// what breaks the protocol); FailedPrecondition for a host description
// (OpenHostLease maps those); Unavailable when this process sees no CUDA
// device (the message names the lease's GPU); NotFound when no visible
// device has the description's UUID (the message names the UUID, the PCI
// bus id and the devices visible); the import's errors (gpu/vmm.h,
// gpu/ipc.h; a size that is not the allocation's fails the driver's map)
// with "import allocation I (N bytes, ...)" naming it; Corruption for an image whose header or
// offset table disagrees with the tables and description.
Result<DeviceLease> OpenDeviceLease(const std::filesystem::path& path,
                                    const DeviceLeaseOptions& options = {});

}  // namespace exlr8
