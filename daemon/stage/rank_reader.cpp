#include "daemon/stage/rank_reader.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <thread>

#include "daemon/cache/cache.h"
#include "daemon/cache/cached_rank.h"
#include "daemon/cache/extent_set.h"
#include "format/checksum.h"

namespace exlr8 {

namespace {

// One half's XXH64 to check again: the plan's range and the index file its
// checksum tail comes from.
struct HalfCheck {
  std::size_t half = 0;  // index into RankHalves::halves
  const PlanRange* range = nullptr;
  const ByteSource* index = nullptr;
  std::string file;
};

Status CheckOne(const RankHalves& rank, const HalfCheck& c) {
  Xxh64 xxh;
  xxh.Update(rank.Bytes(rank.halves[c.half]));
  std::vector<std::byte> tail;
  for (const ByteRun& piece : c.range->checksum_tail) {
    if (piece.length == 0) continue;
    tail.resize(piece.length);
    EXLR8_RETURN_IF_ERROR(c.index->ReadAt(piece.offset, tail));
    xxh.Update(tail);
  }
  if (xxh.Digest() != c.range->xxh64)
    return CorruptionError(c.range->What() + " (" + c.file + " at byte " + std::to_string(c.range->offset) +
                           "): XXH64 mismatch in the cache; the bytes changed on disk since they were verified "
                           "('exlr8d verify' forgets them, then 'exlr8d pull' fetches them again)");
  return Status::Ok();
}

bool Cancelled(const std::atomic<bool>* cancel) { return cancel != nullptr && cancel->load(std::memory_order_relaxed); }

// Checks every half on `threads` threads (0: one per core, at most 16): the
// halves come from the page cache, so hashing, not the disk, bounds a warm
// stage (one thread did ~2.5 GB/s). The error reported is the first failing
// half in plan order, whatever the threads' timing.
Status CheckHalves(const RankHalves& rank, const std::vector<HalfCheck>& checks, int threads,
                   const std::atomic<bool>* cancel, RankReadProgress* progress) {
  std::size_t n = threads > 0 ? static_cast<std::size_t>(threads)
                              : std::clamp<std::size_t>(std::thread::hardware_concurrency(), 1, 16);
  n = std::min(n, std::max<std::size_t>(checks.size(), 1));
  std::atomic<std::size_t> next{0}, checked{0};
  std::vector<Status> failed(checks.size());
  auto work = [&] {
    for (std::size_t i; !Cancelled(cancel) && (i = next.fetch_add(1)) < checks.size();) {
      failed[i] = CheckOne(rank, checks[i]);
      checked.fetch_add(1, std::memory_order_relaxed);
      if (progress != nullptr)
        progress->bytes_checked.fetch_add(rank.halves[checks[i].half].length, std::memory_order_relaxed);
    }
  };
  std::vector<std::thread> pool;
  for (std::size_t t = 1; t < n; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  if (Cancelled(cancel))
    return CancelledError("stopped while checking the rank's halves (" + std::to_string(checked.load()) + " of " +
                          std::to_string(checks.size()) + " checked)");
  for (const Status& s : failed)
    if (!s.ok()) return s;
  return Status::Ok();
}

}  // namespace

Result<OpenedRank> OpenRankInCache(const RankRequest& r) {
  if (r.tp < 1 || r.rank < 0 || r.rank >= r.tp)
    return InvalidArgumentError("rank " + std::to_string(r.rank) + " of TP " + std::to_string(r.tp) +
                                " is not a rank (0 <= rank < tp)");
  OpenedRank out;
  EXLR8_ASSIGN_OR_RETURN(out.cache, Cache::OpenReadOnly(r.cache_dir));
  EXLR8_ASSIGN_OR_RETURN(out.set, FindPulledFileset(*out.cache, r.repo, r.revision));
  if (!r.pin_holder.empty()) {
    // Before anything is read (process_pin.h: pin first, then read).
    auto pin = ProcessPin::Acquire(r.cache_dir, out.set.repo, out.set.commit, r.pin_holder);
    if (pin.ok()) {
      out.pin = std::move(*pin);
    } else if (pin.status().code() == StatusCode::kInvalidArgument) {
      return pin.status();
    } else {
      out.pin_error = pin.status().ToString();
    }
  }
  EXLR8_ASSIGN_OR_RETURN(out.planned, PlanRankFromCache(*out.cache, out.set, r.manifest, r.tp, r.rank));
  return out;
}

Result<std::unique_ptr<MappedFile>> MapCacheFile(Cache& cache, const FileInfo& file) {
  EXLR8_ASSIGN_OR_RETURN(auto path, cache.DataPath(file.id));
  return MappedFile::Open(path, file.size);
}

Result<RankHalves> ReadRankHalves(const RankRequest& r) {
  const auto t0 = std::chrono::steady_clock::now();
  EXLR8_ASSIGN_OR_RETURN(OpenedRank opened, OpenRankInCache(r));
  RankHalves out;
  out.pin = std::move(opened.pin);
  out.pin_error = std::move(opened.pin_error);
  const CachedRankPlan& planned = opened.planned;
  Cache* cache = opened.cache.get();
  out.commit = opened.set.commit;
  out.root = r.cache_dir / r.repo / opened.set.commit;

  std::vector<HalfCheck> checks;
  for (const PlanFile& f : planned.plan.files) {
    if (f.whole || f.ranges.empty()) continue;
    const auto index = planned.index_sources.find(f.index_path);
    if (index == planned.index_sources.end())
      return CorruptionError(f.path + ": its index file " + f.index_path + " is gone");
    const FileInfo& file = *planned.by_path.at(f.path);
    const FileId id = file.id;
    // One query per file, not one per half (two queries each, ~40 us: 5 s
    // for 123,000 halves, more than their hashing; GLM-5.3 has 230,000).
    if (Cancelled(r.cancel)) return CancelledError("stopped while looking up the rank's halves in the cache");
    EXLR8_ASSIGN_OR_RETURN(std::vector<Extent> verified, cache->VerifiedExtents(id));
    std::unique_ptr<MappedFile> map;
    for (const PlanRange& range : f.ranges) {
      if (range.kind != PlanRange::Kind::kHalf) continue;
      if (!ExtentsCover(verified, {range.offset, range.length}))
        return NotFoundError(range.What() + " (" + f.path + " at byte " + std::to_string(range.offset) +
                             ") is not verified in the cache: run exlr8d pull for TP " + std::to_string(r.tp) +
                             " rank " + std::to_string(r.rank) + " first");
      if (!map) {
        EXLR8_ASSIGN_OR_RETURN(map, MapCacheFile(*cache, file));
      }
      RankHalf h;
      h.tag = range.tag;
      h.layout = range.tag.proj == Proj::kDown ? HalfLayout::kDown : HalfLayout::kGateUp;
      h.hidden = range.length / (16ull * static_cast<std::uint64_t>(range.tag.k));
      h.file = f.path;
      h.file_offset = range.offset;
      h.length = range.length;
      h.map = out.maps.size();
      checks.push_back({out.halves.size(), &range, index->second.get(), f.path});
      out.total_bytes += h.length;
      out.halves.push_back(std::move(h));
    }
    if (map) out.maps.push_back(std::move(map));
  }
  if (r.progress != nullptr) r.progress->bytes_total.store(out.total_bytes);
  if (r.before_reading) EXLR8_RETURN_IF_ERROR(r.before_reading());
  EXLR8_RETURN_IF_ERROR(CheckHalves(out, checks, r.threads, r.cancel, r.progress));
  out.read_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace exlr8
