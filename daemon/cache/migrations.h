// Numbered schema migrations for the cache index.
//
// schema/NNN_<what>.sql files are embedded at build time (embed_schema.cmake
// generates schema_sql.h with cache_schema::kMigrations, versions 1..N in
// order). The applied version is PRAGMA user_version: 0 for an empty
// database, N after migration N.
#pragma once

#include <span>
#include <string_view>

#include "daemon/cache/sqlite_db.h"
#include "format/status.h"

namespace exlr8 {

struct Migration {
  int version;            // 1, 2, 3, ... in order
  std::string_view name;  // file name, for messages
  std::string_view sql;
};

// The migrations built into this binary.
std::span<const Migration> BuiltinMigrations();

// Brings `db` from its user_version up to the last of `migrations`, each in
// its own IMMEDIATE transaction that also sets user_version, so a crash or
// a failing migration leaves the database at the previous version.
// FailedPrecondition if the database is newer than the last migration (a
// newer exlr8d wrote it); the failing migration's name otherwise.
// REQUIRES: migrations[i].version == i + 1; no transaction open on `db`.
Status ApplyMigrations(SqliteDb* db, std::span<const Migration> migrations);

}  // namespace exlr8
