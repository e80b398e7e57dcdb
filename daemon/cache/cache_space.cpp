#include "daemon/cache/cache.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <set>
#include <vector>

#include "daemon/cache/cache_rep.h"
#include "format/units.h"

// Cache: free space, claims of pulls in flight, the byte budget and
// eviction (gc), least recently used first.
namespace exlr8 {

// ---- space ----

Result<std::uint64_t> Cache::FreeBytes() {
  struct statvfs vfs;
  if (::fstatvfs(rep_->root_fd.get(), &vfs) != 0) return ErrnoStatus(errno, "statvfs " + rep_->shown);
  const std::uint64_t free =
      static_cast<std::uint64_t>(vfs.f_bavail) * static_cast<std::uint64_t>(vfs.f_frsize);
  return free - std::min(free, rep_->ReserveOwed());
}

const std::optional<std::uint64_t>& Cache::byte_budget() const { return rep_->options.byte_budget; }

Result<std::uint64_t> Cache::RecordedBytes() {
  MutexLock l(&rep_->mu);
  return rep_->RecordedBytes();
}

Cache::SpaceClaim::~SpaceClaim() {
  std::lock_guard<std::mutex> l(cache_->rep_->claims_mu);
  cache_->rep_->claims.erase(id_);
  cache_->rep_->claim_filesets.erase(id_);
}

void Cache::SpaceClaim::SetFileset(FilesetId fileset) {
  std::lock_guard<std::mutex> l(cache_->rep_->claims_mu);
  cache_->rep_->claim_filesets[id_] = fileset;
}

std::unique_ptr<Cache::SpaceClaim> Cache::ClaimSpace(std::function<ClaimedBytes()> remaining) {
  std::lock_guard<std::mutex> l(rep_->claims_mu);
  const std::uint64_t id = rep_->next_claim++;
  rep_->claims.emplace(id, std::move(remaining));
  return std::unique_ptr<SpaceClaim>(new SpaceClaim(this, id));
}

Status Cache::CheckSpace(std::uint64_t bytes_needed, const SpaceClaim* own) {
  std::uint64_t used = 0;
  Rep::ClaimSums claims;
  {
    // The recorded bytes and the claims at one moment: a commit moves
    // bytes from a claim to the recorded sum under this lock.
    MutexLock l(&rep_->mu);
    EXLR8_ASSIGN_OR_RETURN(used, rep_->RecordedBytes());
    claims = rep_->SumClaims(own != nullptr ? own->id_ : 0);
  }
  // The free space after the claims: what is written meanwhile is then
  // counted twice at worst, never not at all.
  EXLR8_ASSIGN_OR_RETURN(std::uint64_t free, FreeBytes());
  // What claims still write comes out of the free space, and what they
  // still record into the cache.
  const std::uint64_t available = free - std::min(free, claims.others.unwritten);
  const std::uint64_t disk_needed = bytes_needed + claims.own.unwritten;
  const std::uint64_t committed = used + claims.others.unrecorded;
  const std::uint64_t budget_needed = bytes_needed + claims.own.unrecorded;
  const std::optional<std::uint64_t>& budget = rep_->options.byte_budget;
  const bool over_budget = budget && (committed > *budget || budget_needed > *budget - committed);
  if (disk_needed <= available && !over_budget) return Status::Ok();
  std::string msg = "need " + HumanBytes(over_budget ? budget_needed : disk_needed) + ", " +
                    HumanBytes(free) + " free on " + rep_->shown;
  if (const std::uint64_t owed = rep_->ReserveOwed(); owed > 0)
    msg += " besides " + HumanBytes(owed) + " kept for the index";
  if (budget) {
    msg += " (budget " + HumanBytes(*budget) + ", " + HumanBytes(used) + " used";
  } else {
    msg += " (no budget";
  }
  if (const std::uint64_t promised = over_budget ? claims.others.unrecorded : claims.others.unwritten;
      promised > 0)
    msg += "; " + HumanBytes(promised) + " promised to pulls running now";
  if (over_budget) msg += "; over budget: run gc or raise the budget";
  msg += ")";
  return ResourceExhaustedError(std::move(msg));
}

Result<GcResult> Cache::Gc(std::uint64_t budget) {
  EXLR8_RETURN_IF_ERROR(rep_->Writable());
  MutexLock l(&rep_->mu);
  Result<GcResult> r = rep_->EvictDownTo(budget);
  rep_->RestoreReserve(/*keep_free=*/rep_->options.reserve_bytes);
  return r;
}

Result<GcResult> Cache::MakeRoom(std::uint64_t bytes_needed, const SpaceClaim* own) {
  EXLR8_RETURN_IF_ERROR(rep_->Writable());
  // The same sums as CheckSpace, solved for the recorded bytes that leave
  // room for `bytes_needed`.
  MutexLock l(&rep_->mu);
  EXLR8_ASSIGN_OR_RETURN(std::uint64_t used, rep_->RecordedBytes());
  const Rep::ClaimSums claims = rep_->SumClaims(own != nullptr ? own->id_ : 0);
  EXLR8_ASSIGN_OR_RETURN(std::uint64_t free, FreeBytes());
  std::uint64_t target = used;
  const std::uint64_t available = free - std::min(free, claims.others.unwritten);
  const std::uint64_t disk_needed = bytes_needed + claims.own.unwritten;
  // On disk: an evicted fileset frees at least its verified bytes.
  if (disk_needed > available) target = used - std::min(used, disk_needed - available);
  if (const std::optional<std::uint64_t>& budget = rep_->options.byte_budget) {
    // All of them may exceed the budget alone.
    const std::uint64_t wanted = claims.others.unrecorded + claims.own.unrecorded + bytes_needed;
    target = std::min(target, *budget - std::min(*budget, wanted));
  }
  if (target >= used) {
    GcResult none;
    none.bytes_remaining = used;
    return none;
  }
  return rep_->EvictDownTo(target);
}

Result<GcResult> Cache::Rep::EvictDownTo(std::uint64_t target) {
  GcResult result;
  EXLR8_ASSIGN_OR_RETURN(std::uint64_t total, RecordedBytes());
  std::vector<std::pair<FilesetId, std::uint64_t>> victims;  // id, verified bytes
  if (total > target) {
    // Listed before the victims are chosen; a pin taken after that races
    // as process_pin.h describes.
    EXLR8_ASSIGN_OR_RETURN(std::vector<ProcessPinInfo> live, ListProcessPins(dir, /*sweep=*/true));
    std::set<std::pair<std::string, std::string>> held;  // repo, commit
    for (const ProcessPinInfo& p : live) held.emplace(p.repo, p.commit);
    const std::set<FilesetId> claimed = ClaimedFilesets();
    EXLR8_ASSIGN_OR_RETURN(const std::set<FilesetId> pulled, FilesetsBeingPulled());
    EXLR8_ASSIGN_OR_RETURN(
        SqliteStmt q,
        db->Prepare("SELECT s.id, "
                    "(SELECT COALESCE(SUM(e.length), 0) FROM files f JOIN extents e ON e.file_id = f.id "
                    "  WHERE f.fileset_id = s.id), s.repo, s.commit_sha "
                    "FROM filesets s "
                    "WHERE NOT EXISTS (SELECT 1 FROM pins p WHERE p.fileset_id = s.id) "
                    "ORDER BY s.last_used ASC, s.id ASC"));
    std::uint64_t left = total;
    while (left > target) {
      EXLR8_ASSIGN_OR_RETURN(bool row, q.Step());
      if (!row) break;
      if (held.count({q.Text(2), q.Text(3)}) || claimed.count(q.Int(0)) || pulled.count(q.Int(0))) continue;
      const auto bytes = static_cast<std::uint64_t>(q.Int(1));
      left -= std::min(left, bytes);
      victims.emplace_back(q.Int(0), bytes);
    }
  }
  EXLR8_RETURN_IF_ERROR(EvictFilesets(victims, &result));
  EXLR8_ASSIGN_OR_RETURN(result.bytes_remaining, RecordedBytes());
  return result;
}

Result<GcResult> Cache::Evict(FilesetId fileset) {
  EXLR8_RETURN_IF_ERROR(rep_->Writable());
  Rep& r = *rep_;
  MutexLock l(&r.mu);
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
  EXLR8_ASSIGN_OR_RETURN(const std::set<FilesetId> pulled, r.FilesetsBeingPulled());
  if (pulled.count(fileset) || rep_->ClaimedFilesets().count(fileset))
    return FailedPreconditionError(name + " has a pull running");
  GcResult result;
  EXLR8_RETURN_IF_ERROR(r.EvictFilesets({{fileset, set.bytes_cached}}, &result));
  r.RestoreReserve(/*keep_free=*/r.options.reserve_bytes);
  EXLR8_ASSIGN_OR_RETURN(result.bytes_remaining, r.RecordedBytes());
  return result;
}

Status Cache::Rep::EvictFilesets(const std::vector<std::pair<FilesetId, std::uint64_t>>& victims, GcResult* result) {
  if (!victims.empty()) {
    // Rows first, durably (synchronous=FULL); files after. A crash in
    // between leaves unrecorded files, which RemoveOrphanDirs sweeps.
    auto delete_rows = [&]() -> Status {
      mu.AssertHeld();  // called only below, under the caller's lock; the analysis does not follow lambdas
      EXLR8_ASSIGN_OR_RETURN(SqliteTxn txn, SqliteTxn::Begin(db.get()));
      EXLR8_ASSIGN_OR_RETURN(SqliteStmt del, db->Prepare("DELETE FROM filesets WHERE id = ?"));
      for (const auto& [id, bytes] : victims) {
        del.Reset();
        EXLR8_RETURN_IF_ERROR(del.Bind(1, id).Run());
      }
      return txn.Commit();
    };
    Status deleted = delete_rows();
    // SQLite needs room even to delete (WAL frames): on a full disk the
    // reserve is what lets an eviction free the rest.
    if (deleted.code() == StatusCode::kResourceExhausted && ReleaseReserve()) deleted = delete_rows();
    EXLR8_RETURN_IF_ERROR(deleted);
    std::set<FilesetId> gone;
    for (const auto& [id, bytes] : victims) {
      gone.insert(id);
      result->evicted.push_back(id);
      result->bytes_freed += bytes;
    }
    MutexLock open_lock(&open_mu);
    std::erase_if(open_files, [&](const auto& kv) { return gone.count(kv.second->fileset) > 0; });
  }
  EXLR8_RETURN_IF_ERROR(RemoveOrphanDirs());
  (void)MarkStalePulls();  // the room a full disk denied it at Open, if any is free now
  return Status::Ok();
}

// ---- the reserve ----

bool Cache::Rep::ReleaseReserve() {
  std::lock_guard<std::mutex> l(reserve_mu);
  const std::string name(kCacheReserveName);
  struct stat st;
  // Only a regular file of ours; anything else there is left alone.
  if (::fstatat(root_fd.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
    return false;
  if (::unlinkat(root_fd.get(), name.c_str(), 0) != 0) return false;
  released_reserve = true;
  return true;
}

std::uint64_t Cache::Rep::ReserveOwed() {
  const std::uint64_t want = options.reserve_bytes;
  std::lock_guard<std::mutex> l(reserve_mu);
  if (!released_reserve || want == 0) return 0;
  struct stat st;
  if (::fstatat(root_fd.get(), std::string(kCacheReserveName).c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 ||
      !S_ISREG(st.st_mode))
    return want;
  const std::uint64_t have =
      std::min(static_cast<std::uint64_t>(st.st_size), static_cast<std::uint64_t>(st.st_blocks) * 512);
  return want - std::min(want, have);
}

void Cache::Rep::RestoreReserve(std::uint64_t keep_free) {
  const std::uint64_t want = options.reserve_bytes;
  if (want == 0 || read_only) return;
  std::lock_guard<std::mutex> l(reserve_mu);
  const std::string name(kCacheReserveName);
  std::uint64_t have = 0;  // allocated bytes of the reserve now
  struct stat st;
  if (::fstatat(root_fd.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    if (!S_ISREG(st.st_mode)) return;  // not ours
    have = std::min(static_cast<std::uint64_t>(st.st_size), static_cast<std::uint64_t>(st.st_blocks) * 512);
  }
  if (have >= want) return;
  struct statvfs vfs;
  if (::fstatvfs(root_fd.get(), &vfs) != 0) return;
  const std::uint64_t free = static_cast<std::uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  if (free <= keep_free) return;
  const std::uint64_t size = have + std::min(want - have, free - keep_free);
  UniqueFd fd(::openat(root_fd.get(), name.c_str(), O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd.valid()) return;
  // Allocated, not sparse: a hole would free nothing when deleted.
  int rc = ::fallocate(fd.get(), 0, 0, static_cast<off_t>(size));
  if (rc != 0 && (errno == EOPNOTSUPP || errno == ENOSYS)) {  // written out instead
    const std::vector<std::byte> zeros(1 << 20);
    Status written = Status::Ok();
    for (std::uint64_t at = 0; at < size && written.ok(); at += zeros.size())
      written = PwriteAll(fd.get(), at,
                          std::span(zeros).first(std::min<std::uint64_t>(zeros.size(), size - at)), name);
    rc = written.ok() ? 0 : -1;
  }
  // Durable, so that a crash does not leave the cache without it: the
  // allocation (fdatasync) and the name (fsync of the directory).
  if (rc == 0 && ::fdatasync(fd.get()) == 0) (void)::fsync(root_fd.get());
}

Status Cache::Rep::RemoveOrphanDirs() {
  // The data directories the index knows.
  std::set<std::string> known;
  {
    EXLR8_ASSIGN_OR_RETURN(SqliteStmt q, db->Prepare("SELECT repo, commit_sha FROM filesets"));
    while (true) {
      EXLR8_ASSIGN_OR_RETURN(bool row, q.Step());
      if (!row) break;
      known.insert(FilesetDir(q.Text(0), q.Text(1)));
    }
  }
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
  std::erase_if(unsynced_dirs, [&](const std::string& d) {
    std::error_code ec;
    return !d.empty() && !fs::is_directory(dir / d, ec);
  });
  return Status::Ok();
}

}  // namespace exlr8
