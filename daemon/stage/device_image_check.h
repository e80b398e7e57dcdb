// Internal to device_image.cpp: the decode step of the device image's
// in-place check (device_image.h), on the GPU against the CPU reference of
// image_reference.h (halves: device_image_check.cpp; dense matrices:
// device_image_dense.cpp).
//
//   halves  each sampled half record's trellis tiles decoded in place
//           (gpu/decode.cuh) and compared bit for bit (fp32 and E4M3); then
//           reconstructed in place (gpu/reconstruct.cuh: u and v from the
//           record's slice and block row and the layer's signs regions, in
//           their stored dtypes) and compared per 128 x 128 block with spec
//           9.3's max|a-b| <= 1e-5 * max|b|.
//   dense   each sampled dense matrix decoded on the GPU from its data
//           regions in place (gpu/dense_decode.cuh; TRELLIS through the
//           trellis decode and the reconstruction) and compared with
//           DecodeDenseMatrix of the cache's file: bit for bit, TRELLIS per
//           128 x 128 block within spec 9.3.
//
// Any difference is Corruption naming the region (layer, expert,
// projection, half), the element or block and the values. The proof's
// decode fields are filled as the check goes (decoded_halves counts the
// halves compared, max_block_error the largest max|a-b| / max|b| seen).
//
// Threads: blocks; uses options.threads host threads for the CPU reference
// and `stream` (of the current device, options.device) for the GPU.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "client/lease/description_v2.h"
#include "daemon/base/mutex.h"
#include "daemon/stage/device_image.h"
#include "daemon/stage/image_reference.h"
#include "daemon/stage/rank_image_plan.h"
#include "format/status.h"
#include "gpu/stream.h"

namespace exlr8 {

// The first error of several threads.
class FirstError {
 public:
  void Note(Status s) {
    if (s.ok()) return;
    MutexLock lock(&mu_);
    if (status_.ok()) status_ = std::move(s);
    failed_.store(true);
  }
  bool failed() const { return failed_.load(std::memory_order_relaxed); }
  Status status() {
    MutexLock lock(&mu_);
    return status_;
  }

 private:
  Mutex mu_;
  Status status_ EXLR8_GUARDED_BY(mu_);
  std::atomic<bool> failed_{false};
};

// Threads for the decode step's CPU reference: options.threads, or every
// core (it bounds --check all; ImageThreadCount's default stops at 16).
inline int DecodeReferenceThreads(const DeviceImageOptions& o) {
  return o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// Spec 9.3's tolerance: per 128 x 128 block, max|a-b| <= kBlockTolerance * max|b|.
inline constexpr double kBlockTolerance = 1e-5;

// Checks the half records `sample` (tensor indices, ImageDecodeSample's)
// of the image at `base` as above; adds each half's trellis bytes to
// o.progress->decode_done as it is done. Sets proof.decoded_halves,
// tiles_bit_exact and max_block_error (decoded_of and the seed are the
// caller's). Cancelled once o.cancel is set.
Status CheckHalfSample(const RankImagePlan& plan, const std::byte* base,
                       const std::vector<std::uint32_t>& sample, const DeviceImageOptions& o,
                       LeaseProof& proof, CudaStreamView stream);

// Checks the dense matrices `sample` (indices into `matrices`,
// ImageDenseSample's) as above (device_image_dense.cpp); adds each matrix's data bytes to
// o.progress->decode_done as it is done. Sets proof.dense_decoded_tensors
// (matrices compared) and dense_decoded_mismatches, and raises
// max_block_error with TRELLIS blocks. Cancelled once o.cancel is set.
Status CheckDenseSample(const RankImagePlan& plan, const std::byte* base,
                        const std::vector<ImageDenseMatrix>& matrices, const std::vector<std::size_t>& sample,
                        const DeviceImageOptions& o, LeaseProof& proof, CudaStreamView stream);

// The data bytes of a dense matrix (its regions' lengths): its share of the
// decode step's progress.
std::uint64_t DenseMatrixBytes(const ImageTables& t, const ImageDenseMatrix& m);

}  // namespace exlr8
