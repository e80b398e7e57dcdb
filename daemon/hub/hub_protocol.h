// Pure helpers for the Hugging Face Hub protocol: URL encoding, validation of
// untrusted names from the Hub, and parsing of the few HTTP headers the hub
// client and the range fetcher act on. No I/O; every function is thread-safe.
//
// URL shapes (as huggingface_hub builds them):
//   revision:  {endpoint}/api/{type}s/{repo}/revision/{quote(rev, safe="")}
//   tree:      {endpoint}/api/{type}s/{repo}/tree/{commit}?recursive=true
//   resolve:   {endpoint}/{prefix}{repo}/resolve/{commit}/{quote(path, safe="/")}
// where prefix is "" for models and "datasets/" for datasets.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "format/json.h"  // EscapeForMessage
#include "format/status.h"

namespace exlr8 {

// Largest file size accepted from the Hub (1 PiB); larger is Corruption.
inline constexpr std::uint64_t kMaxHubFileSize = std::uint64_t{1} << 50;
// Longest repo file path accepted from the Hub, in bytes.
inline constexpr std::size_t kMaxHubPathBytes = 4096;

// Percent-encodes every byte except RFC 3986 unreserved characters
// (A-Z a-z 0-9 - . _ ~); with keep_slash, '/' is kept too.
std::string PercentEncode(std::string_view s, bool keep_slash);

// A repo id "name" or "owner/name": 1..96 bytes per part of [A-Za-z0-9-_.],
// no part "." or "..". Else InvalidArgument (it comes from our caller).
Status ValidateHubRepoId(std::string_view repo);

// A file path received from the Hub (untrusted): non-empty, at most
// kMaxHubPathBytes, relative, '/'-separated, no empty, "." or ".." segment,
// no backslash, no control character (< 0x20 or 0x7f). Else Corruption whose
// message names the path (escaped by format/json.h EscapeForMessage).
Status ValidateHubPath(std::string_view path);

// A commit id: exactly 40 lowercase hex digits.
bool IsCommitSha(std::string_view s);
// An LFS sha256: exactly 64 hex digits (either case).
bool IsSha256Hex(std::string_view s);

// A file of the repo listing, as the tree API describes it.
struct HubFile {
  std::string path;        // validated: relative, no '..', no control chars
  std::uint64_t size = 0;  // <= kMaxHubFileSize
  std::string blob_id;     // git blob oid (may be empty)
  std::string lfs_sha256;  // 64 lowercase hex for LFS files, else empty
};

// One page of `GET /api/models/{repo}/tree/{commit}?recursive=true` (a JSON
// array; untrusted): its files, in order. Directories and other non-file
// entries are skipped, but their paths are validated too. `seen_paths`
// holds the paths of earlier pages; this page's files are added to it.
// Corruption, whose message starts with `what` and names the entry (index,
// and path once it is known to be a valid one), for: a body that is not a
// JSON array of objects, a missing "type" or "path", a path ValidateHubPath
// refuses, a file "size" missing or not an integer in [0, kMaxHubFileSize],
// an "oid" that is not a string of at most 128 bytes, an "lfs" without a
// 64-hex "oid" (or "sha256"), an "lfs.size" other than "size", and a path
// already in `seen_paths`.
Result<std::vector<HubFile>> ParseTreePage(std::string_view body, std::string_view what,
                                           std::unordered_set<std::string>& seen_paths);

// The URL of the `rel="next"` link in an RFC 8288 Link header, if any.
// Example: `<https://hf.co/api/models/a/b/tree/c?cursor=x>; rel="next"`.
std::optional<std::string> ParseNextLink(std::string_view link_header);

// Retry-After: delta-seconds or an IMF-fixdate; the wait from `now`, clamped
// to [0, 365 days]. nullopt when unparseable.
std::optional<std::chrono::seconds> ParseRetryAfter(
    std::string_view value, std::chrono::system_clock::time_point now);

// IETF RateLimit header (draft-ietf-httpapi-ratelimit-headers), e.g.
// `"api";r=0;t=55`: the `t=` parameter (seconds until the quota resets).
// With several policies, the largest t among those with r=0, else nullopt.
// Also accepts the older `limit=.., remaining=.., reset=N` form (reset=N).
std::optional<std::chrono::seconds> ParseRateLimitReset(std::string_view value);

// "bytes FIRST-LAST/TOTAL" (TOTAL may be "*").
struct ContentRange {
  std::uint64_t first = 0;
  std::uint64_t last = 0;
  std::optional<std::uint64_t> total;
};
std::optional<ContentRange> ParseContentRange(std::string_view value);

// Parses a decimal uint64 (no sign, no spaces, no overflow).
std::optional<std::uint64_t> ParseDecimalU64(std::string_view s);

// "scheme://host:port" in lowercase with the default port made explicit, or
// nullopt if `url` is not an absolute http(s) URL. Two URLs share an origin
// iff these are equal; the token goes only to the hub endpoint's origin.
std::optional<std::string> UrlOrigin(std::string_view url);

// Resolves a Location header value against the URL of the request that got
// it (absolute URLs are returned as-is). nullopt when unparseable.
std::optional<std::string> ResolveLocation(std::string_view base_url, std::string_view location);

// The URL with its query and fragment removed: signed CDN URLs carry their
// signature in the query, which must never reach a log or error message.
std::string RedactUrl(std::string_view url);

// Server-sent text made fit for a message: every occurrence of `secret`
// (the hub token, which a server may echo in any header) replaced by
// "[token]", then escaped and bounded by EscapeForMessage.
std::string QuoteServerText(std::string_view text, std::string_view secret);

}  // namespace exlr8
