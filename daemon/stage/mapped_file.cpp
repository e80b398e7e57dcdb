#include "daemon/stage/mapped_file.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "daemon/base/posix.h"

namespace exlr8 {

Result<std::unique_ptr<MappedFile>> MappedFile::Open(const std::filesystem::path& path, std::uint64_t expected_size) {
  // O_NONBLOCK: a FIFO put there must not block the open.
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  if (!fd.valid()) {
    // The cache recorded this file's bytes: one that is gone, or a link or
    // directory in its place, is the cache damaged (exit 3), not a usage
    // or lock problem (ELOOP, EISDIR would otherwise map to exit 7).
    const int e = errno;
    const Status s = ErrnoStatus(e, "open " + path.string());
    if (e == ENOENT || e == ELOOP || e == EISDIR || e == ENOTDIR)
      return CorruptionError(s.message() + " (a file the cache recorded bytes of; exlr8d verify forgets them, "
                                           "and the next pull fetches them again)");
    return s;
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus(errno, "stat " + path.string());
  if (!S_ISREG(st.st_mode)) return CorruptionError(path.string() + " is not a regular file");
  if (static_cast<std::uint64_t>(st.st_size) != expected_size)
    return CorruptionError(path.string() + " has " + std::to_string(st.st_size) + " bytes, the cache recorded " +
                           std::to_string(expected_size));
  if (expected_size == 0) return std::unique_ptr<MappedFile>(new MappedFile(nullptr, 0));
  void* p = ::mmap(nullptr, expected_size, PROT_READ, MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED) return ErrnoStatus(errno, "mmap " + path.string());
  // Halves are read in file order, once for the checksum and once for the
  // upload: ask for read-ahead.
  (void)::madvise(p, expected_size, MADV_SEQUENTIAL);
  return std::unique_ptr<MappedFile>(new MappedFile(static_cast<const std::byte*>(p), expected_size));
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
}

}  // namespace exlr8
