// Running this build's command-line programs from a test, as an operator
// would: through the shell, with stdout and stderr captured.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace exlr8 {

struct ShellRun {
  int status = -1;  // exit status; -1 when it did not exit normally
  std::string out;  // stdout and stderr
};

// Runs `command` through the shell, capturing its output and exit status.
inline ShellRun Shell(const std::string& command) {
  ShellRun r;
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int w = ::pclose(p);
  r.status = WIFEXITED(w) ? WEXITSTATUS(w) : -1;
  return r;
}

// `s` single-quoted for the shell.
inline std::string Quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

inline std::string Exlr8d() { return std::string(EXLR8_BIN_DIR) + "/exlr8d"; }

}  // namespace exlr8
