// daemon/base/migrations.h on a real SQLite file.
#include "daemon/base/migrations.h"

#include <gtest/gtest.h>

#include <memory>
#include <span>
#include <string>

#include "daemon/base/sqlite_db.h"
#include "tests/daemon/cache_test_util.h"

namespace exlr8 {
namespace {

using ::exlr8::testing::TempDir;

TEST(MigrationsTest, ApplyInOrderAndRollBackOnFailure) {
  TempDir tmp;
  std::unique_ptr<SqliteDb> db = SqliteDb::Open((tmp.path() / "m.db").string()).value();
  const Migration two[] = {{1, "001_a.sql", "CREATE TABLE a (x INTEGER);"},
                           {2, "002_b.sql", "CREATE TABLE b (y INTEGER); INSERT INTO a VALUES (7);"}};
  ASSERT_TRUE(ApplyMigrations(db.get(), std::span(two, 1)).ok());
  EXPECT_EQ(*db->QueryInt("PRAGMA user_version"), 1);
  ASSERT_TRUE(ApplyMigrations(db.get(), two).ok());  // only 002 runs
  EXPECT_EQ(*db->QueryInt("PRAGMA user_version"), 2);
  EXPECT_EQ(*db->QueryInt("SELECT COUNT(*) FROM a"), 1);
  ASSERT_TRUE(ApplyMigrations(db.get(), two).ok());  // nothing runs
  EXPECT_EQ(*db->QueryInt("SELECT COUNT(*) FROM a"), 1);
  const Migration broken[] = {two[0], two[1], {3, "003_bad.sql", "CREATE TABLE c (z); INSERT INTO nope VALUES (1);"}};
  const Status s = ApplyMigrations(db.get(), broken);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("003_bad.sql"), std::string::npos) << s.message();
  EXPECT_EQ(*db->QueryInt("PRAGMA user_version"), 2);
  EXPECT_EQ(*db->QueryInt("SELECT COUNT(*) FROM sqlite_master WHERE name = 'c'"), 0);  // rolled back
}

// A reader that does not migrate accepts only the last version, and says
// which versions differ and what to do.
TEST(MigrationsTest, AReaderRequiresTheLatestVersionAndNamesBoth) {
  TempDir tmp;
  std::unique_ptr<SqliteDb> db = SqliteDb::Open((tmp.path() / "m.db").string()).value();
  const Migration two[] = {{1, "001_a.sql", "CREATE TABLE a (x INTEGER);"},
                           {2, "002_b.sql", "CREATE TABLE b (y INTEGER);"}};
  ASSERT_TRUE(ApplyMigrations(db.get(), std::span(two, 1)).ok());
  EXPECT_EQ(*SchemaVersion(db.get()), 1);
  const Status old = RequireLatestSchema(db.get(), two, "upgrade it");
  EXPECT_EQ(old.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(old.message().find("m.db: schema version 1, this exlr8d reads version 2; upgrade it"), std::string::npos)
      << old.message();
  ASSERT_TRUE(ApplyMigrations(db.get(), two).ok());
  EXPECT_TRUE(RequireLatestSchema(db.get(), two, "upgrade it").ok());
  EXPECT_EQ(RequireLatestSchema(db.get(), std::span(two, 1), "x").code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace exlr8
