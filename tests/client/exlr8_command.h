// Runs the built `exlr8` command as a real process, and a temporary
// directory for its files, for the command-line tests of tests/client/.
#pragma once

#include <stdlib.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "tests/support/temp_dir.h"

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

using testing::TempDir;

}  // namespace exlr8
