// Helpers shared by the cache tests: a scratch directory and byte patterns.
#pragma once

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/support/temp_dir.h"

namespace exlr8::testing {


// The deterministic content of byte `offset` of test file `file`.
inline std::byte PatternByte(std::uint64_t file, std::uint64_t offset) {
  std::uint64_t z = (file * 0x9E3779B97F4A7C15ull) ^ (offset >> 3);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<std::byte>(z >> (8 * (offset & 7)));
}

inline std::vector<std::byte> Pattern(std::uint64_t file, std::uint64_t offset, std::size_t length) {
  std::vector<std::byte> out(length);
  for (std::size_t i = 0; i < length; ++i) out[i] = PatternByte(file, offset + i);
  return out;
}

// Mounts a tmpfs of `size` ("2m") on a scratch directory, unmounted when
// destroyed. Needs CAP_SYS_ADMIN: a test skips when mounted() is false.
class TmpfsMount {
 public:
  explicit TmpfsMount(const char* size) {
    const std::string opts = std::string("size=") + size;
    mounted_ = ::mount("tmpfs", dir_.path().c_str(), "tmpfs", 0, opts.c_str()) == 0;
    if (!mounted_) error_ = std::strerror(errno);
  }
  ~TmpfsMount() {
    if (mounted_) ::umount2(dir_.path().c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }
  const std::string& error() const { return error_; }
  const std::filesystem::path& path() const { return dir_.path(); }

 private:
  TempDir dir_;
  bool mounted_ = false;
  std::string error_;
};

// Appends to `filler` until its file system has not one byte left; true if
// it then has none.
inline bool FillUp(const std::filesystem::path& filler) {
  const int fd = ::open(filler.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  std::vector<char> block(1 << 16, 'x');
  for (std::size_t n = block.size(); n > 0; n /= 2)
    while (::write(fd, block.data(), n) == static_cast<ssize_t>(n)) {
    }
  ::close(fd);
  struct statvfs vfs;
  return ::statvfs(filler.parent_path().c_str(), &vfs) == 0 && vfs.f_bavail == 0;
}

inline constexpr char kCommitA[] = "0123456789abcdef0123456789abcdef01234567";
inline constexpr char kCommitB[] = "89abcdef0123456789abcdef0123456789abcdef";
inline constexpr char kCommitC[] = "fedcba9876543210fedcba9876543210fedcba98";
inline constexpr char kCommitD[] = "0123012301230123012301230123012301230123";

}  // namespace exlr8::testing
