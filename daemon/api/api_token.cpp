#include "daemon/api/api_token.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "daemon/base/posix.h"

namespace exlr8 {

namespace {

constexpr std::size_t kMaxTokenFile = 4096;
constexpr std::size_t kRandomBytes = 32;

std::string ModeText(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

}  // namespace

Result<std::string> ReadApiTokenFile(const std::filesystem::path& path) {
  const std::string where = "API token file " + path.string();
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  if (!fd.valid()) return ErrnoStatus(errno, "open " + where);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus(errno, "stat " + where);
  if (!S_ISREG(st.st_mode)) return InvalidArgumentError(where + " is not a regular file");
  if ((st.st_mode & 077) != 0)
    return InvalidArgumentError(where + " has mode " + ModeText(st.st_mode) +
                                ": group and others must have no access (chmod 600)");
  if (st.st_uid != ::geteuid() && st.st_uid != 0)
    return InvalidArgumentError(where + " belongs to uid " + std::to_string(st.st_uid) +
                                ", neither this user nor root");
  if (st.st_size > static_cast<off_t>(kMaxTokenFile))
    return InvalidArgumentError(where + " holds " + std::to_string(st.st_size) +
                                " bytes, more than a token (" + std::to_string(kMaxTokenFile) + " at most)");
  std::string token(static_cast<std::size_t>(st.st_size), '\0');
  if (!token.empty())
    EXLR8_RETURN_IF_ERROR(
        PreadAll(fd.get(), 0, std::as_writable_bytes(std::span(token.data(), token.size())), where));
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) token.pop_back();
  if (token.empty()) return InvalidArgumentError(where + " is empty");
  for (std::size_t i = 0; i < token.size(); ++i)
    if (token[i] <= ' ' || token[i] > '~')
      return InvalidArgumentError(where + ": byte " + std::to_string(i) +
                                  " is not printable ASCII (one token, no spaces, then an optional newline)");
  if (token.size() < kMinApiTokenLength)
    return InvalidArgumentError(where + ": a token of " + std::to_string(token.size()) +
                                " characters is too short (" + std::to_string(kMinApiTokenLength) +
                                " at least)");
  return token;
}

Result<std::string> EnsureApiToken(const std::filesystem::path& path, bool* created) {
  if (created != nullptr) *created = false;
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 || errno != ENOENT) return ReadApiTokenFile(path);
  unsigned char random[kRandomBytes];
  for (std::size_t got = 0; got < sizeof random;) {
    const ssize_t n = ::getrandom(random + got, sizeof random - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(errno, "getrandom for an API token");
    got += static_cast<std::size_t>(n);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string token;
  for (unsigned char b : random) {
    token += kHex[b >> 4];
    token += kHex[b & 15];
  }
  const std::string text = token + "\n";
  // Not WriteFileAtomically, which replaces: the token is created only if
  // no other process made one first (link(2) fails with EEXIST), so two
  // servers starting at once agree on one token.
  const std::filesystem::path temp = path.string() + ".tmp." + std::to_string(::getpid());
  ::unlink(temp.c_str());  // a leftover of a crash of this pid's predecessor
  Status written = [&]() -> Status {
    UniqueFd fd(::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!fd.valid()) return ErrnoStatus(errno, "create " + temp.string());
    // The umask can only take bits away; 0600 exactly, whatever it is.
    if (::fchmod(fd.get(), 0600) != 0) return ErrnoStatus(errno, "chmod " + temp.string());
    EXLR8_RETURN_IF_ERROR(
        PwriteAll(fd.get(), 0, std::as_bytes(std::span(text.data(), text.size())), temp.string()));
    if (::fsync(fd.get()) != 0) return ErrnoStatus(errno, "fsync " + temp.string());
    return Status::Ok();
  }();
  if (!written.ok()) {
    ::unlink(temp.c_str());
    return written;
  }
  const int linked = ::link(temp.c_str(), path.c_str());
  const int link_errno = errno;
  ::unlink(temp.c_str());
  if (linked != 0 && link_errno == EEXIST) return ReadApiTokenFile(path);  // another won: theirs holds
  if (linked != 0) return ErrnoStatus(link_errno, "create " + path.string());
  UniqueFd dir(::open(path.parent_path().empty() ? "." : path.parent_path().c_str(),
                      O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir.valid() || ::fsync(dir.get()) != 0)
    return ErrnoStatus(errno, "fsync the directory of " + path.string());
  if (created != nullptr) *created = true;
  return token;
}

}  // namespace exlr8
