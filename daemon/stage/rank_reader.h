// ReadRankHalves: a rank's expert halves, read back from the cache and
// verified, ready to stage into GPU memory (daemon/stage/gpu_stage.h).
//
// The plan is made again from the cache alone (its expert index files and
// manifest, which a pull verified whole), with the width files' headers
// deferred: halves are located by the index files (spec 3.5), so nothing
// but verified bytes is ever read. Each half is read through
// Cache::OpenVerified (a byte the cache does not hold as verified is an
// error, never a zero) and its XXH64 is checked again with its index-file
// tail (spec 5.3): a byte that rotted on disk since the pull is caught here,
// before it reaches a GPU.
//
// No CUDA here, so this part is tested everywhere.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "format/plan.h"
#include "format/status.h"
#include "format/trellis.h"

namespace exlr8 {

struct RankRequest {
  std::filesystem::path cache_dir;
  std::string repo;               // "org/name"
  std::string revision = "main";  // as pulled: resolved through the cache
  std::string manifest;           // name or repo path
  int tp = 1;
  int rank = 0;
  // Most half bytes read into memory: a rank above it is refused (staging
  // in parts is not built yet) instead of exhausting the host.
  std::uint64_t max_bytes = 16ull << 30;
};

struct RankHalf {
  HalfTag tag;             // layer, expert, proj, half, k
  HalfLayout layout = HalfLayout::kGateUp;
  std::uint64_t hidden = 0;
  std::string file;        // width file (repo path)
  std::uint64_t file_offset = 0;
  std::uint64_t offset = 0;  // in RankHalves::bytes
  std::uint64_t length = 0;
};

struct RankHalves {
  std::string commit;
  std::filesystem::path root;     // the partial mirror the bytes came from
  std::vector<RankHalf> halves;   // in plan order (by file, then offset)
  std::vector<std::byte> bytes;   // every half, back to back
  double read_seconds = 0;        // reading and checking the halves

  std::span<const std::byte> Bytes(const RankHalf& h) const {
    return std::span<const std::byte>(bytes).subspan(h.offset, h.length);
  }
};

// Errors: NotFound when the repo or revision was never pulled into the
// cache, or a half of the rank is not verified there ("... run exlr8d pull",
// naming the half, its file and offset); Corruption when a half's XXH64 no
// longer matches (naming it); ResourceExhausted above max_bytes;
// InvalidArgument for a bad request.
Result<RankHalves> ReadRankHalves(const RankRequest& request);

}  // namespace exlr8
