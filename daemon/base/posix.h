// Thin POSIX helpers for the cache: an owning file descriptor, errno ->
// Status translation, and full-length pread/pwrite loops. Linux only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "format/status.h"

namespace exlr8 {

// Owns one file descriptor; closes it on destruction. Movable, not copyable.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { Reset(); }
  UniqueFd(UniqueFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) {
      Reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void Reset();

 private:
  int fd_ = -1;
};

// Maps an errno value to a Status whose message is "<what>: <strerror>".
//   ENOSPC, EDQUOT, EFBIG         -> ResourceExhausted (disk, quota, file size limit)
//   ENOENT                        -> NotFound
//   EACCES, EPERM, EROFS          -> PermissionDenied
//   ELOOP, ENOTDIR, EISDIR, EEXIST-> FailedPrecondition (unexpected symlink or
//                                    file type inside the cache)
//   anything else                 -> IOError
Status ErrnoStatus(int err, std::string_view what);

// Writes all of `data` at `offset`, retrying short writes and EINTR.
// `what` names the file in error messages.
Status PwriteAll(int fd, std::uint64_t offset, std::span<const std::byte> data, std::string_view what);

// Reads exactly dst.size() bytes at `offset`. A read that hits end of file
// early is Corruption (the file is shorter than the index says).
Status PreadAll(int fd, std::uint64_t offset, std::span<std::byte> dst, std::string_view what);

// The whole of the small file at `path` (not following a final symlink):
// Corruption naming it when it holds more than `max_bytes`; the OS error
// (NotFound for a missing one) otherwise.
Result<std::string> ReadSmallFile(const std::filesystem::path& path, std::size_t max_bytes);

}  // namespace exlr8
