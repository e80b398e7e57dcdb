// Runs the built `exlr8` command as a real process, and a temporary
// directory for its files, for the command-line tests of tests/client/.
#pragma once

#include <stdlib.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace exlr8 {

struct ProcessResult {
  int status = -1;  // the exit status, -1 when killed by a signal
  std::string out;  // stdout and stderr together
};

// Runs exlr8 with `args` (shell-quoted by the caller).
inline ProcessResult Exlr8(const std::string& args) {
  const std::string cmd = std::string(EXLR8_BIN_DIR) + "/exlr8 " + args + " 2>&1";
  ProcessResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  std::size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

// A fresh directory under /tmp, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string t = "/tmp/exlr8-cli-test-XXXXXX";
    if (!mkdtemp(t.data())) std::abort();
    path_ = t;
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace exlr8
