// A program of this build run as a child process by a test: its stdout on a
// pipe the test reads, its stderr to a file or inherited, signalled and
// reaped by the test (and on destruction, with SIGTERM).
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace exlr8 {

class ChildProcess {
 public:
  // Runs EXLR8_BIN_DIR/<program> with `args`. `stderr_file` non-empty: the
  // child's stderr is appended there.
  ChildProcess(const std::string& program, std::vector<std::string> args,
               const std::string& stderr_file = "") {
    int out[2];
    if (::pipe(out) != 0) return;
    const std::string bin = std::string(EXLR8_BIN_DIR) + "/" + program;
    args.insert(args.begin(), bin);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(out[1], 1);
      ::close(out[0]);
      if (!stderr_file.empty()) {
        const int err = ::open(stderr_file.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (err >= 0) ::dup2(err, 2);
      }
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(bin.c_str(), argv.data());
      ::_exit(127);
    }
    ::close(out[1]);
    stdout_ = out[0];
  }
  ~ChildProcess() {
    Signal(SIGTERM);
    if (stdout_ >= 0) ::close(stdout_);
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // Reads stdout until `text` has appeared in what was read (true) or the
  // child closed it (false). Everything read is in printed().
  bool ReadUntil(const std::string& text) {
    char c;
    while (printed_.find(text) == std::string::npos) {
      if (stdout_ < 0 || ::read(stdout_, &c, 1) != 1) return false;
      printed_ += c;
    }
    return true;
  }
  // Reads stdout to its end (the child exited or closed it).
  const std::string& ReadAll() {
    char buf[4096];
    ssize_t n = 0;
    while (stdout_ >= 0 && (n = ::read(stdout_, buf, sizeof buf)) > 0)
      printed_.append(buf, static_cast<std::size_t>(n));
    return printed_;
  }
  const std::string& printed() const { return printed_; }

  // Sends `sig` without waiting for the child to end.
  void Send(int sig) const {
    if (pid_ > 0) ::kill(pid_, sig);
  }
  // Sends `sig` and reaps the child: its exit status, or 128 + the signal
  // that ended it. Later calls return the same status.
  int Signal(int sig) {
    if (pid_ <= 0) return status_;
    ::kill(pid_, sig);
    int w = 0;
    ::waitpid(pid_, &w, 0);
    pid_ = -1;
    status_ = WIFEXITED(w) ? WEXITSTATUS(w) : 128 + WTERMSIG(w);
    return status_;
  }

 private:
  pid_t pid_ = -1;
  int stdout_ = -1;
  std::string printed_;
  int status_ = -1;
};

// Runs `command` with the shell; its exit status (128 when it did not
// exit) and what it printed, stdout and stderr together.
inline std::pair<int, std::string> RunShell(const std::string& command) {
  std::string out;
  std::FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return {-1, "popen failed"};
  char buf[4096];
  std::size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int w = ::pclose(p);
  return {WIFEXITED(w) ? WEXITSTATUS(w) : 128, out};
}

}  // namespace exlr8
