#include "daemon/base/file_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <string>

namespace exlr8 {

Result<std::unique_ptr<FileLock>> FileLock::Acquire(const std::filesystem::path& path,
                                                   std::chrono::milliseconds wait, std::string_view holder_is,
                                                   Clock* clock) {
  Clock& time = clock != nullptr ? *clock : Clock::Real();
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (!fd.valid()) return ErrnoStatus(errno, "open lock file " + path.string());
  const Clock::TimePoint give_up = time.Deadline(wait);
  while (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    if (errno != EWOULDBLOCK) return ErrnoStatus(errno, "lock " + path.string());
    if (time.Now() < give_up) {
      time.SleepFor(std::chrono::milliseconds(10));
      continue;
    }
    // Held: say by whom. The holder writes its pid right after locking, so
    // an empty read means we raced with that write.
    std::array<char, 32> buf{};
    const ssize_t n = ::pread(fd.get(), buf.data(), buf.size() - 1, 0);
    std::string pid = n > 0 ? std::string(buf.data(), static_cast<std::size_t>(n)) : std::string();
    while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
    if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) pid = "unknown";
    return FailedPreconditionError(path.string() + " is locked by pid " + pid + " (" + std::string(holder_is) +
                                   ")");
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd.get(), 0) != 0) return ErrnoStatus(errno, "truncate lock file " + path.string());
  EXLR8_RETURN_IF_ERROR(PwriteAll(fd.get(), 0, std::as_bytes(std::span(pid.data(), pid.size())), path.string()));
  return std::unique_ptr<FileLock>(new FileLock(path, std::move(fd)));
}

}  // namespace exlr8
