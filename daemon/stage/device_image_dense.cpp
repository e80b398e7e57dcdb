// The dense part of the device image's decode step: CheckDenseSample
// (device_image_check.h). The CPU reference (DecodeDenseMatrix of the
// cache's file) is uploaded and compared on the GPU, as for the halves.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "daemon/stage/device_image_check.h"
#include "daemon/stage/image_common.h"
#include "daemon/stage/image_reference.h"
#include "format/trellis.h"
#include "gpu/cuda_check.h"
#include "gpu/decode.cuh"
#include "gpu/dense_decode.cuh"
#include "gpu/device_buffer.h"
#include "gpu/reconstruct.cuh"

namespace exlr8 {

std::uint64_t DenseMatrixBytes(const ImageTables& t, const ImageDenseMatrix& m) {
  std::uint64_t bytes = 0;
  for (std::uint32_t r = 0; r < m.regions; ++r) bytes += t.tensors[m.first + r].length;
  return bytes;
}

namespace {

// CPU references computed together (on every core) before the GPU
// compares them one by one: at most this many weights at once (4 GiB).
constexpr std::uint64_t kDenseBatchWeights = std::uint64_t{1} << 30;
constexpr std::size_t kUploadChunk = std::size_t{64} << 20;

std::string DescribeDense(const RankImagePlan& plan, const ImageDenseMatrix& m) {
  const ImageTensor& first = plan.layout.tables.tensors[m.first];
  return "dense matrix '" + m.name + "' (" + std::string(DenseFormatName(m.format)) + " " +
         std::to_string(m.out) + " x " + std::to_string(m.inp) + ", data at image offset " +
         std::to_string(first.offset) + ", from " + plan.SourceOf(m.first, 0) + ")";
}

// `host` into `device` through the pinned `staging` buffer.
Status UploadThroughPinned(std::span<const float> host, DeviceBuffer& device, PinnedHostBuffer& staging,
                           CudaStreamView stream) {
  const auto bytes = std::as_bytes(host);
  for (std::size_t at = 0; at < bytes.size(); at += staging.size()) {
    const std::size_t n = std::min(staging.size(), bytes.size() - at);
    std::memcpy(staging.bytes().data(), bytes.data() + at, n);
    EXLR8_RETURN_IF_ERROR(device.CopyFromHostAsync(staging.bytes().first(n), at, stream));
    EXLR8_RETURN_IF_ERROR(stream.Synchronize());
  }
  return Status::Ok();
}

}  // namespace

Status CheckDenseSample(const RankImagePlan& plan, const std::byte* base,
                        const std::vector<ImageDenseMatrix>& matrices, const std::vector<std::size_t>& sample,
                        const DeviceImageOptions& o, LeaseProof& proof, CudaStreamView stream) {
  const ImageTables& t = plan.layout.tables;
  proof.dense_decoded_tensors = 0;
  proof.dense_decoded_mismatches = 0;
  if (sample.empty()) return Status::Ok();
  std::uint64_t max_elems = 0, max_trellis = 0, max_vector = 0;
  for (std::size_t i : sample) {
    const ImageDenseMatrix& m = matrices[i];
    const std::uint64_t elems = std::uint64_t{m.out} * m.inp;
    max_elems = std::max(max_elems, elems);
    if (m.format == DenseFormat::kTrellis) {
      max_trellis = std::max(max_trellis, elems);
      max_vector = std::max<std::uint64_t>({max_vector, m.out, m.inp});
    }
  }
  EXLR8_ASSIGN_OR_RETURN(DeviceBuffer d_w, DeviceBuffer::Allocate(max_elems * sizeof(float)));
  EXLR8_ASSIGN_OR_RETURN(DeviceBuffer d_ref, DeviceBuffer::Allocate(max_elems * sizeof(float)));
  EXLR8_ASSIGN_OR_RETURN(DeviceBuffer d_entries, DeviceBuffer::Allocate(max_trellis * sizeof(float)));
  EXLR8_ASSIGN_OR_RETURN(DeviceBuffer d_suh, DeviceBuffer::Allocate(max_vector * sizeof(float)));
  EXLR8_ASSIGN_OR_RETURN(DeviceBuffer d_svh, DeviceBuffer::Allocate(max_vector * sizeof(float)));
  const std::uint64_t max_blocks = max_trellis / (kBlock * kBlock);
  EXLR8_ASSIGN_OR_RETURN(DeviceBuffer d_errors, DeviceBuffer::Allocate(max_blocks * sizeof(BlockError)));
  EXLR8_ASSIGN_OR_RETURN(DeviceBuffer d_compare, DeviceBuffer::Allocate(sizeof(CompareResult)));
  EXLR8_ASSIGN_OR_RETURN(PinnedHostBuffer staging, PinnedHostBuffer::Allocate(std::min<std::uint64_t>(
                                                       kUploadChunk, max_elems * sizeof(float))));
  std::vector<BlockError> errors(max_blocks);
  std::optional<DeviceCodebook> codebook;
  const auto stopped = [&] { return CancelledError("stopped while decoding dense matrices on the GPU"); };

  for (std::size_t first = 0; first < sample.size();) {
    // A batch of matrices whose CPU references are computed together.
    std::size_t end = first;
    std::uint64_t weights = 0;
    while (end < sample.size() && (end == first || weights < kDenseBatchWeights)) {
      const ImageDenseMatrix& m = matrices[sample[end++]];
      weights += std::uint64_t{m.out} * m.inp;
    }
    std::vector<Result<std::vector<float>>> refs(end - first,
                                                 Result<std::vector<float>>(std::vector<float>{}));
    ImageParallelFor(end - first, DecodeReferenceThreads(o), o.cancel,
                     [&](std::size_t j) { refs[j] = ReferenceDense(plan, matrices[sample[first + j]]); });
    if (ImageBuildCancelled(o.cancel)) return stopped();
    for (std::size_t j = 0; j < end - first; ++j) {
      if (ImageBuildCancelled(o.cancel)) return stopped();
      const ImageDenseMatrix& m = matrices[sample[first + j]];
      if (!refs[j].ok()) return refs[j].status();
      const std::vector<float> ref = std::move(*refs[j]);
      refs[j] = std::vector<float>{};
      const std::uint64_t elems = std::uint64_t{m.out} * m.inp;
      if (ref.size() != elems)
        return InternalError(DescribeDense(plan, m) + ": the CPU reference has " +
                             std::to_string(ref.size()) + " weights");
      EXLR8_RETURN_IF_ERROR(UploadThroughPinned(ref, d_ref, staging, stream));
      float* const w = d_w.data_as<float>();
      if (m.format == DenseFormat::kTrellis) {
        // Decode every entry in place, reconstruct with suh/svh read in
        // place (spec 9.2's dense vectors), then transpose into the weight.
        if (!codebook) {
          EXLR8_ASSIGN_OR_RETURN(DeviceCodebook cb, DeviceCodebook::Upload(stream));
          codebook.emplace(std::move(cb));
        }
        const ImageTensor& tr = t.tensors[m.first];
        const ImageTensor& suh = t.tensors[m.first + 1];
        const ImageTensor& svh = t.tensors[m.first + 2];
        const bool side2 = m.side == DenseSide::kInput;
        const std::uint64_t len = side2 ? m.out : m.inp;
        const std::uint64_t entries = tr.shape[0], entry_bytes = tr.shape[1];
        if (entries * kBlock * len != elems || entry_bytes != 16 * std::uint64_t(m.k) * len)
          return CorruptionError(DescribeDense(plan, m) + ": trellis shape {" + std::to_string(entries) +
                                 ", " + std::to_string(entry_bytes) + "} does not fit K" +
                                 std::to_string(m.k));
        std::vector<std::uint64_t> offsets(entries);
        for (std::uint64_t g = 0; g < entries; ++g) offsets[g] = tr.offset + g * entry_bytes;
        EXLR8_ASSIGN_OR_RETURN(DeviceBuffer d_offsets, DeviceBuffer::Allocate(offsets.size() * 8));
        EXLR8_RETURN_IF_ERROR(d_offsets.CopyFromHostAsync(std::as_bytes(std::span(offsets)), 0, stream));
        const HalfBatch batch{base, d_offsets.data_as<std::uint64_t>(),
                              0,    entries,
                              m.k,  side2 ? HalfLayout::kDown : HalfLayout::kGateUp,
                              len};
        EXLR8_RETURN_IF_ERROR(LaunchDecodeHalves(batch, {d_entries.data_as<float>(), nullptr}, *codebook,
                                                 DecodeTableMode::kSharedE4M3, stream));
        EXLR8_RETURN_IF_ERROR(
            LaunchConvertToFloat(base + suh.offset, suh.dtype, m.inp, d_suh.data_as<float>(), stream));
        EXLR8_RETURN_IF_ERROR(
            LaunchConvertToFloat(base + svh.offset, svh.dtype, m.out, d_svh.data_as<float>(), stream));
        ReconstructBatch rb;
        rb.w = d_entries.data_as<float>();
        rb.count = entries;
        rb.rows = side2 ? kBlock : m.inp;
        rb.cols = side2 ? m.out : kBlock;
        rb.u = d_suh.data_as<float>();
        rb.u_stride = side2 ? kBlock : 0;
        rb.v = d_svh.data_as<float>();
        rb.v_stride = side2 ? 0 : kBlock;
        EXLR8_RETURN_IF_ERROR(LaunchReconstructBlocks(rb, stream));
        EXLR8_RETURN_IF_ERROR(
            LaunchTrellisEntriesToWeight(d_entries.data_as<float>(), m.side, m.out, m.inp, w, stream));
        EXLR8_RETURN_IF_ERROR(LaunchBlockErrors(w, d_ref.data_as<float>(), 1, m.out, m.inp,
                                                d_errors.data_as<BlockError>(), stream));
        const std::uint64_t nblocks = elems / (kBlock * kBlock);
        EXLR8_RETURN_IF_ERROR(d_errors.CopyToHostAsync(
            0, std::as_writable_bytes(std::span(errors)).first(nblocks * sizeof(BlockError)), stream));
        EXLR8_RETURN_IF_ERROR(stream.Synchronize());
        const std::uint64_t cblocks = m.inp / kBlock;
        for (std::uint64_t b = 0; b < nblocks; ++b) {
          const BlockError& e = errors[b];
          const double ratio =
              e.max_ref > 0 ? e.max_diff / static_cast<double>(e.max_ref) : (e.max_diff > 0 ? INFINITY : 0.0);
          if (!(static_cast<double>(e.max_diff) <= kBlockTolerance * static_cast<double>(e.max_ref))) {
            proof.dense_decoded_mismatches = 1;
            char buf[200];
            std::snprintf(
                buf, sizeof buf,
                "block [%llu, %llu] of the (out, inp) weight: max|GPU-CPU| %.9g > 1e-5 * max|CPU| %.9g",
                static_cast<unsigned long long>(b / cblocks), static_cast<unsigned long long>(b % cblocks),
                static_cast<double>(e.max_diff), static_cast<double>(e.max_ref));
            return CorruptionError(
                DescribeDense(plan, m) +
                " decodes differently on the GPU than the CPU reference (spec 9.3): " + buf);
          }
          proof.max_block_error = std::max(proof.max_block_error, ratio);
        }
      } else {
        DenseDecodeArgs a;
        a.base = base;
        a.format = m.format;
        a.side = m.side;
        a.out = m.out;
        a.inp = m.inp;
        a.data[0] = t.tensors[m.first].offset;
        if (m.regions > 1) {
          a.data[1] = t.tensors[m.first + 1].offset;
          a.scale_dtype = t.tensors[m.first + 1].dtype;
        }
        EXLR8_RETURN_IF_ERROR(LaunchDecodeDense(a, w, stream));
        EXLR8_RETURN_IF_ERROR(
            LaunchCompareBits(w, d_ref.data_as<float>(), elems, d_compare.data_as<CompareResult>(), stream));
        CompareResult cmp;
        EXLR8_RETURN_IF_ERROR(
            d_compare.CopyToHostAsync(0, std::as_writable_bytes(std::span(&cmp, 1)), stream));
        EXLR8_RETURN_IF_ERROR(stream.Synchronize());
        if (cmp.mismatches != 0) {
          proof.dense_decoded_mismatches = 1;
          float g = 0;
          EXLR8_CUDA_TRY(cudaMemcpy(&g, w + cmp.first, 4, cudaMemcpyDeviceToHost));
          const float c = ref[cmp.first];
          char buf[240];
          std::snprintf(buf, sizeof buf,
                        "weight [%llu, %llu]: GPU %.9g (0x%08x), CPU %.9g (0x%08x); %llu weight(s) differ",
                        static_cast<unsigned long long>(cmp.first / m.inp),
                        static_cast<unsigned long long>(cmp.first % m.inp), static_cast<double>(g),
                        std::bit_cast<std::uint32_t>(g), static_cast<double>(c),
                        std::bit_cast<std::uint32_t>(c), cmp.mismatches);
          return CorruptionError(DescribeDense(plan, m) +
                                 " decodes differently on the GPU than the CPU reference: " + buf);
        }
      }
      ++proof.dense_decoded_tensors;
      if (o.progress != nullptr)
        o.progress->decode_done.fetch_add(DenseMatrixBytes(t, m), std::memory_order_relaxed);
    }
    first = end;
  }
  return Status::Ok();
}

}  // namespace exlr8
