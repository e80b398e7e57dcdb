// JobStore: the durable queue of work asked of `exlr8d serve`
// (<cache>/exlr8d.jobs.db, schema/serve/). Each job is one request: a pull
// (repo, revision, manifest, TP degree and rank) or a verify (a scrub of
// the fileset repo@revision, daemon/scrub/scrub.h). The runner (job_runner.h) takes
// them in order; a server that stops or dies mid-job finds it again at its
// next start (RequeueInterrupted) and resumes it.
//
// Why a database of its own: the server must accept and record requests
// while another process owns the cache (its lock covers exlr8d.db), and the
// queue is the server's state, not the cache's.
//
// Thread-safe: every method may be called from any thread (one mutex).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/base/clock.h"
#include "format/status.h"

namespace exlr8 {

using JobId = std::int64_t;

enum class JobState { kQueued, kRunning, kDone, kFailed, kCancelled };
enum class JobKind { kPull, kVerify, kEvict };
std::string_view JobKindName(JobKind kind);     // "pull", "verify", "evict"
std::string_view JobStateName(JobState state);  // "queued", "running", ...
bool IsFinished(JobState state);                // done, failed or cancelled

// What a client asks for: POST /v1/pulls, or POST /v1/verify or /v1/evict
// (kinds verify and evict: repo and revision only; the other fields keep
// their defaults).
struct JobRequest {
  JobKind kind = JobKind::kPull;
  std::string repo;
  std::string revision = "main";
  std::string manifest;
  int tp = 1;
  int rank = 0;
  std::string endpoint;    // "" = the server's hub
  std::string pin;         // pin holder once done; "" = no pin
  bool make_room = false;  // PullOptions::make_room
};

struct JobInfo {
  JobId id = 0;
  JobRequest request;
  JobState state = JobState::kQueued;
  std::string error;                 // why it failed or was cancelled
  std::optional<std::int64_t> pull;  // the cache's pull row of the latest attempt
  int attempts = 0;                  // attempts started (restarts add one)
  std::int64_t created_ms = 0;
  std::int64_t updated_ms = 0;
  std::optional<std::int64_t> finished_ms;
  std::string result;         // verify jobs, once done: the scrub's report (a JSON object)
  std::string target_commit;  // evict jobs: the commit the first attempt chose ("" before)
};

// Bounds on the queue, so that no client fills a disk with it.
struct JobStoreLimits {
  std::size_t max_unfinished = 1000;  // queued + running; Add refuses beyond
  std::size_t max_finished = 1000;    // older finished jobs are deleted by Add
  // The times recorded (created, started, ended); null = Clock::Real().
  // REQUIRES: outlives the store.
  Clock* clock = nullptr;
};

// What the scheduler (job_scheduler.h) and the running jobs (job.h) ask of
// the durable queue; JobStore is the real one, and unit tests give the
// scheduler a fake that fails or pauses on command. Each method means what
// JobStore's says. Implementations are thread-safe: the scheduler's thread,
// the job threads and the REST handlers call them at once.
class JobQueue {
 public:
  virtual ~JobQueue() = default;
  virtual Result<JobInfo> Get(JobId id) = 0;
  virtual Result<std::vector<JobInfo>> Queued(std::size_t limit = 1000) = 0;
  virtual Status MarkRunning(JobId id) = 0;
  virtual Status SetPull(JobId id, std::int64_t pull) = 0;
  virtual Status SetTargetCommit(JobId id, std::string_view commit) = 0;
  virtual Status Requeue(JobId id) = 0;
  virtual Status Finish(JobId id, JobState state, std::string_view error = {},
                        std::string_view result = {}) = 0;
  virtual Status CancelQueued(JobId id, std::string_view error) = 0;
};

class JobStore final : public JobQueue {
 public:
  // Opens (creating, migrating) the queue at `path`. FailedPrecondition if
  // it was written by a newer exlr8d; Corruption if it is not a database.
  static Result<std::unique_ptr<JobStore>> Open(const std::filesystem::path& path,
                                                JobStoreLimits limits = {});
  ~JobStore() override;
  JobStore(const JobStore&) = delete;
  JobStore& operator=(const JobStore&) = delete;

  // Records a new queued job. InvalidArgument naming the field for a bad
  // repo id, an empty revision, a manifest that is neither a name nor a
  // repo path (absolute, or with ".."), tp < 1, rank outside [0, tp), a
  // verify job with pull fields set, or a field longer than 1,000 bytes. ResourceExhausted when the queue
  // holds max_unfinished jobs already. Forgets the oldest finished jobs beyond max_finished.
  Result<JobId> Add(const JobRequest& request);
  Result<JobInfo> Get(JobId id) override;
  // Newest first, at most `limit`.
  // `state`: only the jobs in that state (a client looking for the running
  // ones behind hundreds of newer queued ones).
  Result<std::vector<JobInfo>> List(std::size_t limit = 100, std::optional<JobState> state = std::nullopt);
  // Queued jobs, oldest first, at most `limit`.
  Result<std::vector<JobInfo>> Queued(std::size_t limit = 1000) override;
  // How many jobs the queue holds in each state ("queued", ...; every state
  // present, 0 where none).
  Result<std::map<std::string, std::uint64_t>> CountByState();

  // queued -> running, one more attempt. FailedPrecondition if not queued.
  Status MarkRunning(JobId id) override;
  // Links the running attempt to its pull row.
  Status SetPull(JobId id, std::int64_t pull) override;
  // Records the commit a running evict job chose (JobInfo::target_commit).
  Status SetTargetCommit(JobId id, std::string_view commit) override;
  // running -> queued: the server stopped mid-job; it resumes next start.
  Status Requeue(JobId id) override;
  // -> done/failed/cancelled with `error` (and `result`, see JobInfo).
  // FailedPrecondition if the job has already finished (a finished job
  // never changes again).
  Status Finish(JobId id, JobState state, std::string_view error = {}, std::string_view result = {}) override;
  // queued -> cancelled with `error`. FailedPrecondition if the job is not
  // queued (it started meanwhile, or ended): a running job is cancelled by
  // its runner, never marked here while its work goes on.
  Status CancelQueued(JobId id, std::string_view error) override;
  // Jobs left 'running' by a server that died: queued again. Returns their
  // number. Call once at start, before running anything.
  Result<int> RequeueInterrupted();

 private:
  struct Rep;
  explicit JobStore(std::unique_ptr<Rep> rep);
  std::unique_ptr<Rep> rep_;
  JobStoreLimits limits_;
};

}  // namespace exlr8
