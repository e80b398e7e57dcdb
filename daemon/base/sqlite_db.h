// A small RAII layer over the SQLite C API: one connection, prepared
// statements, and an IMMEDIATE transaction that rolls back unless committed.
// Errors become Status with the database path and the SQL step in the
// message: SQLITE_FULL -> ResourceExhausted, SQLITE_CORRUPT/NOTADB ->
// Corruption, SQLITE_BUSY/LOCKED -> Unavailable, SQLITE_CONSTRAINT ->
// FailedPrecondition, others -> IOError.
//
// Thread rules: none of these types lock; the owner serializes all use of a
// connection and its statements (Cache does so under its mutex), and a
// statement must not outlive its connection.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "format/status.h"

struct sqlite3;
struct sqlite3_stmt;

namespace exlr8 {

class SqliteDb;

// A prepared statement. Parameters are 1-based, columns 0-based, as in SQLite.
class SqliteStmt {
 public:
  SqliteStmt(SqliteStmt&& o) noexcept;
  SqliteStmt& operator=(SqliteStmt&&) = delete;
  SqliteStmt(const SqliteStmt&) = delete;
  ~SqliteStmt();

  SqliteStmt& Bind(int index, std::int64_t value);
  SqliteStmt& Bind(int index, std::string_view value);  // copied (SQLITE_TRANSIENT)
  SqliteStmt& BindOpt(int index, const std::optional<std::string>& value);  // NULL if nullopt
  // Binding errors (out-of-range index, a bug) surface at the next Step().

  // Runs one step: true if a row is available, false when done.
  Result<bool> Step();
  // Steps to completion, ignoring rows; for INSERT/UPDATE/DELETE.
  Status Run();
  // Clears bindings' effect so the statement can run again with new ones.
  void Reset();

  std::int64_t Int(int column) const;
  std::string Text(int column) const;  // "" for NULL
  std::optional<std::string> OptText(int column) const;
  bool IsNull(int column) const;

 private:
  friend class SqliteDb;
  SqliteStmt(SqliteDb* db, sqlite3_stmt* stmt) : db_(db), stmt_(stmt) {}

  SqliteDb* db_;
  sqlite3_stmt* stmt_;
  int bind_rc_ = 0;  // first failing sqlite3_bind_* code, 0 = none
};

class SqliteDb {
 public:
  // Opens (creating) the database at `path`, read-write, with extended
  // result codes and a busy timeout for outside readers (sqlite3 CLI).
  static Result<std::unique_ptr<SqliteDb>> Open(const std::string& path);
  // Opens an existing database read-only (any write fails with
  // SQLITE_READONLY); NotFound if there is none at `path`.
  static Result<std::unique_ptr<SqliteDb>> OpenReadOnly(const std::string& path);
  ~SqliteDb();

  // Keeps the -wal and -shm files when the last connection closes
  // (SQLITE_FCNTL_PERSIST_WAL). A reader that may not write the directory
  // (a read-only view for another user) can open a WAL database only if
  // they exist; without it, every such open failed with "attempt to write
  // a readonly database" once the owner had closed.
  Status PersistWal();

  // Runs one or more ';'-separated statements without results.
  Status Exec(std::string_view sql);
  // A statement for `sql`: one finished earlier with the same text if there
  // is one (reset, no bindings), else a newly prepared one. A statement's
  // destructor hands it back for reuse, so code prepares where it runs and
  // pays the parse once: preparing cost more than running the few-row
  // statements of the extent table (7% of a pull's CPU, perf on the VM).
  Result<SqliteStmt> Prepare(std::string_view sql);
  // Statements kept for reuse now (tests).
  std::size_t idle_statements() const { return idle_count_; }
  // Runs a single-row, single-integer query such as "PRAGMA user_version".
  Result<std::int64_t> QueryInt(std::string_view sql);

  std::int64_t LastInsertRowId() const;
  std::int64_t Changes() const;  // rows changed by the last statement
  const std::string& path() const { return path_; }

  // Status for SQLite result code `rc` during `what`.
  Status Error(int rc, std::string_view what) const;

 private:
  SqliteDb(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  static Result<std::unique_ptr<SqliteDb>> OpenWithFlags(const std::string& path, int flags);
  friend class SqliteStmt;
  // Resets `stmt` and keeps it for the next Prepare of its text, or
  // finalizes it once kMaxIdleStatements are kept.
  void Recycle(sqlite3_stmt* stmt);

  struct TextHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  // More than the distinct statements the cache and the job store run, so
  // none is parsed twice; a bound all the same.
  static constexpr std::size_t kMaxIdleStatements = 128;

  sqlite3* db_;
  std::string path_;
  // By SQL text (sqlite3_sql), statements not in use. Usually one each; more
  // when the same text was in use twice at once.
  std::unordered_map<std::string, std::vector<sqlite3_stmt*>, TextHash, std::equal_to<>> idle_;
  std::size_t idle_count_ = 0;
};

// BEGIN IMMEDIATE ... COMMIT; the destructor rolls back an uncommitted one.
class SqliteTxn {
 public:
  static Result<SqliteTxn> Begin(SqliteDb* db);
  SqliteTxn(SqliteTxn&& o) noexcept : db_(std::exchange(o.db_, nullptr)) {}
  SqliteTxn& operator=(SqliteTxn&&) = delete;
  ~SqliteTxn();
  Status Commit();

 private:
  explicit SqliteTxn(SqliteDb* db) : db_(db) {}
  SqliteDb* db_;  // null once committed or rolled back
};

}  // namespace exlr8
