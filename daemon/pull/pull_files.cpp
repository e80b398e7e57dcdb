#include "daemon/pull/pull_files.h"

#include <algorithm>
#include <span>

#include "daemon/cache/digest.h"
#include "daemon/cache/extent_set.h"
#include "daemon/cache/record_index.h"
#include "format/layout.h"
#include "format/manifest.h"

namespace exlr8 {

namespace {

constexpr std::size_t kEmptyFilesPerCommit = 64;  // empty files marked verified per commit

}  // namespace

void PullFiles::SetFileset(FilesetId fileset, std::string where) {
  fileset_ = fileset;
  where_ = std::move(where);
}

Status PullFiles::Refresh() {
  if (files_.empty()) {  // the first listing of this run: what it reuses must at least be there
    EXLR8_ASSIGN_OR_RETURN(std::uint64_t lost, cache_.ForgetLostBytes(fileset_));
    bytes_lost_ += lost;
  }
  EXLR8_ASSIGN_OR_RETURN(std::vector<FileInfo> list, cache_.ListFiles(fileset_));
  files_.clear();
  for (auto& f : list) files_.emplace(f.path, std::move(f));
  return Status::Ok();
}

Result<const FileInfo*> PullFiles::File(const std::string& path) const {
  auto it = files_.find(path);
  if (it == files_.end()) return NotFoundError(where_ + " has no file " + path);
  return &it->second;
}

Result<std::unique_ptr<ByteSource>> PullFiles::OpenForPlanning(const FileInfo& f) {
  if (checked_here_.contains(f.id)) return cache_.OpenCheckedByCaller(f.id);
  return cache_.OpenVerified(f.id);
}

Result<std::string> PullFiles::ReadText(const std::string& path) {
  EXLR8_ASSIGN_OR_RETURN(const FileInfo* f, File(path));
  if (f->size > kMaxManifestBytes)
    return ResourceExhaustedError(path + ": " + std::to_string(f->size) + " bytes is too large");
  EXLR8_ASSIGN_OR_RETURN(auto src, OpenForPlanning(*f));
  std::string text(f->size, '\0');
  EXLR8_RETURN_IF_ERROR(src->ReadAt(0, std::as_writable_bytes(std::span(text))));
  return text;
}

Result<std::vector<WholeFileTarget>> PullFiles::MissingWholeFiles(const std::vector<std::string>& paths,
                                                                  bool offline, std::uint64_t* reused) {
  std::vector<WholeFileTarget> targets;
  std::vector<FileId> empty;  // marked in batches: one commit each, not one per file
  auto mark_empty = [&]() -> Status {
    Status s = cache_.MarkWholeFilesVerified(empty);
    empty.clear();
    return s;
  };
  for (const auto& path : paths) {
    EXLR8_ASSIGN_OR_RETURN(const FileInfo* f, File(path));
    if (f->whole_verified) {
      *reused += f->size;
      continue;
    }
    if (!f->sha256 && !f->git_sha1)
      return CorruptionError(path + ": the hub lists no sha256 or git blob id, so it cannot be verified");
    WholeFileTarget t{f->id, f->path, f->size, f->sha256.value_or(""), f->git_sha1.value_or("")};
    const ReleaseFileKind kind = ClassifyReleasePath(path).kind;
    t.check_dense = kind == ReleaseFileKind::kDense || kind == ReleaseFileKind::kVocab;
    t.check_lvq5 = check_lvq5_ && !t.check_dense && MayBeLvq5(path);
    const bool recorded_unflagged = f->bytes_cached > 0;
    if (recorded_unflagged && !offline) {
      // Bytes recorded without the flag (an exlr8d before the flag was set
      // with them, killed between the two) are about to be written again:
      // un-recorded first, so no crash or bad answer leaves them recorded
      // over unchecked bytes. The file is fetched from its start.
      EXLR8_RETURN_IF_ERROR(cache_.ForgetExtents(std::vector<VerifiedExtent>{{f->id, 0, f->size}}).status());
    } else if (f->durable_prefix > 0 && f->size > 0 && !offline) {
      // An interrupted download: resume (at least the last byte is fetched,
      // so the request is never empty).
      t.resume_from = std::min(f->durable_prefix, f->size - 1);
      counters_.bytes_resumed.fetch_add(t.resume_from, std::memory_order_relaxed);
    }
    if (t.size == 0) {  // nothing to fetch; the empty content must still match
      auto d = StreamDigest::Create(
          t.sha256.empty() ? StreamDigest::Kind::kGitBlobSha1 : StreamDigest::Kind::kSha256, 0);
      if (!d.ok()) return d.status();
      if (d->FinishHex() != (t.sha256.empty() ? t.git_sha1 : t.sha256))
        return CorruptionError(path + ": empty file whose listed hash is not the empty content's");
      if (t.check_dense) return CorruptionError(path + ": 0 bytes, too short for a dense file (spec 10)");
      empty.push_back(t.file);
      // A batch holds a descriptor per file until its commit.
      if (empty.size() >= kEmptyFilesPerCommit) EXLR8_RETURN_IF_ERROR(mark_empty());
      continue;
    }
    targets.push_back(std::move(t));
  }
  EXLR8_RETURN_IF_ERROR(mark_empty());
  return targets;
}

Result<std::vector<FileWork>> PullFiles::MissingHalves(const Plan& plan, std::uint64_t coalesce_gap,
                                                       std::uint64_t* reused) {
  std::vector<FileWork> work;
  std::uint64_t ranges = 0;
  for (const PlanFile& pf : plan.files) {
    if (pf.whole) continue;
    EXLR8_ASSIGN_OR_RETURN(const FileInfo* f, File(pf.path));
    auto ix = index_sources_.find(pf.index_path);
    if (ix == index_sources_.end()) return InternalError(pf.index_path + " not loaded");
    FileWork fw;
    fw.file = f->id;
    fw.path = pf.path;
    fw.index = ix->second.get();
    EXLR8_ASSIGN_OR_RETURN(std::vector<Extent> have, cache_.VerifiedExtents(f->id));
    auto covered = [&](std::uint64_t off, std::uint64_t len) {
      auto it = std::upper_bound(have.begin(), have.end(), off,
                                 [](std::uint64_t o, const Extent& e) { return o < e.offset; });
      if (it == have.begin()) return false;
      --it;
      return it->offset <= off && off + len <= it->end();
    };
    for (const PlanRange& r : pf.ranges) {
      if (r.kind != PlanRange::Kind::kHalf) continue;
      if (covered(r.offset, r.length)) {
        *reused += r.length;
        continue;
      }
      fw.halves.push_back({r.offset, r.length, r.xxh64, r.checksum_tail, r.tag});
    }
    if (fw.halves.empty()) continue;
    BuildRequests(fw, coalesce_gap);
    ranges += fw.halves.size();
    work.push_back(std::move(fw));
  }
  counters_.ranges_total.store(ranges);
  counters_.bytes_reused.store(*reused);
  return work;
}

Status PullFiles::CountMissing(const Plan& plan, PullSummary* sum) {
  EXLR8_RETURN_IF_ERROR(Refresh());
  sum->bytes_missing = 0;
  sum->ranges_missing = 0;
  for (const PlanFile& pf : plan.files) {
    EXLR8_ASSIGN_OR_RETURN(const FileInfo* f, File(pf.path));
    if (pf.whole) {
      if (!f->whole_verified) {
        sum->bytes_missing += f->size;
        ++sum->ranges_missing;
      }
      continue;
    }
    // One query per file, not two per range (230,000 ranges at full scale).
    EXLR8_ASSIGN_OR_RETURN(std::vector<Extent> have, cache_.VerifiedExtents(f->id));
    for (const PlanRange& r : pf.ranges) {
      const std::vector<Extent> gaps = MissingExtents(have, {r.offset, r.length});
      for (const Extent& g : gaps) sum->bytes_missing += g.length;
      if (!gaps.empty()) ++sum->ranges_missing;
    }
  }
  sum->complete = sum->bytes_missing == 0 && sum->ranges_missing == 0;
  return Status::Ok();
}

}  // namespace exlr8
