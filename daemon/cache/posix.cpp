#include "daemon/cache/posix.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

namespace exlr8 {

void UniqueFd::Reset() {
  if (fd_ >= 0) ::close(fd_);  // close errors carry no actionable information here
  fd_ = -1;
}

Status ErrnoStatus(int err, std::string_view what) {
  std::string msg = std::string(what) + ": " + ::strerrordesc_np(err);
  switch (err) {
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
      return ResourceExhaustedError(std::move(msg));
    case ENOENT:
      return NotFoundError(std::move(msg));
    case EACCES:
    case EPERM:
    case EROFS:
      return PermissionDeniedError(std::move(msg));
    case ELOOP:
    case ENOTDIR:
    case EISDIR:
    case EEXIST:
      return FailedPreconditionError(std::move(msg));
    default:
      return IOError(std::move(msg));
  }
}

Status PwriteAll(int fd, std::uint64_t offset, std::span<const std::byte> data, std::string_view what) {
  while (!data.empty()) {
    const ssize_t n = ::pwrite(fd, data.data(), data.size(), static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, std::string(what) + ": write of " + std::to_string(data.size()) +
                                    " bytes at offset " + std::to_string(offset));
    }
    if (n == 0) return IOError(std::string(what) + ": write at offset " + std::to_string(offset) + " made no progress");
    data = data.subspan(static_cast<std::size_t>(n));
    offset += static_cast<std::uint64_t>(n);
  }
  return Status::Ok();
}

Status PreadAll(int fd, std::uint64_t offset, std::span<std::byte> dst, std::string_view what) {
  while (!dst.empty()) {
    const ssize_t n = ::pread(fd, dst.data(), dst.size(), static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, std::string(what) + ": read of " + std::to_string(dst.size()) +
                                    " bytes at offset " + std::to_string(offset));
    }
    if (n == 0)
      return CorruptionError(std::string(what) + ": file ends before offset " + std::to_string(offset) +
                             " (shorter than recorded)");
    dst = dst.subspan(static_cast<std::size_t>(n));
    offset += static_cast<std::uint64_t>(n);
  }
  return Status::Ok();
}

}  // namespace exlr8
