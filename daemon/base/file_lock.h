// An exclusive, non-blocking flock(2) on a lock file that names its holder.
//
// flock locks belong to an open file description, so a second FileLock on
// the same path fails both in another process and in the same process (each
// Acquire opens the file anew). The kernel drops the lock when the holder
// dies, however it dies: no stale-lock cleanup is ever needed.
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <string_view>

#include "daemon/base/clock.h"
#include "daemon/base/posix.h"
#include "format/status.h"

namespace exlr8 {

class FileLock {
 public:
  // Creates `path` if needed, takes LOCK_EX|LOCK_NB and writes "<pid>\n"
  // into it. If another holder has it, tries again every 10 ms for up to
  // `wait` (on `clock`; null = Clock::Real()), then FailedPrecondition
  // naming the holder, with `holder_is` in parentheses:
  //   "<path> is locked by pid 1234 (another exlr8d owns this cache)".
  // Other failures: see ErrnoStatus (posix.h).
  static Result<std::unique_ptr<FileLock>> Acquire(const std::filesystem::path& path,
                                                   std::chrono::milliseconds wait = {},
                                                   std::string_view holder_is = "another exlr8d owns this cache",
                                                   Clock* clock = nullptr);

  // Releases the lock (closing the descriptor). The pid stays in the file;
  // it is only meaningful while the file is locked.
  ~FileLock() = default;

  const std::filesystem::path& path() const { return path_; }

 private:
  FileLock(std::filesystem::path path, UniqueFd fd) : path_(std::move(path)), fd_(std::move(fd)) {}

  std::filesystem::path path_;
  UniqueFd fd_;
};

}  // namespace exlr8
