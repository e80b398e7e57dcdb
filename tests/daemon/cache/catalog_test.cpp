// Catalog (daemon/cache/catalog.h): the SQLite index on a real file in a
// scratch directory, stamped by a FakeClock so times and LRU order are
// exact.
#include "daemon/cache/catalog.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>

#include "tests/daemon/base/fake_clock.h"
#include "tests/daemon/cache_test_util.h"

namespace exlr8 {
namespace {

using ::exlr8::testing::FakeClock;
using ::exlr8::testing::TempDir;

const std::string kCommitA(40, 'a');
const std::string kCommitB(40, 'b');
const std::string kCommitC(40, 'c');

#define ASSERT_OK(expr)                                    \
  do {                                                     \
    const Status s_ = (expr);                              \
    ASSERT_TRUE(s_.ok()) << #expr << ": " << s_.message(); \
  } while (false)

class CatalogTest : public ::testing::Test {
 protected:
  std::string db_path() const { return (dir_.path() / "exlr8d.db").string(); }
  // A fresh owner's catalog over the same index (as after a restart).
  std::unique_ptr<Catalog> OpenOwner() {
    auto c = std::make_unique<Catalog>(dir_.path().string(), &clock_);
    MutexLock l(&c->mu());
    const Status s = c->Open(db_path());
    EXPECT_TRUE(s.ok()) << s.message();
    return c;
  }
  void SetUp() override { catalog_ = OpenOwner(); }

  TempDir dir_;
  FakeClock clock_;
  std::unique_ptr<Catalog> catalog_;
};

TEST_F(CatalogTest, FilesetsAreStampedByTheClockAndListedMostRecentlyUsedFirst) {
  Catalog& c = *catalog_;
  MutexLock l(&c.mu());
  const FilesetId a = *c.PutFileset("org/a", "main", kCommitA);
  clock_.Advance(std::chrono::seconds(1));
  const FilesetId b = *c.PutFileset("org/b", "v1", kCommitB);
  std::vector<FilesetInfo> all = *c.QueryFilesets(std::nullopt);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].id, b);
  EXPECT_EQ(all[0].created_ms, FakeClock::kDefaultUnixMs + 1000);
  EXPECT_EQ(all[1].id, a);
  EXPECT_EQ(all[1].last_used_ms, FakeClock::kDefaultUnixMs);

  clock_.Advance(std::chrono::seconds(1));
  ASSERT_OK(c.Touch(a));
  all = *c.QueryFilesets(std::nullopt);
  EXPECT_EQ(all[0].id, a);
  EXPECT_EQ(all[0].last_used_ms, FakeClock::kDefaultUnixMs + 2000);
  EXPECT_EQ(all[0].created_ms, FakeClock::kDefaultUnixMs);  // created stays

  // The same (repo, commit) is the same fileset; the revision is the last one.
  EXPECT_EQ(*c.PutFileset("org/a", "v2", kCommitA), a);
  EXPECT_EQ(*c.LookupCommit("org/a", "main"), kCommitA);
  EXPECT_EQ(*c.LookupCommit("org/a", "v2"), kCommitA);
  EXPECT_EQ(c.LookupCommit("org/a", "nope").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(c.Touch(999).code(), StatusCode::kNotFound);
  EXPECT_EQ(c.PutFileset("no-slash", "main", kCommitA).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(CatalogTest, PinsAreIdempotentAndKeepFilesetsOutOfTheEvictionOrder) {
  Catalog& c = *catalog_;
  MutexLock l(&c.mu());
  const FilesetId a = *c.PutFileset("org/a", "main", kCommitA);
  clock_.Advance(std::chrono::seconds(1));
  const FilesetId b = *c.PutFileset("org/b", "main", kCommitB);
  clock_.Advance(std::chrono::seconds(1));
  const FilesetId cc = *c.PutFileset("org/c", "main", kCommitC);

  ASSERT_OK(c.Pin(b, "user"));
  ASSERT_OK(c.Pin(b, "user"));
  ASSERT_OK(c.Pin(b, "job-7"));
  EXPECT_EQ((*c.QueryFilesets(b))[0].pins, (std::vector<std::string>{"job-7", "user"}));
  EXPECT_EQ(c.Pin(999, "user").code(), StatusCode::kNotFound);

  std::vector<Catalog::EvictionCandidate> order = *c.EvictionOrder();
  ASSERT_EQ(order.size(), 2u);
  EXPECT_EQ(order[0].id, a);  // least recently used first
  EXPECT_EQ(order[0].repo, "org/a");
  EXPECT_EQ(order[0].commit, kCommitA);
  EXPECT_EQ(order[1].id, cc);

  ASSERT_OK(c.Unpin(b, "user"));
  ASSERT_OK(c.Unpin(b, "user"));             // absent: OK
  EXPECT_EQ(c.EvictionOrder()->size(), 2u);  // job-7 still holds it
  ASSERT_OK(c.Unpin(b, "job-7"));
  order = *c.EvictionOrder();
  ASSERT_EQ(order.size(), 3u);
  EXPECT_EQ(order[1].id, b);
}

TEST_F(CatalogTest, FilesRefuseAChangedSizeOrHashAndFillInMissingHashes) {
  Catalog& c = *catalog_;
  MutexLock l(&c.mu());
  const FilesetId fs = *c.PutFileset("org/a", "main", kCommitA);
  const std::vector<NewFile> files = {{"a.bin", 100, std::nullopt, std::nullopt}, {"dir/b.bin", 0, {}, {}}};
  const std::vector<FileId> ids = *c.PutFiles(fs, files);
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(*c.PutFiles(fs, files), ids);  // idempotent

  const std::string sha(64, 'e');
  ASSERT_TRUE(c.PutFiles(fs, std::vector<NewFile>{{"a.bin", 100, sha, std::nullopt}}).ok());
  EXPECT_EQ(c.GetFile(ids[0])->sha256, sha);
  EXPECT_EQ(c.PutFiles(fs, std::vector<NewFile>{{"a.bin", 100, std::string(64, 'f'), std::nullopt}})
                .status()
                .code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(c.PutFiles(fs, std::vector<NewFile>{{"a.bin", 101, std::nullopt, std::nullopt}}).status().code(),
            StatusCode::kFailedPrecondition);
  // All or nothing: a bad entry leaves the good one before it unrecorded.
  EXPECT_EQ(
      c.PutFiles(fs, std::vector<NewFile>{{"new.bin", 1, {}, {}}, {"../escape", 1, {}, {}}}).status().code(),
      StatusCode::kInvalidArgument);
  EXPECT_EQ(c.FindFile(fs, "new.bin").status().code(), StatusCode::kNotFound);

  EXPECT_EQ(*c.FindFile(fs, "dir/b.bin"), ids[1]);
  const Catalog::FileRow row = *c.LoadFile(ids[1]);
  EXPECT_EQ(row.fileset, fs);
  EXPECT_EQ(row.size, 0u);
  EXPECT_EQ(row.rel, "org/a/" + kCommitA + "/dir/b.bin");
  EXPECT_EQ(c.ListFiles(fs)->size(), 2u);
  EXPECT_EQ(c.LoadFile(12345).status().code(), StatusCode::kNotFound);
}

TEST_F(CatalogTest, CommitMergesExtentsAndSetsWholeAndPrefixInOneStep) {
  Catalog& c = *catalog_;
  MutexLock l(&c.mu());
  const FilesetId fs = *c.PutFileset("org/a", "main", kCommitA);
  const std::vector<FileId> ids =
      *c.PutFiles(fs, std::vector<NewFile>{{"a.bin", 1000, {}, {}}, {"b.bin", 50, {}, {}}});
  clock_.Advance(std::chrono::seconds(5));

  Catalog::Commit first;
  first.extents[ids[0]] = {{0, 100}, {200, 100}};
  first.prefixes[ids[0]] = 100;
  first.filesets = {fs};
  ASSERT_OK(c.RecordCommit(first));
  EXPECT_EQ(*c.RecordedBytes(), 200u);
  EXPECT_EQ(c.GetFile(ids[0])->durable_prefix, 100u);
  EXPECT_EQ((*c.QueryFilesets(fs))[0].last_used_ms, FakeClock::kDefaultUnixMs + 5000);

  Catalog::Commit second;
  second.extents[ids[0]] = {{100, 100}};  // touches both: merged into one
  second.extents[ids[1]] = {{0, 50}};
  second.prefixes[ids[1]] = 50;  // whole wins over a prefix
  second.whole = {ids[1]};
  ASSERT_OK(c.RecordCommit(second));
  EXPECT_EQ(*c.AllExtents(ids[0]), (std::vector<Extent>{{0, 300}}));
  EXPECT_EQ(*c.ExtentsNear(ids[0], 300, 400), (std::vector<Extent>{{0, 300}}));  // touches
  EXPECT_TRUE(c.ExtentsNear(ids[0], 301, 400)->empty());
  const FileInfo b = *c.GetFile(ids[1]);
  EXPECT_TRUE(b.whole_verified);
  EXPECT_EQ(b.durable_prefix, 0u);
  EXPECT_EQ(*c.RecordedBytes(), 350u);
  EXPECT_EQ(c.FilesWithExtents(fs)->size(), 2u);
}

TEST_F(CatalogTest, ARecordIndexIsWrittenWithTheWholeFlagAndReplacedWhole) {
  Catalog& c = *catalog_;
  MutexLock l(&c.mu());
  const FilesetId fs = *c.PutFileset("org/a", "main", kCommitA);
  const FileId f = (*c.PutFiles(fs, std::vector<NewFile>{{"m.bin", 100, {}, {}}}))[0];
  auto first = std::make_shared<std::vector<FileRecord>>(std::vector<FileRecord>{
      {"q", "tetra", "4x24", 16, 40, 0xfedcba9876543210ull}, {"cfg", "blob", "", 56, 44, 7}});
  Catalog::Commit commit;
  commit.extents[f] = {{0, 100}};
  commit.whole = {f};
  commit.records[f] = first;
  ASSERT_OK(c.RecordCommit(commit));
  const std::vector<FileRecord> got = *c.Records(f);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].name, "q");
  EXPECT_EQ(got[0].kind, "tetra");
  EXPECT_EQ(got[0].shape, "4x24");
  EXPECT_EQ(got[0].offset, 16u);
  EXPECT_EQ(got[0].length, 40u);
  EXPECT_EQ(got[0].xxh64, 0xfedcba9876543210ull);  // all 64 bits survive the signed column
  EXPECT_EQ(got[1].name, "cfg");
  // Verified whole again without records (not a structured file): none left.
  Catalog::Commit again;
  again.extents[f] = {{0, 100}};
  again.whole = {f};
  ASSERT_OK(c.RecordCommit(again));
  EXPECT_TRUE(c.Records(f)->empty());
  // Deleting the fileset takes the records along.
  ASSERT_OK(c.RecordCommit(commit));
  const FilesetId gone[] = {fs};
  ASSERT_OK(c.DeleteFilesets(gone));
  EXPECT_TRUE(c.Records(f)->empty());
}

TEST_F(CatalogTest, ForgettingBytesDemotesAWholeFile) {
  Catalog& c = *catalog_;
  MutexLock l(&c.mu());
  const FilesetId fs = *c.PutFileset("org/a", "main", kCommitA);
  const FileId f = (*c.PutFiles(fs, std::vector<NewFile>{{"a.bin", 100, {}, {}}}))[0];
  const std::pair<FileId, std::uint64_t> whole[] = {{f, 100}};
  ASSERT_OK(c.RecordWholeFiles(whole));
  EXPECT_TRUE(c.GetFile(f)->whole_verified);
  EXPECT_EQ(*c.RecordedBytes(), 100u);

  EXPECT_EQ(*c.ForgetRanges({{f, {{40, 10}, {95, 20}}}}), 15u);
  EXPECT_EQ(*c.AllExtents(f), (std::vector<Extent>{{0, 40}, {50, 45}}));
  EXPECT_FALSE(c.GetFile(f)->whole_verified);
  EXPECT_EQ(*c.ForgetRanges({{f, {{40, 10}}}}), 0u);  // nothing recorded there
}

TEST_F(CatalogTest, DeletedFilesetsTakeTheirRowsAlong) {
  Catalog& c = *catalog_;
  MutexLock l(&c.mu());
  const FilesetId a = *c.PutFileset("org/a", "main", kCommitA);
  const FilesetId b = *c.PutFileset("org/b", "main", kCommitB);
  const FileId f = (*c.PutFiles(a, std::vector<NewFile>{{"a.bin", 10, {}, {}}}))[0];
  Catalog::Commit commit;
  commit.extents[f] = {{0, 10}};
  ASSERT_OK(c.RecordCommit(commit));
  ASSERT_OK(c.Pin(a, "user"));
  EXPECT_EQ(*c.FilesetDirs(), (std::set<std::string>{"org/a/" + kCommitA, "org/b/" + kCommitB}));

  const FilesetId gone[] = {a};
  ASSERT_OK(c.DeleteFilesets(gone));
  EXPECT_EQ(*c.FilesetDirs(), (std::set<std::string>{"org/b/" + kCommitB}));
  EXPECT_EQ(*c.RecordedBytes(), 0u);
  EXPECT_EQ(c.GetFile(f).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(c.LookupCommit("org/a", "main").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(c.QueryFilesets(std::nullopt)->size(), 1u);
  EXPECT_EQ(c.CheckFilesetExists(b).code(), StatusCode::kOk);
}

TEST_F(CatalogTest, PullHistoryRecordsCountersAndTheEnd) {
  Catalog& c = *catalog_;
  MutexLock l(&c.mu());
  const FilesetId fs = *c.PutFileset("org/a", "main", kCommitA);
  EXPECT_EQ(c.StartPull({fs, "m.json", 2, 2, "{}"}).status().code(), StatusCode::kInvalidArgument);
  clock_.Advance(std::chrono::seconds(1));
  const PullId p = *c.StartPull({fs, "m.json", 2, 1, "{\"x\":1}", FakeClock::kDefaultUnixMs + 500});
  EXPECT_EQ(*c.FilesetsBeingPulled(), (std::set<FilesetId>{fs}));
  clock_.Advance(std::chrono::seconds(2));
  PullCounters counters;
  counters.bytes_fetched = 77;
  ASSERT_OK(c.UpdatePull(p, counters));

  PullInfo info = *c.GetPull(p);
  EXPECT_EQ(info.state, PullState::kRunning);
  EXPECT_EQ(info.started_ms, FakeClock::kDefaultUnixMs + 500);  // when its work began
  EXPECT_EQ(info.updated_ms, FakeClock::kDefaultUnixMs + 3000);
  EXPECT_EQ(info.counters.bytes_fetched, 77u);
  EXPECT_EQ(info.spec.plan_summary_json, "{\"x\":1}");

  EXPECT_EQ(c.FinishPull(p, PullState::kRunning, "").code(), StatusCode::kInvalidArgument);
  ASSERT_OK(c.FinishPull(p, PullState::kCancelled, "stopped by the user"));
  info = *c.GetPull(p);
  EXPECT_EQ(info.state, PullState::kCancelled);
  EXPECT_EQ(info.error, "stopped by the user");
  EXPECT_EQ(info.finished_ms, FakeClock::kDefaultUnixMs + 3000);
  EXPECT_TRUE(c.FilesetsBeingPulled()->empty());
  EXPECT_EQ(c.UpdatePull(p, counters).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(c.FinishPull(p, PullState::kDone, "").code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(c.ListPulls(fs)->size(), 1u);
  EXPECT_EQ(c.GetPull(p + 1).status().code(), StatusCode::kNotFound);
}

TEST_F(CatalogTest, NextOwnerMarksAPullItsPredecessorLeftRunning) {
  FilesetId fs = 0;
  PullId p = 0;
  {
    MutexLock l(&catalog_->mu());
    fs = *catalog_->PutFileset("org/a", "main", kCommitA);
    p = *catalog_->StartPull({fs, "m.json", 1, 0, "{}"});
  }
  // A read-only reader cannot know whether the pull's process lives.
  {
    Catalog reader(dir_.path().string(), &clock_);
    MutexLock l(&reader.mu());
    ASSERT_OK(reader.OpenReadOnly(db_path()));
    EXPECT_EQ(reader.GetPull(p)->state, PullState::kRunning);
    EXPECT_EQ(*reader.FilesetsBeingPulled(), (std::set<FilesetId>{fs}));
  }
  {
    MutexLock l(&catalog_->mu());
    catalog_->Close();  // its process dies without finishing the pull
  }
  clock_.Advance(std::chrono::seconds(9));
  std::unique_ptr<Catalog> next = OpenOwner();
  MutexLock l(&next->mu());
  const PullInfo info = *next->GetPull(p);
  EXPECT_EQ(info.state, PullState::kFailed);
  EXPECT_EQ(info.error, "interrupted: the exlr8d that ran it stopped");
  EXPECT_EQ(info.finished_ms, FakeClock::kDefaultUnixMs + 9000);
  EXPECT_TRUE(next->FilesetsBeingPulled()->empty());
}

TEST_F(CatalogTest, ReadOnlyCatalogRefusesAnIndexOfAnotherVersion) {
  {
    MutexLock l(&catalog_->mu());
    catalog_->Close();
  }
  {
    Result<std::unique_ptr<SqliteDb>> db = SqliteDb::Open(db_path());
    ASSERT_TRUE(db.ok()) << db.status().message();
    ASSERT_OK((*db)->Exec("PRAGMA user_version = 999"));
  }
  Catalog reader(dir_.path().string(), &clock_);
  MutexLock l(&reader.mu());
  const Status s = reader.OpenReadOnly(db_path());
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("schema version 999"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace exlr8
