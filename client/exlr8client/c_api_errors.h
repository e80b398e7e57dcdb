// The C API's error plumbing (c_api_errors.cpp), shared by its source files
// (exlr8client.cpp, c_api_names.cpp, rest_api.cpp): the calling thread's message (exlr8_last_error_message)
// and the mapping of a Status to an exlr8_status.
#pragma once

#include <exception>
#include <new>
#include <string>

#include "exlr8/exlr8client.h"
#include "format/status.h"

namespace exlr8::capi {

// Keeps `message` as the calling thread's last error; returns `code`.
exlr8_status Fail(exlr8_status code, std::string message);
// The calling thread's last message ("" if none).
const char* LastError();
// The C code of a Status (exlr8_status is the ABI's numbering, not StatusCode's).
exlr8_status CodeOf(StatusCode c);

// Runs `f`, turning an exception into EXLR8_RESOURCE_EXHAUSTED (bad_alloc)
// or EXLR8_INTERNAL: nothing is thrown across the C boundary.
template <typename F>
exlr8_status Guard(const char* what, F&& f) noexcept {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return Fail(EXLR8_RESOURCE_EXHAUSTED, std::string(what) + ": out of memory");
  } catch (const std::exception& e) {
    return Fail(EXLR8_INTERNAL, std::string(what) + ": " + e.what());
  } catch (...) {
    return Fail(EXLR8_INTERNAL, std::string(what) + ": unknown exception");
  }
}

}  // namespace exlr8::capi
