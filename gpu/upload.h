// Staging a rank's expert halves into GPU memory.
//
// UploadHalves packs host byte spans (halves read from the cache, in expert-
// major order: entry e * halves_per_expert + h is half h of expert e) into one
// device allocation, each half starting at a multiple of `alignment`, and
// builds a device table of the halves' byte offsets. Kernels address half
// (e, h) as base + offsets[e * halves_per_expert + h] (see gpu/decode.cuh).
//
// Transfer: bytes go through a ring of pinned staging buffers: the host copies
// chunk c + 1 into one buffer while the DMA engine moves chunk c out of the
// other (cudaMemcpyAsync from pinned memory is truly asynchronous and runs at
// full link speed). One host thread's memcpy (about 10 GB/s on the H200
// machine) is far below the link (about 55 GB/s), so each chunk's copies are
// done by `copy_threads` threads at flush time (measured there, 2 GiB of
// 192 KiB halves: 5 GB/s with 1 thread, 22 GB/s with 4, 25 GB/s with 8;
// pageable cudaMemcpyAsync 5.4 GB/s). With pinned_staging = false each half is copied straight
// from the caller's pageable memory instead (the driver stages it itself);
// that path exists to be measured against.
//
// Padding bytes between halves are zero on the device.
// Thread safety: one call uses its own staging buffers; concurrent calls on
// different streams are fine.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "format/status.h"
#include "gpu/device_buffer.h"
#include "gpu/stream.h"

namespace exlr8 {

struct UploadOptions {
  std::size_t staging_bytes = std::size_t{32} << 20;  // size of each pinned buffer
  int staging_buffers = 2;                            // ring depth, >= 1
  std::size_t alignment = 256;                        // half start alignment, a power of two >= 4
  bool pinned_staging = true;                         // false: copy from pageable memory directly
  int copy_threads = 4;                               // host threads filling a staging buffer, 1..64
  // Set while the upload runs: it stops within a half, waits for the copies
  // already queued, and returns Cancelled (nothing is kept). Null: never.
  const std::atomic<bool>* cancel = nullptr;
  // Counted up by each half's bytes as it is handed to the copy engine
  // (null: not counted): a reporter on another thread shows the upload move.
  std::atomic<std::uint64_t>* bytes_uploaded = nullptr;
};

struct UploadStats {
  std::uint64_t bytes = 0;         // payload: sum of the halves' sizes
  std::uint64_t device_bytes = 0;  // allocation including padding
  double seconds = 0;              // first copy queued .. all copies done (excludes allocation)
  double GBPerSecond() const { return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0.0; }
};

// Halves resident on one device. Move-only (owns device memory).
class StagedHalves {
 public:
  std::size_t num_halves() const { return offsets_.size(); }
  std::size_t halves_per_expert() const { return halves_per_expert_; }
  std::size_t num_experts() const { return halves_per_expert_ == 0 ? 0 : offsets_.size() / halves_per_expert_; }

  // Device base pointer and device offset table (num_halves() entries).
  const std::byte* device_base() const { return data_.data_as<std::byte>(); }
  const std::uint64_t* device_offsets() const { return offsets_table_.data_as<std::uint64_t>(); }
  // Host copies of the offsets and sizes, index e * halves_per_expert + h.
  const std::vector<std::uint64_t>& offsets() const { return offsets_; }
  const std::vector<std::uint64_t>& sizes() const { return sizes_; }

  // Device address of half (e, h). REQUIRES: e < num_experts(), h < halves_per_expert().
  const std::byte* HalfPointer(std::size_t e, std::size_t h) const {
    return device_base() + offsets_[e * halves_per_expert_ + h];
  }

  // Enqueues a device -> host copy of half `index` into `dst` (dst.size() must
  // equal sizes()[index]). Errors: InvalidArgument for a bad index or size.
  Status CopyHalfToHostAsync(std::size_t index, std::span<std::byte> dst, CudaStreamView stream) const;

 private:
  friend Result<StagedHalves> UploadHalves(std::span<const std::span<const std::byte>>, std::size_t,
                                           CudaStreamView, const UploadOptions&, UploadStats*);
  DeviceBuffer data_;
  DeviceBuffer offsets_table_;
  std::vector<std::uint64_t> offsets_;
  std::vector<std::uint64_t> sizes_;
  std::size_t halves_per_expert_ = 0;
};

// Copies `halves` to the current device on `stream` and returns once they are
// there (the stream is synchronised: the host spans may be released after
// return). `stats`, if given, receives the byte counts and the transfer time.
// Errors: InvalidArgument for halves_per_expert 0 or not dividing the count,
// an empty half, bad options, or a total size that overflows;
// ResourceExhausted when device or pinned memory runs out; Unavailable
// without a device; Internal for other CUDA failures; Cancelled once
// options.cancel is set.
Result<StagedHalves> UploadHalves(std::span<const std::span<const std::byte>> halves, std::size_t halves_per_expert,
                                  CudaStreamView stream, const UploadOptions& options = {},
                                  UploadStats* stats = nullptr);

}  // namespace exlr8
