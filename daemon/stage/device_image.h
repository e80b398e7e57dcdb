// StageDeviceRankImage: a TP rank's whole image (client/lease/image_layout.h)
// staged from the cache into GPU memory and validated there: the
// `memory.kind = device` of lease v2 (docs/design/RANK_IMAGE.md).
//
// Steps (each with its progress counters in DeviceImageProgress):
//   plan    PlanRankImage: the layout and each region's cache pieces.
//   copy    one device allocation of the layout's size: an exportable VMM
//           allocation (gpu/vmm.h, granularity-rounded), or, when the driver
//           cannot export file descriptors (Unimplemented) or the options
//           ask for it, a cudaMalloc allocation with a legacy IPC handle
//           (gpu/ipc.h). Zeroed, then filled from the mapped cache files by
//           several threads, each with its own pinned staging buffers
//           (double-buffered) and stream, so that the host copy into one
//           buffer overlaps the DMA out of the other.
//   hash    every check entry (the tables' 80-byte entries, uploaded as
//           RegionCheck) hashed on the GPU over the device image
//           (EnqueueRegionHash), in launches of a bounded number of entries.
//   decode  a seeded sample of the half records (or all of them) decoded on
//           the GPU reading their trellis bytes in place from the image,
//           compared bit for bit (fp32 and E4M3) with the CPU reference
//           (format/trellis.h DecodeHalfTiles) of the cache's bytes, then
//           reconstructed on the GPU (spec 9.1-9.3) from the record's slice
//           and block row and the layer's signs regions, all read in place,
//           and compared per 128 x 128 block with the CPU's ReconstructHalf
//           (max|a-b| <= 1e-5 * max|b|); and dense matrices (one of each
//           format present, seeded, or all of them) decoded on the GPU from
//           their data regions in place and compared with DecodeDenseMatrix
//           of the cache's files (bit for bit; TRELLIS per block as above):
//           device_image_check.h.
// The tables go into a sealed memfd (SerializeImageTables).
//
// Any mismatch is Corruption naming the region (layer, expert, projection,
// half or tensor name), the image offset of the first differing byte, and
// the cache file and byte it came from; nothing is kept (the allocation is
// freed before the error returns).
//
// Threads: StageDeviceRankImage blocks; it uses options.threads host threads
// and makes options.device current on each while it works.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "client/lease/description_v2.h"
#include "client/lease/image_layout.h"
#include "daemon/base/posix.h"
#include "daemon/stage/rank_image_plan.h"
#include "daemon/stage/rank_reader.h"
#include "format/status.h"
#include "gpu/device.h"
#include "gpu/device_buffer.h"
#include "gpu/vmm.h"

namespace exlr8 {

// Counters the step's threads count up (relaxed atomics), for a reporter
// polling them; `step` names the step running: 0 plan, 1 copy, 2 hash,
// 3 decode, 4 done.
struct DeviceImageProgress {
  std::atomic<int> step{0};
  std::atomic<std::uint64_t> copy_total{0}, copy_done{0};  // bytes
  std::atomic<std::uint64_t> hash_total{0}, hash_done{0};  // check bytes
  // The decode step's bytes: the sampled half records' trellis bytes and
  // the sampled dense matrices' data bytes (what StepReporter prints is
  // bytes), counted as each half batch or matrix has been compared.
  std::atomic<std::uint64_t> decode_total{0}, decode_done{0};
};

struct DeviceImageOptions {
  int device = 0;  // an ordinal of this process
  // Copy threads, each with its own stream and `staging_buffers` pinned
  // buffers of `staging_bytes` (0: ImageThreadCount's default, at most 16);
  // the decode step's CPU reference uses as many (0: every core).
  int threads = 0;
  // 4 MiB: on the H200 host 16 threads x 2 x 4 MiB uploaded a 9.84 GB rank
  // at 0.95x a pinned cudaMemcpyAsync, 32 MiB buffers at 0.74x, and pin in
  // 0.03 s instead of 0.3-1.5 s (docs/BENCHMARKS.md, stage_image_bench).
  std::size_t staging_bytes = std::size_t{4} << 20;
  int staging_buffers = 2;
  // Force the legacy IPC allocation even where VMM export works (tests,
  // drivers whose VMM export misbehaves).
  bool force_ipc = false;
  // Halves decoded and reconstructed: a seeded sample of at least
  // sample_fraction of the half records (and at least one of every (layer,
  // width, projection) present), or every one with check_all. Dense
  // matrices decoded: one of each format present (chosen with `seed`), or
  // every one with check_all.
  bool check_all = false;
  double sample_fraction = 0.01;
  std::uint64_t seed = 0x5eed;
  // CheckDeviceImage only: skip the hash step and run the decode checks
  // alone (so that a test can show they find a changed byte by themselves).
  bool skip_hash = false;
  const std::atomic<bool>* cancel = nullptr;  // stops within a chunk / launch
  DeviceImageProgress* progress = nullptr;
  // Called on the calling thread as each step begins (the step's number as
  // in DeviceImageProgress::step), e.g. to report it. Null: not called.
  std::function<void(int step)> on_step;
};

struct DeviceRankImage {
  std::string commit;
  // The plan (its layout's tables are those in tables_fd, dense data
  // digests set); keeps the cache files mapped read-only and the pin.
  RankImagePlan plan;
  int device = 0;
  CudaDeviceIdentity identity;
  // Exactly one of `vmm` (with vmm_fd, its exported descriptor) and `ipc`
  // (with ipc_handle, 128 hex digits) holds the image. Owned.
  ExportableDeviceMemory vmm;
  UniqueFd vmm_fd;
  DeviceBuffer ipc;
  std::string ipc_handle;
  UniqueFd tables_fd;  // sealed memfd
  std::uint64_t tables_bytes = 0;
  // seconds_upload is the copy itself: from the staging buffers ready to
  // the last byte on the device. seconds_staging_setup is what came
  // before it (pinning the staging buffers, streams), not in the proof.
  LeaseProof proof;
  double seconds_staging_setup = 0;
  std::uint64_t regions_without_release_digest = 0;
  std::uint64_t bytes_without_release_digest = 0;

  const std::byte* data() const;
  std::uint64_t image_bytes() const { return plan.layout.allocation_bytes(); }
  // The allocation's size as the lessee maps it (VMM: granularity-rounded).
  std::uint64_t allocation_bytes() const;
};

// Errors: PlanRankImage's (NotFound for what the cache lacks, ...);
// Unavailable without a device; ResourceExhausted when device memory or
// pinned memory runs out; Corruption for a region whose bytes on the
// device differ from their digest or a decoded half that differs from the
// CPU reference (named as above: the tile element or the 128 x 128 block of
// the weights, with the values); Cancelled once options.cancel is set.
// request.threads is unused (options.threads counts); request.progress,
// when set, counts the copy's bytes too; request.before_reading runs after
// the plan.
// The image's memory on the current device `device`: a VMM allocation of
// `bytes` (granularity-rounded) with its exported descriptor in img.vmm and
// img.vmm_fd, or, where the driver cannot export one or force_ipc, a
// cudaMalloc in img.ipc with its legacy handle. Errors: ResourceExhausted,
// Unavailable, Internal.
Status AllocateDeviceImageMemory(DeviceRankImage& img, int device, std::uint64_t bytes, bool force_ipc);

Result<DeviceRankImage> StageDeviceRankImage(const RankRequest& request, const DeviceImageOptions& options);

// The hash and decode steps again over a staged image (what the stage ran
// last): OK with the proof's hash and decode fields refreshed, or
// Corruption naming the first bad region as StageDeviceRankImage does.
// Uses options.device, check_all, sample_fraction, seed, cancel, progress.
Status CheckDeviceImage(DeviceRankImage& image, const DeviceImageOptions& options);

// The v2 description (memory kind device, the GPU by UUID and PCI bus id,
// one allocation: "fd" (vmm_fd on the socket, then tables_fd) or
// "ipc:<hex>" (then only tables_fd)).
LeaseDescriptionV2 DescribeDeviceImage(const DeviceRankImage& image, const RankRequest& request,
                                       std::uint32_t release_deadline_s = 30);

}  // namespace exlr8
