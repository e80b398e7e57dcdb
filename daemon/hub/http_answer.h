// What an HTTP answer means to the hub code, without I/O: the response head
// as it is read (ResponseHead), the server's requested wait, and the
// Status of an answer that is not a success. Pure: no libcurl, no clock
// (the wall time is a parameter), so the answer checker, its tests and its
// fuzz target use it alone. libcurl's side is http_common.h.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "format/status.h"

namespace exlr8 {

// ASCII case-insensitive equality (header names, URL schemes).
bool EqualsIgnoreCase(std::string_view a, std::string_view b);
// `s` without leading spaces and tabs, and without trailing spaces, tabs,
// CR and LF (a header line or value).
std::string_view TrimHeaderSpace(std::string_view s);

// The response headers the hub code acts on (a transport feeds them in,
// line by line, as they arrive).
struct ResponseHead {
  long status = 0;
  std::string location;
  std::string content_range;
  std::optional<std::uint64_t> content_length;
  std::string content_encoding;  // lowercased
  std::string link;
  std::string retry_after;
  std::string ratelimit;
  std::string x_error_code;
  std::string x_error_message;
  std::string x_repo_commit;
  std::string x_linked_size;
  std::string x_linked_etag;
  std::string etag;

  void Reset() { *this = ResponseHead(); }
  // Feeds one raw header line (with or without CRLF). A status line starts a
  // new response (after 1xx), clearing earlier fields.
  void AddLine(std::string_view line);
};

// How long to wait after a 429/503: Retry-After (a date is counted from
// `now`, the wall time), else RateLimit t=, else nullopt (caller falls back
// to its backoff).
std::optional<std::chrono::milliseconds> ThrottleWait(const ResponseHead& head,
                                                      std::chrono::system_clock::time_point now);

// "; server asks to wait 600 s, more than the 300 s allowed": appended to
// the error of a 429/503 whose wait is past the cap (it fails at once).
std::string WaitPastCap(std::chrono::milliseconds wait, std::chrono::milliseconds cap);

// Maps a non-success HTTP answer about `what` (e.g. "file 'a/b.safetensors'
// of org/repo@abc123") to a Status:
//   401/403 -> PermissionDenied (+ hint to set HF_TOKEN; never the token)
//   404 -> NotFound naming RepoNotFound / RevisionNotFound / EntryNotFound
//   416 -> Corruption (the listing promised bytes that are not there); 429 -> Unavailable (rate limited);
//   5xx -> Unavailable; others -> IOError.
// `secret` (the token) is cut out of what the server said: a hub may echo
// the Authorization header into X-Error-Message, and the token must reach
// no error, log or record.
Status HttpError(long status, const ResponseHead& head, std::string_view what, bool token_sent,
                 std::string_view secret = {});

// True for statuses worth retrying (408, 429, 5xx).
bool IsRetryableHttp(long status);

// 301, 302, 303, 307, 308.
bool IsRedirectStatus(long status);

}  // namespace exlr8
