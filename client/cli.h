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
#include <string_view>

#include "format/status.h"
#include "format/units.h"  // HumanBytes, used with every summary

namespace exlr8 {

inline constexpr int kExitOk = 0;
inline constexpr int kExitVerifyFailed = 1;
inline constexpr int kExitUsage = 2;

int ExitCodeFor(const Status& status);

// Prints "<prog>: error: <message>" to stderr and returns ExitCodeFor().
int ReportError(std::string_view prog, const Status& status);


}  // namespace exlr8
