// Process pins: a pin that lasts exactly as long as the process holding it.
//
// A pin in the index (Cache::Pin) stays until someone unpins it, and it needs
// the cache's lock to take. Neither suits exlr8d-stage, which holds a rank in
// GPU memory for as long as it runs: it reads the cache beside the process
// that owns it (a pull, a job of `exlr8d serve`), and a holder killed with
// SIGKILL would leave an index pin behind for ever. A process pin is a file
//   <cache>/pins/<pid>-<n>-<random>.pin     "exlr8d-pin 1\n<repo>\n<commit>\n<holder>\n<pid>\n"
// on which the holder keeps an exclusive flock(2) for its whole life. The
// kernel drops the lock when the holder dies, however it dies, so a process
// pin never outlives its holder; the cache's owner removes the files of dead
// holders when it next lists them.
//
// Gc and Evict refuse a fileset with a live process pin as they refuse a
// pinned one (cache.h). Taking one needs no lock, so it can race with an
// eviction that listed the pins just before: the holder then finds the
// fileset gone when it reads it (NotFound), or reads files already mapped,
// whose bytes stay valid; every half is checked against its XXH64 anyway.
// Hence: take the pin first, then read.
//
// A pin file is written under a temporary name and renamed once locked and
// complete, so a lister never mistakes a half-made pin for a dead one.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/base/posix.h"
#include "format/status.h"

namespace exlr8 {

struct ProcessPinInfo {
  std::string repo;    // "org/name"
  std::string commit;  // 40 hex digits
  std::string holder;  // as Cache::Pin's holders
  pid_t pid = 0;
};

class ProcessPin {
 public:
  // Pins (repo, commit) in the cache at `cache_dir` for as long as the
  // returned object (and this process) lives. InvalidArgument for a bad
  // repo, commit or holder; the OS error (naming the file) when the pin
  // file cannot be made, e.g. PermissionDenied on a cache of another user.
  static Result<std::unique_ptr<ProcessPin>> Acquire(const std::filesystem::path& cache_dir, std::string_view repo,
                                                     std::string_view commit, std::string_view holder);
  // Removes the file, then lets go of the lock.
  ~ProcessPin();
  ProcessPin(const ProcessPin&) = delete;
  ProcessPin& operator=(const ProcessPin&) = delete;

  const ProcessPinInfo& info() const { return info_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  ProcessPin(ProcessPinInfo info, std::filesystem::path path, UniqueFd fd)
      : info_(std::move(info)), path_(std::move(path)), fd_(std::move(fd)) {}

  ProcessPinInfo info_;
  std::filesystem::path path_;
  UniqueFd fd_;
};

// The process pins of the cache at `cache_dir` whose holders are alive, in
// file name order; none when there is no pins directory. With `sweep` (the
// cache's owner) the files of dead holders are removed, and temporary files
// a holder left when it died while making its pin, once a minute old. A
// file that is not a pin (unreadable, malformed, not a regular file) is
// skipped, never trusted: a pin only protects the fileset it names.
Result<std::vector<ProcessPinInfo>> ListProcessPins(const std::filesystem::path& cache_dir, bool sweep);

// The directory process pins live in.
std::filesystem::path ProcessPinDir(const std::filesystem::path& cache_dir);

}  // namespace exlr8
