#include "daemon/base/atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "daemon/base/posix.h"

namespace exlr8 {
namespace {

// Different in every call of this process; with the pid, different from
// every other writer's, but for a leftover of a dead process that had this
// pid: O_EXCL finds that one and the next number is tried.
std::atomic<std::uint64_t> g_temp_counter{0};
constexpr int kMaxTempAttempts = 100;

}  // namespace

Status WriteFileAtomically(const std::filesystem::path& path, std::span<const std::byte> bytes,
                           Durability durability, mode_t mode) {
  const std::filesystem::path name = path.filename();
  if (name.empty() || name == "." || name == "..")
    return InvalidArgumentError("write \"" + path.string() + "\": names no file");
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");

  std::filesystem::path temp;
  int fd = -1;
  for (int attempt = 0; fd < 0; ++attempt) {
    temp = dir / (name.string() + ".tmp." + std::to_string(::getpid()) + "." +
                  std::to_string(g_temp_counter.fetch_add(1, std::memory_order_relaxed)));
    fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd < 0 && (errno != EEXIST || attempt + 1 >= kMaxTempAttempts))
      return ErrnoStatus(errno, "create " + temp.string() + " (to replace " + path.string() + ")");
  }

  // Every step until the rename: on failure the temporary file goes.
  Status s = PwriteAll(fd, 0, bytes, temp.string());
  if (s.ok() && durability == Durability::kDurable && ::fsync(fd) != 0)
    s = ErrnoStatus(errno, "fsync " + temp.string());
  // close reports write-back errors of some file systems (NFS): checked.
  if (::close(fd) != 0 && s.ok()) s = ErrnoStatus(errno, "close " + temp.string());
  if (s.ok() && ::rename(temp.c_str(), path.c_str()) != 0)
    s = ErrnoStatus(errno, "rename " + temp.string() + " to " + path.string());
  if (!s.ok()) {
    ::unlink(temp.c_str());
    return s;
  }

  if (durability == Durability::kDurable) {
    UniqueFd dfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!dfd.valid() || ::fsync(dfd.get()) != 0)
      return ErrnoStatus(errno, "fsync directory " + dir.string() + " after replacing " + path.string() +
                                    " (the new content is in place but may not survive a power loss)");
  }
  return Status::Ok();
}

Status WriteFileAtomically(const std::filesystem::path& path, std::string_view bytes, Durability durability,
                           mode_t mode) {
  return WriteFileAtomically(path, std::as_bytes(std::span(bytes.data(), bytes.size())), durability, mode);
}

}  // namespace exlr8
