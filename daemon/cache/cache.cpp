#include "daemon/cache/cache.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <limits>
#include <map>
#include <set>
#include <unordered_map>

#include "daemon/cache/cache_paths.h"
#include "daemon/cache/file_lock.h"
#include "daemon/cache/migrations.h"
#include "daemon/cache/mutex.h"
#include "daemon/cache/posix.h"
#include "daemon/cache/sqlite_db.h"
#include "format/units.h"

namespace exlr8 {
namespace {

constexpr std::size_t kMaxOpenFiles = 128;  // descriptors kept open for reuse
constexpr std::uint64_t kMaxSqlInt = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());

// A data file opened by this process. Shared with in-flight writers and
// ByteSources, so it stays valid when dropped from the open-file table.
struct DataFile {
  UniqueFd fd;
  FilesetId fileset = 0;
  std::uint64_t size = 0;
  std::string rel;    // <org>/<name>/<commit>/<path>
  std::string shown;  // <dir>/<rel>, for messages
  // Bytes written since write-back was last started (CacheOptions::write_behind_bytes).
  std::atomic<std::uint64_t> unkicked{0};
};

// The row of a file joined with its fileset.
struct FileRow {
  FilesetId fileset = 0;
  std::uint64_t size = 0;
  std::string rel;
};

// [offset, offset + length) must lie within a file of `size` bytes.
Status CheckRange(std::string_view shown, std::uint64_t size, std::uint64_t offset, std::uint64_t length) {
  if (offset > size || length > size - offset)
    return InvalidArgumentError(std::string(shown) + ": range [" + std::to_string(offset) + ", +" +
                                std::to_string(length) + ") is outside the file (" + std::to_string(size) +
                                " bytes)");
  return Status::Ok();
}

Status ValidateHash(const std::optional<std::string>& hash, std::size_t hex_digits, std::string_view what) {
  if (!hash) return Status::Ok();
  if (hash->size() != hex_digits || hash->find_first_not_of("0123456789abcdef") != std::string::npos)
    return InvalidArgumentError("invalid " + std::string(what) + " '" + EscapeForMessage(hash->substr(0, 80)) +
                                "': expected " + std::to_string(hex_digits) + " lowercase hex digits");
  return Status::Ok();
}

Result<PullState> ParsePullState(std::string_view s) {
  for (PullState p : {PullState::kRunning, PullState::kDone, PullState::kFailed, PullState::kCancelled})
    if (PullStateName(p) == s) return p;
  return CorruptionError("unknown pull state '" + EscapeForMessage(s) + "' in exlr8d.db");
}

std::int64_t SystemNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::string_view PullStateName(PullState state) {
  switch (state) {
    case PullState::kRunning: return "running";
    case PullState::kDone: return "done";
    case PullState::kFailed: return "failed";
    case PullState::kCancelled: return "cancelled";
  }
  return "unknown";
}

struct Cache::Rep {
  // Immutable after Open; readable without the lock.
  std::filesystem::path dir;
  std::string shown;  // dir as a string, for messages
  CacheOptions options;
  UniqueFd root_fd;
  std::unique_ptr<FileLock> lock;  // released last (declared before db)
  bool read_only = false;          // OpenReadOnly: no lock, the index read-only

  // FailedPrecondition for a change through a read-only view.
  Status Writable() const {
    if (!read_only) return Status::Ok();
    return FailedPreconditionError(shown + ": opened read-only (Cache::OpenReadOnly); nothing changed");
  }

  Mutex mu;
  std::unique_ptr<SqliteDb> db EXLR8_GUARDED_BY(mu);
  // The table of open data files has a lock of its own (taken after mu,
  // never before), so WriteAt of an open file never waits for mu: a commit
  // holds mu through its SQLite transaction, whose WAL fsync would
  // otherwise stall every writer.
  Mutex open_mu EXLR8_ACQUIRED_AFTER(mu);
  std::unordered_map<FileId, std::shared_ptr<DataFile>> open_files EXLR8_GUARDED_BY(open_mu);

  std::shared_ptr<DataFile> FindOpen(FileId file) EXLR8_EXCLUDES(open_mu) {
    MutexLock l(&open_mu);
    auto it = open_files.find(file);
    return it == open_files.end() ? nullptr : it->second;
  }
  // Space claims (Cache::SpaceClaim), by id; a lock of their own, taken
  // without mu or after it (eviction reads the claimed filesets), never
  // before it: nothing that holds claims_mu calls into the Cache.
  std::mutex claims_mu;
  std::map<std::uint64_t, std::function<std::uint64_t()>> claims;  // guarded by claims_mu
  std::map<std::uint64_t, FilesetId> claim_filesets;                // guarded by claims_mu
  std::uint64_t next_claim = 1;                                     // guarded by claims_mu

  // The filesets that claims say are being written: never evicted.
  std::set<FilesetId> ClaimedFilesets() {
    std::lock_guard<std::mutex> l(claims_mu);
    std::set<FilesetId> out;
    for (const auto& [id, fileset] : claim_filesets) out.insert(fileset);
    return out;
  }

  // Bytes every claim but `own` may still write.
  std::uint64_t ClaimedByOthers(std::uint64_t own) {
    std::lock_guard<std::mutex> l(claims_mu);
    std::uint64_t sum = 0;
    for (const auto& [id, remaining] : claims)
      if (id != own) sum += remaining();
    return sum;
  }

  // Directories (relative, "" = root) holding a data file opened by this
  // process whose name has not been fsynced yet.
  std::set<std::string> unsynced_dirs EXLR8_GUARDED_BY(mu);

  std::int64_t Now() EXLR8_REQUIRES(mu) { return options.now_ms ? options.now_ms() : SystemNowMs(); }

  Result<FileRow> LoadFile(FileId file) EXLR8_REQUIRES(mu) {
    EXLR8_ASSIGN_OR_RETURN(SqliteStmt q, db->Prepare("SELECT f.fileset_id, f.size, f.path, s.repo, s.commit_sha "
                                                     "FROM files f JOIN filesets s ON s.id = f.fileset_id "
                                                     "WHERE f.id = ?"));
    q.Bind(1, file);
    EXLR8_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) return NotFoundError(shown + ": no file with id " + std::to_string(file) + " in the cache index");
    FileRow r;
    r.fileset = q.Int(0);
    r.size = static_cast<std::uint64_t>(q.Int(1));
    r.rel = FilesetDir(q.Text(3), q.Text(4)) + "/" + q.Text(2);
    return r;
  }

  Result<FileId> PutFileLocked(FilesetId fileset, const NewFile& f) EXLR8_REQUIRES(mu);

  Status CheckFilesetExists(FilesetId fileset) EXLR8_REQUIRES(mu) {
    EXLR8_ASSIGN_OR_RETURN(SqliteStmt q, db->Prepare("SELECT 1 FROM filesets WHERE id = ?"));
    q.Bind(1, fileset);
    EXLR8_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) return NotFoundError(shown + ": no fileset with id " + std::to_string(fileset) + " in the cache index");
    return Status::Ok();
  }

  // The open data file, opening it first. With `create`, the file and its
  // directories are created and the file is sized to its remote size
  // (sparse). Without, a file not on disk is NotFound.
  Result<std::shared_ptr<DataFile>> GetDataFile(FileId file, bool create) EXLR8_REQUIRES(mu) {
    if (std::shared_ptr<DataFile> open = FindOpen(file)) return open;
    EXLR8_ASSIGN_OR_RETURN(FileRow row, LoadFile(file));
    EXLR8_ASSIGN_OR_RETURN(BeneathFile opened, OpenBeneath(root_fd.get(), row.rel, create, shown));
    auto df = std::make_shared<DataFile>();
    df->fd = std::move(opened.fd);
    df->fileset = row.fileset;
    df->size = row.size;
    df->rel = row.rel;
    df->shown = shown + "/" + row.rel;
    struct stat st;
    if (::fstat(df->fd.get(), &st) != 0) return ErrnoStatus(errno, "stat " + df->shown);
    // A new file, or one a crash left short: extend it to its remote size.
    // Truncation never frees blocks of a file whose size matches.
    if (static_cast<std::uint64_t>(st.st_size) != row.size) {
      if (::ftruncate(df->fd.get(), static_cast<off_t>(row.size)) != 0)
        return ErrnoStatus(errno, "size " + df->shown + " to " + std::to_string(row.size) + " bytes");
    }
    // Its name (and any directory made for it) must be durable before an
    // extent of it is recorded; we cannot know whether a dead predecessor
    // synced them, so every file opened by this process counts.
    for (std::string& d : ParentDirs(row.rel)) unsynced_dirs.insert(std::move(d));
    MutexLock l(&open_mu);
    if (open_files.size() >= kMaxOpenFiles) {
      std::erase_if(open_files, [](const auto& kv) { return kv.second.use_count() == 1; });
    }
    open_files.emplace(file, df);
    return df;
  }

  // The data file of a known file id that must already be on disk:
  // NotFound for an unknown id, FailedPrecondition if never written.
  Result<std::shared_ptr<DataFile>> OpenWritten(FileId file) EXLR8_REQUIRES(mu) {
    if (std::shared_ptr<DataFile> open = FindOpen(file)) return open;
    EXLR8_ASSIGN_OR_RETURN(FileRow row, LoadFile(file));
    Result<std::shared_ptr<DataFile>> f = GetDataFile(file, /*create=*/false);
    if (f.status().code() == StatusCode::kNotFound)
      return FailedPreconditionError(shown + "/" + row.rel + ": not in the cache directory (never written): " +
                                     f.status().message());
    return f;
  }

  // Normalized extents of `file` that overlap or touch [offset, end].
  Result<std::vector<Extent>> ExtentsNear(FileId file, std::uint64_t offset, std::uint64_t end) EXLR8_REQUIRES(mu) {
    std::vector<Extent> out;
    // The last extent starting at or before `offset` may reach into the range.
    EXLR8_ASSIGN_OR_RETURN(SqliteStmt prev, db->Prepare("SELECT start, length FROM extents WHERE file_id = ? AND "
                                                        "start <= ? ORDER BY start DESC LIMIT 1"));
    prev.Bind(1, file).Bind(2, static_cast<std::int64_t>(offset));
    EXLR8_ASSIGN_OR_RETURN(bool row, prev.Step());
    if (row) {
      const Extent e{static_cast<std::uint64_t>(prev.Int(0)), static_cast<std::uint64_t>(prev.Int(1))};
      if (e.end() >= offset) out.push_back(e);
    }
    EXLR8_ASSIGN_OR_RETURN(SqliteStmt next, db->Prepare("SELECT start, length FROM extents WHERE file_id = ? AND "
                                                        "start > ? AND start <= ? ORDER BY start"));
    next.Bind(1, file).Bind(2, static_cast<std::int64_t>(offset)).Bind(3, static_cast<std::int64_t>(end));
    while (true) {
      EXLR8_ASSIGN_OR_RETURN(bool more, next.Step());
      if (!more) break;
      out.push_back({static_cast<std::uint64_t>(next.Int(0)), static_cast<std::uint64_t>(next.Int(1))});
    }
    return out;
  }

  Result<std::vector<Extent>> AllExtents(FileId file) EXLR8_REQUIRES(mu) {
    EXLR8_ASSIGN_OR_RETURN(SqliteStmt q, db->Prepare("SELECT start, length FROM extents WHERE file_id = ? "
                                                     "ORDER BY start"));
    q.Bind(1, file);
    std::vector<Extent> out;
    while (true) {
      EXLR8_ASSIGN_OR_RETURN(bool row, q.Step());
      if (!row) return out;
      out.push_back({static_cast<std::uint64_t>(q.Int(0)), static_cast<std::uint64_t>(q.Int(1))});
    }
  }

  // Merges normalized `adds` into the extent table of `file`, keeping it
  // normalized. REQUIRES: inside a transaction.
  Status MergeExtents(FileId file, std::span<const Extent> adds) EXLR8_REQUIRES(mu) {
    EXLR8_ASSIGN_OR_RETURN(SqliteStmt del, db->Prepare("DELETE FROM extents WHERE file_id = ? AND start = ?"));
    EXLR8_ASSIGN_OR_RETURN(SqliteStmt ins, db->Prepare("INSERT INTO extents (file_id, start, length) VALUES (?, ?, ?)"));
    for (const Extent& add : adds) {
      EXLR8_ASSIGN_OR_RETURN(std::vector<Extent> near, ExtentsNear(file, add.offset, add.end()));
      for (const Extent& e : near) {
        del.Reset();
        EXLR8_RETURN_IF_ERROR(del.Bind(1, file).Bind(2, static_cast<std::int64_t>(e.offset)).Run());
      }
      near.push_back(add);
      for (const Extent& m : NormalizeExtents(std::move(near))) {
        ins.Reset();
        EXLR8_RETURN_IF_ERROR(ins.Bind(1, file)
                                  .Bind(2, static_cast<std::int64_t>(m.offset))
                                  .Bind(3, static_cast<std::int64_t>(m.length))
                                  .Run());
      }
    }
    return Status::Ok();
  }

  Result<std::uint64_t> RecordedBytes() EXLR8_REQUIRES(mu) {
    EXLR8_ASSIGN_OR_RETURN(std::int64_t n, db->QueryInt("SELECT COALESCE(SUM(length), 0) FROM extents"));
    return static_cast<std::uint64_t>(n);
  }

  Result<std::vector<FilesetInfo>> QueryFilesets(std::optional<FilesetId> only) EXLR8_REQUIRES(mu);
  Result<std::vector<PullInfo>> QueryPulls(std::string_view where, std::int64_t arg) EXLR8_REQUIRES(mu);
  Status RemoveOrphanDirs() EXLR8_REQUIRES(mu);
  // Evicts, least recently used first, filesets that no pin, process pin,
  // running pull or live claim protects, until the recorded bytes are at
  // most `target` or nothing evictable is left.
  Result<GcResult> EvictDownTo(std::uint64_t target) EXLR8_REQUIRES(mu);
  // Deletes the filesets' rows in one durable transaction, then their data
  // directories (and any other orphans), and adds them to `result`.
  Status EvictFilesets(const std::vector<std::pair<FilesetId, std::uint64_t>>& victims, GcResult* result)
      EXLR8_REQUIRES(mu);
};

namespace {

// fdatasync each file, then fsync each directory, outside the cache lock.
Status SyncToDisk(const std::vector<std::shared_ptr<DataFile>>& files, const std::set<std::string>& dirs, int root_fd,
                  const std::string& shown) {
  // Start write-back of every file first, so the device works on all of
  // them at once instead of one fdatasync after another. Only a hint: the
  // fdatasync below is what makes the bytes durable.
  if (files.size() > 1)
    for (const auto& f : files) (void)::sync_file_range(f->fd.get(), 0, 0, SYNC_FILE_RANGE_WRITE);
  for (const auto& f : files) {
    while (::fdatasync(f->fd.get()) != 0) {
      if (errno != EINTR) return ErrnoStatus(errno, "fdatasync " + f->shown);
    }
  }
  for (const std::string& d : dirs) {
    EXLR8_ASSIGN_OR_RETURN(UniqueFd fd, OpenDirBeneath(root_fd, d, shown));
    if (::fsync(fd.get()) != 0) return ErrnoStatus(errno, "fsync directory " + shown + "/" + d);
  }
  return Status::Ok();
}

}  // namespace

Cache::Cache(std::unique_ptr<Rep> rep) : rep_(std::move(rep)) {}
Cache::~Cache() = default;

const std::filesystem::path& Cache::dir() const { return rep_->dir; }

Result<std::unique_ptr<Cache>> Cache::Open(std::filesystem::path dir, CacheOptions options) {
  auto rep = std::make_unique<Rep>();
  rep->dir = std::move(dir);
  rep->shown = rep->dir.string();
  rep->options = std::move(options);
  std::error_code ec;
  std::filesystem::create_directories(rep->dir, ec);
  if (ec) return ErrnoStatus(ec.value(), "create cache directory " + rep->shown);
  rep->root_fd = UniqueFd(::open(rep->dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!rep->root_fd.valid()) return ErrnoStatus(errno, "open cache directory " + rep->shown);
  EXLR8_ASSIGN_OR_RETURN(rep->lock, FileLock::Acquire(rep->dir / kCacheLockName));

  MutexLock l(&rep->mu);
  EXLR8_ASSIGN_OR_RETURN(rep->db, SqliteDb::Open((rep->dir / kCacheDbName).string()));
  SqliteDb* db = rep->db.get();
  {
    EXLR8_ASSIGN_OR_RETURN(SqliteStmt q, db->Prepare("PRAGMA journal_mode = WAL"));
    EXLR8_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row || q.Text(0) != "wal")
      return IOError(db->path() + ": cannot switch to WAL journal mode (got '" + (row ? q.Text(0) : "") + "')");
  }
  // FULL: a transaction is on stable storage when COMMIT returns (one WAL
  // fsync per batch, negligible next to the data fdatasyncs). Gc relies on
  // it: it deletes rows, and only then files.
  EXLR8_RETURN_IF_ERROR(db->Exec("PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON"));
  EXLR8_RETURN_IF_ERROR(ApplyMigrations(db, BuiltinMigrations()));
  // We hold the lock, so no process runs the pulls still marked running.
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt q, db->Prepare("UPDATE pulls SET state = 'failed', error = 'interrupted: the "
                                                   "exlr8d that ran it stopped', finished = ?1, updated = ?1 "
                                                   "WHERE state = 'running'"));
  EXLR8_RETURN_IF_ERROR(q.Bind(1, rep->Now()).Run());
  return std::unique_ptr<Cache>(new Cache(std::move(rep)));
}

Result<std::unique_ptr<Cache>> Cache::OpenReadOnly(std::filesystem::path dir) {
  auto rep = std::make_unique<Rep>();
  rep->dir = std::move(dir);
  rep->shown = rep->dir.string();
  rep->read_only = true;
  rep->root_fd = UniqueFd(::open(rep->dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!rep->root_fd.valid()) return ErrnoStatus(errno, "open cache directory " + rep->shown);
  MutexLock l(&rep->mu);
  EXLR8_ASSIGN_OR_RETURN(rep->db, SqliteDb::OpenReadOnly((rep->dir / kCacheDbName).string()));
  // The owner migrates when it opens; an index at another version than this
  // binary's would be read with the wrong queries.
  EXLR8_ASSIGN_OR_RETURN(const std::int64_t version, rep->db->QueryInt("PRAGMA user_version"));
  const auto latest = static_cast<std::int64_t>(BuiltinMigrations().size());
  if (version != latest)
    return FailedPreconditionError(rep->db->path() + ": index at schema version " + std::to_string(version) +
                                   ", this exlr8d reads version " + std::to_string(latest) +
                                   "; wait for the exlr8d that owns the cache, or use the same version");
  return std::unique_ptr<Cache>(new Cache(std::move(rep)));
}

bool Cache::read_only() const { return rep_->read_only; }

// ---- filesets ----

Result<FilesetId> Cache::PutFileset(std::string_view repo, std::string_view revision, std::string_view commit) {
  EXLR8_RETURN_IF_ERROR(rep_->Writable());
  EXLR8_RETURN_IF_ERROR(ValidateRepoId(repo));
  EXLR8_RETURN_IF_ERROR(ValidateRevision(revision));
  EXLR8_RETURN_IF_ERROR(ValidateCommit(commit));
  Rep& r = *rep_;
  MutexLock l(&r.mu);
  const std::int64_t now = r.Now();
  EXLR8_ASSIGN_OR_RETURN(SqliteTxn txn, SqliteTxn::Begin(r.db.get()));
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt up, r.db->Prepare(
                                            "INSERT INTO filesets (repo, revision, commit_sha, created, last_used) "
                                            "VALUES (?1, ?2, ?3, ?4, ?4) ON CONFLICT (repo, commit_sha) DO UPDATE "
                                            "SET revision = excluded.revision, last_used = excluded.last_used "
                                            "RETURNING id"));
  up.Bind(1, repo).Bind(2, revision).Bind(3, commit).Bind(4, now);
  EXLR8_ASSIGN_OR_RETURN(bool row, up.Step());
  if (!row) return InternalError(r.shown + ": upsert of fileset " + std::string(repo) + " returned no id");
  const FilesetId id = up.Int(0);
  EXLR8_RETURN_IF_ERROR(up.Run());
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt rev, r.db->Prepare(
                                             "INSERT INTO revisions (repo, revision, fileset_id, resolved) "
                                             "VALUES (?, ?, ?, ?) ON CONFLICT (repo, revision) DO UPDATE "
                                             "SET fileset_id = excluded.fileset_id, resolved = excluded.resolved"));
  EXLR8_RETURN_IF_ERROR(rev.Bind(1, repo).Bind(2, revision).Bind(3, id).Bind(4, now).Run());
  EXLR8_RETURN_IF_ERROR(txn.Commit());
  return id;
}

Result<std::string> Cache::LookupCommit(std::string_view repo, std::string_view revision) {
  EXLR8_RETURN_IF_ERROR(ValidateRepoId(repo));
  EXLR8_RETURN_IF_ERROR(ValidateRevision(revision));
  Rep& r = *rep_;
  MutexLock l(&r.mu);
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt q, r.db->Prepare("SELECT s.commit_sha FROM revisions v JOIN filesets s "
                                                     "ON s.id = v.fileset_id WHERE v.repo = ? AND v.revision = ?"));
  q.Bind(1, repo).Bind(2, revision);
  EXLR8_ASSIGN_OR_RETURN(bool row, q.Step());
  if (!row)
    return NotFoundError(r.shown + ": no commit recorded for " + std::string(repo) + "@" +
                         EscapeForMessage(revision) + " (never resolved online, or evicted)");
  return q.Text(0);
}

Status Cache::Touch(FilesetId fileset) {
  EXLR8_RETURN_IF_ERROR(rep_->Writable());
  Rep& r = *rep_;
  MutexLock l(&r.mu);
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt q, r.db->Prepare("UPDATE filesets SET last_used = ? WHERE id = ?"));
  EXLR8_RETURN_IF_ERROR(q.Bind(1, r.Now()).Bind(2, fileset).Run());
  if (r.db->Changes() == 0)
    return NotFoundError(r.shown + ": no fileset with id " + std::to_string(fileset) + " in the cache index");
  return Status::Ok();
}

Status Cache::Pin(FilesetId fileset, std::string_view holder) {
  EXLR8_RETURN_IF_ERROR(rep_->Writable());
  EXLR8_RETURN_IF_ERROR(ValidateHolder(holder));
  Rep& r = *rep_;
  MutexLock l(&r.mu);
  EXLR8_RETURN_IF_ERROR(r.CheckFilesetExists(fileset));
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt q, r.db->Prepare("INSERT OR IGNORE INTO pins (fileset_id, holder, created) "
                                                     "VALUES (?, ?, ?)"));
  return q.Bind(1, fileset).Bind(2, holder).Bind(3, r.Now()).Run();
}

Status Cache::RecordVerified(FilesetId fileset, std::uint64_t checks_failed) {
  EXLR8_RETURN_IF_ERROR(rep_->Writable());
  Rep& r = *rep_;
  MutexLock l(&r.mu);
  EXLR8_RETURN_IF_ERROR(r.CheckFilesetExists(fileset));
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt q,
                         r.db->Prepare("UPDATE filesets SET verified = ?, verify_failures = ? WHERE id = ?"));
  return q.Bind(1, r.Now()).Bind(2, static_cast<std::int64_t>(checks_failed)).Bind(3, fileset).Run();
}

Status Cache::Unpin(FilesetId fileset, std::string_view holder) {
  EXLR8_RETURN_IF_ERROR(rep_->Writable());
  EXLR8_RETURN_IF_ERROR(ValidateHolder(holder));
  Rep& r = *rep_;
  MutexLock l(&r.mu);
  EXLR8_RETURN_IF_ERROR(r.CheckFilesetExists(fileset));
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt q, r.db->Prepare("DELETE FROM pins WHERE fileset_id = ? AND holder = ?"));
  return q.Bind(1, fileset).Bind(2, holder).Run();
}

Result<std::vector<FilesetInfo>> Cache::Rep::QueryFilesets(std::optional<FilesetId> only) {
  EXLR8_ASSIGN_OR_RETURN(
      SqliteStmt q,
      db->Prepare("SELECT s.id, s.repo, s.revision, s.commit_sha, s.created, s.last_used, "
                  "(SELECT COUNT(*) FROM files f WHERE f.fileset_id = s.id), "
                  "(SELECT COALESCE(SUM(f.size), 0) FROM files f WHERE f.fileset_id = s.id), "
                  "(SELECT COALESCE(SUM(e.length), 0) FROM files f JOIN extents e ON e.file_id = f.id "
                  "  WHERE f.fileset_id = s.id), "
                  "s.verified, s.verify_failures "
                  "FROM filesets s WHERE ?1 IS NULL OR s.id = ?1 ORDER BY s.last_used DESC, s.id DESC"));
  if (only) q.Bind(1, *only);
  std::vector<FilesetInfo> out;
  std::map<FilesetId, std::size_t> index;
  while (true) {
    EXLR8_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    FilesetInfo f;
    f.id = q.Int(0);
    f.repo = q.Text(1);
    f.revision = q.Text(2);
    f.commit = q.Text(3);
    f.created_ms = q.Int(4);
    f.last_used_ms = q.Int(5);
    f.file_count = static_cast<std::uint64_t>(q.Int(6));
    f.bytes_total = static_cast<std::uint64_t>(q.Int(7));
    f.bytes_cached = static_cast<std::uint64_t>(q.Int(8));
    if (!q.IsNull(9)) f.verified_ms = q.Int(9);
    f.verify_failures = static_cast<std::uint64_t>(q.Int(10));
    index[f.id] = out.size();
    out.push_back(std::move(f));
  }
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt pins, db->Prepare("SELECT fileset_id, holder FROM pins WHERE ?1 IS NULL OR "
                                                      "fileset_id = ?1 ORDER BY holder"));
  if (only) pins.Bind(1, *only);
  while (true) {
    EXLR8_ASSIGN_OR_RETURN(bool row, pins.Step());
    if (!row) break;
    if (auto it = index.find(pins.Int(0)); it != index.end()) out[it->second].pins.push_back(pins.Text(1));
  }
  // Process pins. For the owner a failure to list them fails the query, so
  // that Gc never evicts what a process it could not see holds; a read-only
  // view changes nothing, and reports without them.
  Result<std::vector<ProcessPinInfo>> listed = ListProcessPins(dir, /*sweep=*/!read_only);
  if (!listed.ok() && !read_only) return listed.status();
  std::vector<ProcessPinInfo> live = listed.ok() ? std::move(listed).value() : std::vector<ProcessPinInfo>{};
  for (ProcessPinInfo& p : live)
    for (FilesetInfo& f : out)
      if (f.repo == p.repo && f.commit == p.commit) f.process_pins.push_back(p);
  return out;
}

Result<FilesetInfo> Cache::GetFileset(FilesetId fileset) {
  Rep& r = *rep_;
  MutexLock l(&r.mu);
  EXLR8_ASSIGN_OR_RETURN(std::vector<FilesetInfo> list, r.QueryFilesets(fileset));
  if (list.empty())
    return NotFoundError(r.shown + ": no fileset with id " + std::to_string(fileset) + " in the cache index");
  return std::move(list.front());
}

Result<std::vector<FilesetInfo>> Cache::ListFilesets() {
  MutexLock l(&rep_->mu);
  return rep_->QueryFilesets(std::nullopt);
}

// ---- files ----

namespace {

Status ValidateNewFile(const NewFile& f) {
  EXLR8_RETURN_IF_ERROR(ValidateRepoPath(f.path));
  if (f.size > kMaxSqlInt)
    return InvalidArgumentError("file '" + EscapeForMessage(f.path) + "': size " + std::to_string(f.size) +
                                " is too large");
  EXLR8_RETURN_IF_ERROR(ValidateHash(f.sha256, 64, "sha256 of '" + EscapeForMessage(f.path) + "'"));
  EXLR8_RETURN_IF_ERROR(ValidateHash(f.git_sha1, 40, "git sha1 of '" + EscapeForMessage(f.path) + "'"));
  return Status::Ok();
}

}  // namespace

// Inserts or checks one file row. REQUIRES: r.mu held, a transaction open.
Result<FileId> Cache::Rep::PutFileLocked(FilesetId fileset, const NewFile& f) {
  const std::string_view path = f.path;
  const std::uint64_t size = f.size;
  const std::optional<std::string>& sha256 = f.sha256;
  const std::optional<std::string>& git_sha1 = f.git_sha1;
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt q, db->Prepare("SELECT id, size, sha256, git_sha1 FROM files "
                                                   "WHERE fileset_id = ? AND path = ?"));
  q.Bind(1, fileset).Bind(2, path);
  EXLR8_ASSIGN_OR_RETURN(bool row, q.Step());
  if (!row) {
    EXLR8_ASSIGN_OR_RETURN(SqliteStmt ins, db->Prepare("INSERT INTO files (fileset_id, path, size, sha256, git_sha1) "
                                                       "VALUES (?, ?, ?, ?, ?)"));
    EXLR8_RETURN_IF_ERROR(ins.Bind(1, fileset)
                              .Bind(2, path)
                              .Bind(3, static_cast<std::int64_t>(size))
                              .BindOpt(4, sha256)
                              .BindOpt(5, git_sha1)
                              .Run());
    return db->LastInsertRowId();
  }
  const FileId id = q.Int(0);
  const std::string shown = "file '" + EscapeForMessage(path) + "' of fileset " + std::to_string(fileset);
  if (static_cast<std::uint64_t>(q.Int(1)) != size)
    return FailedPreconditionError(shown + ": declared size " + std::to_string(size) + ", the cache recorded " +
                                   std::to_string(q.Int(1)) + " (the remote changed under a fixed commit?)");
  const std::optional<std::string> old_sha256 = q.OptText(2), old_git = q.OptText(3);
  if (sha256 && old_sha256 && *sha256 != *old_sha256)
    return FailedPreconditionError(shown + ": declared sha256 " + *sha256 + ", the cache recorded " + *old_sha256);
  if (git_sha1 && old_git && *git_sha1 != *old_git)
    return FailedPreconditionError(shown + ": declared git sha1 " + *git_sha1 + ", the cache recorded " + *old_git);
  if ((sha256 && !old_sha256) || (git_sha1 && !old_git)) {
    EXLR8_ASSIGN_OR_RETURN(SqliteStmt up, db->Prepare("UPDATE files SET sha256 = COALESCE(sha256, ?), "
                                                      "git_sha1 = COALESCE(git_sha1, ?) WHERE id = ?"));
    EXLR8_RETURN_IF_ERROR(up.BindOpt(1, sha256).BindOpt(2, git_sha1).Bind(3, id).Run());
  }
  return id;
}

Result<FileId> Cache::PutFile(FilesetId fileset, std::string_view path, std::uint64_t size,
                              std::optional<std::string> sha256, std::optional<std::string> git_sha1) {
  EXLR8_ASSIGN_OR_RETURN(std::vector<FileId> ids,
                         PutFiles(fileset, {{NewFile{std::string(path), size, std::move(sha256), std::move(git_sha1)}}}));
  return ids[0];
}

Result<std::vector<FileId>> Cache::PutFiles(FilesetId fileset, std::span<const NewFile> files) {
  EXLR8_RETURN_IF_ERROR(rep_->Writable());
  for (const NewFile& f : files) EXLR8_RETURN_IF_ERROR(ValidateNewFile(f));
  Rep& r = *rep_;
  MutexLock l(&r.mu);
  EXLR8_RETURN_IF_ERROR(r.CheckFilesetExists(fileset));
  EXLR8_ASSIGN_OR_RETURN(SqliteTxn txn, SqliteTxn::Begin(r.db.get()));
  std::vector<FileId> ids;
  ids.reserve(files.size());
  for (const NewFile& f : files) {
    EXLR8_ASSIGN_OR_RETURN(FileId id, r.PutFileLocked(fileset, f));
    ids.push_back(id);
  }
  EXLR8_RETURN_IF_ERROR(txn.Commit());
  return ids;
}

Result<FileId> Cache::FindFile(FilesetId fileset, std::string_view path) {
  Rep& r = *rep_;
  MutexLock l(&r.mu);
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt q, r.db->Prepare("SELECT id FROM files WHERE fileset_id = ? AND path = ?"));
  q.Bind(1, fileset).Bind(2, path);
  EXLR8_ASSIGN_OR_RETURN(bool row, q.Step());
  if (!row)
    return NotFoundError(r.shown + ": no file '" + EscapeForMessage(path) + "' in fileset " + std::to_string(fileset));
  return q.Int(0);
}

namespace {
constexpr std::string_view kFileColumns =
    "SELECT f.id, f.fileset_id, f.path, f.size, f.sha256, f.git_sha1, f.whole_verified, "
    "(SELECT COALESCE(SUM(e.length), 0) FROM extents e WHERE e.file_id = f.id), f.durable_prefix FROM files f ";

FileInfo ReadFileInfo(const SqliteStmt& q) {
  FileInfo f;
  f.id = q.Int(0);
  f.fileset = q.Int(1);
  f.path = q.Text(2);
  f.size = static_cast<std::uint64_t>(q.Int(3));
  f.sha256 = q.OptText(4);
  f.git_sha1 = q.OptText(5);
  f.whole_verified = q.Int(6) != 0;
  f.bytes_cached = static_cast<std::uint64_t>(q.Int(7));
  f.durable_prefix = static_cast<std::uint64_t>(q.Int(8));
  return f;
}
}  // namespace

Result<FileInfo> Cache::GetFile(FileId file) {
  Rep& r = *rep_;
  MutexLock l(&r.mu);
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt q, r.db->Prepare(std::string(kFileColumns) + "WHERE f.id = ?"));
  q.Bind(1, file);
  EXLR8_ASSIGN_OR_RETURN(bool row, q.Step());
  if (!row) return NotFoundError(r.shown + ": no file with id " + std::to_string(file) + " in the cache index");
  return ReadFileInfo(q);
}

Result<std::vector<FileInfo>> Cache::ListFiles(FilesetId fileset) {
  Rep& r = *rep_;
  MutexLock l(&r.mu);
  EXLR8_RETURN_IF_ERROR(r.CheckFilesetExists(fileset));
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt q,
                         r.db->Prepare(std::string(kFileColumns) + "WHERE f.fileset_id = ? ORDER BY f.path"));
  q.Bind(1, fileset);
  std::vector<FileInfo> out;
  while (true) {
    EXLR8_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) return out;
    out.push_back(ReadFileInfo(q));
  }
}

Result<std::filesystem::path> Cache::DataPath(FileId file) {
  Rep& r = *rep_;
  MutexLock l(&r.mu);
  EXLR8_ASSIGN_OR_RETURN(FileRow row, r.LoadFile(file));
  return r.dir / row.rel;
}

// ---- writing ----

Status Cache::WriteAt(FileId file, std::uint64_t offset, std::span<const std::byte> data) {
  EXLR8_RETURN_IF_ERROR(rep_->Writable());
  std::shared_ptr<DataFile> f = rep_->FindOpen(file);  // without mu: see open_mu
  if (!f) {
    MutexLock l(&rep_->mu);
    EXLR8_ASSIGN_OR_RETURN(f, rep_->GetDataFile(file, /*create=*/true));
  }
  EXLR8_RETURN_IF_ERROR(CheckRange(f->shown, f->size, offset, data.size()));
  EXLR8_RETURN_IF_ERROR(PwriteAll(f->fd.get(), offset, data, f->shown));
  const std::uint64_t every = rep_->options.write_behind_bytes;
  if (every > 0 && f->unkicked.fetch_add(data.size(), std::memory_order_relaxed) + data.size() >= every) {
    f->unkicked.store(0, std::memory_order_relaxed);
    // Whole file: the kernel walks only the dirty pages, and several workers
    // write one file at different offsets. A hint, so failure is harmless.
    (void)::sync_file_range(f->fd.get(), 0, 0, SYNC_FILE_RANGE_WRITE);
  }
  return Status::Ok();
}

Status Cache::CommitVerified(std::span<const VerifiedExtent> extents, std::span<const DurablePrefix> prefixes) {
  EXLR8_RETURN_IF_ERROR(rep_->Writable());
  Rep& r = *rep_;
  std::map<FileId, std::vector<Extent>> by_file;
  for (const VerifiedExtent& e : extents)
    if (e.length > 0) by_file[e.file].push_back({e.offset, e.length});
  std::map<FileId, std::uint64_t> prefix_of;  // the last one per file wins
  for (const DurablePrefix& p : prefixes) {
    prefix_of[p.file] = p.bytes;
    by_file[p.file];  // its file is synced with the others
  }
  if (by_file.empty()) return Status::Ok();

  // 1. resolve and check every extent
  std::vector<std::shared_ptr<DataFile>> files;
  std::set<std::string> dirs;
  {
    MutexLock l(&r.mu);
    for (auto& [id, list] : by_file) {
      Result<std::shared_ptr<DataFile>> f = r.OpenWritten(id);
      if (!f.ok()) return f.status();
      for (const Extent& e : list) EXLR8_RETURN_IF_ERROR(CheckRange((*f)->shown, (*f)->size, e.offset, e.length));
      if (auto p = prefix_of.find(id); p != prefix_of.end())
        EXLR8_RETURN_IF_ERROR(CheckRange((*f)->shown, (*f)->size, 0, p->second));
      list = NormalizeExtents(std::move(list));
      files.push_back(*std::move(f));
    }
    dirs = r.unsynced_dirs;
  }
  // 2. make the bytes durable, without blocking readers
  EXLR8_RETURN_IF_ERROR(SyncToDisk(files, dirs, r.root_fd.get(), r.shown));
  // 3. record them, all in one transaction
  MutexLock l(&r.mu);
  EXLR8_ASSIGN_OR_RETURN(SqliteTxn txn, SqliteTxn::Begin(r.db.get()));
  for (const auto& [id, list] : by_file)
    if (!list.empty()) EXLR8_RETURN_IF_ERROR(r.MergeExtents(id, list));
  if (!prefix_of.empty()) {
    EXLR8_ASSIGN_OR_RETURN(SqliteStmt set, r.db->Prepare("UPDATE files SET durable_prefix = ? WHERE id = ?"));
    for (const auto& [id, bytes] : prefix_of) {
      set.Reset();
      EXLR8_RETURN_IF_ERROR(set.Bind(1, static_cast<std::int64_t>(bytes)).Bind(2, id).Run());
    }
  }
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt touch, r.db->Prepare("UPDATE filesets SET last_used = ? WHERE id = ?"));
  std::set<FilesetId> filesets;
  for (const auto& f : files) filesets.insert(f->fileset);
  const std::int64_t now = r.Now();
  for (FilesetId fs : filesets) {
    touch.Reset();
    EXLR8_RETURN_IF_ERROR(touch.Bind(1, now).Bind(2, fs).Run());
  }
  EXLR8_RETURN_IF_ERROR(txn.Commit());
  for (const std::string& d : dirs) r.unsynced_dirs.erase(d);
  return Status::Ok();
}

Status Cache::MarkWholeFileVerified(FileId file) { return MarkWholeFilesVerified({&file, 1}); }

Status Cache::ReadDurablePrefix(FileId file, std::uint64_t offset, std::span<std::byte> out) {
  Rep& r = *rep_;
  std::shared_ptr<DataFile> f;
  {
    MutexLock l(&r.mu);
    EXLR8_ASSIGN_OR_RETURN(SqliteStmt q, r.db->Prepare("SELECT durable_prefix FROM files WHERE id = ?"));
    q.Bind(1, file);
    EXLR8_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) return NotFoundError(r.shown + ": no file with id " + std::to_string(file) + " in the cache index");
    const auto prefix = static_cast<std::uint64_t>(q.Int(0));
    if (offset > prefix || out.size() > prefix - offset)
      return FailedPreconditionError(r.shown + ": file " + std::to_string(file) + " bytes [" + std::to_string(offset) +
                                     ", " + std::to_string(offset + out.size()) + ") are beyond its durable prefix (" +
                                     std::to_string(prefix) + " bytes)");
    EXLR8_ASSIGN_OR_RETURN(f, r.OpenWritten(file));
  }
  return PreadAll(f->fd.get(), offset, out, f->shown);
}

Status Cache::MarkWholeFilesVerified(std::span<const FileId> ids) {
  EXLR8_RETURN_IF_ERROR(rep_->Writable());
  if (ids.empty()) return Status::Ok();
  Rep& r = *rep_;
  std::vector<std::shared_ptr<DataFile>> files;
  std::set<std::string> dirs;
  {
    MutexLock l(&r.mu);
    for (FileId file : ids) {
      EXLR8_ASSIGN_OR_RETURN(FileRow row, r.LoadFile(file));
      // An empty file has no bytes to write, so nobody else creates it.
      if (row.size == 0) {
        EXLR8_ASSIGN_OR_RETURN(files.emplace_back(), r.GetDataFile(file, /*create=*/true));
      } else {
        EXLR8_ASSIGN_OR_RETURN(files.emplace_back(), r.OpenWritten(file));
      }
    }
    dirs = r.unsynced_dirs;
  }
  EXLR8_RETURN_IF_ERROR(SyncToDisk(files, dirs, r.root_fd.get(), r.shown));
  MutexLock l(&r.mu);
  EXLR8_ASSIGN_OR_RETURN(SqliteTxn txn, SqliteTxn::Begin(r.db.get()));
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt del, r.db->Prepare("DELETE FROM extents WHERE file_id = ?"));
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt ins, r.db->Prepare("INSERT INTO extents (file_id, start, length) "
                                                       "VALUES (?, 0, ?)"));
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt up,
                         r.db->Prepare("UPDATE files SET whole_verified = 1, durable_prefix = 0 WHERE id = ?"));
  for (std::size_t i = 0; i < ids.size(); ++i) {
    del.Reset();
    EXLR8_RETURN_IF_ERROR(del.Bind(1, ids[i]).Run());
    if (files[i]->size > 0) {
      ins.Reset();
      EXLR8_RETURN_IF_ERROR(ins.Bind(1, ids[i]).Bind(2, static_cast<std::int64_t>(files[i]->size)).Run());
    }
    up.Reset();
    EXLR8_RETURN_IF_ERROR(up.Bind(1, ids[i]).Run());
  }
  EXLR8_RETURN_IF_ERROR(txn.Commit());
  for (const std::string& d : dirs) r.unsynced_dirs.erase(d);
  return Status::Ok();
}

Result<std::uint64_t> Cache::ForgetExtents(std::span<const VerifiedExtent> ranges) {
  EXLR8_RETURN_IF_ERROR(rep_->Writable());
  Rep& r = *rep_;
  std::map<FileId, std::vector<Extent>> by_file;
  for (const VerifiedExtent& e : ranges)
    if (e.length > 0) by_file[e.file].push_back({e.offset, e.length});
  if (by_file.empty()) return std::uint64_t{0};
  MutexLock l(&r.mu);
  for (const auto& [id, list] : by_file) {
    EXLR8_ASSIGN_OR_RETURN(FileRow row, r.LoadFile(id));
    for (const Extent& e : list) EXLR8_RETURN_IF_ERROR(CheckRange(r.shown + "/" + row.rel, row.size, e.offset, e.length));
  }
  EXLR8_ASSIGN_OR_RETURN(SqliteTxn txn, SqliteTxn::Begin(r.db.get()));
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt del, r.db->Prepare("DELETE FROM extents WHERE file_id = ?"));
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt ins, r.db->Prepare("INSERT INTO extents (file_id, start, length) VALUES (?, ?, ?)"));
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt demote, r.db->Prepare("UPDATE files SET whole_verified = 0, durable_prefix = 0 "
                                                          "WHERE id = ?"));
  std::uint64_t forgotten = 0;
  for (auto& [id, list] : by_file) {
    EXLR8_ASSIGN_OR_RETURN(std::vector<Extent> have, r.AllExtents(id));
    const std::vector<Extent> keep = SubtractExtents(have, std::move(list));
    const std::uint64_t lost = TotalLength(have) - TotalLength(keep);
    if (lost == 0) continue;
    forgotten += lost;
    del.Reset();
    EXLR8_RETURN_IF_ERROR(del.Bind(1, id).Run());
    for (const Extent& e : keep) {
      ins.Reset();
      EXLR8_RETURN_IF_ERROR(ins.Bind(1, id)
                                .Bind(2, static_cast<std::int64_t>(e.offset))
                                .Bind(3, static_cast<std::int64_t>(e.length))
                                .Run());
    }
    demote.Reset();
    EXLR8_RETURN_IF_ERROR(demote.Bind(1, id).Run());
  }
  EXLR8_RETURN_IF_ERROR(txn.Commit());
  return forgotten;
}

// ---- reading ----

Result<bool> Cache::Covers(FileId file, std::uint64_t offset, std::uint64_t length) {
  EXLR8_ASSIGN_OR_RETURN(std::vector<Extent> holes, MissingRanges(file, offset, length));
  return holes.empty();
}

Result<std::vector<Extent>> Cache::VerifiedExtents(FileId file) {
  Rep& r = *rep_;
  MutexLock l(&r.mu);
  EXLR8_RETURN_IF_ERROR(r.LoadFile(file).status());
  return r.AllExtents(file);
}

Result<std::vector<Extent>> Cache::MissingRanges(FileId file, std::uint64_t offset, std::uint64_t length) {
  Rep& r = *rep_;
  MutexLock l(&r.mu);
  EXLR8_ASSIGN_OR_RETURN(FileRow row, r.LoadFile(file));
  EXLR8_RETURN_IF_ERROR(CheckRange(r.shown + "/" + row.rel, row.size, offset, length));
  if (length == 0) return std::vector<Extent>{};
  EXLR8_ASSIGN_OR_RETURN(std::vector<Extent> near, r.ExtentsNear(file, offset, offset + length));
  return MissingExtents(near, {offset, length});
}

namespace {

// Serves the verified bytes of one cached file, as of when it was opened.
class VerifiedFileSource final : public ByteSource {
 public:
  VerifiedFileSource(std::shared_ptr<DataFile> file, std::uint64_t size, std::vector<Extent> extents,
                     std::string name)
      : file_(std::move(file)), size_(size), extents_(std::move(extents)), name_(std::move(name)) {}

  std::uint64_t size() const override { return size_; }
  const std::string& name() const override { return name_; }

  Status ReadAt(std::uint64_t offset, std::span<std::byte> dst) const override {
    if (offset > size_ || dst.size() > size_ - offset)
      return CorruptionError(name_ + ": read of " + std::to_string(dst.size()) + " bytes at offset " +
                             std::to_string(offset) + " runs past the end (" + std::to_string(size_) + " bytes)");
    if (dst.empty()) return Status::Ok();
    const std::vector<Extent> holes = MissingExtents(extents_, {offset, dst.size()});
    if (!holes.empty())
      return NotFoundError(name_ + ": bytes [" + std::to_string(offset) + ", " + std::to_string(offset + dst.size()) +
                           ") are not verified in the cache; first missing offset " +
                           std::to_string(holes.front().offset));
    return PreadAll(file_->fd.get(), offset, dst, name_);
  }

 private:
  std::shared_ptr<DataFile> file_;  // null when nothing is verified
  std::uint64_t size_;
  std::vector<Extent> extents_;  // normalized snapshot
  std::string name_;
};

}  // namespace

Result<std::unique_ptr<ByteSource>> Cache::OpenVerified(FileId file) {
  Rep& r = *rep_;
  MutexLock l(&r.mu);
  EXLR8_ASSIGN_OR_RETURN(FileRow row, r.LoadFile(file));
  EXLR8_ASSIGN_OR_RETURN(std::vector<Extent> extents, r.AllExtents(file));
  std::shared_ptr<DataFile> df;
  if (!extents.empty()) {
    Result<std::shared_ptr<DataFile>> opened = r.OpenWritten(file);
    if (opened.status().code() == StatusCode::kFailedPrecondition)
      return CorruptionError(r.shown + "/" + row.rel + ": the index records verified bytes but the file is missing");
    if (!opened.ok()) return opened.status();
    df = *std::move(opened);
  }
  return std::unique_ptr<ByteSource>(
      new VerifiedFileSource(std::move(df), row.size, std::move(extents), r.shown + "/" + row.rel));
}

Result<std::unique_ptr<ByteSource>> Cache::OpenCheckedByCaller(FileId file) {
  Rep& r = *rep_;
  MutexLock l(&r.mu);
  EXLR8_ASSIGN_OR_RETURN(FileRow row, r.LoadFile(file));
  std::shared_ptr<DataFile> df;
  std::vector<Extent> all;
  if (row.size > 0) {
    EXLR8_ASSIGN_OR_RETURN(df, r.OpenWritten(file));
    all.push_back({0, row.size});
  }
  return std::unique_ptr<ByteSource>(
      new VerifiedFileSource(std::move(df), row.size, std::move(all), r.shown + "/" + row.rel));
}

// ---- space ----

Result<std::uint64_t> Cache::FreeBytes() {
  struct statvfs vfs;
  if (::fstatvfs(rep_->root_fd.get(), &vfs) != 0) return ErrnoStatus(errno, "statvfs " + rep_->shown);
  return static_cast<std::uint64_t>(vfs.f_bavail) * static_cast<std::uint64_t>(vfs.f_frsize);
}

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

std::unique_ptr<Cache::SpaceClaim> Cache::ClaimSpace(std::function<std::uint64_t()> remaining) {
  std::lock_guard<std::mutex> l(rep_->claims_mu);
  const std::uint64_t id = rep_->next_claim++;
  rep_->claims.emplace(id, std::move(remaining));
  return std::unique_ptr<SpaceClaim>(new SpaceClaim(this, id));
}

Status Cache::CheckSpace(std::uint64_t bytes_needed, const SpaceClaim* own) {
  EXLR8_ASSIGN_OR_RETURN(std::uint64_t free, FreeBytes());
  EXLR8_ASSIGN_OR_RETURN(std::uint64_t used, RecordedBytes());
  const std::uint64_t promised = rep_->ClaimedByOthers(own != nullptr ? own->id_ : 0);
  // What others still write comes out of the free space and into the cache.
  const std::uint64_t available = free - std::min(free, promised);
  const std::uint64_t committed = used + promised;
  const std::optional<std::uint64_t>& budget = rep_->options.byte_budget;
  const bool over_budget = budget && (committed > *budget || bytes_needed > *budget - committed);
  if (bytes_needed <= available && !over_budget) return Status::Ok();
  std::string msg = "need " + HumanBytes(bytes_needed) + ", " + HumanBytes(free) + " free on " + rep_->shown;
  if (budget) {
    msg += " (budget " + HumanBytes(*budget) + ", " + HumanBytes(used) + " used";
  } else {
    msg += " (no budget";
  }
  if (promised > 0) msg += "; " + HumanBytes(promised) + " promised to pulls running now";
  if (over_budget) msg += "; over budget: run gc or raise the budget";
  msg += ")";
  return ResourceExhaustedError(std::move(msg));
}

Result<GcResult> Cache::Gc(std::uint64_t budget) {
  EXLR8_RETURN_IF_ERROR(rep_->Writable());
  MutexLock l(&rep_->mu);
  return rep_->EvictDownTo(budget);
}

Result<GcResult> Cache::MakeRoom(std::uint64_t bytes_needed, const SpaceClaim* own) {
  EXLR8_RETURN_IF_ERROR(rep_->Writable());
  // The same sums as CheckSpace, solved for the recorded bytes that leave
  // room for `bytes_needed`.
  EXLR8_ASSIGN_OR_RETURN(std::uint64_t free, FreeBytes());
  const std::uint64_t promised = rep_->ClaimedByOthers(own != nullptr ? own->id_ : 0);
  MutexLock l(&rep_->mu);
  EXLR8_ASSIGN_OR_RETURN(std::uint64_t used, rep_->RecordedBytes());
  std::uint64_t target = used;
  const std::uint64_t available = free - std::min(free, promised);
  // On disk: an evicted fileset frees at least its verified bytes.
  if (bytes_needed > available) target = used - std::min(used, bytes_needed - available);
  if (const std::optional<std::uint64_t>& budget = rep_->options.byte_budget) {
    const std::uint64_t wanted = promised + bytes_needed;  // both may exceed the budget alone
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
    EXLR8_ASSIGN_OR_RETURN(
        SqliteStmt q,
        db->Prepare("SELECT s.id, "
                    "(SELECT COALESCE(SUM(e.length), 0) FROM files f JOIN extents e ON e.file_id = f.id "
                    "  WHERE f.fileset_id = s.id), s.repo, s.commit_sha "
                    "FROM filesets s "
                    "WHERE NOT EXISTS (SELECT 1 FROM pins p WHERE p.fileset_id = s.id) "
                    "AND NOT EXISTS (SELECT 1 FROM pulls u WHERE u.fileset_id = s.id AND u.state = 'running') "
                    "ORDER BY s.last_used ASC, s.id ASC"));
    std::uint64_t left = total;
    while (left > target) {
      EXLR8_ASSIGN_OR_RETURN(bool row, q.Step());
      if (!row) break;
      if (held.count({q.Text(2), q.Text(3)}) || claimed.count(q.Int(0))) continue;
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
  EXLR8_ASSIGN_OR_RETURN(std::int64_t running,
                         r.db->QueryInt("SELECT COUNT(*) FROM pulls WHERE fileset_id = " + std::to_string(fileset) +
                                        " AND state = 'running'"));
  if (running > 0 || rep_->ClaimedFilesets().count(fileset))
    return FailedPreconditionError(name + " has a pull running");
  GcResult result;
  EXLR8_RETURN_IF_ERROR(r.EvictFilesets({{fileset, set.bytes_cached}}, &result));
  EXLR8_ASSIGN_OR_RETURN(result.bytes_remaining, r.RecordedBytes());
  return result;
}

Status Cache::Rep::EvictFilesets(const std::vector<std::pair<FilesetId, std::uint64_t>>& victims, GcResult* result) {
  if (!victims.empty()) {
    // Rows first, durably (synchronous=FULL); files after. A crash in
    // between leaves unrecorded files, which RemoveOrphanDirs sweeps.
    EXLR8_ASSIGN_OR_RETURN(SqliteTxn txn, SqliteTxn::Begin(db.get()));
    EXLR8_ASSIGN_OR_RETURN(SqliteStmt del, db->Prepare("DELETE FROM filesets WHERE id = ?"));
    for (const auto& [id, bytes] : victims) {
      del.Reset();
      EXLR8_RETURN_IF_ERROR(del.Bind(1, id).Run());
    }
    EXLR8_RETURN_IF_ERROR(txn.Commit());
    std::set<FilesetId> gone;
    for (const auto& [id, bytes] : victims) {
      gone.insert(id);
      result->evicted.push_back(id);
      result->bytes_freed += bytes;
    }
    MutexLock open_lock(&open_mu);
    std::erase_if(open_files, [&](const auto& kv) { return gone.count(kv.second->fileset) > 0; });
  }
  return RemoveOrphanDirs();
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
  // so the index, the lock and anything foreign stay put.
  for (const fs::path& org : subdirs(dir)) {
    if (org.filename().string().rfind("exlr8d.", 0) == 0) continue;  // the cache's own: pins, stage records
    for (const fs::path& name : subdirs(org)) {
      const std::string repo = org.filename().string() + "/" + name.filename().string();
      if (!ValidateRepoId(repo).ok()) continue;
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
    fs::remove(org, ec);
  }
  return Status::Ok();
}

// ---- pulls ----

Result<PullId> Cache::StartPull(const PullSpec& spec) {
  EXLR8_RETURN_IF_ERROR(rep_->Writable());
  if (spec.tp < 1 || spec.rank < 0 || spec.rank >= spec.tp)
    return InvalidArgumentError("pull of '" + EscapeForMessage(spec.manifest) + "': rank " +
                                std::to_string(spec.rank) + " is not in [0, tp = " + std::to_string(spec.tp) + ")");
  EXLR8_RETURN_IF_ERROR(ValidateRepoPath(spec.manifest));
  Rep& r = *rep_;
  MutexLock l(&r.mu);
  EXLR8_RETURN_IF_ERROR(r.CheckFilesetExists(spec.fileset));
  const std::int64_t now = r.Now();
  EXLR8_ASSIGN_OR_RETURN(SqliteTxn txn, SqliteTxn::Begin(r.db.get()));
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt ins, r.db->Prepare("INSERT INTO pulls (fileset_id, manifest, tp, rank, "
                                                       "plan_summary, state, started, updated) "
                                                       "VALUES (?1, ?2, ?3, ?4, ?5, 'running', ?6, ?7)"));
  EXLR8_RETURN_IF_ERROR(ins.Bind(1, spec.fileset)
                            .Bind(2, spec.manifest)
                            .Bind(3, std::int64_t{spec.tp})
                            .Bind(4, std::int64_t{spec.rank})
                            .Bind(5, spec.plan_summary_json)
                            .Bind(6, spec.started_ms > 0 && spec.started_ms <= now ? spec.started_ms : now)
                            .Bind(7, now)
                            .Run());
  const PullId id = r.db->LastInsertRowId();
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt touch, r.db->Prepare("UPDATE filesets SET last_used = ? WHERE id = ?"));
  EXLR8_RETURN_IF_ERROR(touch.Bind(1, now).Bind(2, spec.fileset).Run());
  EXLR8_RETURN_IF_ERROR(txn.Commit());
  return id;
}

Status Cache::UpdatePull(PullId pull, const PullCounters& c) {
  EXLR8_RETURN_IF_ERROR(rep_->Writable());
  for (std::uint64_t v : {c.bytes_planned, c.bytes_fetched, c.bytes_reused, c.requests, c.retries,
                          c.checksum_failures})
    if (v > kMaxSqlInt) return InvalidArgumentError("pull " + std::to_string(pull) + ": counter out of range");
  Rep& r = *rep_;
  MutexLock l(&r.mu);
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt q, r.db->Prepare("UPDATE pulls SET bytes_planned = ?, bytes_fetched = ?, "
                                                     "bytes_reused = ?, requests = ?, retries = ?, "
                                                     "checksum_failures = ?, updated = ? "
                                                     "WHERE id = ? AND state = 'running'"));
  EXLR8_RETURN_IF_ERROR(q.Bind(1, static_cast<std::int64_t>(c.bytes_planned))
                            .Bind(2, static_cast<std::int64_t>(c.bytes_fetched))
                            .Bind(3, static_cast<std::int64_t>(c.bytes_reused))
                            .Bind(4, static_cast<std::int64_t>(c.requests))
                            .Bind(5, static_cast<std::int64_t>(c.retries))
                            .Bind(6, static_cast<std::int64_t>(c.checksum_failures))
                            .Bind(7, r.Now())
                            .Bind(8, pull)
                            .Run());
  if (r.db->Changes() == 0)
    return FailedPreconditionError(r.shown + ": pull " + std::to_string(pull) + " is unknown or no longer running");
  return Status::Ok();
}

Status Cache::FinishPull(PullId pull, PullState state, std::string_view error) {
  EXLR8_RETURN_IF_ERROR(rep_->Writable());
  if (state == PullState::kRunning)
    return InvalidArgumentError("pull " + std::to_string(pull) + ": FinishPull needs a final state");
  Rep& r = *rep_;
  MutexLock l(&r.mu);
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt q, r.db->Prepare("UPDATE pulls SET state = ?1, error = ?2, finished = ?3, "
                                                     "updated = ?3 WHERE id = ?4 AND state = 'running'"));
  EXLR8_RETURN_IF_ERROR(q.Bind(1, PullStateName(state)).Bind(2, error).Bind(3, r.Now()).Bind(4, pull).Run());
  if (r.db->Changes() == 0)
    return FailedPreconditionError(r.shown + ": pull " + std::to_string(pull) + " is unknown or already finished");
  return Status::Ok();
}

Result<std::vector<PullInfo>> Cache::Rep::QueryPulls(std::string_view where, std::int64_t arg) {
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt q,
                         db->Prepare("SELECT id, fileset_id, manifest, tp, rank, plan_summary, state, error, "
                                     "bytes_planned, bytes_fetched, bytes_reused, requests, retries, "
                                     "checksum_failures, started, updated, finished FROM pulls " +
                                     std::string(where) + " ORDER BY id DESC"));
  if (!where.empty()) q.Bind(1, arg);
  std::vector<PullInfo> out;
  while (true) {
    EXLR8_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) return out;
    PullInfo p;
    p.id = q.Int(0);
    p.spec.fileset = q.Int(1);
    p.spec.manifest = q.Text(2);
    p.spec.tp = static_cast<int>(q.Int(3));
    p.spec.rank = static_cast<int>(q.Int(4));
    p.spec.plan_summary_json = q.Text(5);
    EXLR8_ASSIGN_OR_RETURN(p.state, ParsePullState(q.Text(6)));
    p.error = q.Text(7);
    p.counters.bytes_planned = static_cast<std::uint64_t>(q.Int(8));
    p.counters.bytes_fetched = static_cast<std::uint64_t>(q.Int(9));
    p.counters.bytes_reused = static_cast<std::uint64_t>(q.Int(10));
    p.counters.requests = static_cast<std::uint64_t>(q.Int(11));
    p.counters.retries = static_cast<std::uint64_t>(q.Int(12));
    p.counters.checksum_failures = static_cast<std::uint64_t>(q.Int(13));
    p.started_ms = q.Int(14);
    p.updated_ms = q.Int(15);
    if (!q.IsNull(16)) p.finished_ms = q.Int(16);
    out.push_back(std::move(p));
  }
}

Result<PullInfo> Cache::GetPull(PullId pull) {
  Rep& r = *rep_;
  MutexLock l(&r.mu);
  EXLR8_ASSIGN_OR_RETURN(std::vector<PullInfo> list, r.QueryPulls("WHERE id = ?", pull));
  if (list.empty()) return NotFoundError(r.shown + ": no pull with id " + std::to_string(pull));
  return std::move(list.front());
}

Result<std::vector<PullInfo>> Cache::ListPulls(std::optional<FilesetId> fileset) {
  MutexLock l(&rep_->mu);
  if (fileset) return rep_->QueryPulls("WHERE fileset_id = ?", *fileset);
  return rep_->QueryPulls("", 0);
}

}  // namespace exlr8
