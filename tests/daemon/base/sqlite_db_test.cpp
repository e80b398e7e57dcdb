// daemon/base/sqlite_db.h on real SQLite files: statements handed back for
// reuse must behave exactly like newly prepared ones.
#include "daemon/base/sqlite_db.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/daemon/cache_test_util.h"

namespace exlr8 {
namespace {

using ::exlr8::testing::TempDir;

std::unique_ptr<SqliteDb> OpenWithTable(const std::string& path) {
  auto db = SqliteDb::Open(path);
  EXPECT_TRUE(db.ok()) << db.status().ToString();
  EXPECT_TRUE((*db)->Exec("PRAGMA journal_mode = WAL; CREATE TABLE IF NOT EXISTS t (k INTEGER PRIMARY KEY, v TEXT)").ok());
  return std::move(*db);
}

constexpr std::string_view kSelect = "SELECT v FROM t WHERE k >= ? ORDER BY k";

TEST(SqliteDbTest, AReusedStatementKeepsNoBindingsOrRows) {
  TempDir dir;
  auto db = OpenWithTable((dir.path() / "a.db").string());
  ASSERT_TRUE(db->Exec("INSERT INTO t VALUES (1, 'one'), (2, 'two'), (3, 'three')").ok());
  {
    auto q = db->Prepare(kSelect);
    ASSERT_TRUE(q.ok());
    q->Bind(1, 2);
    ASSERT_TRUE(q->Step().value());
    EXPECT_EQ(q->Text(0), "two");  // left in the middle of its rows
  }
  EXPECT_EQ(db->idle_statements(), 1u);
  auto q = db->Prepare(kSelect);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(db->idle_statements(), 0u);  // the same statement, taken again
  // Unbound, the parameter is NULL: `k >= NULL` matches nothing. A leftover
  // binding of 2 would give "two".
  EXPECT_FALSE(q->Step().value());
}

TEST(SqliteDbTest, TheSameTextInUseTwiceAtOnceGivesTwoStatements) {
  TempDir dir;
  auto db = OpenWithTable((dir.path() / "a.db").string());
  ASSERT_TRUE(db->Exec("INSERT INTO t VALUES (1, 'one'), (2, 'two')").ok());
  {
    auto outer = db->Prepare(kSelect);
    ASSERT_TRUE(outer.ok());
    outer->Bind(1, 1);
    ASSERT_TRUE(outer->Step().value());
    auto inner = db->Prepare(kSelect);
    ASSERT_TRUE(inner.ok());
    inner->Bind(1, 2);
    ASSERT_TRUE(inner->Step().value());
    EXPECT_EQ(inner->Text(0), "two");
    EXPECT_EQ(outer->Text(0), "one");  // unaffected by the inner one
    ASSERT_TRUE(outer->Step().value());
    EXPECT_EQ(outer->Text(0), "two");
  }
  EXPECT_EQ(db->idle_statements(), 2u);
}

// A kept statement that was stopped after one row must not keep its read
// open: a reader that kept its snapshot would not see later commits of
// another connection.
TEST(SqliteDbTest, AKeptStatementSeesOtherConnectionsLaterCommits) {
  TempDir dir;
  const std::string path = (dir.path() / "a.db").string();
  auto reader = OpenWithTable(path);
  auto writer = OpenWithTable(path);
  ASSERT_TRUE(writer->Exec("INSERT INTO t VALUES (1, 'one'), (2, 'two')").ok());
  {
    auto q = reader->Prepare(kSelect);
    q->Bind(1, 0);
    ASSERT_TRUE(q->Step().value());
  }
  ASSERT_TRUE(writer->Exec("INSERT INTO t VALUES (0, 'zero')").ok());
  auto q = reader->Prepare(kSelect);
  q->Bind(1, 0);
  ASSERT_TRUE(q->Step().value());
  EXPECT_EQ(q->Text(0), "zero");
}

TEST(SqliteDbTest, KeepsABoundedNumberOfStatements) {
  TempDir dir;
  auto db = OpenWithTable((dir.path() / "a.db").string());
  for (int i = 0; i < 1000; ++i) {
    auto q = db->Prepare("SELECT " + std::to_string(i));
    ASSERT_TRUE(q.ok());
    ASSERT_TRUE(q->Step().value());
    EXPECT_EQ(q->Int(0), i);
  }
  EXPECT_GT(db->idle_statements(), 0u);
  EXPECT_LE(db->idle_statements(), 128u);
}

TEST(SqliteDbTest, AStatementReusedAfterTheSchemaChangedSeesTheNewSchema) {
  TempDir dir;
  auto db = OpenWithTable((dir.path() / "a.db").string());
  ASSERT_TRUE(db->Exec("INSERT INTO t VALUES (1, 'one')").ok());
  constexpr std::string_view kAll = "SELECT * FROM t";
  {
    auto q = db->Prepare(kAll);
    ASSERT_TRUE(q->Step().value());
  }
  ASSERT_TRUE(db->Exec("ALTER TABLE t ADD COLUMN w INTEGER DEFAULT 7").ok());
  auto q = db->Prepare(kAll);
  ASSERT_TRUE(q->Step().value());
  EXPECT_EQ(q->Int(2), 7);  // the third column exists: re-prepared by SQLite
}

}  // namespace
}  // namespace exlr8
