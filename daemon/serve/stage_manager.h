// StageManager: the holders (exlr8d-stage --hold, GPU or host memory) that
// `exlr8d serve` starts on request (POST /v1/stages) and releases (DELETE
// /v1/stages/{id}).
//
// A holder is an exlr8d-stage process (`--hold`), not a thread of the
// server: a restart or upgrade of the API server must not pull the weights
// from under the serving processes. So each holder runs in a session of its
// own (setsid), inherits none of the server's descriptors, and reports
// through files (daemon/stage/stage_state.h) that any later server reads:
//
//   <cache>/exlr8d.stages/<id>/request.json   what was asked (the server writes it)
//   <cache>/exlr8d.stages/<id>/state.json     the holder's steps and outcome
//   <cache>/exlr8d.stages/<id>/holder.lock    flock'ed while the holder lives
//   <cache>/exlr8d.stages/<id>/lease.sock     the lease (client/lease/lease_client.h)
//   <cache>/exlr8d.stages/<id>/log            the holder's stdout and stderr
//
// A stage's state is the holder's, except: "starting" before the holder has
// written one, and "died" when it says it is alive but its lock is free
// (killed, crashed). While it runs, the holder pins its fileset (a process
// pin), so gc leaves it alone.
//
// Thread-safe.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "daemon/base/clock.h"
#include "daemon/base/mutex.h"
#include "daemon/stage/stage_state.h"
#include "format/json.h"
#include "format/status.h"

namespace exlr8 {

struct StageRequest {
  std::string repo;               // "org/name"
  std::string revision = "main";  // as pulled
  std::string manifest;           // a name or a repo path
  int tp = 1;
  int rank = 0;
  std::string memory = "device";  // exlr8d-stage --memory: "device" or "host"
  std::string lease = "v2";       // --lease: "v2", or "v1" (deprecated; device memory only)
  int device = 0;                 // CUDA ordinal (device memory; not passed for host memory)
  // What is decoded on the GPU: lease v1: a count of halves or "all" (its
  // default "64"); lease v2 in device memory: "sample" (the seeded >= 1 %,
  // the default) or "all"; host memory: "none". Empty: the default for the
  // memory and lease (DefaultStageCheck; Start records the default).
  std::string check;
  int release_wait_s = 30;  // for lessees, once told to release
};

// InvalidArgument naming the field ("memory", "lease", "check", ...).
Status ValidateStageRequest(const StageRequest& request);

// The `check` a request with none gets: "64", "sample" or "none", as above.
std::string DefaultStageCheck(const StageRequest& request);

// What a holding (or releasing) holder reports of what it holds, from its
// state.json: lease v2 says "bytes" (the image's allocation), "regions"
// (hashed) and, in device memory, the GPU's UUID ("device"); lease v1 says
// "bytes" (its halves') and the GPU's name, which is not a UUID.
struct HeldImage {
  std::uint64_t bytes = 0;
  std::optional<std::uint64_t> regions;  // lease v2 only
  std::string gpu_uuid;                  // lease v2 in device memory only
};

struct StageInfo {
  std::int64_t id = 0;
  StageRequest request;  // check as recorded: never empty
  std::int64_t created_ms = 0;
  // starting, reading, staging, hashing, decoding (lease v2 in device
  // memory), holding, releasing, released, failed, died
  std::string state;
  bool alive = false;
  pid_t pid = 0;
  std::filesystem::path lease;  // the socket, once holding
  std::string error;            // failed / died: why
  std::optional<int> exit_status;
  std::optional<HeldImage> held;  // holding or releasing, once the holder said
  JsonValue holder;               // the holder's state.json (null before it wrote one)
};

class StageManager {
 public:
  // `stage_binary`: the exlr8d-stage program to run. `clock`: what the
  // records' times and the wait for an exiting holder use; null =
  // Clock::Real(). REQUIRES: `clock` outlives the manager.
  StageManager(std::filesystem::path cache_dir, std::filesystem::path stage_binary, Clock* clock = nullptr);

  // Finished stages (released, failed, died) whose records are kept; older
  // ones are removed when the next stage starts.
  static constexpr std::size_t kKeepFinished = 64;

  // Starts a holder (exlr8d-stage with the request's --memory and --lease).
  // InvalidArgument for a bad request; FailedPrecondition when a live stage
  // holds the same rank in the same memory (the same device, for device
  // memory), naming it; Unimplemented when the stage program is not there.
  Result<StageInfo> Start(const StageRequest& request) EXLR8_EXCLUDES(mu_);
  Result<StageInfo> Get(std::int64_t id) EXLR8_EXCLUDES(mu_);
  // Newest first.
  Result<std::vector<StageInfo>> List() EXLR8_EXCLUDES(mu_);
  // A live holder is told to release (SIGTERM; a second call tells it to
  // release at once, lessees or not). A finished stage's record is removed
  // (`forgotten`). NotFound for an unknown id.
  Result<StageInfo> Release(std::int64_t id, bool* forgotten) EXLR8_EXCLUDES(mu_);

  const std::filesystem::path& stage_binary() const { return stage_binary_; }

 private:
  std::filesystem::path StageDir(std::int64_t id) const;
  Result<StageInfo> Read(std::int64_t id) EXLR8_REQUIRES(mu_);
  void Reap() EXLR8_REQUIRES(mu_);
  // For a holder this server started whose lock is gone: it is exiting
  // (the kernel drops its locks before the parent can reap it), so wait a
  // moment for its status, which then goes to exited_; at most kReapGrace,
  // and once per holder (one stuck in its exit does not slow every read).
  // Polls every millisecond of clock_ time, holding mu_: a test's FakeClock
  // must be advanced for it to end.
  void ReapExiting(std::int64_t id) EXLR8_REQUIRES(mu_);
  static constexpr std::chrono::milliseconds kReapGrace{2000};
  std::vector<std::int64_t> Ids() const;    // the records' ids, newest first
  // Removes the records of finished stages beyond the newest kKeepFinished,
  // so that a node that stages for months keeps a bounded directory.
  void PruneFinished() EXLR8_REQUIRES(mu_);

  std::filesystem::path root_;
  std::filesystem::path stage_binary_;
  Clock& clock_;
  Mutex mu_;
  // Holders this server started and has not reaped: id -> pid; and the exit
  // statuses it reaped (a holder started by an earlier server is reaped by
  // init; its state.json tells how it ended).
  std::map<std::int64_t, pid_t> children_ EXLR8_GUARDED_BY(mu_);
  std::map<std::int64_t, int> exited_ EXLR8_GUARDED_BY(mu_);
  std::set<std::int64_t> waited_for_ EXLR8_GUARDED_BY(mu_);  // ReapExiting gave up on these
};

// The exlr8d-stage beside the running program (/proc/self/exe's directory).
std::filesystem::path DefaultStageBinary();

}  // namespace exlr8
