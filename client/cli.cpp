#include "client/cli.h"

#include <cstdio>
#include <iostream>

namespace exlr8 {

int ExitCodeFor(const Status& s) {
  switch (s.code()) {
    case StatusCode::kOk: return 0;
    case StatusCode::kInvalidArgument: return 2;
    case StatusCode::kCorruption:
    case StatusCode::kNotFound:
    case StatusCode::kNeedMore: return 3;
    case StatusCode::kIOError:
    case StatusCode::kUnavailable: return 4;
    case StatusCode::kPermissionDenied: return 5;
    case StatusCode::kResourceExhausted: return 6;
    case StatusCode::kFailedPrecondition: return 7;
    case StatusCode::kUnimplemented: return 8;
    case StatusCode::kCancelled: return 130;
    case StatusCode::kInternal: return 70;
  }
  return 70;
}

int ReportError(std::string_view prog, const Status& s) {
  std::cerr << prog << ": error: " << s.message() << " [" << StatusCodeName(s.code()) << "]\n";
  return ExitCodeFor(s);
}

}  // namespace exlr8
