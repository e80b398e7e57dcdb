// The C API's error plumbing (c_api_errors.h): the calling thread's last
// message and the mapping of a Status to an exlr8_status.
#include "client/exlr8client/c_api_errors.h"

#include <utility>

namespace exlr8::capi {

namespace {
thread_local std::string t_last_error;
}  // namespace

exlr8_status Fail(exlr8_status code, std::string message) {
  t_last_error = std::move(message);
  return code;
}

const char* LastError() { return t_last_error.c_str(); }

// The C code of a Status (exlr8_status is the ABI's numbering, not
// StatusCode's).
exlr8_status CodeOf(StatusCode c) {
  switch (c) {
    case StatusCode::kOk:
      return EXLR8_OK;
    case StatusCode::kInvalidArgument:
      return EXLR8_INVALID_ARGUMENT;
    case StatusCode::kNotFound:
      return EXLR8_NOT_FOUND;
    case StatusCode::kCorruption:
      return EXLR8_CORRUPTION;
    case StatusCode::kIOError:
      return EXLR8_IO_ERROR;
    case StatusCode::kResourceExhausted:
      return EXLR8_RESOURCE_EXHAUSTED;
    case StatusCode::kUnavailable:
      return EXLR8_UNAVAILABLE;
    case StatusCode::kPermissionDenied:
      return EXLR8_PERMISSION_DENIED;
    case StatusCode::kFailedPrecondition:
      return EXLR8_FAILED_PRECONDITION;
    case StatusCode::kCancelled:
      return EXLR8_CANCELLED;
    case StatusCode::kUnimplemented:
      return EXLR8_UNIMPLEMENTED;
    case StatusCode::kNeedMore:  // an incremental parser's, never a lessee's answer
    case StatusCode::kInternal:
      return EXLR8_INTERNAL;
  }
  return EXLR8_INTERNAL;
}

}  // namespace exlr8::capi
