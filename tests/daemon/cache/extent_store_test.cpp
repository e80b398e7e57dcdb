// ExtentStore (daemon/cache/extent_store.h): the data files on a real
// directory. The catalog is not involved: each test says where a file
// lives and what is recorded of it. fdatasync fails on demand
// (tests/daemon/base/failing_data_sync.h).
#include "daemon/cache/extent_store.h"

#include <errno.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/daemon/base/failing_data_sync.h"
#include "tests/daemon/cache_test_util.h"

namespace exlr8 {
namespace {

using ::exlr8::testing::TempDir;

const std::string kDir = "org/a/" + std::string(40, 'a');

std::vector<std::byte> Bytes(std::string_view s) {
  std::vector<std::byte> out(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) out[i] = static_cast<std::byte>(s[i]);
  return out;
}

// Recorded extents as the catalog would report them; counts the asks.
struct Recorded {
  std::vector<Extent> extents;
  int asked = 0;
  ExtentStore::RecordedExtents Fn() {
    return [this]() -> Result<std::vector<Extent>> {
      ++asked;
      return extents;
    };
  }
};

struct Fixture {
  explicit Fixture(bool read_only = false)
      : root(::open(dir.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)),
        store(root.get(), dir.path().string(), ExtentStore::Options{0, read_only}) {}
  std::filesystem::path Path(const FileLocation& where) const { return dir.path() / where.rel; }
  TempDir dir;
  UniqueFd root;
  ExtentStore store;
};

FileLocation At(std::string path, std::uint64_t size, FilesetId fileset = 1) {
  return FileLocation{fileset, size, kDir + "/" + path};
}

TEST(ExtentStoreTest, CreatesFilesSparseAtTheirListedSizeAndWritesInPlace) {
  Fixture fx;
  Recorded none;
  const FileLocation where = At("sub/a.bin", 1 << 20);
  Result<std::shared_ptr<DataFile>> f = fx.store.Open(7, where, /*create=*/true, none.Fn());
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(none.asked, 1);  // a file it had to create is checked against what is recorded
  struct stat st;
  ASSERT_EQ(::stat(fx.Path(where).c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 1 << 20);
  EXPECT_LT(static_cast<std::uint64_t>(st.st_blocks) * 512, std::uint64_t{1} << 20);  // sparse

  ASSERT_TRUE(fx.store.Write(**f, 4096, Bytes("hello")).ok());
  EXPECT_EQ(fx.store.Write(**f, (1 << 20) - 2, Bytes("hello")).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(fx.store.FindOpen(7), *f);  // kept open for reuse
  ASSERT_TRUE(fx.store.Sync({*f}).ok());

  // The source serves what it is told is verified, nothing else.
  std::unique_ptr<ByteSource> src = ExtentStore::Source(*f, where.size, {{4096, 5}}, "a.bin");
  std::vector<std::byte> out(5);
  ASSERT_TRUE(src->ReadAt(4096, out).ok());
  EXPECT_EQ(out, Bytes("hello"));
  const Status hole = src->ReadAt(4094, out);
  EXPECT_EQ(hole.code(), StatusCode::kNotFound);
  EXPECT_NE(hole.message().find("first missing offset 4094"), std::string::npos) << hole.message();
  EXPECT_EQ(src->ReadAt(where.size - 1, out).code(), StatusCode::kCorruption);
}

TEST(ExtentStoreTest, AFileNeverWrittenIsNotFoundOrFailedPrecondition) {
  Fixture fx;
  Recorded none;
  const FileLocation where = At("missing.bin", 10);
  EXPECT_EQ(fx.store.Open(1, where, /*create=*/false, none.Fn()).status().code(), StatusCode::kNotFound);
  const Status s = fx.store.OpenWritten(1, where, none.Fn()).status();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("never written"), std::string::npos) << s.message();
  EXPECT_FALSE(std::filesystem::exists(fx.Path(where)));
  EXPECT_EQ(*fx.store.SizeOnDisk(1, where), std::nullopt);
}

TEST(ExtentStoreTest, RefusesToRecreateAFileWhoseBytesAreRecorded) {
  Fixture fx;
  Recorded some{{{0, 4}}};
  const Status s = fx.store.Open(1, At("gone.bin", 10), /*create=*/true, some.Fn()).status();
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_NE(s.message().find("was not on disk while the index records bytes of it"), std::string::npos);
  EXPECT_EQ(some.asked, 1);
  EXPECT_EQ(fx.store.FindOpen(1), nullptr);
}

TEST(ExtentStoreTest, ALongerFileIsCutUnlessBytesPastItsSizeAreRecorded) {
  Fixture fx;
  const FileLocation where = At("long.bin", 10);
  std::filesystem::create_directories(fx.Path(where).parent_path());
  std::ofstream(fx.Path(where)) << std::string(16, 'x');

  Recorded past{{{0, 12}}};
  EXPECT_EQ(fx.store.Open(1, where, /*create=*/false, past.Fn()).status().code(), StatusCode::kCorruption);
  EXPECT_EQ(std::filesystem::file_size(fx.Path(where)), 16u);  // left as it is

  Recorded within{{{0, 10}}};
  ASSERT_TRUE(fx.store.Open(1, where, /*create=*/false, within.Fn()).ok());
  EXPECT_EQ(std::filesystem::file_size(fx.Path(where)), 10u);
  EXPECT_EQ(within.asked, 1);
}

TEST(ExtentStoreTest, CutToListedSizeTrimsAFileThatGrew) {
  Fixture fx;
  Recorded none;
  const FileLocation where = At("grow.bin", 8);
  std::shared_ptr<DataFile> f = *fx.store.Open(1, where, /*create=*/true, none.Fn());
  ASSERT_EQ(::ftruncate(f->fd.get(), 20), 0);
  EXPECT_EQ(*fx.store.SizeOnDisk(1, where), 20u);
  ASSERT_TRUE(fx.store.CutToListedSize(*f).ok());
  EXPECT_EQ(*fx.store.SizeOnDisk(1, where), 8u);
}

TEST(ExtentStoreTest, AFileDeletedWhileOpenHasNoSizeAndIsDropped) {
  Fixture fx;
  Recorded none;
  const FileLocation where = At("del.bin", 8);
  ASSERT_TRUE(fx.store.Open(3, where, /*create=*/true, none.Fn()).ok());
  std::filesystem::remove(fx.Path(where));
  EXPECT_EQ(*fx.store.SizeOnDisk(3, where), std::nullopt);
  EXPECT_EQ(fx.store.FindOpen(3), nullptr);
}

TEST(ExtentStoreTest, AFailedSyncFailsEveryLaterSyncOfThatFile) {
  Fixture fx;
  Recorded none;
  std::shared_ptr<DataFile> a = *fx.store.Open(1, At("a.bin", 8), /*create=*/true, none.Fn());
  std::shared_ptr<DataFile> b = *fx.store.Open(2, At("b.bin", 8), /*create=*/true, none.Fn());
  ASSERT_TRUE(fx.store.Write(*a, 0, Bytes("abc")).ok());
  ::exlr8::testing::FailNextDataSyncs(1);
  const Status failed = fx.store.Sync({a});
  EXPECT_EQ(failed.code(), StatusCode::kIOError) << failed.message();
  // fdatasync would pass now, but the pages lost with the error cannot be told.
  const Status again = fx.store.Sync({a});
  EXPECT_FALSE(again.ok());
  EXPECT_NE(again.message().find("failed earlier in this process"), std::string::npos) << again.message();
  EXPECT_TRUE(fx.store.Sync({b}).ok());  // another file is not affected
}

TEST(ExtentStoreTest, EvictedFilesetsAreClosedAndTheirDirectoriesNeedNoSync) {
  Fixture fx;
  Recorded none;
  const FileLocation a = At("a.bin", 8, /*fileset=*/1);
  const FileLocation b{2, 8, "org/b/" + std::string(40, 'b') + "/b.bin"};
  ASSERT_TRUE(fx.store.Open(1, a, /*create=*/true, none.Fn()).ok());
  std::shared_ptr<DataFile> fb = *fx.store.Open(2, b, /*create=*/true, none.Fn());
  // The eviction of fileset 1 removes its directories before any sync.
  fx.store.CloseFilesets({1});
  EXPECT_EQ(fx.store.FindOpen(1), nullptr);
  EXPECT_NE(fx.store.FindOpen(2), nullptr);
  std::filesystem::remove_all(fx.dir.path() / "org/a");
  fx.store.ForgetRemovedDirs();
  EXPECT_TRUE(fx.store.Sync({fb}).ok());
}

TEST(ExtentStoreTest, ReadOnlyStoreNeverCreatesOrResizes) {
  Fixture fx(/*read_only=*/true);
  Recorded none;
  const FileLocation where = At("short.bin", 10);
  EXPECT_EQ(fx.store.Open(1, where, /*create=*/true, none.Fn()).status().code(), StatusCode::kNotFound);
  std::filesystem::create_directories(fx.Path(where).parent_path());
  std::ofstream(fx.Path(where)) << "abc";
  ASSERT_TRUE(fx.store.Open(1, where, /*create=*/false, none.Fn()).ok());
  EXPECT_EQ(std::filesystem::file_size(fx.Path(where)), 3u);
}

}  // namespace
}  // namespace exlr8
