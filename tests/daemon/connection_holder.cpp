// A client of another user, for the tests of per-user connection bounds
// (serve_test, lease_server_test; connection_holder_util.h starts it). Run
// as root, it takes the uid and groups it is given, opens connections and
// reports on descriptor 3 how many the server serves or holds.
//
// A program of its own, not code run after fork() in the test's threaded
// process, and one that cannot outlive the test: it dies with its parent
// (PR_SET_PDEATHSIG, set after the uid change, which clears it), and after
// --lifetime seconds whatever happens (alarm). Every connect and read has a
// timeout. A child left behind by a dead test (one killed by a SIGPIPE,
// say) would otherwise keep ctest's output pipe open until ctest's timeout.
//
//   connection_holder --parent PID --uid UID [--root-group] --lifetime S
//                     (--unix PATH | --tcp PORT) MODE N
//
//   --parent PID   the test process: it exits at once if that is no longer
//                  its parent (the test died before the death signal was set)
//   --root-group   gid 0 as its only supplementary group (a member of a
//                  socket's group); no supplementary groups without it
//   hold N         keeps N connections open, idle. Once it has made the
//                  first N, waits a second and reports how many the server
//                  still holds (nothing to read: no 503, no end of stream);
//                  then opens a new one 50 ms after the server closes one.
//   lease N        connects N times, reading each to its end and keeping it
//                  open; reports how many got any bytes. Then waits.
//
// The report is one int in host byte order. Exit status: 2 bad arguments,
// 3 the uid or groups could not be taken, 4 the parent is gone, 5 the report
// could not be written.
#include <arpa/inet.h>
#include <grp.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr int kReportFd = 3;
constexpr int kConnectTimeoutS = 2;
constexpr int kReadTimeoutMs = 10'000;

struct Args {
  pid_t parent = 0;
  uid_t uid = 0;
  bool root_group = false;
  unsigned lifetime = 0;
  std::string unix_path;
  int tcp_port = 0;
  std::string mode;
  int count = -1;
};

[[noreturn]] void Fail(int status, const std::string& why) {
  std::fprintf(stderr, "connection_holder: %s\n", why.c_str());
  std::_Exit(status);
}

long Number(const char* text, const char* what) {
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || n < 0)
    Fail(2, std::string(what) + " is not a number: " + text);
  return n;
}

Args Parse(int argc, char** argv) {
  Args a;
  int i = 1;
  auto value = [&](const char* flag) -> const char* {
    if (i + 1 >= argc) Fail(2, std::string(flag) + " needs a value");
    return argv[++i];
  };
  for (; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--parent")
      a.parent = static_cast<pid_t>(Number(value("--parent"), "--parent"));
    else if (arg == "--uid")
      a.uid = static_cast<uid_t>(Number(value("--uid"), "--uid"));
    else if (arg == "--root-group")
      a.root_group = true;
    else if (arg == "--lifetime")
      a.lifetime = static_cast<unsigned>(Number(value("--lifetime"), "--lifetime"));
    else if (arg == "--unix")
      a.unix_path = value("--unix");
    else if (arg == "--tcp")
      a.tcp_port = static_cast<int>(Number(value("--tcp"), "--tcp"));
    else if (arg == "hold" || arg == "lease") {
      a.mode = arg;
      a.count = static_cast<int>(Number(value(argv[i]), "the count"));
    } else {
      Fail(2, "unknown argument " + arg);
    }
  }
  if (a.parent <= 0 || a.uid == 0 || a.lifetime == 0 || a.mode.empty() || a.count < 0 ||
      a.unix_path.empty() == (a.tcp_port == 0) || a.tcp_port > 65535 ||
      a.unix_path.size() >= sizeof(sockaddr_un{}.sun_path))
    Fail(2,
         "usage: connection_holder --parent PID --uid UID [--root-group] --lifetime S "
         "(--unix PATH | --tcp PORT) (hold|lease) N");
  return a;
}

// A connection to the server; -1 when refused or not accepted within
// kConnectTimeoutS (SO_SNDTIMEO bounds connect on Linux).
int Connect(const Args& a) {
  const bool unix_socket = !a.unix_path.empty();
  const int fd = ::socket(unix_socket ? AF_UNIX : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  const timeval timeout{kConnectTimeoutS, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
  int rc = -1;
  if (unix_socket) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, a.unix_path.c_str(), a.unix_path.size() + 1);
    rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
  } else {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(a.tcp_port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
  }
  if (rc == 0) return fd;
  ::close(fd);
  return -1;
}

// Held: open, nothing to read (no 503, no end of stream) yet.
bool Held(int fd) {
  pollfd p{fd, POLLIN, 0};
  return fd >= 0 && ::poll(&p, 1, 0) == 0;
}

void Sleep(long ms) {
  timespec t{ms / 1000, (ms % 1000) * 1'000'000};
  while (::nanosleep(&t, &t) != 0 && errno == EINTR) {
  }
}

void Report(int n) {
  if (::write(kReportFd, &n, sizeof n) != static_cast<ssize_t>(sizeof n)) Fail(5, "cannot write the report");
}

[[noreturn]] void Hold(const Args& a) {
  std::vector<int> fds(static_cast<std::size_t>(a.count), -1);
  for (int& fd : fds) fd = Connect(a);
  Sleep(1000);
  int n = 0;
  for (int fd : fds) n += Held(fd) ? 1 : 0;
  Report(n);
  for (;;) {
    Sleep(50);
    for (int& fd : fds) {
      if (Held(fd)) continue;
      if (fd >= 0) ::close(fd);
      fd = Connect(a);
    }
  }
}

// Reads `fd` to its end; the bytes read (-1 after kReadTimeoutMs without one).
long ReadToEnd(int fd) {
  long total = 0;
  char buf[4096];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, kReadTimeoutMs) != 1) return -1;
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) return total;
    total += n;
  }
}

[[noreturn]] void Lease(const Args& a) {
  int served = 0;
  for (int i = 0; i < a.count; ++i) {
    const int fd = Connect(a);
    if (fd >= 0 && ReadToEnd(fd) > 0) ++served;  // kept open, as a lessee does
  }
  Report(served);
  for (;;) ::pause();
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = Parse(argc, argv);
  ::alarm(a.lifetime);  // SIGALRM's default action ends it, whatever it waits for
  const gid_t groups[] = {0};
  if (::setgroups(a.root_group ? 1 : 0, groups) != 0 || ::setresgid(a.uid, a.uid, a.uid) != 0 ||
      ::setresuid(a.uid, a.uid, a.uid) != 0)
    Fail(3, "cannot run as uid " + std::to_string(a.uid) + ": " + std::strerror(errno));
  // After the uid change, which clears it.
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
    Fail(3, std::string("PR_SET_PDEATHSIG: ") + std::strerror(errno));
  if (::getppid() != a.parent) Fail(4, "the test process is gone");
  if (a.mode == "hold") Hold(a);
  Lease(a);
}
