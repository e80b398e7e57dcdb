// StageDeviceRankImage and CheckDeviceImage (device_image.h): the staging
// copy and the in-place hash; the decode step is device_image_check.cpp.
#include "daemon/stage/device_image.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <span>
#include <thread>
#include <utility>
#include <vector>

#include "daemon/stage/device_image_check.h"
#include "daemon/stage/image_common.h"
#include "daemon/stage/image_reference.h"
#include "format/checksum.h"
#include "gpu/cuda_check.h"
#include "gpu/event.h"
#include "gpu/ipc.h"
#include "gpu/region_hash.h"
#include "gpu/stream.h"

namespace exlr8 {

namespace {

using SteadyClock = std::chrono::steady_clock;

// A hash launch covers at most this many check entries or bytes, so that
// progress and a stop are seen between launches.
constexpr std::size_t kHashLaunchChecks = std::size_t{1} << 16;
constexpr std::uint64_t kHashLaunchBytes = std::uint64_t{4} << 30;

void SetStep(const DeviceImageOptions& o, int step) {
  if (o.progress != nullptr) o.progress->step.store(step, std::memory_order_relaxed);
  if (o.on_step) o.on_step(step);
}

std::string Hex8(std::uint8_t b) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02x", b);
  return buf;
}

// The region holding image offset `at` (a check segment's start).
std::uint32_t RegionAt(const ImageTables& t, std::uint64_t at) {
  for (std::uint32_t i = 0; i < t.tensors.size(); ++i)
    if (at >= t.tensors[i].offset && at - t.tensors[i].offset < t.tensors[i].length) return i;
  return 0;
}

// Corruption for check `check`, whose device bytes did not hash to its
// digest: the first device byte that differs from the cache, named.
Status CheckMismatch(const RankImagePlan& plan, const std::byte* base, std::size_t check,
                     std::uint64_t mismatches) {
  const ImageTables& t = plan.layout.tables;
  const ImageCheck& c = t.checks[check];
  const std::uint32_t region = plan.check_region[check];
  const ImageTensor& tensor = t.tensors[region];
  const std::string head = ImageRegionWhat(tensor) + " (region " + std::to_string(region) + ", check " +
                           std::to_string(check) + ", " + std::to_string(mismatches) + " check(s) failed): ";
  for (const ImageSegment& s : c.segments) {
    std::vector<std::byte> device(s.length), cache(s.length);
    if (cudaMemcpy(device.data(), base + s.offset, s.length, cudaMemcpyDeviceToHost) != cudaSuccess)
      return CorruptionError(head + "XXH64 mismatch on the device (the bytes could not be read back)");
    // A segment lies inside one region (the tables' rule): that region's.
    const std::uint32_t in = RegionAt(t, s.offset);
    const ImageTensor& holder = t.tensors[in];
    ReadImageSourceBytes(plan, in, s.offset - holder.offset, cache);
    for (std::uint64_t i = 0; i < s.length; ++i) {
      if (device[i] == cache[i]) continue;
      const std::uint64_t at = s.offset + i;
      return CorruptionError(
          ImageRegionWhat(holder) + " (region " + std::to_string(in) + ", check " + std::to_string(check) +
          ", " + std::to_string(mismatches) + " check(s) failed): the device image's byte at image offset " +
          std::to_string(at) + " (byte " + std::to_string(at - holder.offset) + " of the region) is " +
          Hex8(std::to_integer<std::uint8_t>(device[i])) + ", the cache's (" +
          plan.SourceOf(in, at - holder.offset) + ") " + Hex8(std::to_integer<std::uint8_t>(cache[i])));
    }
  }
  return CorruptionError(
      head + "XXH64 mismatch at image offset " + std::to_string(c.segments.front().offset) +
      " although the device bytes equal the cache's (" +
      plan.SourceOf(region, c.segments.front().offset - tensor.offset) +
      "): the bytes changed on disk since they were verified ('exlr8d verify' forgets them, "
      "then 'exlr8d pull' fetches them again)");
}

// Copies the image into `base` (device memory of at least image_bytes):
// the image is cut into windows of the staging buffer's size, and each
// thread, with its own stream and pinned buffers, assembles a window in a
// buffer (the pieces that fall in it, zeros between them) and sends it
// with one cudaMemcpyAsync while it assembles the next in another buffer.
// Large transfers whatever the regions' sizes (a half record is three
// pieces, two of them a few hundred bytes), and the padding is written
// with the rest.
Status CopyImage(const RankImagePlan& plan, std::byte* base, const RankRequest& r,
                 const DeviceImageOptions& o, double* setup_seconds, double* copy_seconds) {
  const auto t0 = SteadyClock::now();
  const std::uint64_t image_bytes = plan.layout.allocation_bytes();
  const std::size_t window = std::max<std::size_t>(o.staging_bytes, 4096);
  const std::size_t nbuf = static_cast<std::size_t>(std::max(o.staging_buffers, 1));
  EXLR8_ASSIGN_OR_RETURN(const std::vector<ImageCopyItem> items, SortedImageCopyItems(plan, window));
  const std::size_t windows = static_cast<std::size_t>((image_bytes + window - 1) / window);
  if (o.progress != nullptr) o.progress->copy_total.store(image_bytes);
  if (r.progress != nullptr) r.progress->bytes_total.store(image_bytes);
  // 0: a thread per core, up to 16. The host copy from the page cache is
  // what limits the upload, and it scales with cores (cache_upload_bench:
  // 8 threads 0.56x, 16 threads 0.71x of a pinned copy on the H200 host).
  const std::size_t threads = ImageThreadCount(o.threads, windows);

  // Every thread's staging buffers in one pinned allocation (one call
  // pins faster than many), with a stream and an event per buffer, made
  // before the copy is timed: the copy's rate is the link's, not pinning's.
  EXLR8_ASSIGN_OR_RETURN(PinnedHostBuffer staging, PinnedHostBuffer::Allocate(threads * nbuf * window));
  std::vector<CudaStream> streams;
  std::vector<CudaEvent> events;
  for (std::size_t t = 0; t < threads; ++t) {
    EXLR8_ASSIGN_OR_RETURN(CudaStream stream, CudaStream::Create());
    streams.push_back(std::move(stream));
    for (std::size_t b = 0; b < nbuf; ++b) {
      EXLR8_ASSIGN_OR_RETURN(CudaEvent ev, CudaEvent::Create(/*timing=*/false));
      events.push_back(std::move(ev));
    }
  }
  const auto t1 = SteadyClock::now();
  *setup_seconds = std::chrono::duration<double>(t1 - t0).count();

  FirstError error;
  std::atomic<std::size_t> next{0};
  auto worker = [&](std::size_t t) {
    CudaSetDeviceGuard guard;
    if (Status s = guard.Set(o.device); !s.ok()) return error.Note(std::move(s));
    const CudaStreamView stream = streams[t].view();
    std::vector<bool> in_flight(nbuf, false);
    std::size_t slot = 0;
    auto run = [&]() -> Status {
      for (std::size_t w;
           !ImageBuildCancelled(o.cancel) && !error.failed() && (w = next.fetch_add(1)) < windows;) {
        const std::uint64_t begin = std::uint64_t{w} * window;
        const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(window, image_bytes - begin));
        const std::size_t b = slot++ % nbuf;
        CudaEvent& done = events[t * nbuf + b];
        const std::span<std::byte> buf = staging.bytes().subspan((t * nbuf + b) * window, n);
        if (in_flight[b]) EXLR8_RETURN_IF_ERROR(done.Synchronize());
        AssembleImageWindow(items, begin, buf);
        EXLR8_CUDA_TRY(cudaMemcpyAsync(base + begin, buf.data(), n, cudaMemcpyHostToDevice, stream.value()));
        EXLR8_RETURN_IF_ERROR(done.Record(stream));
        in_flight[b] = true;
        if (o.progress != nullptr) o.progress->copy_done.fetch_add(n, std::memory_order_relaxed);
        if (r.progress != nullptr) r.progress->bytes_checked.fetch_add(n, std::memory_order_relaxed);
      }
      return Status::Ok();
    };
    error.Note(run());
    // Always: the staging memory is freed once every thread is done.
    error.Note(stream.Synchronize());
  };
  std::vector<std::thread> pool;
  for (std::size_t t = 1; t < threads; ++t) pool.emplace_back(worker, t);
  worker(0);
  for (auto& t : pool) t.join();
  *copy_seconds = SecondsSince(t1);
  EXLR8_RETURN_IF_ERROR(error.status());
  if (ImageBuildCancelled(o.cancel))
    return CancelledError("stopped while copying the rank's image to the GPU");
  return Status::Ok();
}

// Every check entry hashed over the device image; Corruption for the first
// that differs.
Status HashImage(const RankImagePlan& plan, const std::byte* base, std::uint64_t base_bytes,
                 const DeviceImageOptions& o, LeaseProof& proof, CudaStreamView stream) {
  const ImageTables& t = plan.layout.tables;
  const std::size_t count = t.checks.size();
  std::vector<RegionCheck> checks(count);
  std::vector<std::uint64_t> check_bytes(count, 0);
  for (std::size_t i = 0; i < count; ++i) {
    const ImageCheck& c = t.checks[i];
    RegionCheck& rc = checks[i];
    std::memset(&rc, 0, sizeof rc);
    rc.digest = c.digest;
    rc.segment_count = static_cast<std::uint32_t>(c.segments.size());
    for (std::size_t s = 0; s < c.segments.size() && s < xxh64::kMaxSegments; ++s) {
      rc.segments[s].offset = c.segments[s].offset;
      rc.segments[s].length = c.segments[s].length;
      check_bytes[i] += c.segments[s].length;
    }
  }
  std::uint64_t total = 0;
  for (std::uint64_t b : check_bytes) total += b;
  if (o.progress != nullptr) {
    o.progress->hash_total.store(total);
    o.progress->hash_done.store(0);
  }
  proof.hashed_regions = count;
  proof.hashed_bytes = total;
  proof.hashed_mismatches = 0;
  if (count == 0) return Status::Ok();

  EXLR8_ASSIGN_OR_RETURN(DeviceBuffer d_checks, DeviceBuffer::Allocate(count * sizeof(RegionCheck)));
  EXLR8_ASSIGN_OR_RETURN(DeviceBuffer d_digests, DeviceBuffer::Allocate(count * sizeof(std::uint64_t)));
  EXLR8_ASSIGN_OR_RETURN(DeviceBuffer d_summary, DeviceBuffer::Allocate(sizeof(RegionHashSummary)));
  EXLR8_RETURN_IF_ERROR(d_checks.CopyFromHostAsync(
      {reinterpret_cast<const std::byte*>(checks.data()), count * sizeof(RegionCheck)}, 0, stream));
  for (std::size_t first = 0; first < count;) {
    if (ImageBuildCancelled(o.cancel))
      return CancelledError("stopped while hashing the rank's image on the GPU");
    std::size_t end = first;
    std::uint64_t bytes = 0;
    while (end < count && end - first < kHashLaunchChecks && (bytes == 0 || bytes < kHashLaunchBytes))
      bytes += check_bytes[end++];
    EXLR8_RETURN_IF_ERROR(EnqueueRegionHash(base, base_bytes, d_checks.data_as<RegionCheck>() + first,
                                            end - first, d_digests.data_as<std::uint64_t>() + first,
                                            d_summary.data_as<RegionHashSummary>(), stream));
    EXLR8_RETURN_IF_ERROR(stream.Synchronize());
    if (o.progress != nullptr) o.progress->hash_done.fetch_add(bytes, std::memory_order_relaxed);
    first = end;
  }
  std::vector<std::uint64_t> digests(count);
  EXLR8_RETURN_IF_ERROR(
      d_digests.CopyToHostAsync(0, {reinterpret_cast<std::byte*>(digests.data()), count * 8}, stream));
  EXLR8_RETURN_IF_ERROR(stream.Synchronize());
  std::uint64_t mismatches = 0;
  std::size_t first_bad = count;
  for (std::size_t i = 0; i < count; ++i)
    if (digests[i] != checks[i].digest) {
      if (mismatches++ == 0) first_bad = i;
    }
  proof.hashed_mismatches = mismatches;
  if (mismatches != 0) return CheckMismatch(plan, base, first_bad, mismatches);
  return Status::Ok();
}

Status Validate(const RankImagePlan& plan, const std::byte* base, std::uint64_t bytes,
                const DeviceImageOptions& o, LeaseProof& proof) {
  CudaSetDeviceGuard guard;
  EXLR8_RETURN_IF_ERROR(guard.Set(o.device));
  EXLR8_ASSIGN_OR_RETURN(CudaStream stream, CudaStream::Create());
  if (!o.skip_hash) {
    SetStep(o, 2);
    const auto t0 = SteadyClock::now();
    EXLR8_RETURN_IF_ERROR(HashImage(plan, base, bytes, o, proof, stream.view()));
    proof.seconds_hash = SecondsSince(t0);
  }
  SetStep(o, 3);
  const auto t0 = SteadyClock::now();
  const ImageTables& t = plan.layout.tables;
  std::uint64_t of = 0;
  const std::vector<std::uint32_t> sample = ImageDecodeSample(t, o.check_all, o.sample_fraction, o.seed, &of);
  proof.decoded_of = of;
  proof.decoded_seed = o.seed;
  proof.every_layer_width_projection = true;
  EXLR8_ASSIGN_OR_RETURN(const std::vector<ImageDenseMatrix> dense, ImageDenseMatrices(t));
  const std::vector<std::size_t> dense_sample = ImageDenseSample(dense, o.check_all, o.seed);
  if (o.progress != nullptr) {
    std::uint64_t total = 0;
    for (std::uint32_t i : sample) total += t.tensors[i].shape[0];
    for (std::size_t i : dense_sample) total += DenseMatrixBytes(t, dense[i]);
    o.progress->decode_total.store(total);
    o.progress->decode_done.store(0);
  }
  // The dense matrices' CPU references take a core each (one matrix is
  // one decode), so they run beside the halves' batches, which take every
  // core in bursts, on their own stream and proof, merged after.
  Status dense_status;
  LeaseProof dense_proof;
  std::thread dense_thread([&] {
    CudaSetDeviceGuard dense_guard;
    dense_status = dense_guard.Set(o.device);
    if (!dense_status.ok()) return;
    Result<CudaStream> dense_stream = CudaStream::Create();
    if (!dense_stream.ok()) {
      dense_status = dense_stream.status();
      return;
    }
    dense_status = CheckDenseSample(plan, base, dense, dense_sample, o, dense_proof, dense_stream->view());
  });
  Status halves_status = CheckHalfSample(plan, base, sample, o, proof, stream.view());
  dense_thread.join();
  EXLR8_RETURN_IF_ERROR(halves_status);
  EXLR8_RETURN_IF_ERROR(dense_status);
  proof.dense_decoded_tensors = dense_proof.dense_decoded_tensors;
  proof.dense_decoded_mismatches = dense_proof.dense_decoded_mismatches;
  proof.max_block_error = std::max(proof.max_block_error, dense_proof.max_block_error);
  proof.seconds_decode = SecondsSince(t0);
  return Status::Ok();
}

}  // namespace

const std::byte* DeviceRankImage::data() const {
  return static_cast<const std::byte*>(vmm.empty() ? ipc.data() : vmm.data());
}

std::uint64_t DeviceRankImage::allocation_bytes() const { return vmm.empty() ? ipc.size() : vmm.size(); }

Status AllocateDeviceImageMemory(DeviceRankImage& img, int device, std::uint64_t bytes, bool force_ipc) {
  bool use_ipc = force_ipc;
  if (!use_ipc) {
    Result<ExportableDeviceMemory> vmm = ExportableDeviceMemory::Allocate(device, bytes);
    if (vmm.ok()) {
      img.vmm = std::move(*vmm);
      EXLR8_ASSIGN_OR_RETURN(const int fd, img.vmm.ExportFd());
      img.vmm_fd = UniqueFd(fd);
    } else if (vmm.status().code() == StatusCode::kUnimplemented) {
      use_ipc = true;
    } else {
      return vmm.status();
    }
  }
  if (use_ipc) {
    EXLR8_ASSIGN_OR_RETURN(img.ipc, DeviceBuffer::Allocate(bytes));
    EXLR8_ASSIGN_OR_RETURN(img.ipc_handle, ExportIpcHandle(img.ipc.data()));
  }
  return Status::Ok();
}

Result<DeviceRankImage> StageDeviceRankImage(const RankRequest& r, const DeviceImageOptions& o) {
  const auto t0 = SteadyClock::now();
  SetStep(o, 0);
  DeviceRankImage img;
  EXLR8_ASSIGN_OR_RETURN(img.plan, PlanRankImage(r));
  // After the plan: a rank the cache lacks is NotFound (exit 3) whether
  // or not this machine has a GPU.
  EXLR8_RETURN_IF_ERROR(RequireCudaDevice());
  img.commit = img.plan.commit;
  img.device = o.device;
  EXLR8_ASSIGN_OR_RETURN(img.identity, GetCudaDeviceIdentity(o.device));
  if (r.before_reading) EXLR8_RETURN_IF_ERROR(r.before_reading());
  if (ImageBuildCancelled(o.cancel))
    return CancelledError("stopped before the rank's image was copied to the GPU");
  const std::uint64_t size = img.plan.layout.allocation_bytes();
  img.proof.seconds_read = SecondsSince(t0);

  CudaSetDeviceGuard guard;
  EXLR8_RETURN_IF_ERROR(guard.Set(o.device));
  EXLR8_RETURN_IF_ERROR(AllocateDeviceImageMemory(img, o.device, size, o.force_ipc));
  std::byte* base = const_cast<std::byte*>(img.data());
  // The copy writes every byte of the image, padding included; the
  // allocation's rounding past it is zeroed here (the legacy stream, then
  // a sync, before the copy streams start).
  if (img.allocation_bytes() > size) {
    EXLR8_CUDA_TRY(cudaMemset(base + size, 0, img.allocation_bytes() - size));
    EXLR8_CUDA_TRY(cudaDeviceSynchronize());
  }

  SetStep(o, 1);
  EXLR8_RETURN_IF_ERROR(
      CopyImage(img.plan, base, r, o, &img.seconds_staging_setup, &img.proof.seconds_upload));

  // The dense data regions' whole digests (their blocks' checks prove the
  // device bytes), from the cache on the CPU while the GPU hashes.
  ImageTables& tables = img.plan.layout.tables;
  std::vector<std::uint32_t> dense;
  for (std::uint32_t i = 0; i < tables.tensors.size(); ++i)
    if (tables.tensors[i].kind == ImageRegionKind::kDenseData) dense.push_back(i);
  std::vector<std::uint64_t> dense_digest(dense.size());
  std::thread dense_thread([&] {
    ImageParallelFor(dense.size(), o.threads, o.cancel, [&](std::size_t i) {
      Xxh64 xxh;
      for (const ImageSourcePiece& piece : img.plan.sources[dense[i]].pieces)
        xxh.Update({img.plan.maps[piece.map]->bytes().data() + piece.offset, piece.length});
      dense_digest[i] = xxh.Digest();
    });
  });
  DeviceImageOptions checks = o;
  checks.skip_hash = false;  // the stage always hashes
  Status valid = Validate(img.plan, base, size, checks, img.proof);
  dense_thread.join();
  EXLR8_RETURN_IF_ERROR(valid);
  if (ImageBuildCancelled(o.cancel))
    return CancelledError("stopped while checking the rank's image on the GPU");
  for (std::size_t i = 0; i < dense.size(); ++i) tables.tensors[dense[i]].xxh64 = dense_digest[i];

  EXLR8_ASSIGN_OR_RETURN(img.tables_fd,
                         WriteSealedTables(tables, ImageName(r, img.commit) + " tables", &img.tables_bytes));
  img.proof.commit = img.commit;
  img.regions_without_release_digest = img.plan.regions_without_release_digest;
  img.bytes_without_release_digest = img.plan.bytes_without_release_digest;
  SetStep(o, 4);
  return img;
}

Status CheckDeviceImage(DeviceRankImage& image, const DeviceImageOptions& options) {
  DeviceImageOptions o = options;
  o.device = image.device;
  LeaseProof proof = image.proof;
  EXLR8_RETURN_IF_ERROR(Validate(image.plan, image.data(), image.image_bytes(), o, proof));
  image.proof = proof;
  SetStep(o, 4);
  return Status::Ok();
}

LeaseDescriptionV2 DescribeDeviceImage(const DeviceRankImage& img, const RankRequest& r,
                                       std::uint32_t release_deadline_s) {
  const ImageHeader& h = img.plan.layout.header;
  const ImageTables& t = img.plan.layout.tables;
  LeaseDescriptionV2 d;
  d.repo = r.repo;
  d.commit = img.commit;
  d.manifest = r.manifest;
  d.tp = r.tp;
  d.rank = r.rank;
  d.memory_kind = LeaseMemoryKind::kDevice;
  d.device = LeaseGpu{img.identity.uuid, img.identity.pci_bus_id, img.device};
  d.allocations.push_back({img.allocation_bytes(), img.vmm.empty() ? "ipc:" + img.ipc_handle : "fd"});
  d.image.allocation = 0;
  d.image.header_offset = 0;
  d.image.bytes = h.allocation_bytes;
  d.image.offset_table = h.offset_table.offset;
  d.image.offset_table_bytes = h.offset_table.bytes;
  d.image.layers = h.layers;
  d.image.experts = h.experts;
  d.image.halves = h.halves_per_proj;
  d.tables.bytes = img.tables_bytes;
  d.tables.tensors = t.tensors.size();
  d.tables.checks = t.checks.size();
  for (const ImageTensor& tensor : t.tensors)
    if (!tensor.name.empty()) d.tables.strings += tensor.name.size() + 1;
  d.proof = img.proof;
  d.release_deadline_s = release_deadline_s;
  return d;
}

}  // namespace exlr8
