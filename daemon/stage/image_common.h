// What the host and device image builders (host_image.h, device_image.h)
// share: the copy list of a planned image, the worker pool, sealed memfds,
// and the naming of a region for error messages. No CUDA.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "client/lease/image_layout.h"
#include "daemon/base/posix.h"
#include "daemon/stage/rank_image_plan.h"
#include "format/status.h"

namespace exlr8 {

// Seconds from `t0` to now, for the steps' timings.
inline double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// "FILE at byte N": where an error in a cache file is.
inline std::string FileAtByte(const std::string& file, std::uint64_t offset) {
  return file + " at byte " + std::to_string(offset);
}

inline bool ImageBuildCancelled(const std::atomic<bool>* cancel) {
  return cancel != nullptr && cancel->load(std::memory_order_relaxed);
}

// `threads` (0: one per core, at most 16), at most `work`, at least 1.
std::size_t ImageThreadCount(int threads, std::size_t work);

// Runs work(i) for i in [0, count) on ImageThreadCount(threads, count)
// threads (the caller's among them), stopping early once `cancel` is set.
template <typename Work>
void ImageParallelFor(std::size_t count, int threads, const std::atomic<bool>* cancel, const Work& work) {
  std::atomic<std::size_t> next{0};
  auto loop = [&] {
    for (std::size_t i; !ImageBuildCancelled(cancel) && (i = next.fetch_add(1)) < count;) work(i);
  };
  std::vector<std::thread> pool;
  const std::size_t n = ImageThreadCount(threads, count);
  for (std::size_t t = 1; t < n; ++t) pool.emplace_back(loop);
  loop();
  for (auto& t : pool) t.join();
}

// One copy: `length` bytes from `src` (host memory: a mapped cache file or
// the layout's header / offset table bytes) to image offset `dst`.
struct ImageCopyItem {
  std::uint64_t dst = 0;
  const std::byte* src = nullptr;
  std::uint64_t length = 0;
};

// Everything an image holds besides its zero padding, in pieces of at most
// `chunk_bytes` (> 0): the header, the offset table, then every region's
// source pieces. The pointers stay valid while `plan` lives.
std::vector<ImageCopyItem> ImageCopyItems(const RankImagePlan& plan, std::uint64_t chunk_bytes);

// ImageCopyItems sorted by image offset, checked not to overlap nor to
// leave the image (Internal naming the offset otherwise: a plan bug).
Result<std::vector<ImageCopyItem>> SortedImageCopyItems(const RankImagePlan& plan, std::uint64_t chunk_bytes);

// Fills `out` with the image's bytes [begin, begin + out.size()) from
// `sorted` (SortedImageCopyItems' items): the pieces that fall in the
// window, zeros between them. How the device stage assembles a staging
// buffer; safe from several threads on distinct windows.
void AssembleImageWindow(std::span<const ImageCopyItem> sorted, std::uint64_t begin,
                         std::span<std::byte> out);

// The bytes of check entries (their segments' lengths, summed).
std::uint64_t ImageCheckBytes(const ImageTables& tables);

// A memfd of `bytes` bytes (close-on-exec, sealable). IOError /
// ResourceExhausted naming `name`.
Result<UniqueFd> CreateImageMemfd(const std::string& name, std::uint64_t bytes);
// Adds F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL.
Status SealImageMemfd(int fd, const std::string& name);

// SerializeImageTables(tables) in a sealed memfd named `name`; its size in
// *bytes.
Result<UniqueFd> WriteSealedTables(const ImageTables& tables, const std::string& name, std::uint64_t* bytes);

// A region named for a message: "half record L3 e7 up h2 K4", "L3 signs.in",
// "dense data layers.3.attn.q".
std::string ImageRegionWhat(const ImageTensor& tensor);

// "memfd name" style label of an image: "exlr8-image org/name@0123456789ab tp3 rank1".
std::string ImageName(const RankRequest& request, const std::string& commit);

}  // namespace exlr8
