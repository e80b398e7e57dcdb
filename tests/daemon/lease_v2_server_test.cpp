// The holder's side of lease protocol v2 (daemon/stage/lease_server.h,
// StartV2 and RequestRelease) with real lessees: other processes (this test
// binary run again as LeaseV2Lessee.Child) that open the lease
// (client/lease/host_lease.h) and hash every tensor of the image against
// its digest, on a real Unix socket.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "client/lease/description.h"
#include "client/lease/host_lease.h"
#include "daemon/stage/lease_server.h"
#include "format/checksum.h"
#include "tests/client/lease/lease_test_util.h"
#include "tests/client/lease/lease_v2_test_util.h"
#include "tests/daemon/base/fake_clock.h"

namespace exlr8 {
namespace {

using testing::FakeClock;
using ::testing::HasSubstr;
using testing::MakeV2Image;
using ::testing::UnorderedElementsAre;
using testing::V2Fds;
using testing::V2Image;

constexpr const char* kSocketEnv = "EXLR8_LEASE_V2_CHILD_SOCKET";
constexpr const char* kModeEnv = "EXLR8_LEASE_V2_CHILD_MODE";

void Say(const std::string& s) { (void)!::write(1, s.data(), s.size()); }

// The lessee, run in its own process by the tests below: opens the lease,
// hashes every tensor and every check, says so, then (mode "hold") waits for
// the release line, says so, and lets go; (mode "die") waits to be killed.
TEST(LeaseV2Lessee, Child) {
  const char* path = std::getenv(kSocketEnv);
  if (path == nullptr) GTEST_SKIP() << "run by the tests below as a lessee";
  ::alarm(60);  // never outlives a broken test
  const std::string mode = std::getenv(kModeEnv) != nullptr ? std::getenv(kModeEnv) : "hold";
  auto lease = OpenHostLease(path, std::chrono::seconds(20));
  if (!lease.ok()) {
    Say("OPEN-FAILED " + lease.status().ToString() + "\n");
    std::_Exit(3);
  }
  std::size_t mismatches = 0;
  for (const ImageTensor& t : lease->tables().tensors) mismatches += Xxh64::Hash(lease->Region(t)) != t.xxh64;
  for (const ImageCheck& c : lease->tables().checks) {
    Xxh64 h;
    for (const ImageSegment& s : c.segments) h.Update({lease->base() + s.offset, s.length});
    mismatches += h.Digest() != c.digest;
  }
  Say("OPENED tensors=" + std::to_string(lease->tables().tensors.size()) +
      " mismatches=" + std::to_string(mismatches) + "\n");
  if (mode == "die") {
    for (;;) ::pause();
  }
  auto r = lease->WaitRelease(std::chrono::seconds(30));
  if (!r.ok() || !r->has_value()) {
    Say("NO-RELEASE\n");
    std::_Exit(4);
  }
  Say("RELEASE deadline_s=" + std::to_string((*r)->deadline_s) + ((*r)->holder_gone ? " gone" : "") + "\n");
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the holder waits for this
  lease->Close();
  Say("CLOSED\n");
  std::_Exit(mismatches == 0 ? 0 : 5);
}

// This binary run again as a lessee of `socket`.
class Lessee {
 public:
  Lessee(const std::filesystem::path& socket, const std::string& mode) {
    int out[2];
    EXPECT_EQ(::pipe2(out, O_CLOEXEC), 0);
    std::vector<std::string> args = {"/proc/self/exe", "--gtest_filter=LeaseV2Lessee.Child"};
    std::vector<std::string> env = {std::string(kSocketEnv) + "=" + socket.string(),
                                    std::string(kModeEnv) + "=" + mode};
    for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
    std::vector<char*> argv, envp;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(out[1], 1);
      ::execve("/proc/self/exe", argv.data(), envp.data());
      ::_exit(127);
    }
    ::close(out[1]);
    out_ = out[0];
  }
  ~Lessee() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      Wait();
    }
    ::close(out_);
  }
  Lessee(const Lessee&) = delete;
  Lessee& operator=(const Lessee&) = delete;

  pid_t pid() const { return pid_; }
  // Reads the child's output until `text` shows (true) or 30 s pass or it
  // closes its output (false).
  bool ReadUntil(const std::string& text) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (printed_.find(text) == std::string::npos) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now())
              .count();
      if (left <= 0) return false;
      pollfd p{out_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
      char buf[256];
      const ssize_t n = ::read(out_, buf, sizeof buf);
      if (n <= 0) return false;
      printed_.append(buf, static_cast<std::size_t>(n));
    }
    return true;
  }
  const std::string& printed() const { return printed_; }
  // The exit status (waitpid's), reaping the child.
  int Wait() {
    int status = 0;
    if (pid_ > 0) ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }
  void Kill() { ::kill(pid_, SIGKILL); }

 private:
  pid_t pid_ = -1;
  int out_ = -1;
  std::string printed_;
};

std::filesystem::path SocketPath(const std::string& name) {
  return std::filesystem::temp_directory_path() / (name + "." + std::to_string(::getpid()) + ".sock");
}

// Until the server holds `n` lessees (real time, 20 s at most).
bool AwaitLessees(const LeaseServer& server, std::size_t n) {
  for (int i = 0; i < 2000; ++i) {
    if (server.Lessees().size() == n) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

class LeaseV2Server : public ::testing::Test {
 protected:
  Result<std::unique_ptr<LeaseServer>> Start(const std::filesystem::path& path,
                                             Clock& clock = Clock::Real()) {
    const int fd_list[] = {fds.image, fds.tables};
    return LeaseServer::StartV2(path, WriteLeaseDescriptionV2(im.description), fd_list, {},
                                std::chrono::seconds(30), clock);
  }
  const V2Image im = MakeV2Image(42);
  V2Fds fds{im};
};

TEST_F(LeaseV2Server, TwoLesseesReadEveryTensorAndTheReleaseReachesBoth) {
  const auto path = SocketPath("lease_v2_two");
  auto server = Start(path);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  Lessee a(path, "hold"), b(path, "hold");
  const std::string opened =
      "OPENED tensors=" + std::to_string(im.layout.tables.tensors.size()) + " mismatches=0";
  ASSERT_TRUE(a.ReadUntil(opened)) << a.printed();
  ASSERT_TRUE(b.ReadUntil(opened)) << b.printed();
  ASSERT_TRUE(AwaitLessees(**server, 2));
  EXPECT_THAT((*server)->Lessees(), UnorderedElementsAre(a.pid(), b.pid()));
  EXPECT_EQ((*server)->served(), 2u);

  const auto start = std::chrono::steady_clock::now();
  auto still = (*server)->RequestRelease(std::chrono::seconds(20));
  ASSERT_TRUE(still.ok()) << still.status().ToString();
  EXPECT_TRUE(still->empty());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(15));
  // Both had the line and closed before the wait ended.
  EXPECT_THAT(a.printed() + (a.ReadUntil("CLOSED") ? "" : "?"), HasSubstr("RELEASE deadline_s=20\nCLOSED"));
  EXPECT_THAT(b.printed() + (b.ReadUntil("CLOSED") ? "" : "?"), HasSubstr("RELEASE deadline_s=20\nCLOSED"));
  EXPECT_EQ(a.Wait(), 0);
  EXPECT_EQ(b.Wait(), 0);
  // No new lessee once the release is asked for.
  auto late = OpenHostLease(path, std::chrono::seconds(2));
  EXPECT_FALSE(late.ok());
}

TEST_F(LeaseV2Server, ALesseeThatDiesIsSeenGone) {
  const auto path = SocketPath("lease_v2_dies");
  auto server = Start(path);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  Lessee a(path, "die");
  ASSERT_TRUE(a.ReadUntil("OPENED")) << a.printed();
  EXPECT_THAT(a.printed(), HasSubstr("mismatches=0"));
  ASSERT_TRUE(AwaitLessees(**server, 1));
  a.Kill();
  a.Wait();
  ASSERT_TRUE(AwaitLessees(**server, 0));
  auto still = (*server)->RequestRelease(std::chrono::seconds(20));
  ASSERT_TRUE(still.ok());
  EXPECT_TRUE(still->empty());
}

TEST_F(LeaseV2Server, TheReleaseWaitEndsAtTheDeadlineOnTheServersClock) {
  FakeClock clock;
  const auto path = SocketPath("lease_v2_deadline");
  auto server = Start(path, clock);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto lease = OpenHostLease(path);  // this process: it does not let go
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  ASSERT_TRUE(AwaitLessees(**server, 1));
  Result<std::vector<pid_t>> still = InternalError("not yet");
  std::thread waiter([&] { still = (*server)->RequestRelease(std::chrono::milliseconds(4500)); });
  ASSERT_TRUE(clock.AwaitWaiters(1));
  auto r = lease->WaitRelease(std::chrono::seconds(10));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ((*r)->deadline_s, 5u);  // rounded up
  clock.Advance(std::chrono::seconds(4));
  ASSERT_TRUE(clock.AwaitWaiters(1)) << "still waiting before the deadline";
  clock.Advance(std::chrono::milliseconds(500));
  waiter.join();
  ASSERT_TRUE(still.ok()) << still.status().ToString();
  EXPECT_THAT(*still, UnorderedElementsAre(::getpid()));
  // The lessee's connection stays until Stop; then the lessee sees it go.
  (*server)->Stop();
  auto gone = lease->PollRelease();
  ASSERT_TRUE(gone.ok());
  EXPECT_EQ((*gone)->deadline_s, 5u) << "the release seen first stays";
}

TEST_F(LeaseV2Server, RefusesADescriptionALesseeWouldRefuse) {
  const auto path = SocketPath("lease_v2_refuse");
  const int one[] = {fds.tables};
  auto few = LeaseServer::StartV2(path, WriteLeaseDescriptionV2(im.description), one);
  ASSERT_FALSE(few.ok());
  EXPECT_EQ(few.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(few.status().message(), HasSubstr("names 2 file descriptors"));
  const int two[] = {fds.image, fds.tables};
  auto nl = LeaseServer::StartV2(path, WriteLeaseDescriptionV2(im.description) + "\n", two);
  ASSERT_FALSE(nl.ok());
  EXPECT_EQ(nl.status().code(), StatusCode::kInvalidArgument);
}

TEST_F(LeaseV2Server, AV1ServerHasNoReleaseAndAV2LesseeNamesIt) {
  const auto path = SocketPath("lease_v1_for_v2");
  auto server = LeaseServer::Start(path, WriteLeaseDescription(testing::ValidLeaseDescription()));
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto lease = OpenHostLease(path, std::chrono::seconds(5));
  ASSERT_FALSE(lease.ok());
  EXPECT_EQ(lease.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(lease.status().message(), HasSubstr("speaks lease protocol v1"));
  auto release = (*server)->RequestRelease(std::chrono::seconds(1));
  EXPECT_EQ(release.status().code(), StatusCode::kFailedPrecondition);
}

TEST_F(LeaseV2Server, TheServerKeepsItsOwnDescriptors) {
  const auto path = SocketPath("lease_v2_own");
  auto server = Start(path);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  // The caller's descriptors may close: the server sends its duplicates.
  ::close(fds.image);
  ::close(fds.tables);
  fds.image = fds.tables = -1;
  Lessee a(path, "hold");
  ASSERT_TRUE(a.ReadUntil("OPENED")) << a.printed();
  EXPECT_THAT(a.printed(), HasSubstr("mismatches=0"));
}

}  // namespace
}  // namespace exlr8
