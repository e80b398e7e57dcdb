// BuildHostRankImage: a TP rank's whole image (client/lease/image_layout.h)
// assembled from the cache into host memory, checked, and sealed: the
// `memory.kind = host` of lease v2 (docs/design/RANK_IMAGE.md).
//
// Steps: the plan (rank_image_plan.h: the layout and where each region's
// bytes are, all verified in the cache); a memfd of the layout's allocation
// size, filled through a shared writable mapping by several threads, each
// copying its share of the regions straight from the mapped cache files
// (header and offset table at their places, padding the memfd's zeros);
// every check entry hashed (XXH64, on the CPU, on all threads) against its
// digest; the writable mapping dropped and the memfd sealed (F_SEAL_WRITE |
// F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL), so neither the holder nor any
// process it passes the descriptor to can change the bytes afterwards. The
// tables (SerializeImageTables) go into a second memfd, sealed the same way.
//
// No CUDA and no sockets: the holder passes the two descriptors on (lease
// v2) and may register or upload the read-only mapping.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "client/lease/description_v2.h"
#include "client/lease/image_layout.h"
#include "daemon/base/posix.h"
#include "daemon/cache/process_pin.h"
#include "daemon/stage/rank_reader.h"
#include "format/status.h"

namespace exlr8 {

// A read-only shared mapping of a whole file descriptor; unmapped on
// destruction. Movable.
class ReadOnlyMapping {
 public:
  ReadOnlyMapping() = default;
  // Maps `bytes` bytes of `fd` PROT_READ, MAP_SHARED. IOError from mmap.
  static Result<ReadOnlyMapping> Map(int fd, std::size_t bytes, const std::string& what);
  ~ReadOnlyMapping();
  ReadOnlyMapping(ReadOnlyMapping&& o) noexcept;
  ReadOnlyMapping& operator=(ReadOnlyMapping&& o) noexcept;
  ReadOnlyMapping(const ReadOnlyMapping&) = delete;
  ReadOnlyMapping& operator=(const ReadOnlyMapping&) = delete;

  std::span<const std::byte> bytes() const { return {data_, size_}; }

 private:
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

struct HostRankImage {
  std::string commit;
  ImageLayout layout;  // its tables are those in tables_fd (dense digests set)
  // The image (layout.allocation_bytes() bytes) and the tables, each a
  // sealed memfd, close-on-exec, owned here.
  UniqueFd image_fd;
  UniqueFd tables_fd;
  std::uint64_t tables_bytes = 0;
  ReadOnlyMapping image;  // the image, mapped read-only for the holder
  // The proof of contents (description v2): hashed regions are check
  // entries; mismatches are 0 (a mismatch fails the build); nothing is
  // decoded here. seconds_read covers planning and copying.
  LeaseProof proof;
  // Check entries (and their bytes) whose digest was computed from the
  // cache's verified bytes rather than taken from the release (signs,
  // plain tensors): hashing them proves the copy, not the release.
  std::uint64_t regions_without_release_digest = 0;
  std::uint64_t bytes_without_release_digest = 0;
  std::unique_ptr<ProcessPin> pin;  // as RankHalves::pin
  std::string pin_error;
};

// The image of rank `request.rank` of TP `request.tp`. request.threads
// copy and hash (0: one per core, at most 16); request.progress counts the
// image's bytes as they are copied (header, offset table, regions), then the check entries' bytes as they
// are hashed (bytes_total is both sums); request.before_reading runs once the plan is made, before any
// byte is copied; request.cancel stops the copy or the hash within a region.
// Errors as ReadRankHalves's: NotFound naming what was never pulled or is
// not verified in the cache; Corruption when a check's bytes do not match
// its digest, naming the region (layer, expert, projection, half or the
// tensor's name), its image offset and the file and byte it came from
// (nothing is returned, no descriptor stays open); IOError /
// ResourceExhausted from memfd_create, ftruncate, mmap or the seals;
// Cancelled once request.cancel is set.
Result<HostRankImage> BuildHostRankImage(const RankRequest& request);

// The v2 description of a host image (memory kind host, one "fd"
// allocation: image_fd, then tables_fd on the socket), for `repo` and
// `manifest` as requested. Nothing is decoded on the host: proof.decoded
// says 0 of the rank's halves, and tiles_bit_exact is true only in that
// vacuous sense (the parser ties it to "no mismatch"), so a lessee that
// wants decoded halves reads decoded.halves.
LeaseDescriptionV2 DescribeHostImage(const HostRankImage& image, const RankRequest& request,
                                     std::uint32_t release_deadline_s = 30);

}  // namespace exlr8
