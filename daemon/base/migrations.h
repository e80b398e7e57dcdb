// Numbered schema migrations for an SQLite database (the cache index, the
// serve job queue).
//
// <dir>/NNN_<what>.sql files are embedded at build time (embed_schema.cmake
// generates a header with <ns>::kMigrations, versions 1..N in order; the
// cache's list is BuiltinMigrations() in daemon/cache/cache_schema.h). The
// applied version is PRAGMA user_version: 0 for an empty database, N after
// migration N.
#pragma once

#include <span>
#include <string_view>

#include "daemon/base/sqlite_db.h"
#include "format/status.h"

namespace exlr8 {

struct Migration {
  int version;            // 1, 2, 3, ... in order
  std::string_view name;  // file name, for messages
  std::string_view sql;
};

// Brings `db` from its user_version up to the last of `migrations`, each in
// its own IMMEDIATE transaction that also sets user_version, so a crash or
// a failing migration leaves the database at the previous version.
// FailedPrecondition if the database is newer than the last migration (a
// newer exlr8d wrote it); the failing migration's name otherwise.
// REQUIRES: migrations[i].version == i + 1; no transaction open on `db`.
Status ApplyMigrations(SqliteDb* db, std::span<const Migration> migrations);

// The applied version: PRAGMA user_version.
Result<std::int64_t> SchemaVersion(SqliteDb* db);

// For a reader that does not migrate (a read-only open): OK when `db` is
// at the last of `migrations`, else FailedPrecondition naming the file,
// both versions and `advice` (what the reader can do about it).
Status RequireLatestSchema(SqliteDb* db, std::span<const Migration> migrations, std::string_view advice);

}  // namespace exlr8
