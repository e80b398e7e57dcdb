// Process pins (daemon/cache/process_pin.h): they live exactly as long as
// their holder process, and Gc, Evict and ListFilesets see them.
#include "daemon/cache/process_pin.h"

#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <utime.h>

#include <atomic>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "daemon/cache/cache.h"
#include "tests/daemon/cache_test_util.h"

namespace exlr8 {
namespace {

using testing::kCommitA;
using testing::kCommitB;
using testing::Pattern;
using testing::TempDir;

std::vector<std::string> PinFiles(const std::filesystem::path& cache) {
  std::vector<std::string> out;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(ProcessPinDir(cache), ec), end; !ec && it != end; it.increment(ec))
    out.push_back(it->path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// A process that takes a pin and waits to be killed.
class PinningChild {
 public:
  PinningChild(const std::filesystem::path& cache, const char* repo, const char* commit, const char* holder) {
    int ready[2];
    if (::pipe(ready) != 0) std::abort();
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(ready[0]);
      auto pin = ProcessPin::Acquire(cache, repo, commit, holder);
      const char c = pin.ok() ? '1' : '0';
      (void)!::write(ready[1], &c, 1);
      for (;;) ::pause();
    }
    ::close(ready[1]);
    char c = 0;
    ok_ = ::read(ready[0], &c, 1) == 1 && c == '1';
    ::close(ready[0]);
  }
  ~PinningChild() { Kill(); }
  bool ok() const { return ok_; }
  pid_t pid() const { return pid_; }
  void Kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
  bool ok_ = false;
};

TEST(ProcessPinTest, LivesAsLongAsTheObject) {
  TempDir tmp;
  EXPECT_TRUE(ListProcessPins(tmp.path(), true)->empty());  // no pins directory yet
  {
    auto pin = ProcessPin::Acquire(tmp.path(), "org/a", kCommitA, "exlr8d-stage home tp4 rank1");
    ASSERT_TRUE(pin.ok()) << pin.status().ToString();
    auto live = *ListProcessPins(tmp.path(), true);
    ASSERT_EQ(live.size(), 1u);
    EXPECT_EQ(live[0].repo, "org/a");
    EXPECT_EQ(live[0].commit, kCommitA);
    EXPECT_EQ(live[0].holder, "exlr8d-stage home tp4 rank1");
    EXPECT_EQ(live[0].pid, ::getpid());
    // Two pins of one process are two pins.
    auto second = ProcessPin::Acquire(tmp.path(), "org/a", kCommitA, "another");
    ASSERT_TRUE(second.ok());
    EXPECT_EQ(ListProcessPins(tmp.path(), true)->size(), 2u);
  }
  EXPECT_TRUE(ListProcessPins(tmp.path(), true)->empty());
  EXPECT_TRUE(PinFiles(tmp.path()).empty());
}

// A lister probes every pin file with a shared lock of its own for an
// instant, and sweeps those it could lock: pins being made at that instant
// must neither fail nor be swept.
TEST(ProcessPinTest, ListersProbingNeverBreakAPinBeingMade) {
  TempDir tmp;
  auto held = ProcessPin::Acquire(tmp.path(), "org/a", kCommitA, "held");
  ASSERT_TRUE(held.ok());
  std::atomic<bool> stop{false};
  std::atomic<int> lost{0};
  std::thread lister([&] {
    while (!stop) {
      auto live = ListProcessPins(tmp.path(), /*sweep=*/true);
      if (!live.ok() || live->empty()) ++lost;  // the held pin must always be there
    }
  });
  int failures = 0;
  for (int i = 0; i < 5000; ++i)
    if (!ProcessPin::Acquire(tmp.path(), "org/b", kCommitB, "churn").ok()) ++failures;
  stop = true;
  lister.join();
  EXPECT_EQ(failures, 0);
  EXPECT_EQ(lost, 0);
  EXPECT_EQ(ListProcessPins(tmp.path(), true)->size(), 1u);
}

TEST(ProcessPinTest, RefusesBadNames) {
  TempDir tmp;
  EXPECT_EQ(ProcessPin::Acquire(tmp.path(), "../x", kCommitA, "h").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ProcessPin::Acquire(tmp.path(), "org/a", "main", "h").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ProcessPin::Acquire(tmp.path(), "org/a", kCommitA, "a\nb").status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ProcessPin::Acquire(tmp.path(), "org/a", kCommitA, "").status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(PinFiles(tmp.path()).empty());
}

TEST(ProcessPinTest, AKilledHolderLeavesNoPin) {
  TempDir tmp;
  PinningChild child(tmp.path(), "org/a", kCommitA, "stage");
  ASSERT_TRUE(child.ok());
  auto live = *ListProcessPins(tmp.path(), true);
  ASSERT_EQ(live.size(), 1u);
  EXPECT_EQ(live[0].pid, child.pid());
  child.Kill();  // SIGKILL: no destructor ran, the file is still there
  ASSERT_EQ(PinFiles(tmp.path()).size(), 1u);
  // A reader (no sweep) sees no pin and leaves the file; the owner removes it.
  EXPECT_TRUE(ListProcessPins(tmp.path(), false)->empty());
  EXPECT_EQ(PinFiles(tmp.path()).size(), 1u);
  EXPECT_TRUE(ListProcessPins(tmp.path(), true)->empty());
  EXPECT_TRUE(PinFiles(tmp.path()).empty());
}

TEST(ProcessPinTest, ForeignAndHalfMadeFilesAreNeverTrusted) {
  TempDir tmp;
  const std::filesystem::path dir = ProcessPinDir(tmp.path());
  std::filesystem::create_directories(dir);
  // A locked file that is not a pin protects nothing, and is not removed
  // while it is locked.
  const std::string junk = (dir / "junk.pin").string();
  std::ofstream(junk) << "exlr8d-pin 1\norg/a\nnot-a-commit\nh\n1\n";
  const int fd = ::open(junk.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX), 0);
  // An unterminated one, a huge one, a directory, a symlink to a live pin.
  std::ofstream(dir / "short.pin") << "exlr8d-pin 1\norg/a";
  std::ofstream(dir / "big.pin") << std::string(100000, 'x');
  std::filesystem::create_directories(dir / "d.pin");
  // A temporary file being made right now stays; one a minute old goes.
  std::ofstream(dir / ".making-fresh") << "";
  std::ofstream(dir / ".making-old") << "";
  const timespec old[2] = {{::time(nullptr) - 120, 0}, {::time(nullptr) - 120, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, (dir / ".making-old").c_str(), old, 0), 0);
  auto live = ProcessPin::Acquire(tmp.path(), "org/b", kCommitB, "real");
  ASSERT_TRUE(live.ok());
  std::filesystem::create_symlink((*live)->path(), dir / "link.pin");

  auto pins = *ListProcessPins(tmp.path(), true);
  ASSERT_EQ(pins.size(), 1u);
  EXPECT_EQ(pins[0].holder, "real");
  const std::vector<std::string> left = PinFiles(tmp.path());
  EXPECT_NE(std::find(left.begin(), left.end(), "junk.pin"), left.end());
  EXPECT_NE(std::find(left.begin(), left.end(), ".making-fresh"), left.end());
  EXPECT_EQ(std::find(left.begin(), left.end(), ".making-old"), left.end());
  EXPECT_EQ(std::find(left.begin(), left.end(), "short.pin"), left.end());  // unlocked: a dead holder's
  EXPECT_NE(std::find(left.begin(), left.end(), "d.pin"), left.end());      // not a file: left alone
  ::close(fd);
}

TEST(ProcessPinTest, APinDirectoryThatIsNotOneIsAClearError) {
  TempDir tmp;
  std::ofstream(ProcessPinDir(tmp.path())) << "a file where the pins directory belongs";
  Status s = ProcessPin::Acquire(tmp.path(), "org/a", kCommitA, "h").status();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find(ProcessPinDir(tmp.path()).string() + " is not a directory"), std::string::npos)
      << s.ToString();
  EXPECT_EQ(ListProcessPins(tmp.path(), true).status().code(), StatusCode::kFailedPrecondition);
}

// The cache: a fileset a live process pins is listed with it, and neither
// Gc nor Evict takes it; once the process is gone, both do.
TEST(ProcessPinTest, GcAndEvictLeaveAHeldFilesetAlone) {
  TempDir tmp;
  Result<std::unique_ptr<Cache>> opened = Cache::Open(tmp.path());
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  std::unique_ptr<Cache> cache = std::move(opened).value();
  auto make = [&](const char* repo, const char* commit) {
    const FilesetId fs = *cache->PutFileset(repo, "main", commit);
    const FileId f = *cache->PutFile(fs, "w.bin", 1000);
    EXPECT_TRUE(cache->WriteAt(f, 0, Pattern(f, 0, 1000)).ok());
    const VerifiedExtent e{f, 0, 1000};
    EXPECT_TRUE(cache->CommitVerified({&e, 1}).ok());
    return fs;
  };
  const FilesetId a = make("org/a", kCommitA);  // least recently used: gc's first choice
  const FilesetId b = make("org/b", kCommitB);
  PinningChild stage(tmp.path(), "org/a", kCommitA, "exlr8d-stage home tp2 rank0");
  ASSERT_TRUE(stage.ok());

  const FilesetInfo info = *cache->GetFileset(a);
  ASSERT_EQ(info.process_pins.size(), 1u);
  EXPECT_EQ(info.process_pins[0].pid, stage.pid());
  EXPECT_TRUE(info.pinned());
  EXPECT_TRUE(info.pins.empty());
  EXPECT_FALSE(cache->GetFileset(b)->pinned());
  // A read-only view (exlr8d list beside a pull) sees it too.
  EXPECT_EQ((*Cache::OpenReadOnly(tmp.path()))->GetFileset(a)->process_pins.size(), 1u);

  Status s = cache->Evict(a).status();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("held by exlr8d-stage home tp2 rank0 (pid " + std::to_string(stage.pid()) + ")"),
            std::string::npos)
      << s.ToString();
  GcResult r = *cache->Gc(0);
  EXPECT_EQ(r.evicted, std::vector<FilesetId>{b});
  EXPECT_EQ(r.bytes_remaining, 1000u);
  EXPECT_TRUE(std::filesystem::exists(tmp.path() / "org" / "a" / kCommitA / "w.bin"));
  EXPECT_EQ(PinFiles(tmp.path()).size(), 1u);  // the orphan sweep leaves the pins alone

  stage.Kill();
  EXPECT_TRUE(cache->GetFileset(a)->process_pins.empty());
  r = *cache->Gc(0);
  EXPECT_EQ(r.evicted, std::vector<FilesetId>{a});
  EXPECT_EQ(r.bytes_remaining, 0u);
  EXPECT_TRUE(PinFiles(tmp.path()).empty());
}

}  // namespace
}  // namespace exlr8
