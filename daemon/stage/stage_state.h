// What a holder (exlr8d-stage --state-dir DIR) tells whoever started it,
// through files, so that the news survives a restart of the starter
// (`exlr8d serve`, whose holders outlive it by design: daemon/serve/
// stage_manager.h):
//
//   DIR/holder.lock   flock'ed by the holder for its whole life; its pid
//   DIR/state.json    {"state":S,"pid":P,"updated":T, ...}, replaced
//                     atomically (rename) at every step
//
// The steps: "reading" (the cache, every half's XXH64), "staging" (the GPU
// upload, and with lease v1 its checks), then with lease v2 in device
// memory "hashing" (every region's XXH64 on the GPU) and "decoding" (the
// sample decoded in place), each rewritten about every second with
// "done_bytes" and "total_bytes" as it goes (step_reporter.h); "holding"
// (the lease answers; rewritten with the lessees' pids whenever one comes
// or goes), "releasing" (told to stop, waiting for lessees), then
// "released"; or "failed" with "error" and "exit_status". Host memory goes
// from "reading" to "holding". What "holding" reports besides "lease" and
// "lessees": lease v2: "memory" ("device" or "host"), "commit", "bytes"
// (the image's allocation), "regions" and, in device memory, "device" (the
// GPU's UUID); lease v1: "commit", "halves", "bytes", "device_bytes",
// "device" (the GPU's name), "upload_gb_per_s", "checked_halves". Told to
// stop before it holds, the holder goes from the step under way to
// "released" with "stopped_while" (the step) and "exit_status" 130. A state of a living step whose lock
// nobody holds means the holder died without a word (SIGKILL, a crash): ReadStageState says alive = false,
// and the reader calls that "died".
//
// No CUDA here: both sides are tested everywhere.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "daemon/base/file_lock.h"
#include "daemon/base/posix.h"
#include "format/json.h"
#include "format/json_writer.h"
#include "format/status.h"

namespace exlr8 {

// The members of a state record after "state", "pid" and "updated", in
// order, each value written by JsonWriter (escaped as every document of
// the node is).
//   StateMembers().Add("lease", path).Add("bytes", n).AddArray("lessees", pids)
class StateMembers {
 public:
  template <typename T>
  StateMembers& Add(std::string_view key, const T& value) {
    JsonWriter w;
    w.Value(value);
    members_.emplace_back(std::string(key), std::move(w).Take());
    return *this;
  }
  // A number with `decimals` places (a rate).
  StateMembers& AddFixed(std::string_view key, double value, int decimals);
  template <typename T>
  StateMembers& AddArray(std::string_view key, std::span<const T> values) {
    JsonWriter w;
    w.BeginArray();
    for (const T& v : values) w.Value(v);
    w.EndArray();
    members_.emplace_back(std::string(key), std::move(w).Take());
    return *this;
  }
  // This record's members, then `more`'s.
  StateMembers& Append(const StateMembers& more);

  // (key, JSON text of the value) pairs.
  const std::vector<std::pair<std::string, std::string>>& members() const { return members_; }

 private:
  std::vector<std::pair<std::string, std::string>> members_;
};

class StageStateWriter {
 public:
  // Takes DIR/holder.lock (creating DIR's files, not DIR). FailedPrecondition
  // naming the pid when another holder has it.
  static Result<std::unique_ptr<StageStateWriter>> Open(const std::filesystem::path& dir);

  // Replaces state.json with {"state":state,"pid":..,"updated":..} and
  // then `members`.
  Status Set(std::string_view state, const StateMembers& members = {});

 private:
  StageStateWriter(std::filesystem::path dir, std::unique_ptr<FileLock> lock)
      : dir_(std::move(dir)), lock_(std::move(lock)) {}
  std::filesystem::path dir_;
  std::unique_ptr<FileLock> lock_;  // held for the holder's life
};

struct StageState {
  bool alive = false;    // the holder's lock is held
  pid_t pid = 0;         // from the lock file (0 when unknown)
  std::string state;     // state.json's; empty when there is none yet
  JsonValue record;      // the whole of state.json (null when none)
};

// Reads DIR's state. A state.json that does not parse is Corruption naming
// the file (at most 64 KiB is read).
Result<StageState> ReadStageState(const std::filesystem::path& dir);

// The states a holder is in while it runs.
bool IsLiveStageState(std::string_view state);

}  // namespace exlr8
