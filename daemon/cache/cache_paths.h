// Names inside a cache directory, built and checked in one place.
//
//   <cache>/exlr8d.lock                      lock file (holder's pid)
//   <cache>/exlr8d.db (+ -wal, -shm)         SQLite index
//   <cache>/<org>/<name>/<commit>/<path>     sparse data files
//
// Repo ids, commits and file paths come from a remote listing and are
// untrusted: every Validate* below must pass before a name reaches the file
// system, and files are opened component by component with O_NOFOLLOW so
// that a symlink planted inside the cache cannot lead outside it.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/base/posix.h"
#include "format/json.h"  // EscapeForMessage
#include "format/status.h"

namespace exlr8 {

inline constexpr std::string_view kCacheDbName = "exlr8d.db";
inline constexpr std::string_view kCacheLockName = "exlr8d.lock";
// Room kept for the index on a full disk (CacheOptions::reserve_bytes).
inline constexpr std::string_view kCacheReserveName = "exlr8d.reserve";
inline constexpr std::size_t kMaxPathComponent = 255;  // bytes, NAME_MAX
inline constexpr std::size_t kMaxRepoPath = 4096;      // bytes, PATH_MAX
inline constexpr std::size_t kMaxRepoIdPart = 96;      // the Hub's limit for org and name

// "org/name": each part 1..96 bytes of [A-Za-z0-9._-], not starting with '.'
// or '-', without "..", and the org not starting with "exlr8d." (reserved for
// the cache's own files). InvalidArgument naming the id otherwise.
Status ValidateRepoId(std::string_view repo);

// Exactly 40 (SHA-1) or 64 (SHA-256) lowercase hex digits.
Status ValidateCommit(std::string_view commit);

// A branch, tag or commit as the user typed it: 1..255 bytes, no control
// characters. Only stored in the index, never used as a file name.
Status ValidateRevision(std::string_view revision);

// A pin's holder: 1..255 bytes, no control characters.
Status ValidateHolder(std::string_view holder);

// A relative file path from a repo listing: '/'-separated, non-empty, not
// absolute, no empty, "." or ".." component, no backslash, no NUL or other
// control byte (< 0x20, 0x7f), components <= 255 bytes, total <= 4096 bytes.
// InvalidArgument naming the (escaped) path and the reason otherwise.
Status ValidateRepoPath(std::string_view path);

// A manifest as a client names it: a name (home, down1: the release's
// manifests/exlr8-manifest-NAME.json) or a path in the repo. Either way the
// repo path it stands for must pass ValidateRepoPath (so no control
// characters, which a name could otherwise carry into the logs).
Status ValidateManifestRef(std::string_view manifest);

// "<org>/<name>/<commit>", relative to the cache root.
// REQUIRES: ValidateRepoId(repo) and ValidateCommit(commit) are OK.
std::string FilesetDir(std::string_view repo, std::string_view commit);


// Result of OpenBeneath.
struct BeneathFile {
  UniqueFd fd;
  bool created = false;  // the file did not exist before
};

// Opens the regular file at `rel` (a validated relative path) below the
// directory `root_fd`, walking each component with O_NOFOLLOW. With `create`,
// missing directories (0755) and the file (0644) are created; otherwise a
// missing component is NotFound. A symlink or non-directory on the way is
// FailedPrecondition. The file is opened O_RDWR|O_CLOEXEC, or O_RDONLY with
// `read_only` (which excludes `create`): a read-only view of the cache
// must work for a user who may not write it, and must change nothing.
// `display` prefixes error messages (the cache path).
Result<BeneathFile> OpenBeneath(int root_fd, std::string_view rel, bool create, std::string_view display,
                                bool read_only = false);

// The directories that contain `rel`, outermost first, "" being the root:
// "a/b/f" -> {"", "a", "a/b"}. fsync them to make a new file's name durable.
std::vector<std::string> ParentDirs(std::string_view rel);

// Opens directory `rel` below `root_fd` (O_DIRECTORY|O_NOFOLLOW per
// component) for fsync. `rel` = "" opens the root itself.
Result<UniqueFd> OpenDirBeneath(int root_fd, std::string_view rel, std::string_view display);

// The cache directory: `given` (--cache) if set, else $EXLR8_CACHE, else
// $XDG_CACHE_HOME/exlr8 (an absolute XDG_CACHE_HOME only, as the XDG spec
// says), else ~/.cache/exlr8. InvalidArgument, saying what to set, when
// none of these is there.
Result<std::string> CacheDirOr(const std::optional<std::string>& given);

}  // namespace exlr8
