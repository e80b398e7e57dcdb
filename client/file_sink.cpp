#include "client/file_sink.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <system_error>

namespace exlr8 {

namespace {

Status ErrnoStatus(const std::string& what, const std::string& path, int err) {
  std::string msg = path + ": " + what + ": " + std::strerror(err);
  if (err == ENOSPC || err == EDQUOT) return ResourceExhaustedError(std::move(msg));
  return IOError(std::move(msg));
}

// Closes the descriptor and removes the temporary unless released.
class TempFile {
 public:
  TempFile(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!path_.empty()) ::unlink(path_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  Status Close() {
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) return ErrnoStatus("close", path_, errno);
    return Status::Ok();
  }
  void Keep() { path_.clear(); }

 private:
  int fd_;
  std::string path_;
};

Status PWriteAll(int fd, const std::string& path, std::uint64_t offset, std::span<const std::byte> bytes) {
  while (!bytes.empty()) {
    const std::size_t chunk = std::min<std::size_t>(bytes.size(), std::size_t{1} << 30);
    const ssize_t n = ::pwrite(fd, bytes.data(), chunk, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("pwrite at offset " + std::to_string(offset), path, errno);
    }
    if (n == 0) return IOError(path + ": pwrite at offset " + std::to_string(offset) + " wrote nothing");
    bytes = bytes.subspan(static_cast<std::size_t>(n));
    offset += static_cast<std::uint64_t>(n);
  }
  return Status::Ok();
}

}  // namespace

Status CheckRelativePath(std::string_view rel_path) {
  if (rel_path.empty()) return InvalidArgumentError("release path is empty");
  if (rel_path.front() == '/') return InvalidArgumentError("release path '" + std::string(rel_path) + "' is absolute");
  if (rel_path.find('\0') != std::string_view::npos)
    return InvalidArgumentError("release path contains a NUL byte");
  std::size_t start = 0;
  while (start <= rel_path.size()) {
    std::size_t slash = rel_path.find('/', start);
    if (slash == std::string_view::npos) slash = rel_path.size();
    const std::string_view part = rel_path.substr(start, slash - start);
    if (part.empty() || part == "." || part == "..")
      return InvalidArgumentError("release path '" + std::string(rel_path) + "' has an empty, '.' or '..' component");
    start = slash + 1;
  }
  return Status::Ok();
}

DirectoryReleaseSink::DirectoryReleaseSink(std::string root, bool sync) : root_(std::move(root)), sync_(sync) {}

Result<std::string> DirectoryReleaseSink::Prepare(std::string_view rel_path) const {
  EXLR8_RETURN_IF_ERROR(CheckRelativePath(rel_path));
  const std::filesystem::path full = std::filesystem::path(root_) / std::string(rel_path);
  std::error_code ec;
  std::filesystem::create_directories(full.parent_path(), ec);
  if (ec) return IOError(full.parent_path().string() + ": cannot create directory: " + ec.message());
  return full.string();
}

Status DirectoryReleaseSink::WriteExtents(std::string_view rel_path, std::span<const SparseExtent> extents,
                                          std::uint64_t total_size) const {
  if (total_size > static_cast<std::uint64_t>(std::numeric_limits<off_t>::max()))
    return InvalidArgumentError(std::string(rel_path) + ": size " + std::to_string(total_size) + " is too large");
  EXLR8_ASSIGN_OR_RETURN(const std::string path, Prepare(rel_path));
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("open", tmp, errno);
  TempFile file(fd, tmp);
  // size first: holes stay unallocated, and a too-large size fails early
  if (::ftruncate(file.fd(), static_cast<off_t>(total_size)) != 0)
    return ErrnoStatus("ftruncate to " + std::to_string(total_size) + " bytes", tmp, errno);
  for (const SparseExtent& x : extents) EXLR8_RETURN_IF_ERROR(PWriteAll(file.fd(), tmp, x.offset, x.bytes));
  if (sync_ && ::fsync(file.fd()) != 0) return ErrnoStatus("fsync", tmp, errno);
  EXLR8_RETURN_IF_ERROR(file.Close());
  if (::rename(tmp.c_str(), path.c_str()) != 0) return ErrnoStatus("rename to " + path, tmp, errno);
  file.Keep();
  return Status::Ok();
}

Status DirectoryReleaseSink::WriteFile(std::string_view rel_path, std::span<const std::byte> bytes) {
  const SparseExtent whole{0, bytes};
  return WriteExtents(rel_path, std::span<const SparseExtent>(&whole, 1), bytes.size());
}

Status DirectoryReleaseSink::WriteSparseFile(std::string_view rel_path, std::span<const SparseExtent> extents,
                                             std::uint64_t total_size) {
  EXLR8_RETURN_IF_ERROR(ValidateSparseExtents(rel_path, extents, total_size));
  return WriteExtents(rel_path, extents, total_size);
}

}  // namespace exlr8
