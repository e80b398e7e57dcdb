// Status and Result<T>: the one error vocabulary of exlr8d.
//
// Every fallible function returns a Status (no value) or a Result<T> (a value
// or a Status). Both are [[nodiscard]]. Codes form a small closed set so that
// callers can branch on the kind of failure (a corrupt file is not an I/O
// error, a missing file is not a bad argument); the message says what and
// where, e.g. "experts/exlr8-layer-003.index.safetensors: tensor 'k2.index'
// data_offsets [0, 3080] length 3080, expected 3072 (shape [4,3,16,2] x I64)".
//
// The REST edge (daemon/) maps each code to one HTTP status; the command line
// maps each to one exit status (docs/OPERATIONS.md).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace exlr8 {

enum class StatusCode : std::uint8_t {
  kOk = 0,
  kInvalidArgument,     // the caller passed something unusable (flag, name)
  kNotFound,            // a file, tensor, layer or key does not exist
  kCorruption,          // bytes violate the format or fail their checksum
  kIOError,             // the OS or network failed us
  kNeedMore,            // incremental parser: give it more bytes
  kResourceExhausted,   // disk full, budget exceeded, cap hit
  kUnavailable,         // transient remote failure; retrying may succeed
  kPermissionDenied,    // 401/403, token problems
  kFailedPrecondition,  // state is wrong: cache locked, offline mode
  kCancelled,
  kUnimplemented,       // a capability that is not built yet
  kInternal,            // a bug in exlr8d
};
inline constexpr int kStatusCodeCount = 13;

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message)
      : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "Corruption: <message>", or "OK".
  std::string ToString() const;

  // Returns a copy whose message is "<context>: <message>". Used to add the
  // file name or field path as an error travels outwards.
  Status WithContext(std::string_view context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgumentError(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status NotFoundError(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status CorruptionError(std::string m) { return {StatusCode::kCorruption, std::move(m)}; }
inline Status IOError(std::string m) { return {StatusCode::kIOError, std::move(m)}; }
inline Status NeedMoreError(std::string m) { return {StatusCode::kNeedMore, std::move(m)}; }
inline Status ResourceExhaustedError(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
inline Status UnavailableError(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status PermissionDeniedError(std::string m) { return {StatusCode::kPermissionDenied, std::move(m)}; }
inline Status FailedPreconditionError(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
inline Status CancelledError(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }
inline Status UnimplementedError(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status InternalError(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

// A value of type T, or the Status saying why there is none.
// REQUIRES: a Result is never constructed from an OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : rep_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : rep_(std::move(status)) {  // NOLINT
    if (std::get<Status>(rep_).ok()) rep_ = Status(StatusCode::kInternal, "Result built from OK status");
  }

  bool ok() const { return std::holds_alternative<T>(rep_); }
  // The error, or OK when a value is held.
  Status status() const { return ok() ? Status::Ok() : std::get<Status>(rep_); }

  // REQUIRES: ok().
  T& value() & { return std::get<T>(rep_); }
  const T& value() const& { return std::get<T>(rep_); }
  T&& value() && { return std::get<T>(std::move(rep_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> rep_;
};

}  // namespace exlr8

#define EXLR8_CONCAT_INNER_(a, b) a##b
#define EXLR8_CONCAT_(a, b) EXLR8_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` (a Status) is not OK.
#define EXLR8_RETURN_IF_ERROR(expr)                     \
  do {                                                  \
    ::exlr8::Status exlr8_status_ = (expr);             \
    if (!exlr8_status_.ok()) return exlr8_status_;      \
  } while (0)

// `lhs = value of expr` (a Result<T>), or return its Status.
// Example: EXLR8_ASSIGN_OR_RETURN(auto header, ParseHeader(bytes));
#define EXLR8_ASSIGN_OR_RETURN(lhs, expr) \
  EXLR8_ASSIGN_OR_RETURN_IMPL_(EXLR8_CONCAT_(exlr8_result_, __LINE__), lhs, expr)
#define EXLR8_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()
