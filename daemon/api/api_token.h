// The bearer token of `exlr8d serve`'s TCP listener (ApiServerOptions::
// tcp_token): read from an operator's file (--api-token-file) or, without
// one, from <cache>/exlr8d.api-token, which the first start creates.
//
// A token file holds one token, printable ASCII without spaces, at least 16
// characters (a trailing newline is fine). It must be a regular file (a
// symlink to one is followed), owned by the server's user or root, with no
// access for group or others: the token is the whole credential of every
// change over TCP.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>

#include "format/status.h"

namespace exlr8 {

// The shortest token the server takes, from a file or from its caller.
inline constexpr std::size_t kMinApiTokenLength = 16;

// The token in `path`. InvalidArgument naming the path and what is wrong
// (not a regular file, group or other access, another owner, empty,
// malformed, over 4 KiB); the OS error (NotFound, PermissionDenied) when it
// cannot be opened.
Result<std::string> ReadApiTokenFile(const std::filesystem::path& path);

// The token in `path` when the file exists (checked as ReadApiTokenFile);
// otherwise a new one, 32 random bytes (getrandom) as 64 hex digits, written
// there with mode 0600 atomically: a temp file in the same directory,
// fsync'd, then linked into place, which never replaces an existing file
// (one that appears meanwhile wins and is read), and the directory
// fsync'd. `*created` (optional) says whether this call wrote it. Errors as
// ReadApiTokenFile, and the OS error of a failed write.
Result<std::string> EnsureApiToken(const std::filesystem::path& path, bool* created = nullptr);

}  // namespace exlr8
