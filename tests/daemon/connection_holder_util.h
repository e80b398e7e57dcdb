// Clients of other users for the tests of per-user connection bounds: the
// connection_holder program (connection_holder.cpp says what it does),
// started with posix_spawn, so that nothing but the exec runs in a child of
// the test's threaded process. REQUIRES: root (the holder takes another uid).
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

extern char** environ;

namespace exlr8::testing {

// One connection_holder process, killed (and reaped) when destroyed. It
// also dies with the thread that started it, and after `lifetime` at the
// latest, so no failure of the test can leave it running.
class ConnectionHolder {
 public:
  // `args`: the holder's arguments after --parent, --lifetime (and the
  // program), e.g. {"--uid", "65534", "--unix", path, "hold", "5"}.
  explicit ConnectionHolder(const std::vector<std::string>& args,
                            std::chrono::seconds lifetime = std::chrono::seconds(60)) {
    int report[2];
    if (::pipe2(report, O_CLOEXEC) != 0) {
      why_ = std::string("pipe2: ") + std::strerror(errno);
      return;
    }
    report_ = report[0];
    int write_end = report[1];
    if (write_end == kReportFd) {  // dup2 onto itself would keep close-on-exec
      write_end = ::fcntl(report[1], F_DUPFD_CLOEXEC, kReportFd + 1);
      ::close(report[1]);
    }
    std::vector<std::string> argv = {EXLR8_CONNECTION_HOLDER, "--parent", std::to_string(::getpid()),
                                     "--lifetime", std::to_string(lifetime.count())};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> c_argv;
    for (std::string& a : argv) c_argv.push_back(a.data());
    c_argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&actions, write_end, kReportFd);
    const int rc = ::posix_spawn(&pid_, c_argv[0], &actions, nullptr, c_argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    ::close(write_end);  // the holder's copy is the only writer: its end is seen as EOF
    if (rc != 0) {
      pid_ = -1;
      why_ = "cannot start " + argv[0] + ": " + std::strerror(rc);
    }
  }
  ~ConnectionHolder() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (report_ >= 0) ::close(report_);
  }
  ConnectionHolder(const ConnectionHolder&) = delete;
  ConnectionHolder& operator=(const ConnectionHolder&) = delete;

  // The count the holder reported; -1 when it did not start, ended without
  // a report (why() says how it ended), or sent none within `timeout`.
  int Report(std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    if (pid_ <= 0) return -1;
    const auto until = std::chrono::steady_clock::now() + timeout;
    int n = 0;
    std::size_t got = 0;
    while (got < sizeof n) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
      pollfd p{report_, POLLIN, 0};
      const int ready = left.count() <= 0 ? 0 : ::poll(&p, 1, static_cast<int>(left.count()));
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0) {
        why_ = "no report within " + std::to_string(timeout.count()) + " ms";
        return -1;
      }
      const ssize_t r = ::read(report_, reinterpret_cast<char*>(&n) + got, sizeof n - got);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {  // it ended: say how
        int status = 0;
        if (::waitpid(pid_, &status, 0) == pid_) {
          pid_ = -1;
          why_ = WIFEXITED(status) ? "the holder exited with status " + std::to_string(WEXITSTATUS(status))
                                   : "the holder was killed by signal " + std::to_string(WTERMSIG(status));
        } else {
          why_ = "the holder closed its report unreported";
        }
        return -1;
      }
      got += static_cast<std::size_t>(r);
    }
    return n;
  }
  // Why Report returned -1 (the holder's own message is on stderr).
  const std::string& why() const { return why_; }

 private:
  static constexpr int kReportFd = 3;  // connection_holder.cpp
  pid_t pid_ = -1;
  int report_ = -1;
  std::string why_;
};

}  // namespace exlr8::testing
