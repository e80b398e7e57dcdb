#include "client/file_source.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace exlr8 {

Result<std::unique_ptr<FileByteSource>> FileByteSource::Open(const std::filesystem::path& path,
                                                              std::string display_name) {
  if (display_name.empty()) display_name = path.string();
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return NotFoundError(display_name + ": no such file");
    return IOError(display_name + ": open: " + std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return IOError(display_name + ": not a regular file");
  }
  return std::unique_ptr<FileByteSource>(
      new FileByteSource(fd, static_cast<std::uint64_t>(st.st_size), std::move(display_name)));
}

FileByteSource::~FileByteSource() { ::close(fd_); }

Status FileByteSource::ReadAt(std::uint64_t offset, std::span<std::byte> dst) const {
  if (offset > size_ || dst.size() > size_ - offset)
    return CorruptionError(name_ + ": read of " + std::to_string(dst.size()) + " bytes at offset " +
                           std::to_string(offset) + " runs past the end of the file (" + std::to_string(size_) +
                           " bytes)");
  std::size_t done = 0;
  while (done < dst.size()) {
    ssize_t n = ::pread(fd_, dst.data() + done, dst.size() - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return IOError(name_ + ": read at offset " + std::to_string(offset + done) + ": " + std::strerror(errno));
    }
    if (n == 0) return IOError(name_ + ": file shrank while reading at offset " + std::to_string(offset + done));
    done += static_cast<std::size_t>(n);
  }
  return Status::Ok();
}

Result<std::string> ReadWholeFile(const std::filesystem::path& path, std::uint64_t max_bytes) {
  EXLR8_ASSIGN_OR_RETURN(auto src, FileByteSource::Open(path));
  if (src->size() > max_bytes)
    return ResourceExhaustedError(path.string() + ": " + std::to_string(src->size()) + " bytes, more than the " +
                                  std::to_string(max_bytes) + " allowed");
  std::string s(src->size(), '\0');
  EXLR8_RETURN_IF_ERROR(src->ReadAt(0, std::as_writable_bytes(std::span(s))));
  return s;
}

}  // namespace exlr8
