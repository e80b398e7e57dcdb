// wan_proxy (bench/wan_proxy.cpp) is what the long-path numbers of
// docs/BENCHMARKS.md rest on, so it is checked like product code: the real
// binary, real sockets on loopback. Each test asserts a lower bound that
// only the modelled delay, window or rate can produce: without them the
// same transfer takes a few milliseconds on loopback.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

int ListenLoopback(std::uint16_t* port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 16) != 0) return -1;
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  return fd;
}

int Connect(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool SendAll(int fd, const std::vector<char>& bytes) {
  for (std::size_t done = 0; done < bytes.size();) {
    const ssize_t n = ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

// Reads until the peer ends the stream (or `limit` bytes, whichever first).
std::vector<char> ReadToEnd(int fd, std::size_t limit) {
  std::vector<char> out;
  std::vector<char> buf(64 << 10);
  while (out.size() < limit) {
    const ssize_t n = ::recv(fd, buf.data(), std::min(buf.size(), limit - out.size()), 0);
    if (n <= 0) break;
    out.insert(out.end(), buf.begin(), buf.begin() + n);
  }
  return out;
}

std::vector<char> RandomBytes(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<char> v(n);
  for (char& c : v) c = static_cast<char>(rng());
  return v;
}

// The relay binary, run as a child, between the test and an upstream the
// test serves; killed at the end.
class Relay {
 public:
  explicit Relay(std::uint16_t upstream, const std::vector<std::string>& flags) {
    port_file_ = ::testing::TempDir() + "/wan_proxy_port_" + std::to_string(::getpid());
    std::remove(port_file_.c_str());
    std::vector<std::string> args = {std::string(EXLR8_BIN_DIR) + "/wan_proxy", "--listen", "127.0.0.1:0",
                                     "--upstream", "127.0.0.1:" + std::to_string(upstream), "--port-file",
                                     port_file_};
    args.insert(args.end(), flags.begin(), flags.end());
    pid_ = ::fork();
    if (pid_ == 0) {
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    for (int i = 0; i < 400 && port_ == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      std::ifstream in(port_file_);
      int p = 0;
      if (in >> p) port_ = static_cast<std::uint16_t>(p);
    }
  }
  ~Relay() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    std::remove(port_file_.c_str());
  }
  std::uint16_t port() const { return port_; }

 private:
  std::string port_file_;
  pid_t pid_ = -1;
  std::uint16_t port_ = 0;
};

// An upstream that answers each connection with `body`, then closes.
class Sender {
 public:
  explicit Sender(std::vector<char> body, int connections) : body_(std::move(body)) {
    fd_ = ListenLoopback(&port_);
    thread_ = std::thread([this, connections] {
      std::vector<std::thread> each;
      for (int i = 0; i < connections; ++i) {
        const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (c < 0) break;
        each.emplace_back([this, c] {
          (void)SendAll(c, body_);
          ::close(c);
        });
      }
      for (auto& t : each) t.join();
    });
  }
  ~Sender() {
    thread_.join();
    ::close(fd_);
  }
  std::uint16_t port() const { return port_; }

 private:
  std::vector<char> body_;
  int fd_ = -1;
  std::uint16_t port_ = 0;
  std::thread thread_;
};

TEST(WanProxy, RelaysEveryByteBothWaysAndDelaysTheRoundTrip) {
  // An echo upstream: what the client sends comes back through the relay.
  std::uint16_t up_port = 0;
  const int lfd = ListenLoopback(&up_port);
  ASSERT_GE(lfd, 0);
  std::thread echo([lfd] {
    const int c = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) return;
    std::vector<char> buf(64 << 10);
    while (true) {
      const ssize_t n = ::recv(c, buf.data(), buf.size(), 0);
      if (n <= 0) break;
      if (!SendAll(c, std::vector<char>(buf.begin(), buf.begin() + n))) break;
    }
    ::close(c);
  });
  Relay relay(up_port, {"--delay", "50ms"});
  ASSERT_NE(relay.port(), 0) << "wan_proxy did not start";
  const int fd = Connect(relay.port());
  ASSERT_GE(fd, 0);
  const std::vector<char> sent = RandomBytes(3 << 20, 1);
  const auto start = Clock::now();
  std::thread writer([&] {
    EXPECT_TRUE(SendAll(fd, sent));
    ::shutdown(fd, SHUT_WR);  // the end must pass through, both ways
  });
  const std::vector<char> got = ReadToEnd(fd, sent.size() + 1);
  const double s = Since(start);
  writer.join();
  ::close(fd);
  echo.join();
  ::close(lfd);
  ASSERT_EQ(got.size(), sent.size());
  EXPECT_TRUE(got == sent) << "the relay changed the bytes";
  EXPECT_GE(s, 0.100) << "a round trip through a 50 ms relay took " << s << " s";
}

TEST(WanProxy, WindowCapsWhatOneConnectionMoves) {
  // 2 MiB through a window of 256 KiB on a 2 × 20 ms round trip: at most
  // 256 KiB per 40 ms, so at least 0.28 s (7 windows after the first).
  // Unrelayed, it is a few milliseconds.
  Sender up(RandomBytes(2 << 20, 2), 1);
  Relay relay(up.port(), {"--delay", "20ms", "--window", "256K"});
  ASSERT_NE(relay.port(), 0);
  const auto start = Clock::now();
  const int fd = Connect(relay.port());
  ASSERT_GE(fd, 0);
  const std::vector<char> got = ReadToEnd(fd, 3 << 20);
  const double s = Since(start);
  ::close(fd);
  EXPECT_EQ(got.size(), 2u << 20);
  EXPECT_GE(s, 0.28) << "2 MiB through a 256 KiB window in " << s << " s";
}

TEST(WanProxy, RateCapsAllConnectionsTogether) {
  // Two connections of 2 MiB each under 8 MiB/s in all: at least 0.5 s,
  // less the 10 ms burst. Each alone would be allowed 0.25 s.
  Sender up(RandomBytes(2 << 20, 3), 2);
  Relay relay(up.port(), {"--rate", "8M"});
  ASSERT_NE(relay.port(), 0);
  const auto start = Clock::now();
  std::vector<std::size_t> sizes(2);
  std::vector<std::thread> clients;
  for (int i = 0; i < 2; ++i)
    clients.emplace_back([&, i] {
      const int fd = Connect(relay.port());
      if (fd < 0) return;
      sizes[static_cast<std::size_t>(i)] = ReadToEnd(fd, 3 << 20).size();
      ::close(fd);
    });
  for (auto& t : clients) t.join();
  const double s = Since(start);
  EXPECT_EQ(sizes[0], 2u << 20);
  EXPECT_EQ(sizes[1], 2u << 20);
  EXPECT_GE(s, 0.48) << "4 MiB under 8 MiB/s in " << s << " s";
}

}  // namespace
