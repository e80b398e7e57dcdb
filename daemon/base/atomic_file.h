// Replacing a whole small file so that a reader sees the old content or the
// new, never a part of either (state files, counters, records).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <filesystem>
#include <span>
#include <string_view>

#include "format/status.h"

namespace exlr8 {

enum class Durability {
  // Atomic for readers and against this process dying. After a machine
  // crash the file may hold the old content, the new, or be empty or
  // missing: for files that are rewritten often and can be remade.
  kNone,
  // Atomic as kNone, and once the call returns OK the new content survives
  // a power loss (the file is fsynced before the rename, its directory
  // after).
  kDurable,
};

// Writes `bytes` as the whole content of `path`, creating it or replacing
// what is there (a symlink at `path` is replaced, not followed). The bytes
// go to a new temporary file in the same directory
// (<name>.tmp.<pid>.<n>, created with O_EXCL), which is then renamed over
// `path`; the file gets `mode` as open(2) takes it (the umask applies).
//
// On failure `path` keeps its old content (or stays absent) and the
// temporary file is removed; the error names the step and the file, with
// the codes of ErrnoStatus (posix.h): ResourceExhausted for a full disk,
// PermissionDenied for a read-only directory, NotFound for a missing one,
// FailedPrecondition when `path` is a directory. One exception: when the
// directory's fsync fails (kDurable), the new content is already in place
// and readable, but may not survive a power loss; the error says so.
// InvalidArgument when `path` names no file ("", "dir/").
//
// Thread safety: any number of calls may run at once, on any paths; for the
// same path, the last rename wins.
Status WriteFileAtomically(const std::filesystem::path& path, std::span<const std::byte> bytes,
                           Durability durability, mode_t mode = 0644);
Status WriteFileAtomically(const std::filesystem::path& path, std::string_view bytes, Durability durability,
                           mode_t mode = 0644);

}  // namespace exlr8
