#include "daemon/cache/cache_paths.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "format/layout.h"

namespace exlr8 {
namespace {

bool IsRepoIdChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
         c == '-';
}

Status ValidateRepoIdPart(std::string_view repo, std::string_view part, std::string_view which) {
  auto bad = [&](std::string_view why) {
    return InvalidArgumentError("invalid repo id '" + EscapeForMessage(repo) + "': " + std::string(which) + " " +
                                std::string(why));
  };
  if (part.empty()) return bad("is empty (expected org/name)");
  if (part.size() > kMaxRepoIdPart) return bad("is longer than " + std::to_string(kMaxRepoIdPart) + " bytes");
  for (char c : part)
    if (!IsRepoIdChar(c)) return bad("has a character outside [A-Za-z0-9._-]");
  if (part.front() == '.' || part.front() == '-') return bad("starts with '.' or '-'");
  if (part.find("..") != std::string_view::npos) return bad("contains '..'");
  return Status::Ok();
}

// Splits on '/'; components may be empty.
std::vector<std::string_view> SplitPath(std::string_view rel) {
  std::vector<std::string_view> parts;
  std::size_t start = 0;
  while (true) {
    const std::size_t slash = rel.find('/', start);
    if (slash == std::string_view::npos) {
      parts.push_back(rel.substr(start));
      return parts;
    }
    parts.push_back(rel.substr(start, slash - start));
    start = slash + 1;
  }
}

std::string Join(std::string_view display, std::string_view rel) {
  std::string s(display);
  if (!rel.empty()) {
    s += '/';
    s += rel;
  }
  return s;
}

// Opens (optionally creating) directory `name` inside `dir_fd`.
Result<UniqueFd> OpenSubdir(int dir_fd, const std::string& name, bool create, bool* created, const std::string& shown) {
  *created = false;
  for (int attempt = 0; attempt < 2; ++attempt) {
    const int fd = ::openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) return UniqueFd(fd);
    if (errno != ENOENT || !create) return ErrnoStatus(errno, "open directory " + shown);
    if (::mkdirat(dir_fd, name.c_str(), 0755) == 0) {
      *created = true;
    } else if (errno != EEXIST) {
      return ErrnoStatus(errno, "create directory " + shown);
    }
  }
  return IOError("open directory " + shown + ": vanished after creation");
}

}  // namespace


Status ValidateRepoId(std::string_view repo) {
  const std::size_t slash = repo.find('/');
  if (slash == std::string_view::npos)
    return InvalidArgumentError("invalid repo id '" + EscapeForMessage(repo) + "': expected org/name");
  const std::string_view org = repo.substr(0, slash);
  const std::string_view name = repo.substr(slash + 1);
  EXLR8_RETURN_IF_ERROR(ValidateRepoIdPart(repo, org, "org"));
  EXLR8_RETURN_IF_ERROR(ValidateRepoIdPart(repo, name, "name"));
  if (org.starts_with("exlr8d."))
    return InvalidArgumentError("invalid repo id '" + std::string(repo) +
                                "': org names starting with 'exlr8d.' are reserved for the cache's own files");
  return Status::Ok();
}

Status ValidateCommit(std::string_view commit) {
  const bool hex = !commit.empty() && commit.find_first_not_of("0123456789abcdef") == std::string_view::npos;
  if (!hex || (commit.size() != 40 && commit.size() != 64))
    return InvalidArgumentError("invalid commit '" + EscapeForMessage(commit.substr(0, 80)) +
                                "': expected 40 or 64 lowercase hex digits, got " + std::to_string(commit.size()) +
                                " bytes");
  return Status::Ok();
}

Status ValidateRevision(std::string_view revision) {
  if (revision.empty()) return InvalidArgumentError("invalid revision: empty");
  if (revision.size() > kMaxPathComponent)
    return InvalidArgumentError("invalid revision '" + EscapeForMessage(revision.substr(0, 80)) + "...': longer than " +
                                std::to_string(kMaxPathComponent) + " bytes");
  for (unsigned char c : revision)
    if (c < 0x20 || c == 0x7f)
      return InvalidArgumentError("invalid revision '" + EscapeForMessage(revision) + "': control character");
  return Status::Ok();
}

Status ValidateHolder(std::string_view holder) {
  if (holder.empty() || holder.size() > kMaxPathComponent)
    return InvalidArgumentError("invalid pin holder: must be 1.." + std::to_string(kMaxPathComponent) + " bytes");
  for (unsigned char c : holder)
    if (c < 0x20 || c == 0x7f)
      return InvalidArgumentError("invalid pin holder '" + EscapeForMessage(holder) + "': control character");
  return Status::Ok();
}

Status ValidateRepoPath(std::string_view path) {
  auto bad = [&](std::string_view why) {
    std::string shown = EscapeForMessage(path.substr(0, 200));
    if (path.size() > 200) shown += "...";
    return InvalidArgumentError("invalid repo path '" + shown + "': " + std::string(why));
  };
  if (path.empty()) return bad("empty");
  if (path.size() > kMaxRepoPath) return bad("longer than " + std::to_string(kMaxRepoPath) + " bytes");
  if (path.front() == '/') return bad("absolute");
  for (unsigned char c : path) {
    if (c == 0) return bad("contains NUL");
    if (c < 0x20 || c == 0x7f) return bad("contains a control character");
    if (c == '\\') return bad("contains a backslash");
  }
  for (std::string_view part : SplitPath(path)) {
    if (part.empty()) return bad("has an empty component");
    if (part == "." || part == "..") return bad("has a '" + std::string(part) + "' component");
    if (part.size() > kMaxPathComponent)
      return bad("has a component longer than " + std::to_string(kMaxPathComponent) + " bytes");
  }
  return Status::Ok();
}

Status ValidateManifestRef(std::string_view manifest) {
  if (manifest.empty()) return InvalidArgumentError("empty");
  return ValidateRepoPath(IsManifestName(manifest) ? ManifestPath(manifest) : std::string(manifest));
}

std::string FilesetDir(std::string_view repo, std::string_view commit) {
  std::string dir(repo);
  dir += '/';
  dir += commit;
  return dir;
}

Result<BeneathFile> OpenBeneath(int root_fd, std::string_view rel, bool create, std::string_view display,
                                bool read_only) {
  EXLR8_RETURN_IF_ERROR(ValidateRepoPath(rel));
  if (read_only) create = false;
  const int mode = read_only ? O_RDONLY : O_RDWR;
  const std::vector<std::string_view> parts = SplitPath(rel);
  BeneathFile out;
  UniqueFd dir;  // invalid = root_fd
  std::string walked;
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
    const std::string name(parts[i]);
    walked = walked.empty() ? name : walked + "/" + name;
    bool created = false;  // ParentDirs() covers durability of new directories
    EXLR8_ASSIGN_OR_RETURN(UniqueFd next, OpenSubdir(dir.valid() ? dir.get() : root_fd, name, create, &created,
                                                     Join(display, walked)));
    dir = std::move(next);
  }
  const std::string leaf(parts.back());
  const int at = dir.valid() ? dir.get() : root_fd;
  const std::string shown = Join(display, rel);
  // Not a regular file where a data file belongs (a symbolic link, a FIFO,
  // a directory: put there by hand). Its bytes are not the cache's: for a
  // reader the file is not there (NotFound, so what was recorded of it is
  // forgotten as lost); one that creates replaces it, except a directory,
  // whose contents it will not delete: a stray entry must not fail every
  // later pull nor keep the file from being fetched again. O_NONBLOCK:
  // opening a FIFO must not wait for a writer.
  struct stat leaf_st;
  if (::fstatat(at, leaf.c_str(), &leaf_st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(leaf_st.st_mode)) {
    const std::string kind = S_ISLNK(leaf_st.st_mode)   ? "a symbolic link"
                             : S_ISDIR(leaf_st.st_mode) ? "a directory"
                                                        : "not a regular file";
    if (S_ISDIR(leaf_st.st_mode) && create)
      return CorruptionError(shown + " is a directory where the cache keeps a data file: remove it, then pull again");
    if (!create) return NotFoundError(shown + " is " + kind + ", not a data file of the cache");
    if (::unlinkat(at, leaf.c_str(), 0) != 0 && errno != ENOENT)
      return ErrnoStatus(errno, "remove " + shown + " (" + kind + " where the cache keeps a data file)");
  }
  int fd = ::openat(at, leaf.c_str(), mode | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT && create) {
    fd = ::openat(at, leaf.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd >= 0) {
      out.created = true;
    } else if (errno == EEXIST) {
      fd = ::openat(at, leaf.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    }
  }
  if (fd < 0) return ErrnoStatus(errno, "open " + shown);
  out.fd = UniqueFd(fd);
  struct stat st;
  if (::fstat(out.fd.get(), &st) != 0) return ErrnoStatus(errno, "stat " + shown);
  // Replaced between the check above and the open.
  if (!S_ISREG(st.st_mode)) return FailedPreconditionError("open " + shown + ": not a regular file");
  // O_NONBLOCK was for the open only; a regular file's I/O ignores it, but
  // it is not left set on a descriptor that lives on.
  if (const int flags = ::fcntl(out.fd.get(), F_GETFL); flags >= 0)
    (void)::fcntl(out.fd.get(), F_SETFL, flags & ~O_NONBLOCK);
  return out;
}

std::vector<std::string> ParentDirs(std::string_view rel) {
  std::vector<std::string> dirs{""};
  for (std::size_t slash = rel.find('/'); slash != std::string_view::npos; slash = rel.find('/', slash + 1))
    dirs.emplace_back(rel.substr(0, slash));
  return dirs;
}

Result<UniqueFd> OpenDirBeneath(int root_fd, std::string_view rel, std::string_view display) {
  UniqueFd dir(::fcntl(root_fd, F_DUPFD_CLOEXEC, 0));
  if (!dir.valid()) return ErrnoStatus(errno, "dup " + std::string(display));
  if (rel.empty()) return dir;
  std::string walked;
  for (std::string_view part : SplitPath(rel)) {
    if (part.empty() || part == "." || part == "..")
      return InvalidArgumentError("invalid directory '" + EscapeForMessage(rel) + "' below " + std::string(display));
    walked = walked.empty() ? std::string(part) : walked + "/" + std::string(part);
    bool created = false;
    EXLR8_ASSIGN_OR_RETURN(dir, OpenSubdir(dir.get(), std::string(part), false, &created, Join(display, walked)));
  }
  return dir;
}

Result<std::string> CacheDirOr(const std::optional<std::string>& given) {
  if (given) return *given;
  if (const char* c = std::getenv("EXLR8_CACHE"); c && *c) return std::string(c);
  // The XDG spec: a relative XDG_CACHE_HOME is invalid and ignored.
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x == '/') return std::string(x) + "/exlr8";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/exlr8";
  // No fallback to a directory relative to the working directory: that
  // would be a different cache in every directory a command runs from.
  return InvalidArgumentError("no cache directory: give --cache, or set EXLR8_CACHE, XDG_CACHE_HOME or HOME");
}

}  // namespace exlr8
