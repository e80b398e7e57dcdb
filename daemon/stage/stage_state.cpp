#include "daemon/stage/stage_state.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <chrono>

#include "daemon/base/atomic_file.h"
#include "daemon/base/clock.h"

namespace exlr8 {
namespace {

constexpr const char* kLockName = "holder.lock";
constexpr const char* kStateName = "state.json";
constexpr std::size_t kMaxStateBytes = 64 << 10;

std::string ReadPid(int fd) {
  std::array<char, 32> buf{};
  const ssize_t n = ::pread(fd, buf.data(), buf.size() - 1, 0);
  std::string pid = n > 0 ? std::string(buf.data(), static_cast<std::size_t>(n)) : std::string();
  while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
  if (pid.empty() || pid.size() > 9 || pid.find_first_not_of("0123456789") != std::string::npos) return "";
  return pid;
}

}  // namespace

bool IsLiveStageState(std::string_view state) {
  return state == "reading" || state == "staging" || state == "hashing" || state == "decoding" ||
         state == "holding" || state == "releasing";
}

Result<std::unique_ptr<StageStateWriter>> StageStateWriter::Open(const std::filesystem::path& dir) {
  // A reader's probe (ReadStageState) holds a shared lock for an instant,
  // so a refusal is only believed once it lasts: another holder runs here.
  EXLR8_ASSIGN_OR_RETURN(std::unique_ptr<FileLock> lock,
                         FileLock::Acquire(dir / kLockName, std::chrono::seconds(2),
                                           "another holder runs in " + dir.string()));
  return std::unique_ptr<StageStateWriter>(new StageStateWriter(dir, std::move(lock)));
}

StateMembers& StateMembers::AddFixed(std::string_view key, double value, int decimals) {
  JsonWriter w;
  w.Fixed(value, decimals);
  members_.emplace_back(std::string(key), std::move(w).Take());
  return *this;
}

StateMembers& StateMembers::Append(const StateMembers& more) {
  members_.insert(members_.end(), more.members_.begin(), more.members_.end());
  return *this;
}

Status StageStateWriter::Set(std::string_view state, const StateMembers& members) {
  JsonWriter w;
  w.BeginObject()
      .Field("state", state)
      .Field("pid", static_cast<std::int64_t>(::getpid()))
      .Field("updated", Clock::Real().NowUnixMs());
  for (const auto& [key, value] : members.members()) w.Key(key).Raw(value);
  w.EndObject();
  const std::string text = std::move(w).Take() + "\n";
  // A reader sees the old record or the new one, never half of one. Not
  // durable: the record is rewritten with every step's progress, and
  // describes a process that a machine crash ends anyway.
  return WriteFileAtomically(dir_ / kStateName, text, Durability::kNone);
}

Result<StageState> ReadStageState(const std::filesystem::path& dir) {
  StageState out;
  const std::filesystem::path lock = dir / kLockName;
  UniqueFd lfd(::open(lock.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (lfd.valid()) {
    // The probe's shared lock lasts until lfd closes, a moment: the
    // holder's Open waits out such moments.
    if (::flock(lfd.get(), LOCK_SH | LOCK_NB) != 0) {
      out.alive = errno == EWOULDBLOCK;
      const std::string pid = ReadPid(lfd.get());
      if (!pid.empty()) out.pid = static_cast<pid_t>(std::stol(pid));
    }
  } else if (errno != ENOENT) {
    return ErrnoStatus(errno, "open " + lock.string());
  }
  const std::filesystem::path path = dir / kStateName;
  auto text = ReadSmallFile(path, kMaxStateBytes);
  if (!text.ok()) {
    if (text.status().code() == StatusCode::kNotFound) return out;  // nothing reported yet
    return text.status();
  }
  JsonLimits limits;
  limits.max_depth = 8;
  auto parsed = ParseJson(*text, limits);
  if (!parsed.ok()) return CorruptionError(path.string() + ": " + parsed.status().message());
  const JsonValue* state = parsed->is_object() ? parsed->Find("state") : nullptr;
  if (state == nullptr || !state->is_string())
    return CorruptionError(path.string() + ": no \"state\" string at byte 0");
  out.state = state->as_string();
  if (out.pid == 0)
    if (const JsonValue* pid = parsed->Find("pid"); pid && pid->is_number() && pid->as_int64())
      out.pid = static_cast<pid_t>(*pid->as_int64());
  out.record = std::move(*parsed);
  return out;
}

}  // namespace exlr8
