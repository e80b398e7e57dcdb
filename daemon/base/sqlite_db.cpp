#include "daemon/base/sqlite_db.h"

#include <sqlite3.h>
#include <sys/stat.h>

#include <utility>

namespace exlr8 {

// ---- SqliteStmt ----

SqliteStmt::SqliteStmt(SqliteStmt&& o) noexcept
    : db_(o.db_), stmt_(std::exchange(o.stmt_, nullptr)), bind_rc_(o.bind_rc_) {}

SqliteStmt::~SqliteStmt() {
  if (stmt_) db_->Recycle(stmt_);
}

SqliteStmt& SqliteStmt::Bind(int index, std::int64_t value) {
  const int rc = sqlite3_bind_int64(stmt_, index, value);
  if (rc != SQLITE_OK && bind_rc_ == 0) bind_rc_ = rc;
  return *this;
}

SqliteStmt& SqliteStmt::Bind(int index, std::string_view value) {
  // A default string_view has a null data(), which SQLite would bind as NULL.
  const char* data = value.data() ? value.data() : "";
  const int rc = sqlite3_bind_text64(stmt_, index, data, value.size(), SQLITE_TRANSIENT, SQLITE_UTF8);
  if (rc != SQLITE_OK && bind_rc_ == 0) bind_rc_ = rc;
  return *this;
}

SqliteStmt& SqliteStmt::BindOpt(int index, const std::optional<std::string>& value) {
  if (value) return Bind(index, std::string_view(*value));
  const int rc = sqlite3_bind_null(stmt_, index);
  if (rc != SQLITE_OK && bind_rc_ == 0) bind_rc_ = rc;
  return *this;
}

Result<bool> SqliteStmt::Step() {
  if (bind_rc_ != 0) return db_->Error(bind_rc_, std::string("bind for: ") + sqlite3_sql(stmt_));
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return db_->Error(rc, sqlite3_sql(stmt_));
}

Status SqliteStmt::Run() {
  while (true) {
    EXLR8_ASSIGN_OR_RETURN(bool row, Step());
    if (!row) return Status::Ok();
  }
}

void SqliteStmt::Reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
  bind_rc_ = 0;
}

std::int64_t SqliteStmt::Int(int column) const { return sqlite3_column_int64(stmt_, column); }

std::string SqliteStmt::Text(int column) const {
  const unsigned char* p = sqlite3_column_text(stmt_, column);
  if (!p) return {};
  return std::string(reinterpret_cast<const char*>(p), static_cast<std::size_t>(sqlite3_column_bytes(stmt_, column)));
}

std::optional<std::string> SqliteStmt::OptText(int column) const {
  if (IsNull(column)) return std::nullopt;
  return Text(column);
}

bool SqliteStmt::IsNull(int column) const { return sqlite3_column_type(stmt_, column) == SQLITE_NULL; }

// ---- SqliteDb ----

Result<std::unique_ptr<SqliteDb>> SqliteDb::OpenWithFlags(const std::string& path, int flags) {
  sqlite3* raw = nullptr;
  const int rc = sqlite3_open_v2(path.c_str(), &raw, flags | SQLITE_OPEN_NOFOLLOW, nullptr);
  std::unique_ptr<SqliteDb> db(new SqliteDb(raw, path));  // closes `raw` even on failure
  if (rc != SQLITE_OK) return db->Error(rc, "open");
  sqlite3_extended_result_codes(raw, 1);
  sqlite3_busy_timeout(raw, 5000);
  return db;
}

Result<std::unique_ptr<SqliteDb>> SqliteDb::Open(const std::string& path) {
  return OpenWithFlags(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
}

Result<std::unique_ptr<SqliteDb>> SqliteDb::OpenReadOnly(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return NotFoundError(path + ": no cache index here");
  return OpenWithFlags(path, SQLITE_OPEN_READONLY);
}

Status SqliteDb::PersistWal() {
  int persist = 1;
  const int rc = sqlite3_file_control(db_, "main", SQLITE_FCNTL_PERSIST_WAL, &persist);
  if (rc != SQLITE_OK) return Error(rc, "SQLITE_FCNTL_PERSIST_WAL");
  return Status::Ok();
}

SqliteDb::~SqliteDb() {
  for (auto& [sql, stmts] : idle_)
    for (sqlite3_stmt* stmt : stmts) sqlite3_finalize(stmt);
  // Statements in use must be gone first (they would recycle into a dead
  // connection); close_v2 defers the close if any is not.
  sqlite3_close_v2(db_);
}

Status SqliteDb::Exec(std::string_view sql) {
  char* err = nullptr;
  const std::string text(sql);
  const int rc = sqlite3_exec(db_, text.c_str(), nullptr, nullptr, &err);
  if (err) sqlite3_free(err);
  if (rc != SQLITE_OK) return Error(rc, text.size() > 120 ? text.substr(0, 120) + "..." : text);
  return Status::Ok();
}

Result<SqliteStmt> SqliteDb::Prepare(std::string_view sql) {
  if (auto it = idle_.find(sql); it != idle_.end() && !it->second.empty()) {
    sqlite3_stmt* stmt = it->second.back();
    it->second.pop_back();
    --idle_count_;
    return SqliteStmt(this, stmt);
  }
  sqlite3_stmt* stmt = nullptr;
  const int rc = sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &stmt, nullptr);
  if (rc != SQLITE_OK) {
    sqlite3_finalize(stmt);
    return Error(rc, "prepare " + std::string(sql));
  }
  return SqliteStmt(this, stmt);
}

void SqliteDb::Recycle(sqlite3_stmt* stmt) {
  // Reset ends any read it was in the middle of (a LIMIT 1 query), so a kept
  // statement holds no snapshot of the database open.
  sqlite3_reset(stmt);
  sqlite3_clear_bindings(stmt);
  const char* text = sqlite3_sql(stmt);
  if (idle_count_ >= kMaxIdleStatements || text == nullptr) {
    sqlite3_finalize(stmt);
    return;
  }
  auto it = idle_.find(std::string_view(text));
  if (it == idle_.end()) it = idle_.emplace(text, std::vector<sqlite3_stmt*>()).first;
  it->second.push_back(stmt);
  ++idle_count_;
}

Result<std::int64_t> SqliteDb::QueryInt(std::string_view sql) {
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt stmt, Prepare(sql));
  EXLR8_ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) return InternalError(path_ + ": no row from " + std::string(sql));
  return stmt.Int(0);
}

std::int64_t SqliteDb::LastInsertRowId() const { return sqlite3_last_insert_rowid(db_); }
std::int64_t SqliteDb::Changes() const { return sqlite3_changes64(db_); }

Status SqliteDb::Error(int rc, std::string_view what) const {
  std::string msg = path_ + ": " + std::string(what) + ": " + sqlite3_errstr(rc);
  if (db_ && sqlite3_errcode(db_) == rc) {
    const char* detail = sqlite3_errmsg(db_);
    if (detail && std::string_view(detail) != sqlite3_errstr(rc)) msg += std::string(" (") + detail + ")";
  }
  switch (rc & 0xff) {
    case SQLITE_FULL:
      return ResourceExhaustedError(std::move(msg));
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return CorruptionError(std::move(msg));
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return UnavailableError(std::move(msg));
    case SQLITE_CONSTRAINT:
      return FailedPreconditionError(std::move(msg));
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_AUTH:
      return PermissionDeniedError(std::move(msg));
    case SQLITE_CANTOPEN:
      return NotFoundError(std::move(msg));
    default:
      return IOError(std::move(msg));
  }
}

// ---- SqliteTxn ----

Result<SqliteTxn> SqliteTxn::Begin(SqliteDb* db) {
  EXLR8_RETURN_IF_ERROR(db->Exec("BEGIN IMMEDIATE"));
  return SqliteTxn(db);
}

SqliteTxn::~SqliteTxn() {
  if (db_) (void)db_->Exec("ROLLBACK");  // best effort: SQLite may have rolled back already
}

Status SqliteTxn::Commit() {
  SqliteDb* db = std::exchange(db_, nullptr);
  const Status s = db->Exec("COMMIT");
  if (!s.ok()) (void)db->Exec("ROLLBACK");
  return s;
}

}  // namespace exlr8
