#include "daemon/cache/catalog.h"

#include <limits>
#include <utility>

#include "daemon/cache/cache_paths.h"
#include "daemon/cache/cache_schema.h"

// Catalog: opening the index, filesets, revisions, pins, files and the rows
// an eviction deletes. Extents and pulls: catalog_records.cpp.
namespace exlr8 {

namespace {

Status ValidateHash(const std::optional<std::string>& hash, std::size_t hex_digits, std::string_view what) {
  if (!hash) return Status::Ok();
  if (hash->size() != hex_digits || hash->find_first_not_of("0123456789abcdef") != std::string::npos)
    return InvalidArgumentError("invalid " + std::string(what) + " '" +
                                EscapeForMessage(hash->substr(0, 80)) + "': expected " +
                                std::to_string(hex_digits) + " lowercase hex digits");
  return Status::Ok();
}

Status ValidateNewFile(const NewFile& f) {
  EXLR8_RETURN_IF_ERROR(ValidateRepoPath(f.path));
  if (f.size > kMaxSqlInteger)
    return InvalidArgumentError("file '" + EscapeForMessage(f.path) + "': size " + std::to_string(f.size) +
                                " is too large");
  EXLR8_RETURN_IF_ERROR(ValidateHash(f.sha256, 64, "sha256 of '" + EscapeForMessage(f.path) + "'"));
  EXLR8_RETURN_IF_ERROR(ValidateHash(f.git_sha1, 40, "git sha1 of '" + EscapeForMessage(f.path) + "'"));
  return Status::Ok();
}

constexpr std::string_view kFileColumns =
    "SELECT f.id, f.fileset_id, f.path, f.size, f.sha256, f.git_sha1, f.whole_verified, "
    "(SELECT COALESCE(SUM(e.length), 0) FROM extents e WHERE e.file_id = f.id), f.durable_prefix FROM files "
    "f ";

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

// ---- opening ----

Status Catalog::Open(const std::string& db_path) {
  EXLR8_ASSIGN_OR_RETURN(db_, SqliteDb::Open(db_path));
  SqliteDb* db = db_.get();
  {
    EXLR8_ASSIGN_OR_RETURN(SqliteStmt q, db->Prepare("PRAGMA journal_mode = WAL"));
    EXLR8_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row || q.Text(0) != "wal")
      return IOError(db->path() + ": cannot switch to WAL journal mode (got '" + (row ? q.Text(0) : "") +
                     "')");
  }
  // FULL: a transaction is on stable storage when COMMIT returns (one WAL
  // fsync per batch, negligible next to the data fdatasyncs). Eviction
  // relies on it: it deletes rows, and only then files.
  EXLR8_RETURN_IF_ERROR(db->Exec("PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON"));
  EXLR8_RETURN_IF_ERROR(db->PersistWal());  // for read-only views of other users
  EXLR8_RETURN_IF_ERROR(ApplyMigrations(db, BuiltinMigrations()));
  // The owner holds the lock, so no process runs the pulls still marked
  // running. Not on a full disk, where this UPDATE fails and must not fail
  // gc, unpin, verify or list with it: the rows are then treated as failed
  // without it (IsStalePull).
  if (Status marked = MarkStalePulls(); !marked.ok() && marked.code() != StatusCode::kResourceExhausted)
    return marked;
  return Status::Ok();
}

Status Catalog::OpenReadOnly(const std::string& db_path) {
  read_only_ = true;
  EXLR8_ASSIGN_OR_RETURN(db_, SqliteDb::OpenReadOnly(db_path));
  // The owner migrates when it opens; an index at another version than this
  // binary's would be read with the wrong queries.
  return RequireLatestSchema(db_.get(), BuiltinMigrations(),
                             "wait for the exlr8d that owns the cache, or use the same version");
}

// ---- filesets ----

Result<FilesetId> Catalog::PutFileset(std::string_view repo, std::string_view revision,
                                      std::string_view commit) {
  EXLR8_RETURN_IF_ERROR(ValidateRepoId(repo));
  EXLR8_RETURN_IF_ERROR(ValidateRevision(revision));
  EXLR8_RETURN_IF_ERROR(ValidateCommit(commit));
  const std::int64_t now = Now();
  EXLR8_ASSIGN_OR_RETURN(SqliteTxn txn, SqliteTxn::Begin(db_.get()));
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt up,
                         db_->Prepare("INSERT INTO filesets (repo, revision, commit_sha, created, "
                                      "last_used) VALUES (?1, ?2, ?3, ?4, ?4) ON CONFLICT (repo, "
                                      "commit_sha) DO UPDATE SET revision = excluded.revision, "
                                      "last_used = excluded.last_used RETURNING id"));
  up.Bind(1, repo).Bind(2, revision).Bind(3, commit).Bind(4, now);
  EXLR8_ASSIGN_OR_RETURN(bool row, up.Step());
  if (!row) return InternalError(shown_ + ": upsert of fileset " + std::string(repo) + " returned no id");
  const FilesetId id = up.Int(0);
  EXLR8_RETURN_IF_ERROR(up.Run());
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt rev,
                         db_->Prepare("INSERT INTO revisions (repo, revision, fileset_id, resolved) "
                                      "VALUES (?, ?, ?, ?) ON CONFLICT (repo, revision) DO UPDATE "
                                      "SET fileset_id = excluded.fileset_id, resolved = "
                                      "excluded.resolved"));
  EXLR8_RETURN_IF_ERROR(rev.Bind(1, repo).Bind(2, revision).Bind(3, id).Bind(4, now).Run());
  EXLR8_RETURN_IF_ERROR(txn.Commit());
  return id;
}

Result<std::string> Catalog::LookupCommit(std::string_view repo, std::string_view revision) {
  EXLR8_RETURN_IF_ERROR(ValidateRepoId(repo));
  EXLR8_RETURN_IF_ERROR(ValidateRevision(revision));
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt q,
                         db_->Prepare("SELECT s.commit_sha FROM revisions v JOIN filesets s "
                                      "ON s.id = v.fileset_id WHERE v.repo = ? AND v.revision = ?"));
  q.Bind(1, repo).Bind(2, revision);
  EXLR8_ASSIGN_OR_RETURN(bool row, q.Step());
  if (!row)
    return NotFoundError(shown_ + ": no commit recorded for " + std::string(repo) + "@" +
                         EscapeForMessage(revision) + " (never resolved online, or evicted)");
  return q.Text(0);
}

Status Catalog::Touch(FilesetId fileset) {
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt q, db_->Prepare("UPDATE filesets SET last_used = ? WHERE id = ?"));
  EXLR8_RETURN_IF_ERROR(q.Bind(1, Now()).Bind(2, fileset).Run());
  if (db_->Changes() == 0)
    return NotFoundError(shown_ + ": no fileset with id " + std::to_string(fileset) + " in the cache index");
  return Status::Ok();
}

Status Catalog::Pin(FilesetId fileset, std::string_view holder) {
  EXLR8_RETURN_IF_ERROR(ValidateHolder(holder));
  EXLR8_RETURN_IF_ERROR(CheckFilesetExists(fileset));
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt q,
                         db_->Prepare("INSERT OR IGNORE INTO pins (fileset_id, holder, created) "
                                      "VALUES (?, ?, ?)"));
  return q.Bind(1, fileset).Bind(2, holder).Bind(3, Now()).Run();
}

Status Catalog::Unpin(FilesetId fileset, std::string_view holder) {
  EXLR8_RETURN_IF_ERROR(ValidateHolder(holder));
  EXLR8_RETURN_IF_ERROR(CheckFilesetExists(fileset));
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt q, db_->Prepare("DELETE FROM pins WHERE fileset_id = ? AND holder = ?"));
  return q.Bind(1, fileset).Bind(2, holder).Run();
}

Status Catalog::RecordVerified(FilesetId fileset, std::uint64_t checks_failed) {
  EXLR8_RETURN_IF_ERROR(CheckFilesetExists(fileset));
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt q,
                         db_->Prepare("UPDATE filesets SET verified = ?, verify_failures = ? WHERE id = ?"));
  return q.Bind(1, Now()).Bind(2, static_cast<std::int64_t>(checks_failed)).Bind(3, fileset).Run();
}

Status Catalog::CheckFilesetExists(FilesetId fileset) {
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt q, db_->Prepare("SELECT 1 FROM filesets WHERE id = ?"));
  q.Bind(1, fileset);
  EXLR8_ASSIGN_OR_RETURN(bool row, q.Step());
  if (!row)
    return NotFoundError(shown_ + ": no fileset with id " + std::to_string(fileset) + " in the cache index");
  return Status::Ok();
}

Result<std::vector<FilesetInfo>> Catalog::QueryFilesets(std::optional<FilesetId> only) {
  EXLR8_ASSIGN_OR_RETURN(
      SqliteStmt q,
      db_->Prepare("SELECT s.id, s.repo, s.revision, s.commit_sha, s.created, s.last_used, "
                   "(SELECT COUNT(*) FROM files f WHERE f.fileset_id = s.id), "
                   "(SELECT COALESCE(SUM(f.size), 0) FROM files f WHERE f.fileset_id = s.id), "
                   "(SELECT COALESCE(SUM(e.length), 0) FROM files f JOIN extents e ON e.file_id = f.id "
                   "  WHERE f.fileset_id = s.id), "
                   "s.verified, s.verify_failures, "
                   "(SELECT COUNT(*) FROM files f WHERE f.fileset_id = s.id AND f.whole_verified = 1), "
                   "(SELECT COUNT(DISTINCT r.file_id) FROM files f JOIN records r ON r.file_id = f.id "
                   "  WHERE f.fileset_id = s.id AND f.whole_verified = 1), "
                   "(SELECT COUNT(*) FROM files f JOIN records r ON r.file_id = f.id "
                   "  WHERE f.fileset_id = s.id AND f.whole_verified = 1) "
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
    f.files_verified = static_cast<std::uint64_t>(q.Int(11));
    f.lvq5_files = static_cast<std::uint64_t>(q.Int(12));
    f.records = static_cast<std::uint64_t>(q.Int(13));
    index[f.id] = out.size();
    out.push_back(std::move(f));
  }
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt pins,
                         db_->Prepare("SELECT fileset_id, holder FROM pins WHERE ?1 IS NULL OR "
                                      "fileset_id = ?1 ORDER BY holder"));
  if (only) pins.Bind(1, *only);
  while (true) {
    EXLR8_ASSIGN_OR_RETURN(bool row, pins.Step());
    if (!row) break;
    if (auto it = index.find(pins.Int(0)); it != index.end()) out[it->second].pins.push_back(pins.Text(1));
  }
  return out;
}

// ---- files ----

// Inserts or checks one file row. REQUIRES: a transaction open.
Result<FileId> Catalog::PutFileLocked(FilesetId fileset, const NewFile& f) {
  const std::string_view path = f.path;
  const std::uint64_t size = f.size;
  const std::optional<std::string>& sha256 = f.sha256;
  const std::optional<std::string>& git_sha1 = f.git_sha1;
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt q, db_->Prepare("SELECT id, size, sha256, git_sha1 FROM files "
                                                    "WHERE fileset_id = ? AND path = ?"));
  q.Bind(1, fileset).Bind(2, path);
  EXLR8_ASSIGN_OR_RETURN(bool row, q.Step());
  if (!row) {
    EXLR8_ASSIGN_OR_RETURN(SqliteStmt ins, db_->Prepare("INSERT INTO files (fileset_id, path, size, sha256, "
                                                        "git_sha1) VALUES (?, ?, ?, ?, ?)"));
    EXLR8_RETURN_IF_ERROR(ins.Bind(1, fileset)
                              .Bind(2, path)
                              .Bind(3, static_cast<std::int64_t>(size))
                              .BindOpt(4, sha256)
                              .BindOpt(5, git_sha1)
                              .Run());
    return db_->LastInsertRowId();
  }
  const FileId id = q.Int(0);
  const std::string shown = "file '" + EscapeForMessage(path) + "' of fileset " + std::to_string(fileset);
  if (static_cast<std::uint64_t>(q.Int(1)) != size)
    return FailedPreconditionError(shown + ": declared size " + std::to_string(size) +
                                   ", the cache recorded " + std::to_string(q.Int(1)) +
                                   " (the remote changed under a fixed commit?)");
  const std::optional<std::string> old_sha256 = q.OptText(2), old_git = q.OptText(3);
  if (sha256 && old_sha256 && *sha256 != *old_sha256)
    return FailedPreconditionError(shown + ": declared sha256 " + *sha256 + ", the cache recorded " +
                                   *old_sha256);
  if (git_sha1 && old_git && *git_sha1 != *old_git)
    return FailedPreconditionError(shown + ": declared git sha1 " + *git_sha1 + ", the cache recorded " +
                                   *old_git);
  if ((sha256 && !old_sha256) || (git_sha1 && !old_git)) {
    EXLR8_ASSIGN_OR_RETURN(SqliteStmt up, db_->Prepare("UPDATE files SET sha256 = COALESCE(sha256, ?), "
                                                       "git_sha1 = COALESCE(git_sha1, ?) WHERE id = ?"));
    EXLR8_RETURN_IF_ERROR(up.BindOpt(1, sha256).BindOpt(2, git_sha1).Bind(3, id).Run());
  }
  return id;
}

Result<std::vector<FileId>> Catalog::PutFiles(FilesetId fileset, std::span<const NewFile> files) {
  for (const NewFile& f : files) EXLR8_RETURN_IF_ERROR(ValidateNewFile(f));
  EXLR8_RETURN_IF_ERROR(CheckFilesetExists(fileset));
  EXLR8_ASSIGN_OR_RETURN(SqliteTxn txn, SqliteTxn::Begin(db_.get()));
  std::vector<FileId> ids;
  ids.reserve(files.size());
  for (const NewFile& f : files) {
    EXLR8_ASSIGN_OR_RETURN(FileId id, PutFileLocked(fileset, f));
    ids.push_back(id);
  }
  EXLR8_RETURN_IF_ERROR(txn.Commit());
  return ids;
}

Result<FileId> Catalog::FindFile(FilesetId fileset, std::string_view path) {
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt q,
                         db_->Prepare("SELECT id FROM files WHERE fileset_id = ? AND path = ?"));
  q.Bind(1, fileset).Bind(2, path);
  EXLR8_ASSIGN_OR_RETURN(bool row, q.Step());
  if (!row)
    return NotFoundError(shown_ + ": no file '" + EscapeForMessage(path) + "' in fileset " +
                         std::to_string(fileset));
  return q.Int(0);
}

Result<FileInfo> Catalog::GetFile(FileId file) {
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt q, db_->Prepare(std::string(kFileColumns) + "WHERE f.id = ?"));
  q.Bind(1, file);
  EXLR8_ASSIGN_OR_RETURN(bool row, q.Step());
  if (!row)
    return NotFoundError(shown_ + ": no file with id " + std::to_string(file) + " in the cache index");
  return ReadFileInfo(q);
}

Result<std::vector<FileInfo>> Catalog::ListFiles(FilesetId fileset) {
  EXLR8_RETURN_IF_ERROR(CheckFilesetExists(fileset));
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt q,
                         db_->Prepare(std::string(kFileColumns) + "WHERE f.fileset_id = ? ORDER BY f.path"));
  q.Bind(1, fileset);
  std::vector<FileInfo> out;
  while (true) {
    EXLR8_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) return out;
    out.push_back(ReadFileInfo(q));
  }
}

Result<Catalog::FileRow> Catalog::LoadFile(FileId file) {
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt q,
                         db_->Prepare("SELECT f.fileset_id, f.size, f.path, s.repo, s.commit_sha "
                                      "FROM files f JOIN filesets s ON s.id = f.fileset_id "
                                      "WHERE f.id = ?"));
  q.Bind(1, file);
  EXLR8_ASSIGN_OR_RETURN(bool row, q.Step());
  if (!row)
    return NotFoundError(shown_ + ": no file with id " + std::to_string(file) + " in the cache index");
  FileRow r;
  r.fileset = q.Int(0);
  r.size = static_cast<std::uint64_t>(q.Int(1));
  r.rel = FilesetDir(q.Text(3), q.Text(4)) + "/" + q.Text(2);
  return r;
}

Result<std::uint64_t> Catalog::DurablePrefix(FileId file) {
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt q, db_->Prepare("SELECT durable_prefix FROM files WHERE id = ?"));
  q.Bind(1, file);
  EXLR8_ASSIGN_OR_RETURN(bool row, q.Step());
  if (!row)
    return NotFoundError(shown_ + ": no file with id " + std::to_string(file) + " in the cache index");
  return static_cast<std::uint64_t>(q.Int(0));
}

Result<std::vector<FileId>> Catalog::FilesWithExtents(FilesetId fileset) {
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt q, db_->Prepare("SELECT DISTINCT f.id FROM files f JOIN extents e ON "
                                                    "e.file_id = f.id WHERE f.fileset_id = ?"));
  q.Bind(1, fileset);
  std::vector<FileId> ids;
  while (true) {
    EXLR8_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) return ids;
    ids.push_back(q.Int(0));
  }
}

// ---- eviction ----

Result<std::vector<Catalog::EvictionCandidate>> Catalog::EvictionOrder() {
  EXLR8_ASSIGN_OR_RETURN(
      SqliteStmt q,
      db_->Prepare("SELECT s.id, "
                   "(SELECT COALESCE(SUM(e.length), 0) FROM files f JOIN extents e ON e.file_id = f.id "
                   "  WHERE f.fileset_id = s.id), s.repo, s.commit_sha "
                   "FROM filesets s "
                   "WHERE NOT EXISTS (SELECT 1 FROM pins p WHERE p.fileset_id = s.id) "
                   "ORDER BY s.last_used ASC, s.id ASC"));
  std::vector<EvictionCandidate> out;
  while (true) {
    EXLR8_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) return out;
    out.push_back({q.Int(0), static_cast<std::uint64_t>(q.Int(1)), q.Text(2), q.Text(3)});
  }
}

Status Catalog::DeleteFilesets(std::span<const FilesetId> filesets) {
  EXLR8_ASSIGN_OR_RETURN(SqliteTxn txn, SqliteTxn::Begin(db_.get()));
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt del, db_->Prepare("DELETE FROM filesets WHERE id = ?"));
  for (FilesetId id : filesets) {
    del.Reset();
    EXLR8_RETURN_IF_ERROR(del.Bind(1, id).Run());
  }
  return txn.Commit();
}

Result<std::set<std::string>> Catalog::FilesetDirs() {
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt q, db_->Prepare("SELECT repo, commit_sha FROM filesets"));
  std::set<std::string> known;
  while (true) {
    EXLR8_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) return known;
    known.insert(FilesetDir(q.Text(0), q.Text(1)));
  }
}

}  // namespace exlr8
