#include "daemon/cache/process_pin.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <random>

#include "daemon/cache/cache_paths.h"

namespace exlr8 {
namespace {

constexpr std::string_view kMagic = "exlr8d-pin 1";
constexpr std::string_view kPinSuffix = ".pin";
constexpr std::string_view kTempPrefix = ".making-";
// A pin file is a few hundred bytes; anything longer is not one of ours.
constexpr std::size_t kMaxPinFile = 4096;
// A holder that died between creating its temporary file and renaming it
// leaves the file; one this old is not being made any more.
constexpr auto kTempGrace = std::chrono::seconds(60);

std::string Serialize(const ProcessPinInfo& p) {
  return std::string(kMagic) + "\n" + p.repo + "\n" + p.commit + "\n" + p.holder + "\n" + std::to_string(p.pid) +
         "\n";
}

// Parses what Serialize wrote; nullopt for anything else.
std::optional<ProcessPinInfo> Parse(std::string_view text) {
  std::vector<std::string_view> lines;
  while (!text.empty()) {
    const std::size_t nl = text.find('\n');
    if (nl == std::string_view::npos) return std::nullopt;  // unterminated: not ours
    lines.push_back(text.substr(0, nl));
    text.remove_prefix(nl + 1);
  }
  if (lines.size() != 5 || lines[0] != kMagic) return std::nullopt;
  ProcessPinInfo p{std::string(lines[1]), std::string(lines[2]), std::string(lines[3]), 0};
  if (!ValidateRepoId(p.repo).ok() || !ValidateCommit(p.commit).ok() || !ValidateHolder(p.holder).ok())
    return std::nullopt;
  const std::string_view pid = lines[4];
  if (pid.empty() || pid.size() > 9 || pid.find_first_not_of("0123456789") != std::string_view::npos)
    return std::nullopt;
  p.pid = static_cast<pid_t>(std::stol(std::string(pid)));
  return p;
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// A name no other pin of this or another process has: pid, a counter, and
// random bits (pids are reused, and a cache may be shared over NFS).
std::string UniqueName() {
  static std::atomic<std::uint64_t> counter{0};
  thread_local std::mt19937_64 rng{std::random_device{}()};
  char rnd[17];
  std::snprintf(rnd, sizeof rnd, "%016llx", static_cast<unsigned long long>(rng()));
  return std::to_string(::getpid()) + "-" + std::to_string(counter.fetch_add(1)) + "-" + rnd;
}

Status MakeDir(const std::filesystem::path& dir) {
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return ErrnoStatus(errno, "create " + dir.string());
  struct stat st{};
  if (::lstat(dir.c_str(), &st) != 0) return ErrnoStatus(errno, "stat " + dir.string());
  if (!S_ISDIR(st.st_mode)) return FailedPreconditionError(dir.string() + " is not a directory");
  return Status::Ok();
}

}  // namespace

std::filesystem::path ProcessPinDir(const std::filesystem::path& cache_dir) {
  // "exlr8d." is reserved: no repo org can take this name (cache_paths.h).
  return cache_dir / "exlr8d.pins";
}

Result<std::unique_ptr<ProcessPin>> ProcessPin::Acquire(const std::filesystem::path& cache_dir,
                                                        std::string_view repo, std::string_view commit,
                                                        std::string_view holder) {
  EXLR8_RETURN_IF_ERROR(ValidateRepoId(repo));
  EXLR8_RETURN_IF_ERROR(ValidateCommit(commit));
  EXLR8_RETURN_IF_ERROR(ValidateHolder(holder));
  ProcessPinInfo info{std::string(repo), std::string(commit), std::string(holder), ::getpid()};
  const std::string text = Serialize(info);
  const std::filesystem::path dir = ProcessPinDir(cache_dir);
  const std::string name = UniqueName();
  const std::filesystem::path temp = dir / (std::string(kTempPrefix) + name);
  const std::filesystem::path final_path = dir / (name + std::string(kPinSuffix));
  // Not WriteFileAtomically: the pin is its file descriptor's lock, so the
  // file is made, locked and renamed through the one descriptor it keeps.
  UniqueFd fd;
  // An owner's sweep may remove the directory once it is empty, between our
  // mkdir and our create: make it again.
  for (int attempt = 0; !fd.valid(); ++attempt) {
    EXLR8_RETURN_IF_ERROR(MakeDir(dir));
    fd = UniqueFd(::open(temp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
    if (!fd.valid() && (errno != ENOENT || attempt >= 3)) return ErrnoStatus(errno, "create pin " + temp.string());
  }
  // Locked before it has its final name: a lister never sees it unlocked.
  // Blocking, because a lister may hold a shared lock on it for the instant
  // of its probe (nobody else can hold one: we made the file).
  int locked;
  while ((locked = ::flock(fd.get(), LOCK_EX)) != 0 && errno == EINTR) {
  }
  if (locked != 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    return ErrnoStatus(err, "lock pin " + temp.string());
  }
  Status s = PwriteAll(fd.get(), 0, std::as_bytes(std::span(text.data(), text.size())), temp.string());
  if (s.ok() && ::rename(temp.c_str(), final_path.c_str()) != 0) s = ErrnoStatus(errno, "rename " + temp.string());
  if (!s.ok()) {
    ::unlink(temp.c_str());
    return s;
  }
  return std::unique_ptr<ProcessPin>(new ProcessPin(std::move(info), final_path, std::move(fd)));
}

ProcessPin::~ProcessPin() {
  // Unlinked while still locked: a lister that opened it just before sees a
  // live pin, never a dead one to sweep.
  ::unlink(path_.c_str());
}

Result<std::vector<ProcessPinInfo>> ListProcessPins(const std::filesystem::path& cache_dir, bool sweep) {
  const std::filesystem::path dir = ProcessPinDir(cache_dir);
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    if (errno == ENOENT) return std::vector<ProcessPinInfo>{};
    return ErrnoStatus(errno, "open " + dir.string());
  }
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) names.emplace_back(e->d_name);
  ::closedir(d);
  std::sort(names.begin(), names.end());

  std::vector<ProcessPinInfo> live;
  for (const std::string& name : names) {
    const bool pin = EndsWith(name, kPinSuffix);
    const bool temp = name.rfind(kTempPrefix, 0) == 0;
    if (!pin && !temp) continue;
    const std::filesystem::path path = dir / name;
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    if (!fd.valid()) continue;  // gone since readdir, a symlink, unreadable
    struct stat st{};
    if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (::flock(fd.get(), LOCK_SH | LOCK_NB) == 0) {
      // Nobody holds it: its holder is dead (or a temporary file is being
      // made right now, hence the grace period).
      if (!sweep) continue;
      const auto age = std::chrono::system_clock::now() - std::chrono::system_clock::from_time_t(st.st_mtime);
      if (pin || age > kTempGrace) ::unlink(path.c_str());
      continue;
    }
    if (errno != EWOULDBLOCK || !pin) continue;
    if (st.st_size <= 0 || static_cast<std::uint64_t>(st.st_size) > kMaxPinFile) continue;
    std::string text(static_cast<std::size_t>(st.st_size), '\0');
    if (!PreadAll(fd.get(), 0, std::as_writable_bytes(std::span(text.data(), text.size())), path.string()).ok())
      continue;
    if (auto info = Parse(text)) live.push_back(std::move(*info));
  }
  return live;
}

}  // namespace exlr8
