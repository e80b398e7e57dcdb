// ReadRankHalves: a rank's expert halves, read back from the cache and
// verified, ready to stage into GPU memory (daemon/stage/gpu_stage.h).
//
// The plan is made again from the cache alone (its expert index files and
// manifest, which a pull verified whole), with the width files' headers
// deferred: halves are located by the index files (spec 3.5). Every half
// must be recorded as verified in the cache (within its file's verified
// extents, read once per file: a hole is an error, never a zero), and its XXH64 is checked again with its index-file
// tail (spec 5.3): a byte that rotted on disk since the pull is caught here,
// before it reaches a GPU. The halves stay where they are: each width file
// is mapped read-only (mapped_file.h), so a rank of any size is read from
// the page cache without a host copy.
//
// No CUDA here, so this part is tested everywhere.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "daemon/cache/cached_rank.h"
#include "daemon/cache/process_pin.h"
#include "daemon/stage/mapped_file.h"
#include "format/plan.h"
#include "format/status.h"
#include "format/trellis.h"

namespace exlr8 {

// How far a read has come, for a reporter on another thread: the bytes of
// the rank's halves once they are located, then those checked so far.
struct RankReadProgress {
  std::atomic<std::uint64_t> bytes_total{0};
  std::atomic<std::uint64_t> bytes_checked{0};
};

struct RankRequest {
  std::filesystem::path cache_dir;
  std::string repo;               // "org/name"
  std::string revision = "main";  // as pulled: resolved through the cache
  std::string manifest;           // name or repo path
  int tp = 1;
  int rank = 0;
  // Threads checking the halves' XXH64: 0 = one per core (at most 16).
  int threads = 0;
  // Non-empty: pin the fileset for as long as the result lives, under this
  // holder name (a process pin, daemon/cache/process_pin.h), taken before
  // the halves are read, so gc leaves alone what is being staged and held.
  std::string pin_holder;
  // Set (by a signal: exlr8d-stage told to stop while it reads), the read
  // stops within a half and returns Cancelled. Null: never.
  const std::atomic<bool>* cancel = nullptr;
  // Counted up as the read goes (null: not counted).
  RankReadProgress* progress = nullptr;
  // Called once the halves are located in the cache, before any is read and
  // hashed; an error it returns ends the read. exlr8d-stage checks its GPU
  // here, so a rank of 75 GB is not read for a device that is not there,
  // while a rank that was never pulled still says so.
  std::function<Status()> before_reading;
};

struct RankHalf {
  HalfTag tag;             // layer, expert, proj, half, k
  HalfLayout layout = HalfLayout::kGateUp;
  std::uint64_t hidden = 0;
  std::string file;        // width file (repo path)
  std::uint64_t file_offset = 0;
  std::uint64_t length = 0;
  std::size_t map = 0;     // index into RankHalves::maps
};

struct RankHalves {
  std::string commit;
  std::filesystem::path root;     // the partial mirror the bytes came from
  std::vector<RankHalf> halves;   // in plan order (by file, then offset)
  std::uint64_t total_bytes = 0;  // sum of the halves' lengths
  double read_seconds = 0;        // reading and checking the halves
  std::vector<std::unique_ptr<MappedFile>> maps;  // the width files, read-only
  // The process pin asked for by RankRequest::pin_holder. When it could
  // not be taken (a cache this user may read but not write), the halves are
  // read all the same and pin_error says why there is no pin.
  std::unique_ptr<ProcessPin> pin;
  std::string pin_error;

  // The half's bytes, in the mapping of its width file.
  std::span<const std::byte> Bytes(const RankHalf& h) const {
    return maps[h.map]->bytes().subspan(h.file_offset, h.length);
  }
};

// What ReadRankHalves and the image plan (rank_image_plan.h) start from:
// the cache opened read-only, the fileset as pulled, the process pin asked
// for by RankRequest::pin_holder (taken before anything is read; when it
// cannot be taken, pin_error says why and the rest goes on) and the rank's
// plan made again from the cache. Errors as ReadRankHalves's.
struct OpenedRank {
  std::unique_ptr<Cache> cache;
  FilesetInfo set;
  std::unique_ptr<ProcessPin> pin;
  std::string pin_error;
  CachedRankPlan planned;
};
Result<OpenedRank> OpenRankInCache(const RankRequest& request);

// Maps a data file of the cache read-only (Corruption when its size is not
// the recorded one: changed behind the cache's back).
Result<std::unique_ptr<MappedFile>> MapCacheFile(Cache& cache, const FileInfo& file);

// Errors: NotFound when the repo or revision was never pulled into the
// cache, or a half of the rank is not verified there ("... run exlr8d pull",
// naming the half, its file and offset); Corruption when a half's XXH64 no
// longer matches (naming it) or a data file has another size than the cache
// recorded; InvalidArgument for a bad request; Cancelled once
// RankRequest::cancel is set.
Result<RankHalves> ReadRankHalves(const RankRequest& request);

}  // namespace exlr8
