#include <algorithm>
#include <set>
#include <vector>

#include "daemon/cache/cache.h"
#include "daemon/cache/cache_rep.h"

// Cache, the facade: space checks and eviction (gc), least recently used
// first. The catalog says what is recorded, pinned and pulled, the space
// account what is free and claimed and how far to evict; the facade
// decides under the catalog's lock, deletes rows, then files.
namespace exlr8 {

// ---- space ----

Result<std::uint64_t> Cache::FreeBytes() { return rep_->space->FreeBytes(); }

const std::optional<std::uint64_t>& Cache::byte_budget() const { return rep_->space->byte_budget(); }

Result<std::uint64_t> Cache::RecordedBytes() {
  MutexLock l(&rep_->catalog.mu());
  return rep_->catalog.RecordedBytes();
}

Cache::SpaceClaim::~SpaceClaim() { account_->DropClaim(id_); }

void Cache::SpaceClaim::SetFileset(FilesetId fileset) { account_->SetClaimFileset(id_, fileset); }

std::unique_ptr<Cache::SpaceClaim> Cache::ClaimSpace(std::function<ClaimedBytes()> remaining) {
  SpaceAccount* account = rep_->space.get();
  return std::unique_ptr<SpaceClaim>(new SpaceClaim(account, account->AddClaim(std::move(remaining))));
}

Status Cache::CheckSpace(std::uint64_t bytes_needed, const SpaceClaim* own) {
  std::uint64_t used = 0;
  SpaceAccount::ClaimSums claims;
  {
    // The recorded bytes and the claims at one moment: a commit moves
    // bytes from a claim to the recorded sum under this lock.
    MutexLock l(&rep_->catalog.mu());
    EXLR8_ASSIGN_OR_RETURN(used, rep_->catalog.RecordedBytes());
    claims = rep_->space->SumClaims(own != nullptr ? own->id_ : 0);
  }
  // The free space after the claims: what is written meanwhile is then
  // counted twice at worst, never not at all.
  EXLR8_ASSIGN_OR_RETURN(std::uint64_t free, FreeBytes());
  return rep_->space->Check(bytes_needed, used, claims, free);
}

Result<GcResult> Cache::Gc(std::uint64_t budget) {
  EXLR8_RETURN_IF_ERROR(rep_->Writable());
  MutexLock l(&rep_->catalog.mu());
  Result<GcResult> r = rep_->EvictDownTo(budget);
  rep_->space->RestoreReserve(/*keep_free=*/rep_->options.reserve_bytes);
  return r;
}

Result<GcResult> Cache::MakeRoom(std::uint64_t bytes_needed, const SpaceClaim* own) {
  EXLR8_RETURN_IF_ERROR(rep_->Writable());
  // The same sums as CheckSpace, solved for the recorded bytes that leave
  // room for `bytes_needed`.
  MutexLock l(&rep_->catalog.mu());
  EXLR8_ASSIGN_OR_RETURN(std::uint64_t used, rep_->catalog.RecordedBytes());
  const SpaceAccount::ClaimSums claims = rep_->space->SumClaims(own != nullptr ? own->id_ : 0);
  EXLR8_ASSIGN_OR_RETURN(std::uint64_t free, FreeBytes());
  const std::uint64_t target = rep_->space->RoomTarget(bytes_needed, used, claims, free);
  if (target >= used) {
    GcResult none;
    none.bytes_remaining = used;
    return none;
  }
  return rep_->EvictDownTo(target);
}

Result<GcResult> Cache::Rep::EvictDownTo(std::uint64_t target) {
  GcResult result;
  EXLR8_ASSIGN_OR_RETURN(std::uint64_t total, catalog.RecordedBytes());
  std::vector<std::pair<FilesetId, std::uint64_t>> victims;  // id, verified bytes
  if (total > target) {
    // Listed before the victims are chosen; a pin taken after that races
    // as process_pin.h describes.
    EXLR8_ASSIGN_OR_RETURN(std::vector<ProcessPinInfo> live, ListProcessPins(dir, /*sweep=*/true));
    std::set<std::pair<std::string, std::string>> held;  // repo, commit
    for (const ProcessPinInfo& p : live) held.emplace(p.repo, p.commit);
    const std::set<FilesetId> claimed = space->ClaimedFilesets();
    EXLR8_ASSIGN_OR_RETURN(const std::set<FilesetId> pulled, catalog.FilesetsBeingPulled());
    EXLR8_ASSIGN_OR_RETURN(const std::vector<Catalog::EvictionCandidate> order, catalog.EvictionOrder());
    std::uint64_t left = total;
    for (const Catalog::EvictionCandidate& c : order) {
      if (left <= target) break;
      if (held.count({c.repo, c.commit}) || claimed.count(c.id) || pulled.count(c.id)) continue;
      left -= std::min(left, c.bytes);
      victims.emplace_back(c.id, c.bytes);
    }
  }
  EXLR8_RETURN_IF_ERROR(EvictFilesets(victims, &result));
  EXLR8_ASSIGN_OR_RETURN(result.bytes_remaining, catalog.RecordedBytes());
  return result;
}

Result<GcResult> Cache::Evict(FilesetId fileset) {
  EXLR8_RETURN_IF_ERROR(rep_->Writable());
  Rep& r = *rep_;
  MutexLock l(&r.catalog.mu());
  EXLR8_ASSIGN_OR_RETURN(std::vector<FilesetInfo> list, r.QueryFilesets(fileset));
  if (list.empty())
    return NotFoundError(r.shown + ": no fileset with id " + std::to_string(fileset) + " in the cache index");
  const FilesetInfo& set = list.front();
  const std::string name = set.repo + " commit " + set.commit;
  if (!set.pins.empty()) {
    std::string holders;
    for (const std::string& h : set.pins) holders += (holders.empty() ? "" : ", ") + h;
    return FailedPreconditionError(name + " is pinned by " + holders + "; unpin it first (exlr8d unpin)");
  }
  if (!set.process_pins.empty()) {
    std::string holders;
    for (const ProcessPinInfo& p : set.process_pins)
      holders += (holders.empty() ? "" : ", ") + p.holder + " (pid " + std::to_string(p.pid) + ")";
    return FailedPreconditionError(name + " is held by " + holders +
                                   "; the pin goes when that process exits (stop it first)");
  }
  EXLR8_ASSIGN_OR_RETURN(const std::set<FilesetId> pulled, r.catalog.FilesetsBeingPulled());
  if (pulled.count(fileset) || r.space->ClaimedFilesets().count(fileset))
    return FailedPreconditionError(name + " has a pull running");
  GcResult result;
  EXLR8_RETURN_IF_ERROR(r.EvictFilesets({{fileset, set.bytes_cached}}, &result));
  r.space->RestoreReserve(/*keep_free=*/r.options.reserve_bytes);
  EXLR8_ASSIGN_OR_RETURN(result.bytes_remaining, r.catalog.RecordedBytes());
  return result;
}

Status Cache::Rep::EvictFilesets(const std::vector<std::pair<FilesetId, std::uint64_t>>& victims,
                                 GcResult* result) {
  if (!victims.empty()) {
    // Rows first, durably (synchronous=FULL); files after. A crash in
    // between leaves unrecorded files, which RemoveOrphanDirs sweeps.
    std::vector<FilesetId> ids;
    for (const auto& [id, bytes] : victims) ids.push_back(id);
    Status deleted = catalog.DeleteFilesets(ids);
    // SQLite needs room even to delete (WAL frames): on a full disk the
    // reserve is what lets an eviction free the rest.
    if (deleted.code() == StatusCode::kResourceExhausted && space->ReleaseReserve())
      deleted = catalog.DeleteFilesets(ids);
    EXLR8_RETURN_IF_ERROR(deleted);
    std::set<FilesetId> gone;
    for (const auto& [id, bytes] : victims) {
      gone.insert(id);
      result->evicted.push_back(id);
      result->bytes_freed += bytes;
    }
    store->CloseFilesets(gone);
  }
  EXLR8_RETURN_IF_ERROR(RemoveOrphanDirs());
  (void)catalog.MarkStalePulls();  // the room a full disk denied it at Open, if any is free now
  return Status::Ok();
}

Status Cache::Rep::RemoveOrphanDirs() {
  // The data directories the index knows.
  EXLR8_ASSIGN_OR_RETURN(const std::set<std::string> known, catalog.FilesetDirs());
  namespace fs = std::filesystem;
  auto subdirs = [](const fs::path& p) {
    std::vector<fs::path> out;
    std::error_code ec;
    for (fs::directory_iterator it(p, ec), end; !ec && it != end; it.increment(ec)) {
      std::error_code sec;
      if (it->symlink_status(sec).type() == fs::file_type::directory) out.push_back(it->path());
    }
    return out;
  };
  // Only <org>/<name>/<commit> triples with valid names are ever touched,
  // so the index, the lock and anything foreign stay put: an org directory
  // goes only once emptied of repos here; other empty directories at the
  // root (lost+found of a dedicated file system) are not the cache's.
  for (const fs::path& org : subdirs(dir)) {
    if (org.filename().string().rfind("exlr8d.", 0) == 0) continue;  // the cache's own: pins, stage records
    bool held_repos = false;
    for (const fs::path& name : subdirs(org)) {
      const std::string repo = org.filename().string() + "/" + name.filename().string();
      if (!ValidateRepoId(repo).ok()) continue;
      held_repos = true;
      for (const fs::path& commit : subdirs(name)) {
        const std::string c = commit.filename().string();
        if (!ValidateCommit(c).ok() || known.count(FilesetDir(repo, c))) continue;
        std::error_code ec;
        fs::remove_all(commit, ec);  // removes symlinks, never follows them
        if (ec) return ErrnoStatus(ec.value(), "remove " + commit.string());
      }
      std::error_code ec;
      fs::remove(name, ec);  // only if now empty
    }
    std::error_code ec;
    if (held_repos) fs::remove(org, ec);  // only if now empty
  }
  // A directory removed here holds nothing left to record, and a pending
  // sync of its names would fail every later commit (open: ENOENT).
  store->ForgetRemovedDirs();
  return Status::Ok();
}

}  // namespace exlr8
