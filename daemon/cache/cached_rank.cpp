#include "daemon/cache/cached_rank.h"

#include <algorithm>
#include <array>
#include <span>
#include <vector>

#include "daemon/cache/digest.h"
#include "daemon/cache/extent_set.h"
#include "format/expert_index.h"
#include "format/layout.h"
#include "format/manifest.h"
#include "format/planner_input.h"
#include "format/safetensors.h"

namespace exlr8 {

namespace {

Result<std::string> ReadWhole(const ByteSource& src, std::uint64_t max_bytes) {
  if (src.size() > max_bytes)
    return ResourceExhaustedError(src.name() + ": " + std::to_string(src.size()) + " bytes, more than " +
                                  std::to_string(max_bytes));
  std::string text(src.size(), '\0');
  EXLR8_RETURN_IF_ERROR(src.ReadAt(0, std::as_writable_bytes(std::span<char>(text))));
  return text;
}

// The size of a width file's header (8 + N) as the cache holds it, or
// nullopt while its first 8 bytes are not verified there.
Result<std::optional<std::uint64_t>> CachedHeaderSize(Cache& cache, const FileInfo& f,
                                                      const std::vector<Extent>& verified) {
  if (f.size < 8 || !ExtentsCover(verified, {0, 8})) return std::optional<std::uint64_t>();
  EXLR8_ASSIGN_OR_RETURN(auto src, cache.OpenVerified(f.id));
  std::array<std::byte, 8> first{};
  EXLR8_RETURN_IF_ERROR(src->ReadAt(0, first));
  EXLR8_ASSIGN_OR_RETURN(std::uint64_t n, SafetensorsHeaderSize(first, f.size, f.path));
  return std::optional<std::uint64_t>(n);
}

// Whole files the plan is made from (index files, the manifest) are
// checked against their listed hash each time: a pull verified them, but
// nothing covers them since: a manifest edited or rotted in the cache
// would stage another width mix under the asked-for name, its halves all
// passing their checksums. Small: some 70 MB at GLM-5.3 scale.
Status CheckWholeFileHash(const ByteSource& src, const FileInfo& f) {
  if (!f.sha256 && !f.git_sha1) return CorruptionError(f.path + ": the cache lists no hash to check it by");
  const auto kind = f.sha256 ? StreamDigest::Kind::kSha256 : StreamDigest::Kind::kGitBlobSha1;
  EXLR8_ASSIGN_OR_RETURN(StreamDigest digest, StreamDigest::Create(kind, src.size()));
  std::vector<std::byte> buffer(static_cast<std::size_t>(std::min<std::uint64_t>(4 << 20, src.size())));
  for (std::uint64_t at = 0; at < src.size();) {
    const std::span<std::byte> piece(buffer.data(),
                                     static_cast<std::size_t>(std::min<std::uint64_t>(buffer.size(), src.size() - at)));
    EXLR8_RETURN_IF_ERROR(src.ReadAt(at, piece));
    digest.Update(piece);
    at += piece.size();
  }
  const std::string got = digest.FinishHex();
  const std::string& expected = f.sha256 ? *f.sha256 : *f.git_sha1;
  if (got != expected)
    return CorruptionError(f.path + " in the cache: " + (f.sha256 ? "SHA-256 " : "git SHA-1 ") + got +
                           ", expected " + expected + " (changed since it was pulled; exlr8d verify forgets it, " +
                           "and the next pull fetches it again)");
  return Status::Ok();
}

}  // namespace

Result<FilesetInfo> FindPulledFileset(Cache& cache, const std::string& repo, const std::string& revision) {
  auto commit = cache.LookupCommit(repo, revision);
  if (!commit.ok())
    return NotFoundError(repo + "@" + revision + " was never pulled into " + cache.dir().string() +
                         " (run exlr8d pull first)");
  EXLR8_ASSIGN_OR_RETURN(std::vector<FilesetInfo> sets, cache.ListFilesets());
  for (auto& s : sets)
    if (s.repo == repo && s.commit == *commit) return s;
  return NotFoundError(repo + "@" + *commit + " is not in " + cache.dir().string());
}

Result<CachedRankPlan> PlanRankFromCache(Cache& cache, const FilesetInfo& set, const std::string& manifest_name,
                                         int tp, int rank, bool check_index_hashes,
                                         const std::string* local_manifest) {
  if (tp < 1 || rank < 0 || rank >= tp)
    return InvalidArgumentError("rank " + std::to_string(rank) + " of TP " + std::to_string(tp) +
                                " is not a rank (0 <= rank < tp)");
  CachedRankPlan out;
  EXLR8_ASSIGN_OR_RETURN(out.files, cache.ListFiles(set.id));
  // What the planner reads, from verified bytes only.
  std::vector<ReleaseFile> files;
  for (const FileInfo& f : out.files) {
    files.push_back({f.path, f.size, f.sha256, f.git_sha1});
    out.by_path[f.path] = &f;
  }
  PlannerSources sources;
  sources.open_index = [&](const ReleaseFile& rf) -> Result<std::unique_ptr<ByteSource>> {
    const FileInfo& f = *out.by_path.at(rf.path);
    EXLR8_ASSIGN_OR_RETURN(std::unique_ptr<ByteSource> src, cache.OpenVerified(f.id));
    if (check_index_hashes) EXLR8_RETURN_IF_ERROR(CheckWholeFileHash(*src, f));
    return src;
  };
  sources.manifest_name = manifest_name;
  sources.manifest_text = [&]() -> Result<std::string> {
    if (local_manifest != nullptr) return *local_manifest;
    const std::string manifest_path = IsManifestName(manifest_name) ? ManifestPath(manifest_name) : manifest_name;
    auto manifest_file = out.by_path.find(manifest_path);
    if (manifest_file == out.by_path.end())
      return NotFoundError("manifest '" + manifest_name + "' is not in " + set.repo + "@" + set.commit + " (no " +
                           manifest_path + ")");
    EXLR8_ASSIGN_OR_RETURN(auto manifest_src, cache.OpenVerified(manifest_file->second->id));
    EXLR8_RETURN_IF_ERROR(CheckWholeFileHash(*manifest_src, *manifest_file->second));
    return ReadWhole(*manifest_src, kMaxManifestBytes);
  };
  EXLR8_ASSIGN_OR_RETURN(PlannerInput input, AssemblePlannerInput(std::move(files), sources));
  out.index_sources = std::move(input.index_sources);
  PlanOptions po;
  po.tp = tp;
  po.rank = rank;
  po.defer_headers = true;  // halves are located by the index files alone
  EXLR8_ASSIGN_OR_RETURN(out.plan, MakePlan(input.release, *input.manifest, po));
  out.indexes = std::move(input.release.indexes);
  return out;
}

Result<RankStatus> CheckRankStatus(Cache& cache, const std::string& repo, const std::string& revision,
                                   const std::string& manifest, int tp, int rank,
                                   const std::string* local_manifest) {
  EXLR8_ASSIGN_OR_RETURN(FilesetInfo set, FindPulledFileset(cache, repo, revision));
  RankStatus st;
  st.commit = set.commit;
  // What the plan is made from, not verified yet: a pull just begun is not
  // planned, never a 404 ("never pulled") to a GET /v1/ranks client. A
  // manifest the release does not list stays an error (PlanRankFromCache).
  // Verified as the planner reads it: recorded whole (the flag may lag).
  auto not_planned = [&st](std::string why) {
    st.planned = false;
    st.first_missing = std::move(why);
    return st;
  };
  {
    EXLR8_ASSIGN_OR_RETURN(std::vector<FileInfo> files, cache.ListFiles(set.id));
    const std::string manifest_path = IsManifestName(manifest) ? ManifestPath(manifest) : manifest;
    const bool listed = local_manifest != nullptr ||
                        std::any_of(files.begin(), files.end(), [&](const FileInfo& f) { return f.path == manifest_path; });
    for (const FileInfo& f : files) {
      const bool needed = f.path == manifest_path || ClassifyReleasePath(f.path).kind == ReleaseFileKind::kExpertIndex;
      if (listed && needed && f.bytes_cached < f.size)
        return not_planned(f.path + " (which the plan is made from) is not verified in the cache yet");
    }
  }
  Result<CachedRankPlan> made =
      PlanRankFromCache(cache, set, manifest, tp, rank, /*check_index_hashes=*/false, local_manifest);
  // One that no longer matches its hash: forgotten by exlr8d verify, then
  // fetched again; until then the rank is not there.
  if (!made.ok()) {
    if (made.status().code() == StatusCode::kCorruption) return not_planned(made.status().message());
    return made.status();
  }
  CachedRankPlan planned = std::move(made).value();
  auto missing = [&st](const std::string& what) {
    if (st.first_missing.empty()) st.first_missing = what;
  };
  for (const PlanFile& pf : planned.plan.files) {
    auto it = planned.by_path.find(pf.path);
    if (it == planned.by_path.end()) return InternalError(pf.path + ": in the plan but not in the cache's listing");
    const FileInfo& f = *it->second;
    // What the file holds now: a cached width file cut short (`truncate -s
    // 1000`) leaves its rank incomplete, as verify, the next pull and the
    // stage all see it. Bytes past its end are not there.
    std::uint64_t held = f.size;
    if (f.bytes_cached > 0 || f.whole_verified) {
      EXLR8_ASSIGN_OR_RETURN(std::optional<std::uint64_t> on_disk, cache.SizeOnDisk(f.id));
      if (!on_disk || *on_disk != f.size) {
        ++st.files_changed;
        held = std::min(f.size, on_disk.value_or(0));
        missing(!on_disk ? f.path + " is recorded in the index but not in the cache directory (deleted?)"
                         : f.path + " is " + std::to_string(*on_disk) +
                               " bytes in the cache directory, listed " + std::to_string(f.size) + " (" +
                               (*on_disk < f.size ? "truncated" : "grown") + " since it was pulled)");
      }
    }
    if (pf.whole) {
      ++st.files;
      st.bytes_planned += f.size;
      if (f.whole_verified && held == f.size) {
        ++st.files_verified;
        st.bytes_verified += f.size;
      } else {
        missing(f.path + " (a whole file) is not verified in the cache");
      }
      continue;
    }
    // One query per file (halves: hundreds of thousands at GLM-5.3 scale).
    EXLR8_ASSIGN_OR_RETURN(std::vector<Extent> verified, cache.VerifiedExtents(f.id));
    if (held < f.size) verified = SubtractExtents(verified, {{held, f.size - held}});
    ++st.headers;
    EXLR8_ASSIGN_OR_RETURN(std::optional<std::uint64_t> header, CachedHeaderSize(cache, f, verified));
    if (header) st.bytes_planned += *header;
    if (header && ExtentsCover(verified, {0, *header})) {
      ++st.headers_verified;
      st.bytes_verified += *header;
    } else {
      missing("the header of " + f.path + " is not verified in the cache");
    }
    for (const PlanRange& r : pf.ranges) {
      if (r.kind != PlanRange::Kind::kHalf) continue;
      ++st.halves;
      st.bytes_planned += r.length;
      if (ExtentsCover(verified, {r.offset, r.length})) {
        ++st.halves_verified;
        st.bytes_verified += r.length;
      } else {
        missing(r.What() + " (" + f.path + " at byte " + std::to_string(r.offset) + ") is not verified in the cache");
      }
    }
  }
  return st;
}

Result<WholeFilesetStatus> CheckWholeFilesetStatus(Cache& cache, const std::string& repo,
                                                   const std::string& revision) {
  WholeFilesetStatus st;
  EXLR8_ASSIGN_OR_RETURN(st.fileset, FindPulledFileset(cache, repo, revision));
  EXLR8_ASSIGN_OR_RETURN(std::vector<FileInfo> files, cache.ListFiles(st.fileset.id));
  st.files = files.size();
  for (const FileInfo& f : files) {
    EXLR8_ASSIGN_OR_RETURN(std::optional<std::uint64_t> size, cache.SizeOnDisk(f.id));
    const bool intact = f.size == 0 || (size && *size == f.size);
    if (f.whole_verified && !intact) ++st.files_changed;
    if (f.whole_verified && intact) {
      ++st.files_verified;
      st.bytes_verified += f.size;
    } else if (st.first_missing.empty()) {
      st.first_missing = f.path + (f.whole_verified ? " (not at its listed size any more)" : "");
    }
  }
  return st;
}

}  // namespace exlr8
