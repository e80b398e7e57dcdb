#include "gpu/upload.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "gpu/cuda_check.h"
#include "gpu/event.h"

namespace exlr8 {

namespace {

// One pending host copy into a staging buffer.
struct Piece {
  std::byte* dst;
  const std::byte* src;
  std::size_t len;
};

// Copies `pieces` (total `total` bytes) with up to `threads` threads, each
// taking one contiguous share of the concatenated bytes; the calling thread
// takes the first share. Parts under 1 MiB are not worth a thread.
void ParallelCopy(const std::vector<Piece>& pieces, std::size_t total, int threads) {
  constexpr std::size_t kMinPart = std::size_t{1} << 20;
  const std::size_t parts = std::max<std::size_t>(1, std::min<std::size_t>(threads, total / kMinPart));
  auto copy_share = [&pieces](std::size_t begin, std::size_t end) {
    std::size_t at = 0;  // offset of the current piece in the concatenation
    for (const Piece& p : pieces) {
      const std::size_t lo = std::max(begin, at), hi = std::min(end, at + p.len);
      if (lo < hi) std::memcpy(p.dst + (lo - at), p.src + (lo - at), hi - lo);
      at += p.len;
      if (at >= end) break;
    }
  };
  const std::size_t per = (total + parts - 1) / parts;
  std::vector<std::jthread> workers;
  workers.reserve(parts - 1);
  for (std::size_t t = 1; t < parts; ++t) {
    const std::size_t begin = std::min(total, t * per), end = std::min(total, begin + per);
    if (begin == end) continue;
    try {
      workers.emplace_back([=] { copy_share(begin, end); });
    } catch (const std::system_error&) {  // no thread to be had: copy this share here
      copy_share(begin, end);
    }
  }
  copy_share(0, std::min(total, per));
}  // joins

// The ring of pinned buffers; each chunk maps to one contiguous device range.
class StagingRing {
 public:
  StagingRing(std::byte* device, CudaStreamView stream) : device_(device), stream_(stream) {}

  Status Init(const UploadOptions& o) {
    copy_threads_ = o.copy_threads;
    bufs_.resize(static_cast<std::size_t>(o.staging_buffers));
    busy_.assign(bufs_.size(), false);
    for (std::size_t i = 0; i < bufs_.size(); ++i) {
      EXLR8_ASSIGN_OR_RETURN(bufs_[i], PinnedHostBuffer::Allocate(o.staging_bytes));
      EXLR8_ASSIGN_OR_RETURN(CudaEvent e, CudaEvent::Create(/*timing=*/false));
      events_.push_back(std::move(e));
    }
    return Status::Ok();
  }

  // Appends the next n bytes of the packed device image: a copy of src, or
  // n zeros (padding) when `zeros`.
  Status Append(const std::byte* src, std::size_t n, bool zeros) {
    while (n > 0) {
      if (fill_ == bufs_[cur_].size()) EXLR8_RETURN_IF_ERROR(Flush());
      EXLR8_RETURN_IF_ERROR(WaitCurrent());
      const std::size_t take = std::min(n, bufs_[cur_].size() - fill_);
      std::byte* dst = bufs_[cur_].bytes().data() + fill_;
      if (zeros) {
        std::memset(dst, 0, take);
      } else {
        pending_.push_back({dst, src, take});  // copied at Flush, in parallel
        pending_bytes_ += take;
        src += take;
      }
      fill_ += take;
      n -= take;
    }
    return Status::Ok();
  }

  // Queues the current chunk and moves to the next buffer.
  Status Flush() {
    if (fill_ == 0) return Status::Ok();
    ParallelCopy(pending_, pending_bytes_, copy_threads_);
    pending_.clear();
    pending_bytes_ = 0;
    EXLR8_CUDA_TRY(cudaMemcpyAsync(device_ + chunk_start_, bufs_[cur_].bytes().data(), fill_, cudaMemcpyHostToDevice,
                                   stream_.value()));
    EXLR8_RETURN_IF_ERROR(events_[cur_].Record(stream_));
    busy_[cur_] = true;
    chunk_start_ += fill_;
    fill_ = 0;
    cur_ = (cur_ + 1) % bufs_.size();
    return Status::Ok();
  }

 private:
  // Blocks until the DMA that last read the current buffer is done.
  Status WaitCurrent() {
    if (busy_[cur_]) {
      EXLR8_RETURN_IF_ERROR(events_[cur_].Synchronize());
      busy_[cur_] = false;
    }
    return Status::Ok();
  }

  std::byte* device_;
  CudaStreamView stream_;
  std::vector<PinnedHostBuffer> bufs_;
  std::vector<CudaEvent> events_;
  std::vector<bool> busy_;
  int copy_threads_ = 1;
  std::vector<Piece> pending_;  // host copies into the current buffer
  std::size_t pending_bytes_ = 0;
  std::size_t cur_ = 0;
  std::size_t fill_ = 0;
  std::uint64_t chunk_start_ = 0;
};

}  // namespace

Status StagedHalves::CopyHalfToHostAsync(std::size_t index, std::span<std::byte> dst, CudaStreamView stream) const {
  if (index >= offsets_.size())
    return InvalidArgumentError("StagedHalves: half " + std::to_string(index) + " of " +
                                std::to_string(offsets_.size()));
  if (dst.size() != sizes_[index])
    return InvalidArgumentError("StagedHalves: half " + std::to_string(index) + " has " +
                                std::to_string(sizes_[index]) + " bytes, destination " + std::to_string(dst.size()));
  return data_.CopyToHostAsync(offsets_[index], dst, stream);
}

Result<StagedHalves> UploadHalves(std::span<const std::span<const std::byte>> halves, std::size_t halves_per_expert,
                                  CudaStreamView stream, const UploadOptions& options, UploadStats* stats) {
  // arguments
  if (halves_per_expert == 0 || halves.size() % halves_per_expert != 0)
    return InvalidArgumentError("UploadHalves: " + std::to_string(halves.size()) + " halves is not a multiple of " +
                                std::to_string(halves_per_expert) + " halves per expert");
  const std::size_t align = options.alignment;
  if (align < 4 || (align & (align - 1)) != 0)
    return InvalidArgumentError("UploadHalves: alignment " + std::to_string(align) + " is not a power of two >= 4");
  if (options.pinned_staging && (options.staging_buffers < 1 || options.staging_buffers > 16 ||
                                 options.staging_bytes < 4096 || options.staging_bytes > (std::size_t{1} << 32) ||
                                 options.copy_threads < 1 || options.copy_threads > 64))
    return InvalidArgumentError("UploadHalves: staging ring of " + std::to_string(options.staging_buffers) + " x " +
                                std::to_string(options.staging_bytes) + " bytes, " +
                                std::to_string(options.copy_threads) +
                                " copy threads (want 1..16 x 4 KiB..4 GiB, 1..64 threads)");

  // layout
  StagedHalves staged;
  staged.halves_per_expert_ = halves_per_expert;
  staged.offsets_.reserve(halves.size());
  staged.sizes_.reserve(halves.size());
  std::uint64_t end = 0, payload = 0;
  constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max() / 2;
  for (std::size_t i = 0; i < halves.size(); ++i) {
    if (halves[i].empty()) return InvalidArgumentError("UploadHalves: half " + std::to_string(i) + " is empty");
    const std::uint64_t start = (end + align - 1) & ~static_cast<std::uint64_t>(align - 1);
    if (halves[i].size() > kMax - start)
      return InvalidArgumentError("UploadHalves: total size overflows at half " + std::to_string(i));
    staged.offsets_.push_back(start);
    staged.sizes_.push_back(halves[i].size());
    end = start + halves[i].size();
    payload += halves[i].size();
  }
  EXLR8_ASSIGN_OR_RETURN(staged.data_, DeviceBuffer::Allocate(end));
  EXLR8_ASSIGN_OR_RETURN(staged.offsets_table_,
                         DeviceBuffer::Allocate(staged.offsets_.size() * sizeof(std::uint64_t)));
  std::byte* device = staged.data_.data_as<std::byte>();

  StagingRing ring(device, stream);
  if (options.pinned_staging) EXLR8_RETURN_IF_ERROR(ring.Init(options));

  // transfer
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  std::uint64_t pos = 0;  // device bytes written so far
  for (std::size_t i = 0; i < halves.size(); ++i) {
    if (options.cancel != nullptr && options.cancel->load(std::memory_order_relaxed)) {
      // The DMA may still read the staging ring: let it finish before the
      // ring and the allocation are freed.
      EXLR8_RETURN_IF_ERROR(stream.Synchronize());
      return CancelledError("upload stopped after " + std::to_string(i) + " of " + std::to_string(halves.size()) +
                            " halves");
    }
    const std::uint64_t gap = staged.offsets_[i] - pos;
    if (options.pinned_staging) {
      if (gap > 0) EXLR8_RETURN_IF_ERROR(ring.Append(nullptr, gap, /*zeros=*/true));
      EXLR8_RETURN_IF_ERROR(ring.Append(halves[i].data(), halves[i].size(), /*zeros=*/false));
    } else {
      if (gap > 0) EXLR8_CUDA_TRY(cudaMemsetAsync(device + pos, 0, gap, stream.value()));
      EXLR8_CUDA_TRY(cudaMemcpyAsync(device + staged.offsets_[i], halves[i].data(), halves[i].size(),
                                     cudaMemcpyHostToDevice, stream.value()));
    }
    pos = staged.offsets_[i] + halves[i].size();
    if (options.bytes_uploaded != nullptr) options.bytes_uploaded->fetch_add(halves[i].size(), std::memory_order_relaxed);
  }
  if (options.pinned_staging) EXLR8_RETURN_IF_ERROR(ring.Flush());
  EXLR8_RETURN_IF_ERROR(stream.Synchronize());
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();

  // offset table (small; pageable is fine)
  const auto* table = reinterpret_cast<const std::byte*>(staged.offsets_.data());
  EXLR8_RETURN_IF_ERROR(staged.offsets_table_.CopyFromHostAsync(
      {table, staged.offsets_.size() * sizeof(std::uint64_t)}, 0, stream));
  EXLR8_RETURN_IF_ERROR(stream.Synchronize());

  if (stats != nullptr) {
    stats->bytes = payload;
    stats->device_bytes = end;
    stats->seconds = seconds;
  }
  return staged;
}

}  // namespace exlr8
