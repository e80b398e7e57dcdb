#include "daemon/serve/stage_manager.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

#include "daemon/base/atomic_file.h"
#include "daemon/base/clock.h"
#include "daemon/base/posix.h"
#include "daemon/cache/cache_paths.h"
#include "daemon/stage/lease_server.h"
#include "format/json_writer.h"
#include "format/layout.h"

extern char** environ;

namespace exlr8 {
namespace {

constexpr std::size_t kMaxRequestBytes = 64 << 10;
constexpr std::size_t kLogTailBytes = 2048;

std::string RequestJson(const StageRequest& r, std::int64_t created_ms) {
  JsonWriter w;
  w.BeginObject()
      .Field("repo", r.repo)
      .Field("revision", r.revision)
      .Field("manifest", r.manifest)
      .Field("tp", r.tp)
      .Field("rank", r.rank)
      .Field("memory", r.memory)
      .Field("lease", r.lease)
      .Field("device", r.device)
      .Field("check", r.check)
      .Field("release_wait_s", r.release_wait_s)
      .Field("created", created_ms)
      .EndObject();
  return std::move(w).Take() + "\n";
}

Result<std::pair<StageRequest, std::int64_t>> ReadRequest(const std::filesystem::path& path) {
  EXLR8_ASSIGN_OR_RETURN(std::string text, ReadSmallFile(path, kMaxRequestBytes));
  auto parsed = ParseJson(text);
  if (!parsed.ok()) return CorruptionError(path.string() + ": " + parsed.status().message());
  auto str = [&](const char* k) -> std::string {
    const JsonValue* v = parsed->is_object() ? parsed->Find(k) : nullptr;
    return v && v->is_string() ? v->as_string() : std::string();
  };
  auto num = [&](const char* k) -> std::int64_t {
    const JsonValue* v = parsed->is_object() ? parsed->Find(k) : nullptr;
    return v && v->is_number() && v->as_int64() ? *v->as_int64() : -1;
  };
  StageRequest r;
  r.repo = str("repo");
  r.revision = str("revision");
  r.manifest = str("manifest");
  r.tp = static_cast<int>(num("tp"));
  r.rank = static_cast<int>(num("rank"));
  // A record written before the server chose memory and lease is one of a
  // v1 holder in device memory: that was the only kind it started.
  r.memory = parsed->is_object() && parsed->Find("memory") ? str("memory") : "device";
  r.lease = parsed->is_object() && parsed->Find("lease") ? str("lease") : "v1";
  r.device = static_cast<int>(num("device"));
  r.check = str("check");
  r.release_wait_s = static_cast<int>(num("release_wait_s"));
  if (r.check.empty()) r.check = DefaultStageCheck(r);
  if (Status s = ValidateStageRequest(r); !s.ok()) return CorruptionError(path.string() + ": " + s.message());
  return std::make_pair(std::move(r), num("created"));
}

// The last line of the holder's log with something in it: what it said
// before it stopped.
std::string LastLogLine(const std::filesystem::path& log) {
  UniqueFd fd(::open(log.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  struct stat st{};
  if (!fd.valid() || ::fstat(fd.get(), &st) != 0) return "";
  const auto size = static_cast<std::uint64_t>(st.st_size);
  const std::uint64_t from = size > kLogTailBytes ? size - kLogTailBytes : 0;
  std::string text(static_cast<std::size_t>(size - from), '\0');
  const ssize_t n = ::pread(fd.get(), text.data(), text.size(), static_cast<off_t>(from));
  text.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  const auto nl = text.rfind('\n');
  return EscapeForMessage(nl == std::string::npos ? text : text.substr(nl + 1), 400);
}

std::string DescribeExit(int status) {
  if (status >= 128) return "killed by signal " + std::to_string(status - 128);
  return "exit status " + std::to_string(status);
}

// The same rank in the same memory: host memory is one place per node,
// device memory one per GPU.
bool SameRank(const StageRequest& a, const StageRequest& b) {
  return a.repo == b.repo && a.revision == b.revision && a.manifest == b.manifest && a.tp == b.tp &&
         a.rank == b.rank && a.memory == b.memory && (a.memory == "host" || a.device == b.device);
}

std::string WhereHeld(const StageRequest& r) {
  return r.memory == "host" ? std::string("in host memory") : "on device " + std::to_string(r.device);
}

// What a holder in `state` says it holds (stage_manager.h: HeldImage), or
// nothing before it says so.
std::optional<HeldImage> HeldOf(std::string_view state, const JsonValue& record) {
  if ((state != "holding" && state != "releasing") || !record.is_object()) return std::nullopt;
  const JsonValue* bytes = record.Find("bytes");
  if (bytes == nullptr || !bytes->as_uint64()) return std::nullopt;
  HeldImage held;
  held.bytes = *bytes->as_uint64();
  if (const JsonValue* regions = record.Find("regions"); regions != nullptr && regions->as_uint64())
    held.regions = *regions->as_uint64();
  // Lease v2 reports the memory kind, and in device memory the GPU's UUID
  // as "device"; lease v1's "device" is the GPU's name.
  const JsonValue* memory = record.Find("memory");
  const JsonValue* device = record.Find("device");
  if (memory != nullptr && memory->is_string() && memory->as_string() == "device" && device != nullptr &&
      device->is_string())
    held.gpu_uuid = device->as_string();
  return held;
}

}  // namespace

Status ValidateStageRequest(const StageRequest& r) {
  EXLR8_RETURN_IF_ERROR(ValidateRepoId(r.repo));
  EXLR8_RETURN_IF_ERROR(ValidateRevision(r.revision));
  if (r.manifest.empty()) return InvalidArgumentError("missing manifest (a name such as \"home\", or a repo path)");
  if (Status s = ValidateManifestRef(r.manifest); !s.ok())
      return InvalidArgumentError("manifest: a name such as \"home\" or a path in the repo: " + s.message());
  if (r.tp < 1 || r.tp > (1 << 20)) return InvalidArgumentError("tp must be an integer in [1, 1048576]");
  if (r.rank < 0 || r.rank >= r.tp)
    return InvalidArgumentError("rank " + std::to_string(r.rank) +
                                " is not in [0, tp = " + std::to_string(r.tp) + ")");
  if (r.memory != "device" && r.memory != "host")
    return InvalidArgumentError(
        "memory must be \"device\" (GPU memory, the default) or \"host\" (a sealed memfd, "
        "no GPU needed), not \"" +
        EscapeForMessage(r.memory, 40) + "\"");
  if (r.lease != "v1" && r.lease != "v2")
    return InvalidArgumentError(
        "lease must be \"v2\" (the default) or \"v1\" (deprecated: the halves only, "
        "device memory only), not \"" +
        EscapeForMessage(r.lease, 40) + "\"");
  if (r.memory == "host" && r.lease != "v2")
    return InvalidArgumentError("lease \"v1\" holds device memory only: host memory is leased over \"v2\"");
  if (r.device < 0 || r.device > 1024) return InvalidArgumentError("device must be an integer in [0, 1024]");
  if (r.memory == "host") {
    if (!r.check.empty() && r.check != "none")
      return InvalidArgumentError("check must be \"none\" for host memory (nothing is decoded on the host)");
  } else if (r.lease == "v2") {
    if (!r.check.empty() && r.check != "sample" && r.check != "all")
      return InvalidArgumentError(
          "check must be \"sample\" (a seeded >= 1 % of the halves, the default) or \"all\" with lease v2 (a "
          "count of halves is lease v1's)");
  } else if (!r.check.empty() && r.check != "all" &&
             (r.check.size() > 9 || r.check.find_first_not_of("0123456789") != std::string::npos)) {
    return InvalidArgumentError("check must be \"all\" or a count of halves");
  }
  if (r.release_wait_s < 0 || r.release_wait_s > 3600)
    return InvalidArgumentError("release_wait_s must be an integer in [0, 3600]");
  return Status::Ok();
}

std::string DefaultStageCheck(const StageRequest& r) {
  if (r.memory == "host") return "none";
  return r.lease == "v2" ? "sample" : "64";
}

std::filesystem::path DefaultStageBinary() {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::filesystem::path("exlr8d-stage") : self.parent_path() / "exlr8d-stage";
}

StageManager::StageManager(std::filesystem::path cache_dir, std::filesystem::path stage_binary, Clock* clock)
    : root_(std::move(cache_dir) / "exlr8d.stages"),  // "exlr8d." is no repo's org (cache_paths.h)
      stage_binary_(std::move(stage_binary)),
      clock_(clock != nullptr ? *clock : Clock::Real()) {}

std::filesystem::path StageManager::StageDir(std::int64_t id) const { return root_ / std::to_string(id); }

void StageManager::Reap() {
  for (auto it = children_.begin(); it != children_.end();) {
    int status = 0;
    const pid_t r = ::waitpid(it->second, &status, WNOHANG);
    if (r == 0 || (r < 0 && errno == EINTR)) {
      ++it;
      continue;
    }
    if (r == it->second)
      exited_[it->first] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    it = children_.erase(it);
  }
}

void StageManager::ReapExiting(std::int64_t id) {
  const auto child = children_.find(id);
  if (child == children_.end() || waited_for_.contains(id)) return;
  const Clock::TimePoint give_up = clock_.Deadline(kReapGrace);
  while (true) {
    int status = 0;
    const pid_t r = ::waitpid(child->second, &status, WNOHANG);
    if (r == child->second) {
      exited_[id] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      children_.erase(child);
      return;
    }
    if (r < 0 && errno != EINTR) {  // not ours to wait for (any more)
      children_.erase(child);
      return;
    }
    if (clock_.Now() >= give_up) break;
    clock_.SleepFor(std::chrono::milliseconds(1));
  }
  waited_for_.insert(id);
}

Result<StageInfo> StageManager::Read(std::int64_t id) {
  const std::filesystem::path dir = StageDir(id);
  StageInfo info;
  info.id = id;
  auto request = ReadRequest(dir / "request.json");
  if (!request.ok()) {
    if (request.status().code() == StatusCode::kNotFound) return NotFoundError("no stage " + std::to_string(id));
    return request.status();
  }
  info.request = std::move(request->first);
  info.created_ms = request->second;
  EXLR8_ASSIGN_OR_RETURN(StageState st, ReadStageState(dir));
  // A live state without the lock: the holder is dying. If it is ours, its
  // exit status is a moment away; without the wait, a status read in that
  // moment would say only "killed or crashed".
  if (IsLiveStageState(st.state) && !st.alive) ReapExiting(id);
  info.alive = st.alive;
  info.pid = st.pid;
  info.holder = std::move(st.record);
  const auto child = children_.find(id);
  const auto exited = exited_.find(id);
  if (info.pid == 0 && child != children_.end()) info.pid = child->second;
  if (exited != exited_.end()) info.exit_status = exited->second;
  auto holder_field = [&](const char* key) -> const JsonValue* {
    return info.holder.is_object() ? info.holder.Find(key) : nullptr;
  };
  if (st.state.empty()) {
    // Nothing written yet: starting, unless the process is gone (ours and
    // not reaped, or one that holds the lock and is about to write).
    if (child != children_.end() || st.alive) {
      info.state = "starting";
      info.alive = true;
    } else {
      info.state = exited != exited_.end() ? "failed" : "died";
      const std::string said = LastLogLine(dir / "log");
      info.error = "exlr8d-stage " +
                   (exited != exited_.end() ? DescribeExit(exited->second) : std::string("is gone")) +
                   " before it reported" + (said.empty() ? std::string() : ": " + said);
    }
  } else if (IsLiveStageState(st.state) && !st.alive) {
    info.state = "died";
    info.error = "the holder (pid " + std::to_string(info.pid) + ") is gone without releasing, while " + st.state +
                 (info.exit_status ? " (" + DescribeExit(*info.exit_status) + ")" : std::string(": killed or crashed"));
  } else {
    info.state = st.state;
    if (const JsonValue* e = holder_field("error"); e && e->is_string()) info.error = e->as_string();
    if (const JsonValue* x = holder_field("exit_status"); x && x->is_number() && x->as_int64())
      info.exit_status = static_cast<int>(*x->as_int64());
  }
  if (const JsonValue* lease = holder_field("lease"); lease && lease->is_string() && info.state == "holding")
    info.lease = lease->as_string();
  if (info.alive) info.held = HeldOf(info.state, info.holder);
  return info;
}

Result<StageInfo> StageManager::Start(const StageRequest& asked) {
  EXLR8_RETURN_IF_ERROR(ValidateStageRequest(asked));
  StageRequest request = asked;
  if (request.check.empty()) request.check = DefaultStageCheck(request);
  MutexLock l(&mu_);
  Reap();
  if (::access(stage_binary_.c_str(), X_OK) != 0)
    return UnimplementedError(stage_binary_.string() +
                              " is not there: exlr8d-stage is built only with the CUDA Toolkit (install it beside "
                              "exlr8d, or name it with exlr8d serve --stage-binary)");
  if (::mkdir(root_.c_str(), 0750) != 0 && errno != EEXIST) return ErrnoStatus(errno, "create " + root_.string());
  std::int64_t next = 1;
  std::error_code ec;
  for (std::int64_t id : Ids()) {
    next = std::max(next, id + 1);
    auto other = Read(id);
    if (other.ok() && (other->alive || other->state == "starting") && SameRank(other->request, request))
      return FailedPreconditionError("stage " + std::to_string(id) + " already holds " + request.repo + " " +
                                     request.manifest + " TP " + std::to_string(request.tp) + " rank " +
                                     std::to_string(request.rank) + " " + WhereHeld(request) + " (state " +
                                     other->state + "); release it first");
  }
  PruneFinished();
  // Ids are never reused, even after a stage is forgotten: a client that
  // kept one must not find another stage under it.
  const std::filesystem::path last_id = root_ / "last-id";
  if (auto text = ReadSmallFile(last_id, 32); text.ok()) {
    const std::string digits = text->substr(0, text->find('\n'));
    if (!digits.empty() && digits.size() <= 15 && digits.find_first_not_of("0123456789") == std::string::npos)
      next = std::max<std::int64_t>(next, std::stoll(digits) + 1);
  }
  std::filesystem::path dir;
  for (;; ++next) {
    dir = StageDir(next);
    if (::mkdir(dir.c_str(), 0750) == 0) break;
    if (errno != EEXIST) return ErrnoStatus(errno, "create " + dir.string());
  }
  // The holder's socket lives in the stage's directory: a cache directory
  // too deep for a socket path fails here, not after the holder has read
  // and uploaded the rank.
  if (auto addr = UnixSocketAddress(dir / "lease.sock"); !addr.ok()) {
    std::filesystem::remove(dir, ec);
    return FailedPreconditionError(addr.status().message() + ": the cache directory is too deep for the stage's "
                                   "lease socket; run exlr8d serve with a shorter --cache");
  }
  if (Status s = WriteFileAtomically(last_id, std::to_string(next) + "\n", Durability::kDurable); !s.ok()) {
    std::filesystem::remove(dir, ec);
    return s;
  }
  // Read back by every status read: whole or absent, never truncated.
  if (Status s = WriteFileAtomically(dir / "request.json", RequestJson(request, clock_.NowUnixMs()),
                                     Durability::kDurable);
      !s.ok()) {
    std::filesystem::remove_all(dir, ec);
    return s;
  }

  std::vector<std::string> args = {stage_binary_.string(),
                                   "--repo",
                                   request.repo,
                                   "--revision",
                                   request.revision,
                                   "--manifest",
                                   request.manifest,
                                   "--tp",
                                   std::to_string(request.tp),
                                   "--rank",
                                   std::to_string(request.rank),
                                   "--cache",
                                   root_.parent_path().string(),
                                   "--memory",
                                   request.memory,
                                   "--lease",
                                   request.lease,
                                   "--hold",
                                   (dir / "lease.sock").string(),
                                   "--release-wait",
                                   std::to_string(request.release_wait_s),
                                   "--state-dir",
                                   dir.string()};
  // exlr8d-stage refuses --check for host memory, and takes only "all" with
  // lease v2 (its default is the sample); --device names a GPU.
  if (request.memory == "device") args.insert(args.end(), {"--device", std::to_string(request.device)});
  if (request.memory == "device" && (request.lease == "v1" || request.check == "all"))
    args.insert(args.end(), {"--check", request.check});
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  // Its own session, default signal handling, nothing of ours but its
  // log: the holder must not die with the server's session, nor keep the
  // server's listening sockets open after the server is gone.
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&actions);
  posix_spawnattr_init(&attr);
  const std::string log = (dir / "log").string();
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0640);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  posix_spawn_file_actions_addclosefrom_np(&actions, 3);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (int sig : {SIGINT, SIGTERM, SIGPIPE, SIGCHLD, SIGHUP}) sigaddset(&defaults, sig);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = 0;
  // The server's environment, less the hub token in any of the variables
  // it may come from: a holder never goes to the network, so it has no
  // business holding one (HUGGING_FACE_HUB_TOKEN included).
  std::vector<char*> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view var(*e);
    if (var.rfind("HF_TOKEN=", 0) != 0 && var.rfind("HUGGING_FACE_HUB_TOKEN=", 0) != 0 &&
        var.rfind("HF_TOKEN_PATH=", 0) != 0)
      env.push_back(*e);
  }
  env.push_back(nullptr);
  const int err = ::posix_spawn(&pid, stage_binary_.c_str(), &actions, &attr, argv.data(), env.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (err != 0) {
    std::filesystem::remove_all(dir, ec);
    return ErrnoStatus(err, "start " + stage_binary_.string());
  }
  children_[next] = pid;
  return Read(next);
}

std::vector<std::int64_t> StageManager::Ids() const {
  std::vector<std::int64_t> ids;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(root_, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.empty() || name.size() > 15 || name.find_first_not_of("0123456789") != std::string::npos) continue;
    ids.push_back(std::stoll(name));
  }
  std::sort(ids.rbegin(), ids.rend());
  return ids;
}

void StageManager::PruneFinished() {
  std::size_t finished = 0;
  for (std::int64_t id : Ids()) {
    auto info = Read(id);
    if (!info.ok() || info->alive || info->state == "starting") continue;
    if (++finished <= kKeepFinished) continue;
    std::error_code ec;
    std::filesystem::remove_all(StageDir(id), ec);  // a record, nothing more: no error is worth failing a start
    exited_.erase(id);
  }
}

Result<StageInfo> StageManager::Get(std::int64_t id) {
  MutexLock l(&mu_);
  Reap();
  return Read(id);
}

Result<std::vector<StageInfo>> StageManager::List() {
  MutexLock l(&mu_);
  Reap();
  std::vector<StageInfo> out;
  for (std::int64_t id : Ids()) {
    auto info = Read(id);
    if (info.ok()) out.push_back(std::move(*info));  // a directory being made or removed right now: skipped
  }
  return out;
}

Result<StageInfo> StageManager::Release(std::int64_t id, bool* forgotten) {
  MutexLock l(&mu_);
  Reap();
  EXLR8_ASSIGN_OR_RETURN(StageInfo info, Read(id));
  *forgotten = false;
  if (info.alive && info.pid > 0) {
    // The pid is the lock holder's (or our own child's, before it locked):
    // never a stranger that reused a dead holder's pid.
    if (::kill(info.pid, SIGTERM) != 0 && errno != ESRCH)
      return ErrnoStatus(errno, "signal the holder (pid " + std::to_string(info.pid) + ")");
    return Read(id);
  }
  std::error_code ec;
  std::filesystem::remove_all(StageDir(id), ec);
  if (ec) return ErrnoStatus(ec.value(), "remove " + StageDir(id).string());
  exited_.erase(id);
  *forgotten = true;
  return info;
}

}  // namespace exlr8
