// daemon/base/atomic_file.h on real files: the content and mode, what a
// failure at each step leaves (the old content, no temporary file), and
// that a concurrent reader never sees a part. This binary defines fsync
// itself, so the library linked into it calls this one, which counts calls
// and fails on demand, and otherwise forwards to libc's.
#include "daemon/base/atomic_file.h"

#include <dlfcn.h>
#include <errno.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/daemon/cache_test_util.h"
#include "tests/support/files.h"

namespace {
std::atomic<int> g_file_syncs{0};       // fsync calls on regular files
std::atomic<int> g_dir_syncs{0};        // fsync calls on directories
std::atomic<int> g_fail_file_syncs{0};  // file fsyncs still to fail with EIO
std::atomic<int> g_fail_dir_syncs{0};   // directory fsyncs still to fail with EIO

bool TakeOne(std::atomic<int>& left) {
  int n = left.load();
  while (n > 0 && !left.compare_exchange_weak(n, n - 1)) {
  }
  return n > 0;
}
}  // namespace

extern "C" int fsync(int fd) {
  struct stat st {};
  const bool dir = ::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode);
  (dir ? g_dir_syncs : g_file_syncs).fetch_add(1);
  if (TakeOne(dir ? g_fail_dir_syncs : g_fail_file_syncs)) {
    errno = EIO;
    return -1;
  }
  using Fn = int (*)(int);
  static const Fn real = reinterpret_cast<Fn>(::dlsym(RTLD_NEXT, "fsync"));
  return real(fd);
}

namespace exlr8 {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::TempDir;
using testing::TmpfsMount;

// Every name in `dir`, sorted.
std::vector<std::string> Names(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

class UmaskScope {
 public:
  explicit UmaskScope(mode_t m) : old_(::umask(m)) {}
  ~UmaskScope() { ::umask(old_); }

 private:
  mode_t old_;
};

TEST(AtomicFileTest, WritesTheContentAndModeAndLeavesNoTemporaryFile) {
  TempDir tmp;
  UmaskScope umask(022);
  const fs::path p = tmp.path() / "state.json";
  ASSERT_TRUE(WriteFileAtomically(p, "{\"a\":1}\n", Durability::kNone, 0600).ok());
  EXPECT_EQ(testing::ReadFileText(p), "{\"a\":1}\n");
  struct stat st {};
  ASSERT_EQ(::stat(p.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  // Replaced by a shorter content, durably, with the default mode.
  ASSERT_TRUE(WriteFileAtomically(p, "{}", Durability::kDurable).ok());
  EXPECT_EQ(testing::ReadFileText(p), "{}");
  ASSERT_EQ(::stat(p.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0644u);
  // Empty content and bytes.
  ASSERT_TRUE(WriteFileAtomically(p, "", Durability::kNone).ok());
  EXPECT_EQ(fs::file_size(p), 0u);
  const std::vector<std::byte> bytes = {std::byte{0}, std::byte{0xff}, std::byte{7}};
  ASSERT_TRUE(WriteFileAtomically(p, bytes, Durability::kNone).ok());
  EXPECT_EQ(testing::ReadFileText(p), std::string("\0\xff\x07", 3));
  EXPECT_EQ(Names(tmp.path()), std::vector<std::string>{"state.json"});
}

TEST(AtomicFileTest, ARelativePathIsInTheCurrentDirectory) {
  TempDir tmp;
  const fs::path old_cwd = fs::current_path();
  fs::current_path(tmp.path());
  const Status s = WriteFileAtomically("here", "x", Durability::kDurable);
  fs::current_path(old_cwd);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(testing::ReadFileText(tmp.path() / "here"), "x");
  EXPECT_EQ(Names(tmp.path()), std::vector<std::string>{"here"});
}

TEST(AtomicFileTest, ASymlinkIsReplacedNotFollowed) {
  TempDir tmp;
  const fs::path target = tmp.path() / "target";
  ASSERT_TRUE(WriteFileAtomically(target, "keep", Durability::kNone).ok());
  fs::create_symlink(target, tmp.path() / "link");
  ASSERT_TRUE(WriteFileAtomically(tmp.path() / "link", "new", Durability::kNone).ok());
  EXPECT_FALSE(fs::is_symlink(tmp.path() / "link"));
  EXPECT_EQ(testing::ReadFileText(tmp.path() / "link"), "new");
  EXPECT_EQ(testing::ReadFileText(target), "keep");
}

TEST(AtomicFileTest, DurableSyncsTheFileAndTheDirectoryAndNoneSyncsNothing) {
  TempDir tmp;
  const fs::path p = tmp.path() / "f";
  int files = g_file_syncs.load(), dirs = g_dir_syncs.load();
  ASSERT_TRUE(WriteFileAtomically(p, "x", Durability::kNone).ok());
  EXPECT_EQ(g_file_syncs.load(), files);
  EXPECT_EQ(g_dir_syncs.load(), dirs);
  ASSERT_TRUE(WriteFileAtomically(p, "y", Durability::kDurable).ok());
  EXPECT_EQ(g_file_syncs.load(), files + 1);
  EXPECT_EQ(g_dir_syncs.load(), dirs + 1);
}

TEST(AtomicFileTest, AFailedFileSyncKeepsTheOldContentAndRemovesTheTemporaryFile) {
  TempDir tmp;
  const fs::path p = tmp.path() / "f";
  ASSERT_TRUE(WriteFileAtomically(p, "old", Durability::kDurable).ok());
  g_fail_file_syncs = 1;
  const Status s = WriteFileAtomically(p, "new", Durability::kDurable);
  g_fail_file_syncs = 0;
  EXPECT_EQ(s.code(), StatusCode::kIOError) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr("fsync " + (tmp.path() / "f.tmp.").string()));
  EXPECT_EQ(testing::ReadFileText(p), "old");
  EXPECT_EQ(Names(tmp.path()), std::vector<std::string>{"f"});
}

// The one failure after the rename: the new content is there, and the
// error says it may not survive a power loss.
TEST(AtomicFileTest, AFailedDirectorySyncSaysTheNewContentMayNotLast) {
  TempDir tmp;
  const fs::path p = tmp.path() / "f";
  ASSERT_TRUE(WriteFileAtomically(p, "old", Durability::kDurable).ok());
  g_fail_dir_syncs = 1;
  const Status s = WriteFileAtomically(p, "new", Durability::kDurable);
  g_fail_dir_syncs = 0;
  EXPECT_EQ(s.code(), StatusCode::kIOError) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr("fsync directory " + tmp.path().string()));
  EXPECT_THAT(s.message(), HasSubstr("may not survive a power loss"));
  EXPECT_EQ(testing::ReadFileText(p), "new");
  EXPECT_EQ(Names(tmp.path()), std::vector<std::string>{"f"});
}

TEST(AtomicFileTest, AFailedWriteKeepsTheOldContentAndRemovesTheTemporaryFile) {
  TempDir tmp;
  const fs::path p = tmp.path() / "f";
  ASSERT_TRUE(WriteFileAtomically(p, "old", Durability::kNone).ok());
  struct rlimit old {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  struct rlimit low = old;
  low.rlim_cur = 1000;
  auto old_handler = ::signal(SIGXFSZ, SIG_IGN);  // EFBIG instead of death
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &low), 0);
  const Status s = WriteFileAtomically(p, std::string(5000, 'n'), Durability::kDurable);
  ::setrlimit(RLIMIT_FSIZE, &old);
  ::signal(SIGXFSZ, old_handler);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr((tmp.path() / "f.tmp.").string()));
  EXPECT_EQ(testing::ReadFileText(p), "old");
  EXPECT_EQ(Names(tmp.path()), std::vector<std::string>{"f"});
}

TEST(AtomicFileTest, OnAFullDiskTheOldContentStays) {
  TmpfsMount mnt("64k");
  if (!mnt.mounted()) GTEST_SKIP() << "cannot mount a tmpfs (" << mnt.error() << "); needs CAP_SYS_ADMIN";
  const fs::path p = mnt.path() / "f";
  ASSERT_TRUE(WriteFileAtomically(p, "old", Durability::kDurable).ok());
  ASSERT_TRUE(testing::FillUp(mnt.path() / "filler"));
  const Status s = WriteFileAtomically(p, std::string(1 << 16, 'n'), Durability::kDurable);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_EQ(testing::ReadFileText(p), "old");
  EXPECT_EQ(Names(mnt.path()), (std::vector<std::string>{"f", "filler"}));
}

TEST(AtomicFileTest, AReadOnlyDirectoryIsPermissionDeniedAndLeavesNothing) {
  TmpfsMount mnt("64k");
  if (!mnt.mounted()) GTEST_SKIP() << "cannot mount a tmpfs (" << mnt.error() << "); needs CAP_SYS_ADMIN";
  const fs::path p = mnt.path() / "f";
  ASSERT_TRUE(WriteFileAtomically(p, "old", Durability::kNone).ok());
  ASSERT_EQ(::mount(nullptr, mnt.path().c_str(), nullptr, MS_REMOUNT | MS_RDONLY, nullptr), 0)
      << std::strerror(errno);
  const Status s = WriteFileAtomically(p, "new", Durability::kDurable);
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr("to replace " + p.string()));
  EXPECT_EQ(testing::ReadFileText(p), "old");
  EXPECT_EQ(Names(mnt.path()), std::vector<std::string>{"f"});
}

TEST(AtomicFileTest, ADirectoryInTheWayFailsTheRenameAndLeavesNoTemporaryFile) {
  TempDir tmp;
  const fs::path p = tmp.path() / "d";
  fs::create_directory(p);
  fs::path inside = p / "keep";
  ASSERT_TRUE(WriteFileAtomically(inside, "k", Durability::kNone).ok());
  const Status s = WriteFileAtomically(p, "x", Durability::kDurable);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr("rename"));
  EXPECT_TRUE(fs::is_directory(p));
  EXPECT_EQ(Names(tmp.path()), std::vector<std::string>{"d"});
}

TEST(AtomicFileTest, BadPathsNameWhatIsWrong) {
  TempDir tmp;
  Status s = WriteFileAtomically(tmp.path() / "missing" / "f", "x", Durability::kNone);
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr((tmp.path() / "missing").string()));
  s = WriteFileAtomically("", "x", Durability::kNone);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  s = WriteFileAtomically(tmp.path() / "dir/", "x", Durability::kNone);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_TRUE(Names(tmp.path()).empty());
}

// A reader that opens the file while it is being replaced again and again
// reads one whole version every time: never a mix, a truncated or an empty
// file.
TEST(AtomicFileTest, AConcurrentReaderNeverSeesAPart) {
  TempDir tmp;
  const fs::path p = tmp.path() / "f";
  const std::string a(200 << 10, 'a'), b(300 << 10, 'b');
  ASSERT_TRUE(WriteFileAtomically(p, a, Durability::kNone).ok());
  std::atomic<bool> stop{false};
  std::atomic<int> reads{0}, bad{0};
  std::thread reader([&] {
    while (!stop) {
      const std::string got = testing::ReadFileText(p);
      if (got != a && got != b) ++bad;
      ++reads;
    }
  });
  for (int i = 0; i < 200; ++i) ASSERT_TRUE(WriteFileAtomically(p, i % 2 ? a : b, Durability::kNone).ok());
  while (reads < 50) std::this_thread::yield();
  stop = true;
  reader.join();
  EXPECT_EQ(bad, 0) << "of " << reads << " reads";
  EXPECT_EQ(Names(tmp.path()), std::vector<std::string>{"f"});
}

// Writers of the same path at once all succeed; the last rename wins and
// no temporary file is left.
TEST(AtomicFileTest, ConcurrentWritersOfOnePathLeaveOneWholeVersion) {
  TempDir tmp;
  const fs::path p = tmp.path() / "f";
  std::vector<std::thread> writers;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t)
    writers.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i)
        if (!WriteFileAtomically(p, std::string(4096, static_cast<char>('a' + t)), Durability::kNone).ok())
          ++failures;
    });
  for (std::thread& w : writers) w.join();
  EXPECT_EQ(failures, 0);
  const std::string got = testing::ReadFileText(p);
  ASSERT_EQ(got.size(), 4096u);
  EXPECT_EQ(got, std::string(4096, got[0]));
  EXPECT_EQ(Names(tmp.path()), std::vector<std::string>{"f"});
}

}  // namespace
}  // namespace exlr8
