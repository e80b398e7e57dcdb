#include "daemon/cache/cache.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <map>
#include <string>

#include "daemon/cache/cache_rep.h"
#include "daemon/cache/cache_schema.h"

// Cache: opening the index, filesets and files. The data (cache_extents.cpp),
// space and eviction (cache_space.cpp) and pull records (cache_pulls.cpp)
// are in files of their own; their shared state is Cache::Rep (cache_rep.h).
namespace exlr8 {

using cache_internal::FileRow;
using cache_internal::kMaxSqlInt;

namespace {

Status ValidateHash(const std::optional<std::string>& hash, std::size_t hex_digits, std::string_view what) {
  if (!hash) return Status::Ok();
  if (hash->size() != hex_digits || hash->find_first_not_of("0123456789abcdef") != std::string::npos)
    return InvalidArgumentError("invalid " + std::string(what) + " '" + EscapeForMessage(hash->substr(0, 80)) +
                                "': expected " + std::to_string(hex_digits) + " lowercase hex digits");
  return Status::Ok();
}

}  // namespace

Cache::Cache(std::unique_ptr<Rep> rep) : rep_(std::move(rep)) {}
Cache::~Cache() {
  if (rep_->read_only) return;
  // The index first: closing it checkpoints its WAL, which may grow the
  // database. Then the reserve this Cache released, as much of it as is
  // free: a command that freed nothing (unpin, verify) leaves a full disk
  // as full as it found it, with the room for the next one (gc) to work.
  {
    MutexLock l(&rep_->mu);
    rep_->db.reset();
  }
  rep_->space->RestoreReserve(/*keep_free=*/rep_->space->released_reserve() ? 0 : rep_->options.reserve_bytes);
}

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
  rep->space = std::make_unique<SpaceAccount>(
      rep->root_fd.get(), rep->shown,
      SpaceAccount::Options{rep->options.byte_budget, rep->options.reserve_bytes, /*read_only=*/false});
  EXLR8_ASSIGN_OR_RETURN(rep->lock, FileLock::Acquire(rep->dir / kCacheLockName, rep->options.lock_wait));
  // On a full disk, room for the index before SQLite needs it: opening may
  // already write (its shared-memory file, a checkpoint that grows the
  // database).
  if (rep->options.use_reserve) rep->space->ReleaseReserveIfLow();

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
  EXLR8_RETURN_IF_ERROR(db->PersistWal());  // for read-only views of other users
  EXLR8_RETURN_IF_ERROR(ApplyMigrations(db, BuiltinMigrations()));
  // We hold the lock, so no process runs the pulls still marked running.
  // Not on a full disk, where this UPDATE fails and must not fail gc, unpin,
  // verify or list with it: the rows are then treated as failed without it
  // (Rep::IsStalePull).
  if (Status marked = rep->MarkStalePulls(); !marked.ok() && marked.code() != StatusCode::kResourceExhausted)
    return marked;
  // What an eviction a crash interrupted left on disk (its rows gone, some
  // of its files not yet): no rerun of that eviction finds the fileset
  // again, so the first owner after it removes them rather than leaving
  // them to a gc that evicts something. Best effort: a failure here
  // is said again by the next eviction, which sweeps too.
  (void)rep->RemoveOrphanDirs();
  // Made when there is room to spare; one released above waits until the
  // work is done (~Cache).
  rep->space->RestoreReserve(/*keep_free=*/rep->options.reserve_bytes);
  return std::unique_ptr<Cache>(new Cache(std::move(rep)));
}

Result<std::unique_ptr<Cache>> Cache::OpenReadOnly(std::filesystem::path dir) {
  auto rep = std::make_unique<Rep>();
  rep->dir = std::move(dir);
  rep->shown = rep->dir.string();
  rep->read_only = true;
  rep->root_fd = UniqueFd(::open(rep->dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!rep->root_fd.valid()) return ErrnoStatus(errno, "open cache directory " + rep->shown);
  rep->space = std::make_unique<SpaceAccount>(rep->root_fd.get(), rep->shown,
                                              SpaceAccount::Options{std::nullopt, 0, /*read_only=*/true});
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

}  // namespace exlr8
