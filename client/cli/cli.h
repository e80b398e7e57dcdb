// Shared conventions of the `exlr8` and `exlr8d` commands: exit statuses,
// error printing, human-readable sizes.
//
// Exit statuses (docs/OPERATIONS.md lists them too):
//   0  success
//   1  verification failed: a checksum mismatch (verify), or a pull that did
//      not get everything in its plan verified
//   2  usage: bad or missing option, unknown command (InvalidArgument)
//   3  bad input data: a file is corrupt or missing (Corruption, NotFound)
//   4  I/O or network failure (IOError, Unavailable)
//   5  permission denied (token missing or rejected)
//   6  out of space or budget (ResourceExhausted)
//   7  wrong state: cache locked by another process, offline with nothing
//      cached (FailedPrecondition)
//   8  not implemented yet (Unimplemented)
//   130 cancelled (SIGINT/SIGTERM)
//   70 internal error (a bug: please report)
#pragma once

#include <cstdint>
#include <string>
#include <span>
#include <string_view>
#include <vector>

#include "format/status.h"
#include "format/units.h"  // HumanBytes, used with every summary

namespace exlr8 {

inline constexpr int kExitOk = 0;
inline constexpr int kExitVerifyFailed = 1;
inline constexpr int kExitUsage = 2;

int ExitCodeFor(const Status& status);

// One subcommand of a command-line program: its name and its entry point,
// which takes the arguments after the name and returns the exit status.
struct Subcommand {
  std::string_view name;
  int (*run)(const std::vector<std::string>& args);
};

// main() of `exlr8` and `exlr8d`: --help/-h/help print `usage`, `help CMD`
// is `CMD --help`, --version prints "<prog> <version>", a known subcommand
// runs, anything else is a usage error (exit 2) naming the nearest command.
int DispatchSubcommand(std::string_view prog, std::string_view version, std::string_view usage, int argc,
                       char** argv, std::span<const Subcommand> commands);

// Prints "<prog>: error: <message>" to stderr and returns ExitCodeFor().
int ReportError(std::string_view prog, const Status& status);


}  // namespace exlr8
