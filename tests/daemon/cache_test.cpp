// Integration tests of daemon/cache/cache.h: real files, real SQLite, in a
// scratch directory.
#include "daemon/cache/cache.h"

#include <fcntl.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <thread>

#include "daemon/base/migrations.h"
#include "daemon/base/sqlite_db.h"
#include "daemon/cache/cache_paths.h"
#include "daemon/cache/cache_schema.h"
#include "tests/daemon/base/fake_clock.h"
#include "tests/daemon/cache_test_util.h"

namespace exlr8 {
namespace {

using testing::FakeClock;
using testing::kCommitA;
using testing::kCommitB;
using testing::kCommitC;
using testing::kCommitD;
using testing::Pattern;
using testing::TempDir;
using testing::TmpfsMount;

constexpr std::uint64_t kMiB = 1 << 20;

std::unique_ptr<Cache> MustOpen(const std::filesystem::path& dir, CacheOptions options = {}) {
  Result<std::unique_ptr<Cache>> cache = Cache::Open(dir, std::move(options));
  EXPECT_TRUE(cache.ok()) << cache.status().ToString();
  return cache.ok() ? std::move(cache).value() : nullptr;
}

std::vector<std::byte> ReadFileBytes(const std::filesystem::path& p, std::uint64_t offset, std::size_t n) {
  std::vector<std::byte> out(n);
  const int fd = ::open(p.c_str(), O_RDONLY);
  EXPECT_GE(fd, 0) << p;
  if (fd < 0) return {};
  EXPECT_EQ(::pread(fd, out.data(), n, static_cast<off_t>(offset)), static_cast<ssize_t>(n));
  ::close(fd);
  return out;
}

// One fileset with one file, for tests that need just that.
struct Fixture {
  TempDir tmp;
  std::unique_ptr<Cache> cache;
  FilesetId fileset = 0;
  FileId file = 0;

  explicit Fixture(std::uint64_t size = kMiB, CacheOptions options = {}) {
    cache = MustOpen(tmp.path(), std::move(options));
    fileset = *cache->PutFileset("org/model", "main", kCommitA);
    file = *cache->PutFile(fileset, "experts/exlr8-layer-003.k3.safetensors", size);
  }
  // Writes the pattern over [offset, offset + length) and commits it.
  void WriteVerified(std::uint64_t offset, std::size_t length, FileId f = 0) {
    if (f == 0) f = file;
    ASSERT_TRUE(cache->WriteAt(f, offset, Pattern(f, offset, length)).ok());
    const VerifiedExtent e{f, offset, length};
    ASSERT_TRUE(cache->CommitVerified({&e, 1}).ok());
  }
};

TEST(CacheTest, LayoutAndSparseFiles) {
  Fixture fx(64 * kMiB);
  const std::filesystem::path expected =
      fx.tmp.path() / "org" / "model" / kCommitA / "experts" / "exlr8-layer-003.k3.safetensors";
  EXPECT_EQ(*fx.cache->DataPath(fx.file), expected);
  EXPECT_TRUE(std::filesystem::exists(fx.tmp.path() / "exlr8d.db"));
  EXPECT_TRUE(std::filesystem::exists(fx.tmp.path() / "exlr8d.lock"));

  fx.WriteVerified(32 * kMiB + 123, 5000);
  struct stat st;
  ASSERT_EQ(::stat(expected.c_str(), &st), 0);
  EXPECT_EQ(static_cast<std::uint64_t>(st.st_size), 64 * kMiB);  // remote size, so offsets line up
  // Holes stay holes: 5000 bytes occupy a page or three, not 64 MiB.
  EXPECT_LE(static_cast<std::uint64_t>(st.st_blocks) * 512, 256u * 1024) << "st_blocks " << st.st_blocks;
  // Bytes sit at their remote offsets; a hole reads as zeros.
  EXPECT_EQ(ReadFileBytes(expected, 32 * kMiB + 123, 5000), Pattern(fx.file, 32 * kMiB + 123, 5000));
  EXPECT_EQ(ReadFileBytes(expected, 0, 16), std::vector<std::byte>(16));
}

TEST(CacheTest, ExtentsMergeAndQueries) {
  Fixture fx(1000);
  fx.WriteVerified(0, 10);
  fx.WriteVerified(20, 10);
  EXPECT_EQ(*fx.cache->VerifiedExtents(fx.file), (std::vector<Extent>{{0, 10}, {20, 10}}));
  fx.WriteVerified(10, 10);  // fills the gap: adjacent on both sides
  EXPECT_EQ(*fx.cache->VerifiedExtents(fx.file), (std::vector<Extent>{{0, 30}}));
  fx.WriteVerified(25, 15);  // overlaps the end
  fx.WriteVerified(100, 10);
  fx.WriteVerified(5, 5);  // inside
  EXPECT_EQ(*fx.cache->VerifiedExtents(fx.file), (std::vector<Extent>{{0, 40}, {100, 10}}));

  EXPECT_TRUE(*fx.cache->Covers(fx.file, 0, 40));
  EXPECT_TRUE(*fx.cache->Covers(fx.file, 101, 9));
  EXPECT_TRUE(*fx.cache->Covers(fx.file, 500, 0));
  EXPECT_FALSE(*fx.cache->Covers(fx.file, 0, 41));
  EXPECT_FALSE(*fx.cache->Covers(fx.file, 99, 2));
  EXPECT_EQ(*fx.cache->MissingRanges(fx.file, 0, 200), (std::vector<Extent>{{40, 60}, {110, 90}}));
  EXPECT_EQ(*fx.cache->MissingRanges(fx.file, 35, 70), (std::vector<Extent>{{40, 60}}));
  EXPECT_TRUE(fx.cache->MissingRanges(fx.file, 0, 40)->empty());

  EXPECT_EQ(fx.cache->Covers(fx.file, 990, 11).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(fx.cache->MissingRanges(fx.file, ~0ull, 2).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(fx.cache->Covers(999, 0, 1).status().code(), StatusCode::kNotFound);

  // One batch over two files, unsorted, with duplicates: one transaction.
  const FileId other = *fx.cache->PutFile(fx.fileset, "other.bin", 100);
  ASSERT_TRUE(fx.cache->WriteAt(other, 0, Pattern(other, 0, 100)).ok());
  ASSERT_TRUE(fx.cache->WriteAt(fx.file, 200, Pattern(fx.file, 200, 50)).ok());
  const VerifiedExtent batch[] = {{other, 50, 50}, {fx.file, 200, 50}, {other, 0, 50}, {other, 10, 5}};
  ASSERT_TRUE(fx.cache->CommitVerified(batch).ok());
  EXPECT_EQ(*fx.cache->VerifiedExtents(other), (std::vector<Extent>{{0, 100}}));
  EXPECT_EQ(*fx.cache->VerifiedExtents(fx.file), (std::vector<Extent>{{0, 40}, {100, 10}, {200, 50}}));
  EXPECT_EQ(*fx.cache->RecordedBytes(), 40u + 10 + 50 + 100);
}

TEST(CacheTest, CommitIsAllOrNothingAndChecksItsInput) {
  Fixture fx(1000);
  ASSERT_TRUE(fx.cache->WriteAt(fx.file, 0, Pattern(fx.file, 0, 100)).ok());
  // A bad extent in the batch: nothing of it is recorded.
  const VerifiedExtent bad_range[] = {{fx.file, 0, 100}, {fx.file, 950, 51}};
  EXPECT_EQ(fx.cache->CommitVerified(bad_range).code(), StatusCode::kInvalidArgument);
  const VerifiedExtent unknown[] = {{fx.file, 0, 100}, {4242, 0, 1}};
  EXPECT_EQ(fx.cache->CommitVerified(unknown).code(), StatusCode::kNotFound);
  EXPECT_TRUE(fx.cache->VerifiedExtents(fx.file)->empty());
  // A declared file that was never written is not on disk: refuse to record.
  const FileId never = *fx.cache->PutFile(fx.fileset, "never/written.bin", 10);
  const VerifiedExtent unwritten{never, 0, 10};
  const Status s = fx.cache->CommitVerified({&unwritten, 1});
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find("never/written.bin"), std::string::npos) << s.message();
  EXPECT_FALSE(std::filesystem::exists(*fx.cache->DataPath(never)));
  // Writes outside the file are rejected before touching it.
  EXPECT_EQ(fx.cache->WriteAt(fx.file, 990, Pattern(fx.file, 990, 11)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(fx.cache->WriteAt(fx.file, ~0ull - 1, Pattern(fx.file, 0, 4)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(fx.cache->WriteAt(4242, 0, Pattern(1, 0, 4)).code(), StatusCode::kNotFound);
  // Empty extents are no-ops.
  const VerifiedExtent empty{fx.file, 5, 0};
  EXPECT_TRUE(fx.cache->CommitVerified({&empty, 1}).ok());
  EXPECT_TRUE(fx.cache->CommitVerified({}).ok());
}

TEST(CacheTest, VerifiedByteSourceServesOnlyVerifiedBytes) {
  Fixture fx(4096);
  fx.WriteVerified(100, 200);
  // Written but not committed: on disk, yet must not be served.
  ASSERT_TRUE(fx.cache->WriteAt(fx.file, 300, Pattern(fx.file, 300, 100)).ok());
  Result<std::unique_ptr<ByteSource>> src = fx.cache->OpenVerified(fx.file);
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  EXPECT_EQ((*src)->size(), 4096u);
  std::vector<std::byte> buf(150);
  ASSERT_TRUE((*src)->ReadAt(120, buf).ok());
  EXPECT_EQ(buf, Pattern(fx.file, 120, 150));
  const Status hole = (*src)->ReadAt(250, buf);
  EXPECT_EQ(hole.code(), StatusCode::kNotFound);
  EXPECT_NE(hole.message().find("first missing offset 300"), std::string::npos) << hole.message();
  EXPECT_NE(hole.message().find("exlr8-layer-003.k3.safetensors"), std::string::npos) << hole.message();
  EXPECT_EQ((*src)->ReadAt(4000, buf).code(), StatusCode::kCorruption);  // past the end
  // A file with nothing verified: every read is NotFound, even at 0.
  const FileId empty = *fx.cache->PutFile(fx.fileset, "config.json", 10);
  Result<std::unique_ptr<ByteSource>> none = fx.cache->OpenVerified(empty);
  ASSERT_TRUE(none.ok());
  std::vector<std::byte> one(1);
  EXPECT_EQ((*none)->ReadAt(0, one).code(), StatusCode::kNotFound);
}

TEST(CacheTest, MarkWholeFileVerified) {
  Fixture fx(3000);
  ASSERT_TRUE(fx.cache->WriteAt(fx.file, 0, Pattern(fx.file, 0, 3000)).ok());
  fx.WriteVerified(10, 10);
  ASSERT_TRUE(fx.cache->MarkWholeFileVerified(fx.file).ok());
  EXPECT_EQ(*fx.cache->VerifiedExtents(fx.file), (std::vector<Extent>{{0, 3000}}));
  EXPECT_TRUE(fx.cache->GetFile(fx.file)->whole_verified);
  // An empty file is created by marking it.
  const FileId empty = *fx.cache->PutFile(fx.fileset, "empty/marker", 0);
  ASSERT_TRUE(fx.cache->MarkWholeFileVerified(empty).ok());
  EXPECT_TRUE(std::filesystem::is_regular_file(*fx.cache->DataPath(empty)));
  EXPECT_TRUE(fx.cache->GetFile(empty)->whole_verified);
  // Unwritten non-empty file: refuse.
  const FileId unwritten = *fx.cache->PutFile(fx.fileset, "b.bin", 5);
  EXPECT_EQ(fx.cache->MarkWholeFileVerified(unwritten).code(), StatusCode::kFailedPrecondition);
}

// A whole-file extent sets whole_verified in the commit that records it:
// no moment exists at which the bytes are recorded and the flag is not. A
// pull killed at such a moment would leave bytes that verify skips and a
// later pull writes over while they stay recorded.
TEST(CacheTest, AWholeFileExtentIsFlaggedInTheSameCommit) {
  Fixture fx(3000);
  ASSERT_TRUE(fx.cache->WriteAt(fx.file, 0, Pattern(fx.file, 0, 3000)).ok());
  const DurablePrefix prefix{fx.file, 2000};
  ASSERT_TRUE(fx.cache->CommitVerified({}, {&prefix, 1}).ok());
  EXPECT_EQ(fx.cache->GetFile(fx.file)->durable_prefix, 2000u);
  // Not the whole file: refused, nothing recorded.
  const VerifiedExtent part{fx.file, 0, 2999, /*whole_file=*/true};
  const Status refused = fx.cache->CommitVerified({&part, 1});
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument) << refused.ToString();
  EXPECT_THAT(refused.message(), ::testing::HasSubstr("is not the whole file (3000 bytes)"));
  EXPECT_TRUE(fx.cache->VerifiedExtents(fx.file)->empty());
  const VerifiedExtent whole{fx.file, 0, 3000, /*whole_file=*/true};
  ASSERT_TRUE(fx.cache->CommitVerified({&whole, 1}, {&prefix, 1}).ok());
  auto info = fx.cache->GetFile(fx.file);
  ASSERT_TRUE(info.ok());
  EXPECT_TRUE(info->whole_verified);
  EXPECT_EQ(info->durable_prefix, 0u);  // done: no resume point left
  EXPECT_EQ(*fx.cache->VerifiedExtents(fx.file), (std::vector<Extent>{{0, 3000}}));
  // An extent without the flag records the bytes only (a width file's halves).
  const FileId other = *fx.cache->PutFile(fx.fileset, "dense/exlr8-dense-000.safetensors", 100);
  fx.WriteVerified(0, 100, other);
  EXPECT_FALSE(fx.cache->GetFile(other)->whole_verified);
}

TEST(CacheTest, MarkWholeFilesVerifiedIsAllOrNothing) {
  Fixture fx(3000);
  ASSERT_TRUE(fx.cache->WriteAt(fx.file, 0, Pattern(fx.file, 0, 3000)).ok());
  const FileId b = *fx.cache->PutFile(fx.fileset, "dense/b.bin", 100);
  ASSERT_TRUE(fx.cache->WriteAt(b, 0, Pattern(b, 0, 100)).ok());
  const FileId empty = *fx.cache->PutFile(fx.fileset, "empty/marker", 0);
  const FileId unwritten = *fx.cache->PutFile(fx.fileset, "dense/c.bin", 5);
  // One unwritten file fails the batch before anything is recorded.
  const std::vector<FileId> bad = {fx.file, b, unwritten};
  EXPECT_EQ(fx.cache->MarkWholeFilesVerified(bad).code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(fx.cache->VerifiedExtents(fx.file)->empty());
  EXPECT_FALSE(fx.cache->GetFile(b)->whole_verified);
  const std::vector<FileId> good = {fx.file, b, empty};
  ASSERT_TRUE(fx.cache->MarkWholeFilesVerified(good).ok());
  EXPECT_EQ(*fx.cache->VerifiedExtents(fx.file), (std::vector<Extent>{{0, 3000}}));
  EXPECT_EQ(*fx.cache->VerifiedExtents(b), (std::vector<Extent>{{0, 100}}));
  EXPECT_TRUE(fx.cache->VerifiedExtents(empty)->empty());
  for (FileId id : good) EXPECT_TRUE(fx.cache->GetFile(id)->whole_verified) << id;
  EXPECT_TRUE(fx.cache->MarkWholeFilesVerified({}).ok());
}

TEST(CacheTest, DurablePrefixIsAResumePointNeverPresence) {
  Fixture fx(3000);
  ASSERT_TRUE(fx.cache->WriteAt(fx.file, 0, Pattern(fx.file, 0, 1200)).ok());
  const DurablePrefix p{fx.file, 1200};
  ASSERT_TRUE(fx.cache->CommitVerified({}, {&p, 1}).ok());
  EXPECT_EQ(fx.cache->GetFile(fx.file)->durable_prefix, 1200u);
  // Not present: no extent, nothing readable through OpenVerified.
  EXPECT_TRUE(fx.cache->VerifiedExtents(fx.file)->empty());
  EXPECT_EQ(fx.cache->GetFile(fx.file)->bytes_cached, 0u);
  std::vector<std::byte> one(1);
  EXPECT_EQ((*fx.cache->OpenVerified(fx.file))->ReadAt(0, one).code(), StatusCode::kNotFound);
  // ... but readable as a prefix, and only within it.
  std::vector<std::byte> back(1200);
  ASSERT_TRUE(fx.cache->ReadDurablePrefix(fx.file, 0, back).ok());
  EXPECT_TRUE(back == Pattern(fx.file, 0, 1200));
  std::vector<std::byte> over(2);
  EXPECT_EQ(fx.cache->ReadDurablePrefix(fx.file, 1199, over).code(), StatusCode::kFailedPrecondition);
  // A prefix past the file's size is refused with the rest of its batch.
  const DurablePrefix bad{fx.file, 3001};
  const VerifiedExtent e{fx.file, 0, 10};
  EXPECT_EQ(fx.cache->CommitVerified({&e, 1}, {&bad, 1}).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(fx.cache->VerifiedExtents(fx.file)->empty());
  // Verified whole: the prefix is cleared.
  ASSERT_TRUE(fx.cache->WriteAt(fx.file, 1200, Pattern(fx.file, 1200, 1800)).ok());
  ASSERT_TRUE(fx.cache->MarkWholeFileVerified(fx.file).ok());
  EXPECT_EQ(fx.cache->GetFile(fx.file)->durable_prefix, 0u);
  EXPECT_EQ(fx.cache->ReadDurablePrefix(fx.file, 0, one).code(), StatusCode::kFailedPrecondition);
}

TEST(CacheTest, ForgetExtentsUnrecordsDamagedBytesAndKeepsTheRest) {
  Fixture fx(3000);
  fx.WriteVerified(0, 100);
  fx.WriteVerified(200, 100);
  const FileId whole = *fx.cache->PutFile(fx.fileset, "dense/exlr8-vocab.safetensors", 500);
  ASSERT_TRUE(fx.cache->WriteAt(whole, 0, Pattern(whole, 0, 500)).ok());
  ASSERT_TRUE(fx.cache->MarkWholeFileVerified(whole).ok());
  const std::uint64_t before = *fx.cache->RecordedBytes();

  // A range inside one extent, one across a hole, one over nothing recorded.
  const VerifiedExtent bad[] = {{fx.file, 10, 20}, {fx.file, 90, 120}, {fx.file, 1000, 50}, {whole, 499, 1}};
  ASSERT_EQ(*fx.cache->ForgetExtents(bad), 20u + 10 + 10 + 1);
  EXPECT_EQ(*fx.cache->VerifiedExtents(fx.file), (std::vector<Extent>{{0, 10}, {30, 60}, {210, 90}}));
  EXPECT_FALSE(*fx.cache->Covers(fx.file, 10, 1));
  EXPECT_EQ(*fx.cache->RecordedBytes(), before - 41);
  // A whole file that lost a byte is whole no more; the rest stays verified.
  EXPECT_FALSE(fx.cache->GetFile(whole)->whole_verified);
  EXPECT_EQ(*fx.cache->VerifiedExtents(whole), (std::vector<Extent>{{0, 499}}));
  // The bytes stay on disk, but nothing serves them.
  std::vector<std::byte> one(1);
  EXPECT_EQ((*fx.cache->OpenVerified(fx.file))->ReadAt(15, one).code(), StatusCode::kNotFound);
  EXPECT_EQ(ReadFileBytes(*fx.cache->DataPath(fx.file), 15, 1), Pattern(fx.file, 15, 1));
  // Forgetting again forgets nothing; bad input changes nothing.
  EXPECT_EQ(*fx.cache->ForgetExtents(bad), 0u);
  const VerifiedExtent outside[] = {{fx.file, 0, 5}, {fx.file, 2990, 11}};
  EXPECT_EQ(fx.cache->ForgetExtents(outside).status().code(), StatusCode::kInvalidArgument);
  const VerifiedExtent unknown[] = {{fx.file, 0, 5}, {999, 0, 1}};
  EXPECT_EQ(fx.cache->ForgetExtents(unknown).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(*fx.cache->Covers(fx.file, 0, 5));
  // Refetched and committed again, the bytes count once more.
  fx.WriteVerified(0, 300);
  EXPECT_EQ(*fx.cache->VerifiedExtents(fx.file), (std::vector<Extent>{{0, 300}}));

  // Durable: a fresh open sees the same extents.
  fx.cache.reset();
  fx.cache = MustOpen(fx.tmp.path());
  EXPECT_EQ(*fx.cache->VerifiedExtents(fx.file), (std::vector<Extent>{{0, 300}}));
  EXPECT_FALSE(fx.cache->GetFile(whole)->whole_verified);
  // A read-only view refuses.
  auto view = Cache::OpenReadOnly(fx.tmp.path());
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  EXPECT_EQ((*view)->ForgetExtents(bad).status().code(), StatusCode::kFailedPrecondition);
}

TEST(CacheTest, Version1DatabaseIsUpgradedInPlace) {
  TempDir tmp;
  {
    // A cache index as exlr8d with schema version 1 left it.
    std::unique_ptr<SqliteDb> db = SqliteDb::Open((tmp.path() / "exlr8d.db").string()).value();
    ASSERT_TRUE(ApplyMigrations(db.get(), std::span(BuiltinMigrations()).first(1)).ok());
    ASSERT_TRUE(db->Exec("INSERT INTO filesets (id, repo, revision, commit_sha, created, last_used) VALUES "
                         "(1, 'org/model', 'main', '" + std::string(kCommitA) + "', 0, 0);"
                         "INSERT INTO files (id, fileset_id, path, size) VALUES (7, 1, 'config.json', 10);")
                    .ok());
  }
  std::unique_ptr<Cache> cache = MustOpen(tmp.path());
  ASSERT_TRUE(cache);
  Result<FileInfo> f = cache->GetFile(7);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->path, "config.json");
  EXPECT_EQ(f->durable_prefix, 0u);
  std::unique_ptr<SqliteDb> db = SqliteDb::Open((tmp.path() / "exlr8d.db").string()).value();
  EXPECT_EQ(*db->QueryInt("PRAGMA user_version"), static_cast<std::int64_t>(BuiltinMigrations().size()));
}

TEST(CacheTest, Version3DatabaseGetsAnEmptyRecordIndex) {
  TempDir tmp;
  {
    // A cache index as exlr8d with schema version 3 left it: a whole file.
    std::unique_ptr<SqliteDb> db = SqliteDb::Open((tmp.path() / "exlr8d.db").string()).value();
    ASSERT_TRUE(ApplyMigrations(db.get(), std::span(BuiltinMigrations()).first(3)).ok());
    ASSERT_TRUE(db->Exec("INSERT INTO filesets (id, repo, revision, commit_sha, created, last_used) VALUES "
                         "(1, 'org/model', 'main', '" +
                         std::string(kCommitA) +
                         "', 0, 0);"
                         "INSERT INTO files (id, fileset_id, path, size, whole_verified) VALUES "
                         "(7, 1, 'm.bin', 0, 1);")
                    .ok());
  }
  std::unique_ptr<Cache> cache = MustOpen(tmp.path());
  ASSERT_TRUE(cache);
  Result<std::vector<FileRecord>> records = cache->Records(7);
  ASSERT_TRUE(records.ok()) << records.status().ToString();
  EXPECT_TRUE(records->empty());
  EXPECT_TRUE(cache->GetFile(7)->whole_verified);
  std::unique_ptr<SqliteDb> db = SqliteDb::Open((tmp.path() / "exlr8d.db").string()).value();
  EXPECT_EQ(*db->QueryInt("PRAGMA user_version"), 4);
}

TEST(CacheTest, PutFileIsIdempotentAndDetectsChanges) {
  Fixture fx(1000);
  const std::string sha(64, 'a'), sha2(64, 'b'), git(40, 'c');
  EXPECT_EQ(*fx.cache->PutFile(fx.fileset, "experts/exlr8-layer-003.k3.safetensors", 1000), fx.file);
  // A hash unknown so far is filled in; the same hash again is fine.
  EXPECT_EQ(*fx.cache->PutFile(fx.fileset, "experts/exlr8-layer-003.k3.safetensors", 1000, sha), fx.file);
  EXPECT_EQ(*fx.cache->PutFile(fx.fileset, "experts/exlr8-layer-003.k3.safetensors", 1000, sha, git), fx.file);
  EXPECT_EQ(*fx.cache->GetFile(fx.file)->sha256, sha);
  EXPECT_EQ(*fx.cache->GetFile(fx.file)->git_sha1, git);
  const Result<FileId> resized = fx.cache->PutFile(fx.fileset, "experts/exlr8-layer-003.k3.safetensors", 1001);
  EXPECT_EQ(resized.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(resized.status().message().find("1001"), std::string::npos);
  EXPECT_EQ(fx.cache->PutFile(fx.fileset, "experts/exlr8-layer-003.k3.safetensors", 1000, sha2).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(fx.cache->PutFile(fx.fileset, "x", 1, "ABC").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(fx.cache->PutFile(777, "x", 1).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(fx.cache->PutFile(fx.fileset, "x", 1ull << 63).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(*fx.cache->FindFile(fx.fileset, "experts/exlr8-layer-003.k3.safetensors"), fx.file);
  EXPECT_EQ(fx.cache->FindFile(fx.fileset, "nope").status().code(), StatusCode::kNotFound);
}

TEST(CacheTest, UnsafeNamesNeverReachTheFileSystem) {
  Fixture fx(10);
  for (const char* bad : {"../escape", "/abs", "a/../../b", "a\\b", "a//b", "./a", ""}) {
    const Result<FileId> r = fx.cache->PutFile(fx.fileset, bad, 10);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    if (*bad) {
      EXPECT_NE(r.status().message().find(EscapeForMessage(bad)), std::string::npos) << r.status().message();
    }
  }
  EXPECT_EQ(fx.cache->PutFile(fx.fileset, std::string("a\0b", 3), 10).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(fx.cache->PutFileset("../x", "main", kCommitA).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(fx.cache->PutFileset("org/x", "main", "../../etc").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(fx.cache->PutFileset("exlr8d.db/x", "main", kCommitA).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(fx.cache->PutFileset("org/x", "", kCommitA).status().code(), StatusCode::kInvalidArgument);
}

TEST(CacheTest, SymlinksInsideTheCacheAreNotFollowed) {
  Fixture fx(10);
  TempDir outside;
  const std::filesystem::path commit_dir = fx.tmp.path() / "org" / "model" / kCommitA;
  std::filesystem::create_directories(commit_dir);
  std::filesystem::create_directory_symlink(outside.path(), commit_dir / "linked");
  std::filesystem::create_symlink(outside.path() / "target", commit_dir / "leaf.bin");
  const FileId via_dir = *fx.cache->PutFile(fx.fileset, "linked/f.bin", 10);
  const FileId via_leaf = *fx.cache->PutFile(fx.fileset, "leaf.bin", 10);
  EXPECT_EQ(fx.cache->WriteAt(via_dir, 0, Pattern(1, 0, 10)).code(), StatusCode::kFailedPrecondition);
  // A link where a data file belongs is replaced, never followed.
  EXPECT_TRUE(fx.cache->WriteAt(via_leaf, 0, Pattern(1, 0, 10)).ok());
  EXPECT_FALSE(std::filesystem::is_symlink(commit_dir / "leaf.bin"));
  EXPECT_TRUE(std::filesystem::is_empty(outside.path()));
}

TEST(CacheTest, SecondOpenInSameProcessFailsNamingPid) {
  TempDir tmp;
  std::unique_ptr<Cache> first = MustOpen(tmp.path());
  const Result<std::unique_ptr<Cache>> second = Cache::Open(tmp.path());
  ASSERT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  const std::string msg = second.status().message();
  EXPECT_NE(msg.find((tmp.path() / "exlr8d.lock").string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("pid " + std::to_string(::getpid())), std::string::npos) << msg;
  first.reset();
  EXPECT_TRUE(Cache::Open(tmp.path()).ok());  // released with the object
}

// Open waits a moment for a holder that lets go (a `list`, a `pin`), and
// no longer than CacheOptions::lock_wait for one that does not.
TEST(CacheTest, OpenWaitsBrieflyForTheLock) {
  TempDir tmp;
  std::unique_ptr<Cache> first = MustOpen(tmp.path());
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    first.reset();
  });
  const auto start = std::chrono::steady_clock::now();
  auto second = Cache::Open(tmp.path());  // the default wait, 2 s
  releaser.join();
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(250));
  CacheOptions brief;
  brief.lock_wait = std::chrono::milliseconds(200);
  const auto again = std::chrono::steady_clock::now();
  auto third = Cache::Open(tmp.path(), brief);
  const auto waited = std::chrono::steady_clock::now() - again;
  EXPECT_EQ(third.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_GE(waited, std::chrono::milliseconds(200));
  EXPECT_LT(waited, std::chrono::milliseconds(1500));
}

TEST(CacheTest, OpenFromForkedChildFailsNamingParentPid) {
  TempDir tmp;
  std::unique_ptr<Cache> cache = MustOpen(tmp.path());
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(fds[0]);
    const Result<std::unique_ptr<Cache>> r = Cache::Open(tmp.path());
    const std::string report = std::to_string(static_cast<int>(r.status().code())) + " " + r.status().message();
    (void)!::write(fds[1], report.data(), report.size());
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string report;
  char buf[512];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) report.append(buf, static_cast<std::size_t>(n));
  ::close(fds[0]);
  int wstatus = 0;
  ASSERT_EQ(::waitpid(child, &wstatus, 0), child);
  EXPECT_TRUE(WIFEXITED(wstatus));
  EXPECT_EQ(report.substr(0, report.find(' ')), std::to_string(static_cast<int>(StatusCode::kFailedPrecondition)))
      << report;
  EXPECT_NE(report.find("pid " + std::to_string(::getpid())), std::string::npos) << report;
  EXPECT_NE(report.find("exlr8d.lock"), std::string::npos) << report;
}

// A cache with index schema version 2 is upgraded in place: its filesets
// and verified bytes stay, never checked again yet.
TEST(CacheTest, AVersion2IndexIsUpgradedKeepingItsData) {
  TempDir tmp;
  FileId file = 0;
  {
    std::unique_ptr<SqliteDb> db = SqliteDb::Open((tmp.path() / "exlr8d.db").string()).value();
    ASSERT_TRUE(ApplyMigrations(db.get(), BuiltinMigrations().first(2)).ok());
    ASSERT_TRUE(db->Exec("INSERT INTO filesets (id, repo, revision, commit_sha, created, last_used) "
                         "VALUES (1, 'org/old', 'main', '" + std::string(kCommitA) + "', 5, 5)")
                    .ok());
  }
  {
    std::unique_ptr<Cache> cache = MustOpen(tmp.path());
    file = *cache->PutFile(1, "w.bin", 100);
    ASSERT_TRUE(cache->WriteAt(file, 0, Pattern(file, 0, 100)).ok());
    const VerifiedExtent e{file, 0, 100};
    ASSERT_TRUE(cache->CommitVerified({&e, 1}).ok());
    const FilesetInfo set = *cache->GetFileset(1);
    EXPECT_EQ(set.repo, "org/old");
    EXPECT_EQ(set.bytes_cached, 100u);
    EXPECT_FALSE(set.verified_ms.has_value());
    ASSERT_TRUE(cache->RecordVerified(1, 2).ok());
    EXPECT_EQ(cache->RecordVerified(99, 0).code(), StatusCode::kNotFound);
  }
  std::unique_ptr<Cache> cache = MustOpen(tmp.path());
  const FilesetInfo set = *cache->GetFileset(1);
  EXPECT_TRUE(set.verified_ms.has_value());
  EXPECT_EQ(set.verify_failures, 2u);
}

TEST(CacheTest, MigratesEmptyDbAndReopensIdempotently) {
  TempDir tmp;
  const auto latest = static_cast<std::int64_t>(BuiltinMigrations().size());
  ASSERT_GE(latest, 1);
  FilesetId fs = 0;
  {
    std::unique_ptr<Cache> cache = MustOpen(tmp.path());
    fs = *cache->PutFileset("org/model", "main", kCommitA);
  }
  for (int i = 0; i < 2; ++i) {
    std::unique_ptr<Cache> cache = MustOpen(tmp.path());
    ASSERT_TRUE(cache);
    EXPECT_EQ(cache->GetFileset(fs)->commit, kCommitA);
  }
  std::unique_ptr<SqliteDb> db = SqliteDb::Open((tmp.path() / "exlr8d.db").string()).value();
  EXPECT_EQ(*db->QueryInt("PRAGMA user_version"), latest);
  EXPECT_EQ(*db->QueryInt("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name IN "
                          "('filesets', 'files', 'extents', 'pulls', 'pins', 'revisions')"),
            6);
  {
    Result<SqliteStmt> mode = db->Prepare("PRAGMA journal_mode");
    ASSERT_TRUE(mode.ok());
    ASSERT_TRUE(*mode->Step());
    EXPECT_EQ(mode->Text(0), "wal");
  }
  // A database from a newer exlr8d is refused, not downgraded.
  ASSERT_TRUE(db->Exec("PRAGMA user_version = " + std::to_string(latest + 1)).ok());
  db.reset();
  const Result<std::unique_ptr<Cache>> newer = Cache::Open(tmp.path());
  EXPECT_EQ(newer.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(newer.status().message().find("newer"), std::string::npos) << newer.status().message();
}

TEST(CacheTest, LookupCommitForOfflineMode) {
  Fixture fx;
  EXPECT_EQ(*fx.cache->LookupCommit("org/model", "main"), kCommitA);
  ASSERT_TRUE(fx.cache->PutFileset("org/model", "main", kCommitB).ok());  // main moved
  ASSERT_TRUE(fx.cache->PutFileset("org/model", "v1.0", kCommitA).ok());
  EXPECT_EQ(*fx.cache->LookupCommit("org/model", "main"), kCommitB);
  EXPECT_EQ(*fx.cache->LookupCommit("org/model", "v1.0"), kCommitA);
  EXPECT_EQ(fx.cache->LookupCommit("org/model", "dev").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(fx.cache->LookupCommit("org/other", "main").status().code(), StatusCode::kNotFound);
  // Same (repo, commit) is one fileset, whatever the revision.
  EXPECT_EQ(*fx.cache->PutFileset("org/model", "v1.0", kCommitA), fx.fileset);
}

TEST(CacheTest, ListFilesetsReportsBytes) {
  Fixture fx(1000);
  fx.WriteVerified(0, 300);
  const FileId f2 = *fx.cache->PutFile(fx.fileset, "b.bin", 500);
  fx.WriteVerified(100, 50, f2);
  const FilesetId other = *fx.cache->PutFileset("org/other", "main", kCommitB);
  ASSERT_TRUE(fx.cache->Pin(other, "deploy-a").ok());
  const std::vector<FilesetInfo> list = *fx.cache->ListFilesets();
  ASSERT_EQ(list.size(), 2u);
  const FilesetInfo& a = list[0].id == fx.fileset ? list[0] : list[1];
  const FilesetInfo& b = list[0].id == fx.fileset ? list[1] : list[0];
  EXPECT_EQ(a.repo, "org/model");
  EXPECT_EQ(a.commit, kCommitA);
  EXPECT_EQ(a.file_count, 2u);
  EXPECT_EQ(a.bytes_total, 1500u);
  EXPECT_EQ(a.bytes_cached, 350u);
  EXPECT_TRUE(a.pins.empty());
  EXPECT_EQ(b.pins, std::vector<std::string>{"deploy-a"});
  EXPECT_EQ(b.bytes_cached, 0u);
  const std::vector<FileInfo> files = *fx.cache->ListFiles(fx.fileset);
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files[0].path, "b.bin");
  EXPECT_EQ(files[0].bytes_cached, 50u);
}

TEST(CacheTest, PullLifecycle) {
  TempDir tmp;
  PullId interrupted = 0;
  FilesetId fs = 0;
  {
    std::unique_ptr<Cache> cache = MustOpen(tmp.path());
    fs = *cache->PutFileset("org/model", "main", kCommitA);
    PullSpec spec{fs, "manifests/home.json", 4, 1, R"({"halves":3072})"};
    const PullId p = *cache->StartPull(spec);
    PullCounters c{1000, 600, 400, 12, 1, 0};
    ASSERT_TRUE(cache->UpdatePull(p, c).ok());
    ASSERT_TRUE(cache->FinishPull(p, PullState::kDone).ok());
    EXPECT_EQ(cache->UpdatePull(p, c).code(), StatusCode::kFailedPrecondition);
    EXPECT_EQ(cache->FinishPull(p, PullState::kFailed).code(), StatusCode::kFailedPrecondition);
    EXPECT_EQ(cache->FinishPull(p, PullState::kRunning).code(), StatusCode::kInvalidArgument);
    const PullInfo info = *cache->GetPull(p);
    EXPECT_EQ(info.state, PullState::kDone);
    EXPECT_EQ(info.spec.rank, 1);
    EXPECT_EQ(info.spec.plan_summary_json, R"({"halves":3072})");
    EXPECT_EQ(info.counters.bytes_fetched, 600u);
    EXPECT_EQ(info.counters.requests, 12u);
    EXPECT_TRUE(info.finished_ms.has_value());
    EXPECT_EQ(cache->StartPull({fs, "m.json", 4, 4, "{}"}).status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(cache->StartPull({fs + 100, "m.json", 1, 0, "{}"}).status().code(), StatusCode::kNotFound);
    interrupted = *cache->StartPull({fs, "manifests/home.json", 4, 2, "{}"});
    const std::vector<PullInfo> all = *cache->ListPulls();
    ASSERT_EQ(all.size(), 2u);
    EXPECT_EQ(all[0].id, interrupted);  // newest first
    EXPECT_EQ(all[0].state, PullState::kRunning);
  }
  // The process that ran it is gone: reopening marks it failed.
  std::unique_ptr<Cache> cache = MustOpen(tmp.path());
  const PullInfo info = *cache->GetPull(interrupted);
  EXPECT_EQ(info.state, PullState::kFailed);
  EXPECT_NE(info.error.find("interrupted"), std::string::npos);
  EXPECT_EQ(cache->ListPulls(fs)->size(), 2u);
  EXPECT_TRUE(cache->ListPulls(fs + 1)->empty());
}

// A pull that began before it recorded itself (it plans first) keeps its own
// start, so rates over started..updated count all its bytes; a start in the
// future is not believed.
TEST(CacheTest, PullStartTimeFromTheSpec) {
  TempDir tmp;
  std::unique_ptr<Cache> cache = MustOpen(tmp.path());
  const FilesetId fs = *cache->PutFileset("org/model", "main", kCommitA);
  PullSpec spec{fs, "manifests/home.json", 4, 1, "{}"};
  const PullInfo now = *cache->GetPull(*cache->StartPull(spec));
  EXPECT_EQ(now.started_ms, now.updated_ms);
  spec.started_ms = now.started_ms - 5000;
  const PullInfo early = *cache->GetPull(*cache->StartPull(spec));
  EXPECT_EQ(early.started_ms, now.started_ms - 5000);
  EXPECT_GE(early.updated_ms, now.updated_ms);
  spec.started_ms = now.started_ms + 3'600'000;
  const PullInfo future = *cache->GetPull(*cache->StartPull(spec));
  EXPECT_LT(future.started_ms, spec.started_ms);
  EXPECT_EQ(future.started_ms, future.updated_ms);
}

TEST(CacheTest, CheckSpaceAgainstBudgetAndDisk) {
  CacheOptions options;
  options.byte_budget = 1000;
  Fixture fx(2000, options);
  fx.WriteVerified(0, 600);
  EXPECT_TRUE(fx.cache->CheckSpace(400).ok());
  const Status over = fx.cache->CheckSpace(401);
  EXPECT_EQ(over.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(over.message().find("need 401 B"), std::string::npos) << over.message();
  EXPECT_NE(over.message().find("budget 1.00 kB, 600 B used"), std::string::npos) << over.message();
  EXPECT_NE(over.message().find(fx.tmp.path().string()), std::string::npos) << over.message();
  const Status disk = fx.cache->CheckSpace(std::uint64_t{1} << 62);
  EXPECT_EQ(disk.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(disk.message().find("free on"), std::string::npos) << disk.message();
  EXPECT_GT(*fx.cache->FreeBytes(), 0u);
}

// Pulls running at once claim what they will still write; each one's check
// counts every claim as taken, its own included, on the budget and on the
// disk.
TEST(CacheTest, CheckSpaceCountsWhatPullsClaimed) {
  CacheOptions options;
  options.byte_budget = 1000;
  Fixture fx(2000, options);
  fx.WriteVerified(0, 200);
  std::atomic<std::uint64_t> a_left{500};
  auto a = fx.cache->ClaimSpace([&] { return Cache::ClaimedBytes{a_left.load(), a_left.load()}; });
  auto b = fx.cache->ClaimSpace([] { return Cache::ClaimedBytes{}; });
  EXPECT_TRUE(fx.cache->CheckSpace(300, b.get()).ok());  // 200 used + 500 claimed + 300 = the budget
  const Status over = fx.cache->CheckSpace(301, b.get());
  EXPECT_EQ(over.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(over.message().find("need 301 B"), std::string::npos) << over.message();
  EXPECT_NE(over.message().find("500 B promised to pulls running now"), std::string::npos) << over.message();
  EXPECT_EQ(fx.cache->CheckSpace(301).code(), StatusCode::kResourceExhausted);  // no claim: every one counts
  // Its own claim counts against a pull too, as what it needs.
  EXPECT_TRUE(fx.cache->CheckSpace(300, a.get()).ok());
  const Status own = fx.cache->CheckSpace(301, a.get());
  EXPECT_EQ(own.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(own.message().find("need 801 B"), std::string::npos) << own.message();
  EXPECT_EQ(own.message().find("promised"), std::string::npos) << own.message();
  a_left = 100;  // most of a's claim is done
  EXPECT_TRUE(fx.cache->CheckSpace(700, b.get()).ok());
  a.reset();  // a ended
  EXPECT_TRUE(fx.cache->CheckSpace(800, b.get()).ok());
  EXPECT_FALSE(fx.cache->CheckSpace(801, b.get()).ok());
  // Written and not yet recorded: the budget's still, the disk's no more.
  auto written = fx.cache->ClaimSpace([] { return Cache::ClaimedBytes{0, 300}; });
  EXPECT_TRUE(fx.cache->CheckSpace(500, b.get()).ok());
  EXPECT_FALSE(fx.cache->CheckSpace(501, b.get()).ok());
  written.reset();
  // On the disk: a claim as large as the free space leaves nothing.
  const std::uint64_t free = *fx.cache->FreeBytes();
  auto huge = fx.cache->ClaimSpace([free] { return Cache::ClaimedBytes{free, 0}; });
  const Status disk = fx.cache->CheckSpace(1, b.get());
  EXPECT_EQ(disk.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(disk.message().find("free on"), std::string::npos) << disk.message();
  EXPECT_EQ(disk.message().find("over budget"), std::string::npos) << disk.message();
}

// The claim a commit takes bytes off (CommitVerified's on_recorded) and
// the recorded sum change together for every check: a check while commits
// run never counts a byte twice (recorded and still claimed), which failed
// pulls that fit their budget, nor not at all, which let them exceed it.
TEST(CacheTest, ACheckNeverCountsBytesTwiceWhileTheyAreRecorded) {
  constexpr std::uint64_t kChunk = 1000, kChunks = 100;
  CacheOptions options;
  options.byte_budget = kChunk * kChunks;
  Fixture fx(kChunk * kChunks, options);
  std::atomic<std::uint64_t> claimed{kChunk * kChunks}, recorded{0};
  auto claim = fx.cache->ClaimSpace([&] { return Cache::ClaimedBytes{0, claimed.load() - recorded.load()}; });
  for (std::uint64_t i = 0; i < kChunks; ++i)
    ASSERT_TRUE(fx.cache->WriteAt(fx.file, i * kChunk, Pattern(fx.file, i * kChunk, kChunk)).ok());
  std::atomic<bool> done{false};
  std::thread committer([&] {
    for (std::uint64_t i = 0; i < kChunks; ++i) {
      const VerifiedExtent e{fx.file, i * kChunk, kChunk};
      const Status s = fx.cache->CommitVerified({&e, 1}, {}, [&] { recorded += kChunk; });
      if (!s.ok()) {
        ADD_FAILURE() << s.ToString();
        break;
      }
    }
    done = true;
  });
  int checks = 0, wrong = 0;
  while (!done.load() || checks == 0) {
    // The whole budget is taken at every moment: not one byte more fits.
    if (!fx.cache->CheckSpace(0, claim.get()).ok() || fx.cache->CheckSpace(1, claim.get()).ok()) ++wrong;
    ++checks;
  }
  committer.join();
  EXPECT_EQ(wrong, 0) << "of " << checks << " checks";
  EXPECT_EQ(recorded.load(), kChunk * kChunks);
  EXPECT_EQ(*fx.cache->RecordedBytes(), kChunk * kChunks);
  // Nothing to record still runs it (the batch held only empty extents).
  bool ran = false;
  const VerifiedExtent empty{fx.file, 0, 0};
  EXPECT_TRUE(fx.cache->CommitVerified({&empty, 1}, {}, [&] { ran = true; }).ok());
  EXPECT_TRUE(ran);
  // Nor on error.
  ran = false;
  const VerifiedExtent outside{fx.file, kChunk * kChunks, 1};
  EXPECT_FALSE(fx.cache->CommitVerified({&outside, 1}, {}, [&] { ran = true; }).ok());
  EXPECT_FALSE(ran);
}

TEST(CacheTest, DiskFullIsResourceExhaustedAndNothingRecorded) {
  TmpfsMount fs("2m");
  if (!fs.mounted()) GTEST_SKIP() << "cannot mount a tmpfs here (" << fs.error() << "); needs CAP_SYS_ADMIN";
  {
    std::unique_ptr<Cache> cache = MustOpen(fs.path() / "cache");
    ASSERT_TRUE(cache);
    const FilesetId set = *cache->PutFileset("org/model", "main", kCommitA);
    const FileId file = *cache->PutFile(set, "big.bin", 16 * kMiB);
    const Status s = cache->WriteAt(file, 8 * kMiB, Pattern(file, 0, 4 * kMiB));
    EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
    EXPECT_NE(s.message().find("big.bin"), std::string::npos) << s.message();
    EXPECT_TRUE(cache->VerifiedExtents(file)->empty());
    EXPECT_EQ(*cache->RecordedBytes(), 0u);
    EXPECT_EQ(cache->CheckSpace(4 * kMiB).code(), StatusCode::kResourceExhausted);
  }
}

TEST(CacheTest, FileSizeLimitIsResourceExhausted) {
  Fixture fx(4 * kMiB);
  struct rlimit old;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  struct rlimit low = old;
  low.rlim_cur = kMiB;
  auto old_handler = ::signal(SIGXFSZ, SIG_IGN);  // EFBIG instead of death
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &low), 0);
  const Status s = fx.cache->WriteAt(fx.file, 2 * kMiB, Pattern(fx.file, 0, 4096));
  ::setrlimit(RLIMIT_FSIZE, &old);
  ::signal(SIGXFSZ, old_handler);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_TRUE(fx.cache->VerifiedExtents(fx.file)->empty());
}

// A fileset of one 1000-byte file "w.bin", its first `verified` bytes
// written and recorded.
FilesetId FilesetWithVerifiedBytes(Cache& cache, const char* repo, const char* commit, std::uint64_t verified) {
  const FilesetId fs = *cache.PutFileset(repo, "main", commit);
  const FileId f = *cache.PutFile(fs, "w.bin", 1000);
  EXPECT_TRUE(cache.WriteAt(f, 0, Pattern(f, 0, 1000)).ok());
  const VerifiedExtent e{f, 0, verified};
  EXPECT_TRUE(cache.CommitVerified({&e, 1}).ok());
  return fs;
}

TEST(CacheTest, GcEvictsLeastRecentlyUsedAndSkipsPinned) {
  TempDir tmp;
  FakeClock clock(1000);
  CacheOptions options;
  options.clock = &clock;
  std::unique_ptr<Cache> cache = MustOpen(tmp.path(), options);
  auto make = [&](const char* repo, const char* commit) {
    const FilesetId fs = FilesetWithVerifiedBytes(*cache, repo, commit, 1000);
    clock.Advance(std::chrono::milliseconds(1));
    return fs;
  };
  const FilesetId a = make("org/a", kCommitA);  // t=1000, oldest, pinned
  const FilesetId b = make("org/b", kCommitB);  // t=1001, touched at t=1003
  const FilesetId c = make("org/c", kCommitC);  // t=1002
  ASSERT_TRUE(cache->Pin(a).ok());
  ASSERT_TRUE(cache->Pin(a).ok());  // idempotent
  ASSERT_TRUE(cache->Touch(b).ok());
  EXPECT_EQ(cache->Touch(999).code(), StatusCode::kNotFound);

  GcResult r = *cache->Gc(3000);  // nothing to do
  EXPECT_TRUE(r.evicted.empty());
  EXPECT_EQ(r.bytes_remaining, 3000u);

  r = *cache->Gc(2000);  // c is the least recently used unpinned
  EXPECT_EQ(r.evicted, std::vector<FilesetId>{c});
  EXPECT_EQ(r.bytes_freed, 1000u);
  EXPECT_EQ(r.bytes_remaining, 2000u);
  EXPECT_FALSE(std::filesystem::exists(tmp.path() / "org" / "c"));
  EXPECT_EQ(cache->GetFileset(c).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(cache->LookupCommit("org/c", "main").status().code(), StatusCode::kNotFound);

  // A running pull protects b like a pin while it runs.
  const PullId p = *cache->StartPull({b, "m.json", 1, 0, "{}"});
  r = *cache->Gc(0);
  EXPECT_TRUE(r.evicted.empty());
  ASSERT_TRUE(cache->FinishPull(p, PullState::kCancelled, "user").ok());

  r = *cache->Gc(0);  // b goes, pinned a stays
  EXPECT_EQ(r.evicted, std::vector<FilesetId>{b});
  EXPECT_EQ(r.bytes_remaining, 1000u);
  EXPECT_TRUE(std::filesystem::exists(tmp.path() / "org" / "a" / kCommitA / "w.bin"));
  EXPECT_FALSE(std::filesystem::exists(tmp.path() / "org" / "b"));

  ASSERT_TRUE(cache->Unpin(a).ok());
  r = *cache->Gc(0);
  EXPECT_EQ(r.evicted, std::vector<FilesetId>{a});
  EXPECT_EQ(*cache->RecordedBytes(), 0u);
  EXPECT_TRUE(cache->ListFilesets()->empty());
  // The index and the lock are never touched.
  EXPECT_TRUE(std::filesystem::exists(tmp.path() / "exlr8d.db"));
  EXPECT_TRUE(std::filesystem::exists(tmp.path() / "exlr8d.lock"));
}

// A fileset read (its directories noted for the name sync every commit
// makes) and then evicted does not stop later commits of another fileset:
// the gone directory is skipped, not an "open directory ...: No such file
// or directory" that fails every commit of a long-lived `serve`.
TEST(CacheTest, CommitsGoOnAfterAFilesetThatWasReadIsEvicted) {
  TempDir tmp;
  std::unique_ptr<Cache> cache = MustOpen(tmp.path());
  const FilesetId gone = *cache->PutFileset("org/gone", "main", kCommitA);
  const FileId read = *cache->PutFile(gone, "deep/dir/w.bin", 1000);
  ASSERT_TRUE(cache->WriteAt(read, 0, Pattern(read, 0, 1000)).ok());
  const VerifiedExtent e{read, 0, 1000};
  ASSERT_TRUE(cache->CommitVerified({&e, 1}).ok());
  cache.reset();
  cache = MustOpen(tmp.path());  // a new process: opening to read notes the directories
  auto src = cache->OpenVerified(read);
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  src->reset();
  ASSERT_TRUE(cache->Evict(gone).ok());
  EXPECT_FALSE(std::filesystem::exists(tmp.path() / "org" / "gone"));
  const FilesetId kept = *cache->PutFileset("org/kept", "main", kCommitB);
  const FileId w = *cache->PutFile(kept, "w.bin", 1000);
  ASSERT_TRUE(cache->WriteAt(w, 0, Pattern(w, 0, 1000)).ok());
  const VerifiedExtent k{w, 0, 1000};
  const Status s = cache->CommitVerified({&k, 1});
  EXPECT_TRUE(s.ok()) << s.ToString();
}

// A read-only view changes nothing, even where the cache is damaged: a file
// cut short stays short (a writer would extend it), and reading past its
// end fails instead of serving zeros. The view opens files read-only, so
// it cannot hide the damage from later pulls.
TEST(CacheTest, AReadOnlyViewNeverChangesADataFile) {
  Fixture fx(3000);
  fx.WriteVerified(0, 3000);
  const std::filesystem::path path = *fx.cache->DataPath(fx.file);
  fx.cache.reset();
  std::filesystem::resize_file(path, 1000);
  ::chmod(path.c_str(), 0444);  // and not writable (root may write it anyway)
  auto view = Cache::OpenReadOnly(fx.tmp.path());
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  auto src = (*view)->OpenVerified(fx.file);
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  std::vector<std::byte> buf(100);
  EXPECT_TRUE((*src)->ReadAt(500, buf).ok());
  const Status past = (*src)->ReadAt(1500, buf);
  EXPECT_EQ(past.code(), StatusCode::kCorruption) << past.ToString();
  EXPECT_THAT(past.message(), ::testing::HasSubstr("shorter than recorded"));
  EXPECT_EQ(std::filesystem::file_size(path), 1000u);
}

// What a pull reuses must at least be there: bytes of files deleted, or cut
// short, behind the cache's back are un-recorded (one stat per file).
TEST(CacheTest, ForgetLostBytesUnrecordsWhatTheDirectoryNoLongerHolds) {
  Fixture fx(3000);
  fx.WriteVerified(0, 3000);
  const FileId second = *fx.cache->PutFile(fx.fileset, "b/second.bin", 500);
  ASSERT_TRUE(fx.cache->WriteAt(second, 0, Pattern(second, 0, 500)).ok());
  ASSERT_TRUE(fx.cache->MarkWholeFileVerified(second).ok());
  const FileId third = *fx.cache->PutFile(fx.fileset, "c.bin", 400);
  fx.WriteVerified(0, 400, third);
  EXPECT_EQ(*fx.cache->ForgetLostBytes(fx.fileset), 0u);  // nothing lost yet
  // Files this process has open: one cut short, one deleted.
  std::filesystem::resize_file(*fx.cache->DataPath(fx.file), 1200);
  std::filesystem::remove(*fx.cache->DataPath(third));
  EXPECT_EQ(*fx.cache->ForgetLostBytes(fx.fileset), 1800u + 400u);
  EXPECT_EQ(*fx.cache->VerifiedExtents(fx.file), (std::vector<Extent>{{0, 1200}}));
  EXPECT_TRUE(fx.cache->VerifiedExtents(third)->empty());
  // Written again, the deleted one is a new file in the directory, not the
  // unlinked one this process still had open.
  fx.WriteVerified(0, 400, third);
  EXPECT_EQ(std::filesystem::file_size(*fx.cache->DataPath(third)), 400u);
  EXPECT_EQ(ReadFileBytes(*fx.cache->DataPath(third), 0, 400), Pattern(third, 0, 400));
  // A file not open here, deleted.
  fx.cache.reset();
  std::filesystem::remove(*MustOpen(fx.tmp.path())->DataPath(second));
  fx.cache = MustOpen(fx.tmp.path());
  EXPECT_EQ(*fx.cache->ForgetLostBytes(fx.fileset), 500u);
  EXPECT_TRUE(fx.cache->VerifiedExtents(second)->empty());
  EXPECT_FALSE(fx.cache->GetFile(second)->whole_verified);
  EXPECT_EQ(*fx.cache->VerifiedExtents(third), (std::vector<Extent>{{0, 400}}));
  EXPECT_EQ(*fx.cache->ForgetLostBytes(fx.fileset), 0u);
}

// A data file replaced by a symbolic link or a directory (by hand) must not
// fail every later pull (exit 7) and so keep its bytes from ever being
// fetched again. What is not a regular file holds none of the cache's
// bytes: a reader finds it missing, the lost bytes are forgotten, and a
// writer replaces it (a link itself, never its target; a FIFO without
// waiting for a writer), except a directory, which it names and leaves.
TEST(CacheTest, ADataFileReplacedByALinkOrAFifoIsReplacedAgain) {
  Fixture fx(3000);
  fx.WriteVerified(0, 3000);
  const FileId fifo_file = *fx.cache->PutFile(fx.fileset, "f.bin", 100);
  fx.WriteVerified(0, 100, fifo_file);
  const FileId dir_file = *fx.cache->PutFile(fx.fileset, "d.bin", 100);
  fx.WriteVerified(0, 100, dir_file);
  fx.cache.reset();  // nothing open: the next open meets what is on disk

  TempDir elsewhere;
  const std::filesystem::path target = elsewhere.path() / "target";
  { std::ofstream(target) << "not the cache's"; }
  auto reopened = MustOpen(fx.tmp.path());
  const std::filesystem::path data = *reopened->DataPath(fx.file);
  const std::filesystem::path fifo = *reopened->DataPath(fifo_file);
  const std::filesystem::path dir = *reopened->DataPath(dir_file);
  reopened.reset();
  std::filesystem::remove(data);
  std::filesystem::create_symlink(target, data);
  std::filesystem::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  std::filesystem::remove(dir);
  std::filesystem::create_directory(dir);
  { std::ofstream(dir / "kept") << "someone's"; }

  {
    auto view = Cache::OpenReadOnly(fx.tmp.path());
    ASSERT_TRUE(view.ok()) << view.status().ToString();
    auto link = (*view)->OpenVerified(fx.file);
    EXPECT_EQ(link.status().code(), StatusCode::kCorruption) << link.status().ToString();
    EXPECT_THAT(link.status().message(), ::testing::HasSubstr("the index records verified bytes but the file is missing"));
    EXPECT_THAT(link.status().message(), ::testing::HasSubstr("is a symbolic link, not a data file of the cache"));
  }
  fx.cache = MustOpen(fx.tmp.path());
  EXPECT_EQ(*fx.cache->ForgetLostBytes(fx.fileset), 3200u);
  fx.WriteVerified(0, 3000);
  fx.WriteVerified(0, 100, fifo_file);
  EXPECT_EQ(ReadFileBytes(data, 0, 3000), Pattern(fx.file, 0, 3000));
  EXPECT_FALSE(std::filesystem::is_symlink(data));
  EXPECT_TRUE(std::filesystem::is_regular_file(fifo));
  std::ifstream in(target);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "not the cache's");
  Status into_dir = fx.cache->WriteAt(dir_file, 0, Pattern(dir_file, 0, 100));
  EXPECT_EQ(into_dir.code(), StatusCode::kCorruption) << into_dir.ToString();
  EXPECT_THAT(into_dir.message(), ::testing::HasSubstr("is a directory where the cache keeps a data file: remove it"));
  EXPECT_TRUE(std::filesystem::exists(dir / "kept"));
}

// A data file gone from disk while the index records bytes of it is never
// quietly made again underneath them: a write to it fails
// until those bytes are forgotten.
TEST(CacheTest, AFileGoneWithRecordedBytesIsNotMadeAgainUnderThem) {
  Fixture fx(3000);
  fx.WriteVerified(0, 1000);
  const std::filesystem::path data = *fx.cache->DataPath(fx.file);
  fx.cache.reset();
  std::filesystem::remove(data);
  fx.cache = MustOpen(fx.tmp.path());
  Status s = fx.cache->WriteAt(fx.file, 1000, Pattern(fx.file, 1000, 100));
  EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
  EXPECT_THAT(s.message(), ::testing::HasSubstr("was not on disk while the index records bytes of it"));
  EXPECT_EQ(*fx.cache->VerifiedExtents(fx.file), (std::vector<Extent>{{0, 1000}}));
  EXPECT_EQ(*fx.cache->ForgetLostBytes(fx.fileset), 1000u);
  fx.WriteVerified(0, 3000);
  EXPECT_EQ(ReadFileBytes(data, 0, 3000), Pattern(fx.file, 0, 3000));
}

// An index whose listed size was cut by hand below its recorded bytes
// disagrees with itself: the next writable open refuses, and leaves the
// file as it is, rather than truncate it and lose those bytes.
TEST(CacheTest, AListedSizeBelowTheRecordedBytesNeverCutsThem) {
  Fixture fx(3000);
  fx.WriteVerified(0, 3000);
  const std::filesystem::path data = *fx.cache->DataPath(fx.file);
  fx.cache.reset();
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((fx.tmp.path() / "exlr8d.db").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, ("UPDATE files SET size = 1000 WHERE id = " + std::to_string(fx.file)).c_str(), nullptr,
                         nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  fx.cache = MustOpen(fx.tmp.path());
  Status s = fx.cache->WriteAt(fx.file, 0, Pattern(fx.file, 0, 10));
  EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
  EXPECT_THAT(s.message(), ::testing::HasSubstr("past the file's listed size of 1000 bytes"));
  EXPECT_EQ(std::filesystem::file_size(data), 3000u);
  EXPECT_EQ(ReadFileBytes(data, 0, 3000), Pattern(fx.file, 0, 3000));
}

TEST(CacheTest, EvictTakesOneFilesetUnlessPinnedOrBeingPulled) {
  TempDir tmp;
  std::unique_ptr<Cache> cache = MustOpen(tmp.path());
  auto make = [&](const char* repo, const char* commit) {
    return FilesetWithVerifiedBytes(*cache, repo, commit, 700);
  };
  const FilesetId a = make("org/a", kCommitA);
  const FilesetId b = make("org/b", kCommitB);  // the most recently used: gc would take a first
  ASSERT_TRUE(cache->Pin(a, "svc").ok());
  Status pinned = cache->Evict(a).status();
  EXPECT_EQ(pinned.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(pinned.message().find("pinned by svc"), std::string::npos) << pinned.ToString();
  EXPECT_TRUE(std::filesystem::exists(tmp.path() / "org" / "a" / kCommitA / "w.bin"));

  const PullId p = *cache->StartPull({b, "m.json", 1, 0, "{}"});
  EXPECT_EQ(cache->Evict(b).status().code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(cache->FinishPull(p, PullState::kDone, "").ok());

  GcResult r = *cache->Evict(b);
  EXPECT_EQ(r.evicted, std::vector<FilesetId>{b});
  EXPECT_EQ(r.bytes_freed, 700u);
  EXPECT_EQ(r.bytes_remaining, 700u);
  EXPECT_FALSE(std::filesystem::exists(tmp.path() / "org" / "b"));
  EXPECT_EQ(cache->GetFileset(b).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(cache->Evict(b).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(std::filesystem::exists(tmp.path() / "org" / "a" / kCommitA / "w.bin"));
  EXPECT_EQ(*cache->RecordedBytes(), 700u);
}

// `exlr8d pull --make-room`: what gc would evict, least recently used
// first, and only as much as the bytes asked for need: never a pinned
// fileset, nor one a live claim writes (a pull's own, before its row).
TEST(CacheTest, MakeRoomEvictsOnlyWhatTheNeedTakesLeastRecentlyUsedFirst) {
  TempDir tmp;
  FakeClock clock(1000);
  CacheOptions options;
  options.clock = &clock;
  options.byte_budget = 4000;
  std::unique_ptr<Cache> cache = MustOpen(tmp.path(), options);
  auto make = [&](const char* repo, const char* commit) {
    const FilesetId fs = FilesetWithVerifiedBytes(*cache, repo, commit, 1000);
    clock.Advance(std::chrono::milliseconds(1));
    return fs;
  };
  const FilesetId a = make("org/a", kCommitA);  // oldest, pinned
  const FilesetId b = make("org/b", kCommitB);  // written by a live claim
  const FilesetId c = make("org/c", kCommitC);
  const FilesetId d = make("org/d", kCommitD);  // newest
  ASSERT_TRUE(cache->Pin(a).ok());
  std::atomic<std::uint64_t> b_left{0};
  auto writing_b = cache->ClaimSpace([&] { return Cache::ClaimedBytes{b_left.load(), b_left.load()}; });
  writing_b->SetFileset(b);

  GcResult r = *cache->MakeRoom(1000);  // 4000 of the 4000 budget used
  EXPECT_EQ(r.evicted, std::vector<FilesetId>{c});  // a is pinned, b is being written
  EXPECT_EQ(r.bytes_freed, 1000u);
  EXPECT_TRUE(cache->CheckSpace(1000).ok());
  r = *cache->MakeRoom(1000);  // fits now: nothing more goes
  EXPECT_TRUE(r.evicted.empty());
  EXPECT_EQ(r.bytes_remaining, 3000u);

  // Another pull's claim counts as taken, as in CheckSpace: 500 promised
  // leaves 500 of the budget, so 1000 more needs d gone.
  b_left = 500;
  auto mine = cache->ClaimSpace([] { return Cache::ClaimedBytes{}; });
  r = *cache->MakeRoom(1000, mine.get());
  EXPECT_EQ(r.evicted, std::vector<FilesetId>{d});
  EXPECT_TRUE(cache->CheckSpace(1000, mine.get()).ok());

  // Not enough to evict: what can go goes, and CheckSpace still says no.
  r = *cache->MakeRoom(3000, mine.get());
  EXPECT_TRUE(r.evicted.empty());
  EXPECT_EQ(cache->CheckSpace(3000, mine.get()).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(cache->Evict(b).status().code(), StatusCode::kFailedPrecondition);  // the claim protects it from Evict too
  writing_b.reset();
  r = *cache->MakeRoom(3000, mine.get());
  EXPECT_EQ(r.evicted, std::vector<FilesetId>{b});
  EXPECT_TRUE(cache->CheckSpace(3000, mine.get()).ok());
  EXPECT_TRUE(std::filesystem::exists(tmp.path() / "org" / "a" / kCommitA / "w.bin"));
}

TEST(CacheTest, GcRemovesOrphanDataLeftByACrash) {
  Fixture fx(100);
  fx.WriteVerified(0, 100);
  const std::filesystem::path orphan = fx.tmp.path() / "org" / "gone" / kCommitB;
  std::filesystem::create_directories(orphan / "sub");
  std::ofstream(orphan / "sub" / "f.bin") << "stale";
  std::ofstream(fx.tmp.path() / "README.txt") << "not ours";
  std::filesystem::create_directories(fx.tmp.path() / "org" / "gone" / "not-a-commit");
  const GcResult r = *fx.cache->Gc(1 << 20);
  EXPECT_TRUE(r.evicted.empty());
  EXPECT_FALSE(std::filesystem::exists(orphan));
  EXPECT_TRUE(std::filesystem::exists(fx.tmp.path() / "org" / "gone" / "not-a-commit"));
  EXPECT_TRUE(std::filesystem::exists(fx.tmp.path() / "README.txt"));
  EXPECT_TRUE(*fx.cache->Covers(fx.file, 0, 100));
  EXPECT_EQ(ReadFileBytes(*fx.cache->DataPath(fx.file), 0, 100), Pattern(fx.file, 0, 100));
}

// An eviction killed after its rows are gone leaves its files, and no rerun
// finds the fileset to finish it; the next owner of the cache removes them.
// Foreign directories at the root stay, empty or not.
TEST(CacheTest, TheNextOwnerRemovesWhatAnInterruptedEvictionLeft) {
  TempDir tmp;
  const std::filesystem::path left = tmp.path() / "org" / "gone" / kCommitB;
  {
    std::unique_ptr<Cache> cache = MustOpen(tmp.path());
    ASSERT_TRUE(cache);
    const FilesetId kept = *cache->PutFileset("org/model", "main", kCommitA);
    const FileId f = *cache->PutFile(kept, "w.bin", 100);
    ASSERT_TRUE(cache->WriteAt(f, 0, Pattern(f, 0, 100)).ok());
    const VerifiedExtent e{f, 0, 100};
    ASSERT_TRUE(cache->CommitVerified({&e, 1}).ok());
  }
  std::filesystem::create_directories(left / "experts");  // the rows went, these files did not
  std::ofstream(left / "experts" / "w.bin") << "left behind";
  for (const char* foreign : {"lost+found", "my-notes"}) std::filesystem::create_directories(tmp.path() / foreign);
  {
    auto view = Cache::OpenReadOnly(tmp.path());  // a reader changes nothing
    ASSERT_TRUE(view.ok()) << view.status().ToString();
    EXPECT_TRUE(std::filesystem::exists(left));
  }
  std::unique_ptr<Cache> cache = MustOpen(tmp.path());
  ASSERT_TRUE(cache);
  EXPECT_FALSE(std::filesystem::exists(tmp.path() / "org" / "gone"));
  EXPECT_TRUE(std::filesystem::exists(tmp.path() / "org" / "model" / kCommitA / "w.bin"));
  ASSERT_TRUE(cache->Gc(1 << 20).ok());
  EXPECT_TRUE(std::filesystem::exists(tmp.path() / "lost+found"));
  EXPECT_TRUE(std::filesystem::exists(tmp.path() / "my-notes"));
  EXPECT_EQ(*cache->RecordedBytes(), 100u);
}

// Write-behind starts write-back from the writers' threads while others
// write the same file; the bytes, and only the committed ones, must land.
TEST(CacheTest, WriteBehindFromSeveralWritersKeepsEveryByte) {
  CacheOptions options;
  options.write_behind_bytes = 1;  // after every write
  Fixture fx(8 * kMiB, options);
  constexpr int kWriters = 4;
  constexpr std::uint64_t kChunk = 48 * 1024 + 17;  // not page aligned
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w)
    writers.emplace_back([&, w] {
      for (std::uint64_t off = w * kChunk; off + kChunk <= 8 * kMiB; off += kWriters * kChunk)
        ASSERT_TRUE(fx.cache->WriteAt(fx.file, off, Pattern(fx.file, off, kChunk)).ok());
    });
  for (auto& t : writers) t.join();
  const std::uint64_t written = (8 * kMiB / kChunk) * kChunk;
  const VerifiedExtent e{fx.file, 0, written};
  ASSERT_TRUE(fx.cache->CommitVerified({&e, 1}).ok());
  EXPECT_EQ(ReadFileBytes(*fx.cache->DataPath(fx.file), 0, written), Pattern(fx.file, 0, written));
  EXPECT_TRUE(*fx.cache->Covers(fx.file, 0, written));
  EXPECT_FALSE(*fx.cache->Covers(fx.file, written, 1));
}

TEST(CacheTest, ReaderThreadRunsWhileWriterCommits) {
  Fixture fx(kMiB);
  std::atomic<bool> done{false};
  std::atomic<int> reads{0};
  std::atomic<bool> reader_ended{false};
  std::thread reader([&] {
    struct Ended {
      std::atomic<bool>& flag;
      ~Ended() { flag.store(true); }
    } ended{reader_ended};  // also when an ASSERT below returns early
    while (!done.load()) {
      ASSERT_TRUE(fx.cache->ListFilesets().ok());
      ASSERT_TRUE(fx.cache->MissingRanges(fx.file, 0, kMiB).ok());
      reads.fetch_add(1);
    }
  });
  // The writes start once the reader runs, so that they overlap its reads
  // however the two threads are scheduled.
  while (reads.load() == 0 && !reader_ended.load()) std::this_thread::yield();
  for (std::uint64_t off = 0; off < kMiB; off += 64 * 1024) fx.WriteVerified(off, 32 * 1024);
  done.store(true);
  reader.join();
  EXPECT_GT(reads.load(), 0);
  EXPECT_EQ(fx.cache->VerifiedExtents(fx.file)->size(), 16u);
}

}  // namespace
}  // namespace exlr8

namespace exlr8 {
namespace {

TEST(CacheTest, PutFilesIsOneAllOrNothingTransaction) {
  testing::TempDir tmp;
  auto cache = Cache::Open(tmp.path());
  ASSERT_TRUE(cache.ok());
  const FilesetId fs = *(*cache)->PutFileset("org/model", "main", testing::kCommitA);
  std::vector<NewFile> files = {{"config.json", 10, std::nullopt, std::string(40, 'a')},
                                {"experts/x.safetensors", 1000, std::string(64, 'b'), std::nullopt}};
  auto ids = (*cache)->PutFiles(fs, files);
  ASSERT_TRUE(ids.ok()) << ids.status().ToString();
  ASSERT_EQ(ids->size(), 2u);
  EXPECT_EQ(*(*cache)->FindFile(fs, "experts/x.safetensors"), (*ids)[1]);
  EXPECT_EQ(*(*cache)->PutFiles(fs, files), *ids);  // idempotent
  // One bad entry (a size that contradicts the recorded one) rejects all of them.
  std::vector<NewFile> bad = {{"new.txt", 5, std::nullopt, std::nullopt}, {"config.json", 11, std::nullopt, std::nullopt}};
  auto r = (*cache)->PutFiles(fs, bad);
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ((*cache)->FindFile(fs, "new.txt").status().code(), StatusCode::kNotFound);
  std::vector<NewFile> unsafe = {{"../x", 5, std::nullopt, std::nullopt}};
  EXPECT_EQ((*cache)->PutFiles(fs, unsafe).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace exlr8
