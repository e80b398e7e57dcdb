#include "format/status.h"

#include <array>

namespace exlr8 {

namespace {
constexpr std::array<std::string_view, kStatusCodeCount> kNames = {
    "OK",           "InvalidArgument",   "NotFound",         "Corruption", "IOError",
    "NeedMore",     "ResourceExhausted", "Unavailable",      "PermissionDenied",
    "FailedPrecondition", "Cancelled",   "Unimplemented",    "Internal",
};
static_assert(kNames.size() == static_cast<size_t>(StatusCode::kInternal) + 1);
}  // namespace

std::string_view StatusCodeName(StatusCode code) {
  auto i = static_cast<size_t>(code);
  return i < kNames.size() ? kNames[i] : "Unknown";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string s(StatusCodeName(code_));
  s += ": ";
  s += message_;
  return s;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  std::string m(context);
  m += ": ";
  m += message_;
  return Status(code_, std::move(m));
}

}  // namespace exlr8
