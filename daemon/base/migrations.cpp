#include "daemon/base/migrations.h"

#include <string>

namespace exlr8 {

Result<std::int64_t> SchemaVersion(SqliteDb* db) { return db->QueryInt("PRAGMA user_version"); }

Status RequireLatestSchema(SqliteDb* db, std::span<const Migration> migrations, std::string_view advice) {
  EXLR8_ASSIGN_OR_RETURN(const std::int64_t version, SchemaVersion(db));
  const auto latest = static_cast<std::int64_t>(migrations.size());
  if (version == latest) return Status::Ok();
  return FailedPreconditionError(db->path() + ": schema version " + std::to_string(version) +
                                 ", this exlr8d reads version " + std::to_string(latest) + "; " +
                                 std::string(advice));
}

Status ApplyMigrations(SqliteDb* db, std::span<const Migration> migrations) {
  EXLR8_ASSIGN_OR_RETURN(const std::int64_t current, SchemaVersion(db));
  const auto latest = static_cast<std::int64_t>(migrations.size());
  if (current > latest)
    return FailedPreconditionError(db->path() + ": schema version " + std::to_string(current) +
                                   " is newer than this exlr8d understands (" + std::to_string(latest) +
                                   "); use a newer exlr8d or another cache directory");
  if (current < 0) return CorruptionError(db->path() + ": negative schema version " + std::to_string(current));
  for (std::int64_t v = current + 1; v <= latest; ++v) {
    const Migration& m = migrations[static_cast<std::size_t>(v - 1)];
    if (m.version != v)
      return InternalError("migration table out of order: " + std::string(m.name) + " at position " + std::to_string(v));
    EXLR8_ASSIGN_OR_RETURN(SqliteTxn txn, SqliteTxn::Begin(db));
    Status s = db->Exec(m.sql);
    if (s.ok()) s = db->Exec("PRAGMA user_version = " + std::to_string(v));
    if (s.ok()) s = txn.Commit();
    if (!s.ok()) return s.WithContext("migration " + std::string(m.name));
  }
  return Status::Ok();
}

}  // namespace exlr8
