// The lease holder's socket (daemon/stage/lease_server.h) with plain text for
// a description: real Unix sockets, no GPU. Who holds a connection open is a
// lessee; the holder sees them come and go.
#include "daemon/stage/lease_server.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "daemon/base/posix.h"
#include "tests/daemon/base/fake_clock.h"
#include "tests/daemon/cache_test_util.h"
#include "tests/daemon/connection_holder_util.h"
#include "tests/daemon/serve_test_util.h"  // WaitFor

namespace exlr8 {
namespace {

using ::exlr8::testing::ConnectionHolder;
using ::exlr8::testing::FakeClock;
using ::exlr8::testing::TempDir;
namespace fs = std::filesystem;

// Connects; returns the connection (invalid when refused).
UniqueFd Connect(const fs::path& socket) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, socket.c_str(), socket.native().size() + 1);
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) return UniqueFd();
  return fd;
}

// Reads to the end of the holder's stream, or until nothing came for 10 s;
// the connection stays open.
std::string ReadDescription(int fd) {
  std::string text;
  char buf[4096];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 10'000) != 1) break;
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    text.append(buf, static_cast<std::size_t>(n));
  }
  return text;
}

TEST(LeaseServerTest, LesseesAreThoseWhoKeepTheirConnection) {
  TempDir dir;
  const fs::path socket = dir.path() / "lease.sock";
  const std::string description(300'000, 'd');  // more than a socket buffer
  auto server = LeaseServer::Start(socket, description);
  ASSERT_TRUE(server.ok()) << server.status().ToString();

  UniqueFd a = Connect(socket);
  ASSERT_TRUE(a.valid());
  EXPECT_EQ(ReadDescription(a.get()), description);  // ends: the holder shut its side
  UniqueFd b = Connect(socket);
  ASSERT_TRUE(b.valid());
  EXPECT_EQ(ReadDescription(b.get()), description);
  ASSERT_TRUE(WaitFor([&] { return (*server)->Lessees().size() == 2; }, 5));
  EXPECT_EQ((*server)->Lessees(), (std::vector<pid_t>{::getpid(), ::getpid()}));
  EXPECT_EQ((*server)->served(), 2u);

  a.Reset();  // a lets go
  EXPECT_TRUE(WaitFor([&] { return (*server)->Lessees().size() == 1; }, 5));

  // Told to stop: no new lessee, the one left stays until it lets go.
  (*server)->StopAccepting();
  EXPECT_FALSE(fs::exists(socket));
  EXPECT_FALSE(Connect(socket).valid());
  EXPECT_EQ((*server)->Lessees().size(), 1u);
  (*server)->StopAccepting();  // idempotent
  b.Reset();
  EXPECT_TRUE(WaitFor([&] { return (*server)->Lessees().empty(); }, 5));
  (*server)->Stop();
  EXPECT_EQ((*server)->served(), 2u);
}

// The holder is told of every change, so exlr8d-stage can report who holds
// its lease (GET /v1/stages/{id}).
TEST(LeaseServerTest, EveryChangeOfLesseesIsAnnounced) {
  TempDir dir;
  const fs::path socket = dir.path() / "lease.sock";
  std::mutex mu;
  std::vector<std::size_t> counts;  // the number of lessees at each announcement
  auto server = LeaseServer::Start(socket, "{}", [&](const std::vector<pid_t>& pids) {
    for (pid_t p : pids) EXPECT_EQ(p, ::getpid());
    std::lock_guard<std::mutex> l(mu);
    counts.push_back(pids.size());
  });
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto announced = [&] {
    std::lock_guard<std::mutex> l(mu);
    return counts;
  };
  UniqueFd a = Connect(socket);
  ASSERT_EQ(ReadDescription(a.get()), "{}");
  UniqueFd b = Connect(socket);
  ASSERT_EQ(ReadDescription(b.get()), "{}");
  ASSERT_TRUE(WaitFor([&] { return announced().size() == 2; }, 5));
  a.Reset();
  b.Reset();
  ASSERT_TRUE(WaitFor([&] { return !announced().empty() && announced().back() == 0; }, 5));
  const std::vector<std::size_t> seen = announced();
  EXPECT_EQ(seen.front(), 1u);
  EXPECT_EQ(seen[1], 2u);
  (*server)->Stop();
}

TEST(LeaseServerTest, LesseesAreBounded) {
  TempDir dir;
  const fs::path socket = dir.path() / "lease.sock";
  auto server = LeaseServer::Start(socket, "{}");
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  std::vector<UniqueFd> held;
  for (std::size_t i = 0; i < LeaseServer::kMaxLessees; ++i) {
    held.push_back(Connect(socket));
    ASSERT_EQ(ReadDescription(held.back().get()), "{}") << i;
  }
  UniqueFd over = Connect(socket);
  ASSERT_TRUE(over.valid());
  EXPECT_EQ(ReadDescription(over.get()), "");  // closed unanswered
  EXPECT_EQ((*server)->served(), LeaseServer::kMaxLessees);
  held.pop_back();  // room for one again
  ASSERT_TRUE(WaitFor([&] { return (*server)->Lessees().size() == LeaseServer::kMaxLessees - 1; }, 5));
  UniqueFd again = Connect(socket);
  EXPECT_EQ(ReadDescription(again.get()), "{}");
}

// No one member of the socket's group may hold every connection, locking
// the other lessees out (and holding a release off). A user gets
// kMaxLesseesPerUser; root and the holder's user keep a reserve.
TEST(LeaseServerTest, OneUserCannotHoldEveryConnection) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root, to lease as other users";
  TempDir dir;
  ASSERT_EQ(::chmod(dir.path().c_str(), 0711), 0);  // the socket's mode and group decide
  const fs::path socket = dir.path() / "lease.sock";
  auto server = LeaseServer::Start(socket, "{}");
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  // Lessees of other users (gid 0 among their groups, as members of the
  // socket's group), each keeping its connections until destroyed.
  std::vector<std::unique_ptr<ConnectionHolder>> lessees;
  auto served = [&](uid_t uid, int count) {
    lessees.push_back(std::make_unique<ConnectionHolder>(
        std::vector<std::string>{"--uid", std::to_string(uid), "--root-group", "--unix", socket.string(),
                                 "lease", std::to_string(count)}));
    const int n = lessees.back()->Report();
    EXPECT_GE(n, 0) << "uid " << uid << ": " << lessees.back()->why();
    return n;
  };
  constexpr int kPerUser = static_cast<int>(LeaseServer::kMaxLesseesPerUser);
  EXPECT_EQ(served(65534, 100), kPerUser);
  EXPECT_EQ(served(65533, 100), kPerUser);
  EXPECT_EQ(served(65532, 100), kPerUser);
  // 192 held: a fourth user gets up to the reserve, a fifth nothing.
  constexpr int kShared = static_cast<int>(LeaseServer::kMaxLessees - LeaseServer::kReservedLessees);
  EXPECT_EQ(served(65531, 100), kShared - 3 * kPerUser);
  EXPECT_EQ(served(65530, 10), 0);
  // Root gets the reserve.
  std::vector<UniqueFd> mine;
  for (std::size_t i = 0; i < LeaseServer::kReservedLessees; ++i) {
    mine.push_back(Connect(socket));
    EXPECT_EQ(ReadDescription(mine.back().get()), "{}") << i;
  }
  EXPECT_TRUE(WaitFor([&] { return (*server)->Lessees().size() == LeaseServer::kMaxLessees; }, 5));
  lessees.clear();  // killed and reaped
  // Their connections closed with them: room again.
  EXPECT_TRUE(WaitFor([&] { return (*server)->Lessees().size() == LeaseServer::kReservedLessees; }, 5));
}

// The description is written off the server's thread: a client that reads
// slowly, or not at all, must hold up neither other lessees nor SIGTERM's
// StopAccepting. 20 MB is about a GLM-5.3 rank's description.
TEST(LeaseServerTest, AClientThatDoesNotReadHoldsUpNoOne) {
  TempDir dir;
  const fs::path socket = dir.path() / "lease.sock";
  const std::string description(20 << 20, 'd');
  auto server = LeaseServer::Start(socket, description);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  UniqueFd stuck = Connect(socket);  // never reads
  ASSERT_TRUE(stuck.valid());
  UniqueFd reader = Connect(socket);
  ASSERT_TRUE(reader.valid());
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(ReadDescription(reader.get()).size(), description.size());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5))
      << "waited for the stuck client";
  ASSERT_TRUE(WaitFor([&] { return (*server)->Lessees().size() == 1; }, 5));
  EXPECT_EQ((*server)->served(), 1u);

  const auto t0 = std::chrono::steady_clock::now();
  (*server)->StopAccepting();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
  EXPECT_LT(ReadDescription(stuck.get()).size(), description.size()) << "dropped, never a lessee";
  EXPECT_EQ((*server)->Lessees().size(), 1u);
}

// On a FakeClock: the deadline passes when the test says, not after a sleep.
TEST(LeaseServerTest, AClientNotTakingTheDescriptionInTimeIsClosed) {
  TempDir dir;
  const fs::path socket = dir.path() / "lease.sock";
  const std::string description(8 << 20, 'd');
  FakeClock clock;
  auto server = LeaseServer::Start(socket, description, {}, std::chrono::milliseconds(200), clock);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  UniqueFd slow = Connect(socket);
  ASSERT_TRUE(slow.valid());
  // The first bytes arrive once the server took the connection, and with
  // it the deadline; then the clock passes it.
  pollfd first{slow.get(), POLLIN, 0};
  ASSERT_EQ(::poll(&first, 1, 10'000), 1);
  clock.Advance(std::chrono::milliseconds(600));
  EXPECT_LT(ReadDescription(slow.get()).size(), description.size());
  EXPECT_EQ((*server)->served(), 0u);
  EXPECT_TRUE((*server)->Lessees().empty());
  UniqueFd next = Connect(socket);  // the server goes on
  EXPECT_EQ(ReadDescription(next.get()).size(), description.size());
}

TEST(LeaseServerTest, StopDropsLesseesAndAStaleSocketIsReplaced) {
  TempDir dir;
  const fs::path socket = dir.path() / "lease.sock";
  {
    // A socket file nobody answers on (a killed holder's).
    UniqueFd stale(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, socket.c_str(), socket.native().size() + 1);
    ASSERT_EQ(::bind(stale.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr), 0);
  }
  ASSERT_TRUE(fs::exists(socket));
  auto server = LeaseServer::Start(socket, "{}");
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  // A live holder is not replaced.
  EXPECT_EQ(LeaseServer::Start(socket, "{}").status().code(), StatusCode::kFailedPrecondition);
  UniqueFd a = Connect(socket);
  ASSERT_EQ(ReadDescription(a.get()), "{}");
  ASSERT_TRUE(WaitFor([&] { return (*server)->Lessees().size() == 1; }, 5));
  (*server)->Stop();  // drops the lessee: it reads end of stream, its writes fail
  EXPECT_TRUE((*server)->Lessees().empty());
  EXPECT_FALSE(fs::exists(socket));
  char c;
  EXPECT_EQ(::read(a.get(), &c, 1), 0);
  (*server)->Stop();  // idempotent
}

}  // namespace
}  // namespace exlr8
