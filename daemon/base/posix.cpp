#include "daemon/base/posix.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

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

Result<std::string> ReadSmallFile(const std::filesystem::path& path, std::size_t max_bytes) {
  // Non-blocking: a FIFO put where the file should be must not hang us.
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
  if (!fd.valid()) return ErrnoStatus(errno, "open " + path.string());
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus(errno, "stat " + path.string());
  if (!S_ISREG(st.st_mode)) return FailedPreconditionError(path.string() + ": not a regular file");
  if (static_cast<std::uint64_t>(st.st_size) > max_bytes)
    return CorruptionError(path.string() + ": larger than " + std::to_string(max_bytes) + " bytes");
  // One byte more than the file tells one that grew meanwhile; never more
  // than the limit allows.
  std::string text(std::min<std::size_t>(static_cast<std::size_t>(st.st_size), max_bytes) + 1, '\0');
  std::size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::pread(fd.get(), text.data() + got, text.size() - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(errno, "read " + path.string());
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
    if (got == text.size() && got <= max_bytes) text.resize(std::min(max_bytes + 1, 2 * text.size()), '\0');
  }
  if (got > max_bytes) return CorruptionError(path.string() + ": larger than " + std::to_string(max_bytes) + " bytes");
  text.resize(got);
  return text;
}

}  // namespace exlr8
