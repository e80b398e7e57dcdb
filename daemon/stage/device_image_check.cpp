// The decode step of the device image's in-place check: device_image_check.h.
//
// Where the comparison runs: on the GPU. The CPU reference is written
// straight into pinned buffers (weights as fp32, tiles as E4M3 bytes: 5
// bytes per weight), uploaded with one DMA per batch, and compared there;
// only per-block maxima and a mismatch count come back. The other way
// round (the GPU's tiles and weights copied to the host and compared
// there) moves as many bytes over the link but adds a pass over both
// buffers to the host's work, and the host, computing the reference on
// every core, is what bounds `--check all`.
#include "daemon/stage/device_image_check.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <tuple>

#include "daemon/stage/image_common.h"
#include "daemon/stage/image_reference.h"
#include "format/trellis.h"
#include "gpu/cuda_check.h"
#include "gpu/decode.cuh"
#include "gpu/device_buffer.h"
#include "gpu/reconstruct.cuh"

namespace exlr8 {

namespace {

// Weights per batch (decoded, reconstructed and compared together); two
// batches are in flight, each with host buffers pinned for the check. A
// sample's batches are small (pinning 2 x 80 MB instead of 2 x 320 MB
// saves ~0.2 s of a ~1 s stage); `--check all` runs for seconds, where
// larger batches keep every core busy between the GPU's turns.
constexpr std::uint64_t kSampleBatchWeights = std::uint64_t{16} << 20;
constexpr std::uint64_t kCheckAllBatchWeights = std::uint64_t{64} << 20;

HalfLayout LayoutOf(const ImageTensor& t) {
  return t.proj == static_cast<std::uint8_t>(Proj::kDown) ? HalfLayout::kDown : HalfLayout::kGateUp;
}

std::string Describe(const RankImagePlan& plan, std::uint32_t region) {
  const ImageTensor& h = plan.layout.tables.tensors[region];
  return ImageRegionWhat(h) + " at image offset " + std::to_string(h.offset) + " (from " +
         plan.SourceOf(region, 0) + ")";
}

// Corruption for a block of half `region` outside spec 9.3's tolerance,
// with the block's worst element (the GPU's block read back).
Status BlockMismatch(const RankImagePlan& plan, std::uint32_t region, const float* gpu_half,
                     const float* cpu_half, std::uint64_t cols, std::uint64_t rb, std::uint64_t cb,
                     const BlockError& e) {
  std::vector<float> g(kBlock * kBlock);
  std::string worst;
  if (cudaMemcpy2D(g.data(), kBlock * sizeof(float), gpu_half + rb * kBlock * cols + cb * kBlock,
                   cols * sizeof(float), kBlock * sizeof(float), kBlock,
                   cudaMemcpyDeviceToHost) == cudaSuccess) {
    std::uint64_t wr = 0, wc = 0;
    double wd = -1;
    for (std::uint64_t r = 0; r < kBlock; ++r)
      for (std::uint64_t c = 0; c < kBlock; ++c) {
        const float a = g[r * kBlock + c], b = cpu_half[(rb * kBlock + r) * cols + cb * kBlock + c];
        double d = std::fabs(static_cast<double>(a) - b);
        if (std::isnan(d)) d = INFINITY;
        if (d > wd) {
          wd = d;
          wr = rb * kBlock + r;
          wc = cb * kBlock + c;
        }
      }
    char buf[160];
    std::snprintf(buf, sizeof buf, "; worst at weight [%llu, %llu]: GPU %.9g, CPU %.9g",
                  static_cast<unsigned long long>(wr), static_cast<unsigned long long>(wc),
                  static_cast<double>(g[(wr - rb * kBlock) * kBlock + (wc - cb * kBlock)]),
                  static_cast<double>(cpu_half[wr * cols + wc]));
    worst = buf;
  }
  char buf[200];
  std::snprintf(buf, sizeof buf,
                "block [%llu, %llu] (rows %llu.., columns %llu..): max|GPU-CPU| %.9g > 1e-5 * max|CPU| %.9g",
                static_cast<unsigned long long>(rb), static_cast<unsigned long long>(cb),
                static_cast<unsigned long long>(rb * kBlock), static_cast<unsigned long long>(cb * kBlock),
                static_cast<double>(e.max_diff), static_cast<double>(e.max_ref));
  return CorruptionError(Describe(plan, region) +
                         " reconstructs differently on the GPU than the CPU reference (spec 9.3): " + buf +
                         worst);
}

}  // namespace

namespace {

// A batch of halves of one (width, layout, hidden), entries [first, first
// + count) of the sample in group order.
struct HalfBatchPlan {
  int k = 0;
  HalfLayout layout = HalfLayout::kGateUp;
  std::uint64_t hidden = 0;
  std::uint64_t first = 0, count = 0;
};

// What one batch in flight uses. Two slots: while the GPU uploads and
// compares one batch, the CPU computes the next one's reference.
struct HalfSlot {
  DeviceBuffer f32, e4m3, ref_w, ref_tiles, u, v, errors, compare;
  PinnedHostBuffer w, tiles, h_errors, h_compare;
  const HalfBatchPlan* batch = nullptr;  // in flight, not yet checked
};

Result<HalfSlot> AllocateSlot(std::uint64_t elems, std::uint64_t vector_elems) {
  HalfSlot s;
  const std::uint64_t blocks = elems / (kBlock * kBlock);
  EXLR8_ASSIGN_OR_RETURN(s.f32, DeviceBuffer::Allocate(elems * sizeof(float)));
  EXLR8_ASSIGN_OR_RETURN(s.e4m3, DeviceBuffer::Allocate(elems));
  EXLR8_ASSIGN_OR_RETURN(s.ref_w, DeviceBuffer::Allocate(elems * sizeof(float)));
  EXLR8_ASSIGN_OR_RETURN(s.ref_tiles, DeviceBuffer::Allocate(elems));
  EXLR8_ASSIGN_OR_RETURN(s.u, DeviceBuffer::Allocate(vector_elems * sizeof(float)));
  EXLR8_ASSIGN_OR_RETURN(s.v, DeviceBuffer::Allocate(vector_elems * sizeof(float)));
  EXLR8_ASSIGN_OR_RETURN(s.errors, DeviceBuffer::Allocate(blocks * sizeof(BlockError)));
  EXLR8_ASSIGN_OR_RETURN(s.compare, DeviceBuffer::Allocate(sizeof(CompareResult)));
  EXLR8_ASSIGN_OR_RETURN(s.w, PinnedHostBuffer::Allocate(elems * sizeof(float)));
  EXLR8_ASSIGN_OR_RETURN(s.tiles, PinnedHostBuffer::Allocate(elems));
  EXLR8_ASSIGN_OR_RETURN(s.h_errors, PinnedHostBuffer::Allocate(blocks * sizeof(BlockError)));
  EXLR8_ASSIGN_OR_RETURN(s.h_compare, PinnedHostBuffer::Allocate(sizeof(CompareResult)));
  return s;
}

}  // namespace

Status CheckHalfSample(const RankImagePlan& plan, const std::byte* base,
                       const std::vector<std::uint32_t>& sample, const DeviceImageOptions& o,
                       LeaseProof& proof, CudaStreamView stream) {
  const ImageTables& t = plan.layout.tables;
  proof.decoded_halves = 0;
  proof.tiles_bit_exact = true;
  proof.max_block_error = 0;
  if (sample.empty()) return Status::Ok();

  // Groups of one (width, layout, hidden), flattened in group order: the
  // decode's offsets and the vectors' places, one entry per sampled half.
  std::map<std::tuple<int, int, std::uint64_t>, std::vector<std::uint32_t>> groups;
  for (std::uint32_t i : sample) {
    const ImageTensor& h = t.tensors[i];
    groups[{h.k, static_cast<int>(LayoutOf(h)), std::uint64_t{h.shape[2]} * kBlock}].push_back(i);
  }
  std::vector<std::uint32_t> members;  // tensor indices in group order
  std::vector<std::uint64_t> offsets;
  std::vector<HalfVectorRef> refs;
  std::vector<HalfBatchPlan> batches;
  std::uint64_t max_elems = 0, max_vector = 0;
  const std::uint64_t batch_weights = o.check_all ? kCheckAllBatchWeights : kSampleBatchWeights;
  for (const auto& [key, group] : groups) {
    const auto [k, layout_int, hidden] = key;
    const bool down = static_cast<HalfLayout>(layout_int) == HalfLayout::kDown;
    for (std::uint32_t i : group) {
      const ImageTensor& h = t.tensors[i];
      if (std::uint64_t{h.shape[0]} != 16 * std::uint64_t{h.k} * hidden || h.shape[1] != kBlock)
        return CorruptionError(ImageRegionWhat(h) + ": shape {" + std::to_string(h.shape[0]) + ", " +
                               std::to_string(h.shape[1]) + ", " + std::to_string(h.shape[2]) +
                               "} does not fit width K" + std::to_string(h.k));
      const ImageTensor* signs = t.FindSigns(h.layer, down);
      if (signs == nullptr || signs->shape[0] != hidden)
        return CorruptionError(ImageRegionWhat(h) + ": the image has no " +
                               (down ? "signs.out" : "signs.in") + " of " + std::to_string(hidden) +
                               " elements for layer " + std::to_string(h.layer));
      HalfVectorRef r;
      r.slice = h.offset + h.shape[0];
      r.block = r.slice + std::uint64_t{h.shape[1]} * DTypeSize(h.dtype);
      r.signs = signs->offset;
      r.slice_dtype = static_cast<std::uint8_t>(h.dtype);
      r.block_dtype = static_cast<std::uint8_t>(h.block_dtype);
      r.signs_dtype = static_cast<std::uint8_t>(signs->dtype);
      members.push_back(i);
      offsets.push_back(h.offset);
      refs.push_back(r);
    }
    const std::uint64_t half_elems = kBlock * hidden;
    const std::uint64_t per_batch =
        std::min<std::uint64_t>(group.size(), std::max<std::uint64_t>(1, batch_weights / half_elems));
    const std::uint64_t start = members.size() - group.size();
    for (std::uint64_t first = 0; first < group.size(); first += per_batch) {
      const std::uint64_t count = std::min<std::uint64_t>(per_batch, group.size() - first);
      batches.push_back({k, static_cast<HalfLayout>(layout_int), hidden, start + first, count});
      max_elems = std::max(max_elems, count * half_elems);
      max_vector = std::max(max_vector, count * hidden);
    }
  }
  EXLR8_ASSIGN_OR_RETURN(DeviceCodebook codebook, DeviceCodebook::Upload(stream));
  EXLR8_ASSIGN_OR_RETURN(DeviceBuffer d_offsets, DeviceBuffer::Allocate(offsets.size() * 8));
  EXLR8_ASSIGN_OR_RETURN(DeviceBuffer d_refs, DeviceBuffer::Allocate(refs.size() * sizeof(HalfVectorRef)));
  EXLR8_RETURN_IF_ERROR(d_offsets.CopyFromHostAsync(std::as_bytes(std::span(offsets)), 0, stream));
  EXLR8_RETURN_IF_ERROR(d_refs.CopyFromHostAsync(std::as_bytes(std::span(refs)), 0, stream));
  EXLR8_RETURN_IF_ERROR(stream.Synchronize());
  HalfSlot slots[2];
  const std::size_t nslots = batches.size() > 1 ? 2 : 1;
  for (std::size_t n = 0; n < nslots; ++n) {
    EXLR8_ASSIGN_OR_RETURN(slots[n], AllocateSlot(max_elems, max_vector));
  }
  // Declared after the buffers, so destroyed first; a buffer's cudaFree
  // waits for the work still queued on it (an early return).
  EXLR8_ASSIGN_OR_RETURN(CudaStream second, CudaStream::Create());
  const CudaStreamView streams[2] = {stream, second.view()};
  const auto stopped = [&] { return CancelledError("stopped while decoding the sample on the GPU"); };

  // Checks what slot `s` computed for its batch (its stream synchronised).
  auto finish = [&](std::size_t s) -> Status {
    HalfSlot& slot = slots[s];
    const HalfBatchPlan& b = *slot.batch;
    slot.batch = nullptr;
    EXLR8_RETURN_IF_ERROR(streams[s].Synchronize());
    const bool down = b.layout == HalfLayout::kDown;
    const std::uint64_t half_elems = kBlock * b.hidden, cols = down ? b.hidden : kBlock;
    const std::uint64_t blocks_per_half = half_elems / (kBlock * kBlock);
    const CompareResult cmp = *reinterpret_cast<const CompareResult*>(slot.h_compare.bytes().data());
    if (cmp.mismatches != 0) {
      // The tiles were reconstructed over since: decode the batch again
      // for the first differing element's GPU values.
      proof.tiles_bit_exact = false;
      const HalfBatch batch{base,    d_offsets.data_as<std::uint64_t>(), b.first, b.count, b.k, b.layout,
                            b.hidden};
      EXLR8_RETURN_IF_ERROR(LaunchDecodeHalves(batch,
                                               {slot.f32.data_as<float>(), slot.e4m3.data_as<std::uint8_t>()},
                                               codebook, DecodeTableMode::kSharedE4M3, streams[s]));
      EXLR8_RETURN_IF_ERROR(streams[s].Synchronize());
      const std::uint64_t j = cmp.first / half_elems, i = cmp.first % half_elems;
      float g = 0;
      std::uint8_t ge = 0;
      EXLR8_CUDA_TRY(cudaMemcpy(&g, slot.f32.data_as<float>() + cmp.first, 4, cudaMemcpyDeviceToHost));
      EXLR8_CUDA_TRY(
          cudaMemcpy(&ge, slot.e4m3.data_as<std::uint8_t>() + cmp.first, 1, cudaMemcpyDeviceToHost));
      const std::uint8_t want = reinterpret_cast<const std::uint8_t*>(slot.tiles.bytes().data())[cmp.first];
      char buf[200];
      std::snprintf(buf, sizeof buf,
                    "tile value [%llu, %llu]: GPU fp32 0x%08x E4M3 0x%02x, CPU fp32 0x%08x E4M3 0x%02x "
                    "(%llu element(s) of the batch differ)",
                    static_cast<unsigned long long>(i / cols), static_cast<unsigned long long>(i % cols),
                    std::bit_cast<std::uint32_t>(g), ge, std::bit_cast<std::uint32_t>(E4M3ToFloat(want)),
                    want, cmp.mismatches);
      return CorruptionError(Describe(plan, members[b.first + j]) +
                             " decodes differently on the GPU than the CPU reference: " + buf);
    }
    const auto* errors = reinterpret_cast<const BlockError*>(slot.h_errors.bytes().data());
    const float* cpu_w = reinterpret_cast<const float*>(slot.w.bytes().data());
    for (std::uint64_t blk = 0; blk < b.count * blocks_per_half; ++blk) {
      const BlockError& e = errors[blk];
      const double ratio =
          e.max_ref > 0 ? e.max_diff / static_cast<double>(e.max_ref) : (e.max_diff > 0 ? INFINITY : 0.0);
      if (!(static_cast<double>(e.max_diff) <= kBlockTolerance * static_cast<double>(e.max_ref))) {
        const std::uint64_t j = blk / blocks_per_half, in = blk % blocks_per_half;
        return BlockMismatch(plan, members[b.first + j], slot.f32.data_as<float>() + j * half_elems,
                             cpu_w + j * half_elems, cols, in / (cols / kBlock), in % (cols / kBlock), e);
      }
      proof.max_block_error = std::max(proof.max_block_error, ratio);
    }
    proof.decoded_halves += b.count;
    if (o.progress != nullptr) {
      std::uint64_t bytes = 0;
      for (std::uint64_t j = 0; j < b.count; ++j) bytes += t.tensors[members[b.first + j]].shape[0];
      o.progress->decode_done.fetch_add(bytes, std::memory_order_relaxed);
    }
    return Status::Ok();
  };

  auto run = [&]() -> Status {
    for (std::size_t n = 0; n < batches.size(); ++n) {
      if (ImageBuildCancelled(o.cancel)) return stopped();
      const std::size_t s = n % nslots;
      if (slots[s].batch != nullptr) EXLR8_RETURN_IF_ERROR(finish(s));  // batch n - 2 (one slot: n - 1)
      HalfSlot& slot = slots[s];
      const HalfBatchPlan& b = batches[n];
      const CudaStreamView st = streams[s];
      const bool down = b.layout == HalfLayout::kDown;
      const std::uint64_t half_elems = kBlock * b.hidden, elems = b.count * half_elems;
      // The GPU decodes (and expands the vectors) while the CPU computes the
      // reference on every core.
      const HalfBatch batch{base,    d_offsets.data_as<std::uint64_t>(), b.first, b.count, b.k, b.layout,
                            b.hidden};
      EXLR8_RETURN_IF_ERROR(LaunchDecodeHalves(batch,
                                               {slot.f32.data_as<float>(), slot.e4m3.data_as<std::uint8_t>()},
                                               codebook, DecodeTableMode::kSharedE4M3, st));
      EXLR8_RETURN_IF_ERROR(LaunchExpandHalfVectors(base, d_refs.data_as<HalfVectorRef>() + b.first, b.count,
                                                    b.layout, b.hidden, slot.u.data_as<float>(),
                                                    slot.v.data_as<float>(), st));
      float* const cpu_w = reinterpret_cast<float*>(slot.w.bytes().data());
      std::uint8_t* const cpu_tiles = reinterpret_cast<std::uint8_t*>(slot.tiles.bytes().data());
      FirstError error;
      ImageParallelFor(b.count, DecodeReferenceThreads(o), o.cancel, [&](std::size_t j) {
        if (error.failed()) return;
        error.Note(ReferenceHalf(plan, members[b.first + j], {cpu_tiles + j * half_elems, half_elems},
                                 {cpu_w + j * half_elems, half_elems}));
      });
      if (ImageBuildCancelled(o.cancel)) return stopped();
      if (error.failed()) return error.status();

      // Tiles bit for bit (before the reconstruction overwrites them), then
      // the weights per 128 x 128 block: all queued, checked by finish().
      EXLR8_RETURN_IF_ERROR(slot.ref_tiles.CopyFromHostAsync(slot.tiles.bytes().first(elems), 0, st));
      EXLR8_RETURN_IF_ERROR(LaunchCompareTiles(slot.f32.data_as<float>(), slot.e4m3.data_as<std::uint8_t>(),
                                               slot.ref_tiles.data_as<std::uint8_t>(), elems,
                                               slot.compare.data_as<CompareResult>(), st));
      EXLR8_RETURN_IF_ERROR(slot.compare.CopyToHostAsync(0, slot.h_compare.bytes(), st));
      EXLR8_RETURN_IF_ERROR(slot.ref_w.CopyFromHostAsync(slot.w.bytes().first(elems * sizeof(float)), 0, st));
      ReconstructBatch rb;
      rb.w = slot.f32.data_as<float>();
      rb.count = b.count;
      rb.rows = down ? kBlock : b.hidden;
      rb.cols = down ? b.hidden : kBlock;
      rb.u = slot.u.data_as<float>();
      rb.u_stride = rb.rows;
      rb.v = slot.v.data_as<float>();
      rb.v_stride = rb.cols;
      EXLR8_RETURN_IF_ERROR(LaunchReconstructBlocks(rb, st));
      EXLR8_RETURN_IF_ERROR(LaunchBlockErrors(slot.f32.data_as<float>(), slot.ref_w.data_as<float>(), b.count,
                                              rb.rows, rb.cols, slot.errors.data_as<BlockError>(), st));
      const std::uint64_t nblocks = elems / (kBlock * kBlock);
      EXLR8_RETURN_IF_ERROR(
          slot.errors.CopyToHostAsync(0, slot.h_errors.bytes().first(nblocks * sizeof(BlockError)), st));
      slot.batch = &b;
      // The other slot's batch (n - 1) has had this batch's CPU time to finish.
      if (nslots == 2 && slots[1 - s].batch != nullptr) EXLR8_RETURN_IF_ERROR(finish(1 - s));
    }
    for (std::size_t s = 0; s < nslots; ++s)
      if (slots[s].batch != nullptr) EXLR8_RETURN_IF_ERROR(finish(s));
    return Status::Ok();
  };
  Status status = run();
  // Nothing stays queued on the buffers and pinned memory freed on return
  // (an early one included).
  for (const CudaStreamView st : streams) {
    Status done = st.Synchronize();
    if (status.ok()) status = std::move(done);
  }
  return status;
}

}  // namespace exlr8
