#include "daemon/serve/job_store.h"

#include <array>
#include <functional>

#include "daemon/base/clock.h"
#include "daemon/base/migrations.h"
#include "daemon/base/mutex.h"
#include "daemon/base/sqlite_db.h"
#include "daemon/cache/cache_paths.h"
#include "daemon/hub/hub_protocol.h"
#include "serve_schema_sql.h"

namespace exlr8 {

namespace {

constexpr std::array<std::string_view, 5> kStateNames = {"queued", "running", "done", "failed", "cancelled"};
constexpr std::array<std::string_view, 3> kKindNames = {"pull", "verify", "evict"};
constexpr std::size_t kMaxFieldBytes = 1000;

Result<JobState> ParseState(const std::string& name) {
  for (std::size_t i = 0; i < kStateNames.size(); ++i)
    if (kStateNames[i] == name) return static_cast<JobState>(i);
  return CorruptionError("job state '" + name + "' is unknown");
}

Result<JobKind> ParseKind(const std::string& name) {
  for (std::size_t i = 0; i < kKindNames.size(); ++i)
    if (kKindNames[i] == name) return static_cast<JobKind>(i);
  return CorruptionError("job kind '" + name + "' is unknown");
}

Status CheckRequest(const JobRequest& r) {
  for (const auto& [field, value] : {std::pair<const char*, const std::string*>{"repo", &r.repo},
                                     {"revision", &r.revision}, {"manifest", &r.manifest},
                                     {"endpoint", &r.endpoint}, {"pin", &r.pin}})
    if (value->size() > kMaxFieldBytes)
      return InvalidArgumentError(std::string(field) + ": longer than " + std::to_string(kMaxFieldBytes) + " bytes");
  // The cache's own rule (no "..", no leading '.'), so a job that could
  // never run is refused when it is asked for.
  if (Status s = ValidateRepoId(r.repo); !s.ok()) return InvalidArgumentError("repo: " + s.message());
  if (r.revision.empty()) return InvalidArgumentError("revision must not be empty");
  // What the job would fail on only after it ran is refused up front: a pin
  // holder the cache refuses must not surface after the whole pull, with
  // the fileset left unpinned.
  if (Status s = ValidateRevision(r.revision); !s.ok()) return InvalidArgumentError("revision: " + s.message());
  if (!r.pin.empty())
    if (Status s = ValidateHolder(r.pin); !s.ok()) return InvalidArgumentError("pin: " + s.message());
  if (!r.endpoint.empty() &&
      (!UrlOrigin(r.endpoint) || r.endpoint.find_first_of("?#") != std::string::npos))
    return InvalidArgumentError("endpoint: '" + EscapeForMessage(r.endpoint) +
                                "' is not an http(s) URL without query");
  if (r.kind != JobKind::kPull) {
    // A scrub or an eviction of a fileset: nothing else applies.
    if (!r.manifest.empty() || r.tp != 1 || r.rank != 0 || !r.endpoint.empty() || !r.pin.empty() || r.make_room)
      return InvalidArgumentError("a" + std::string(r.kind == JobKind::kVerify ? " verify" : "n evict") +
                                  " job takes repo and revision only");
    return Status::Ok();
  }
  if (r.manifest.empty()) {  // the whole fileset
    if (r.tp != 1 || r.rank != 0) return InvalidArgumentError("tp and rank need a manifest");
    return Status::Ok();
  }
  // Names and repo paths only: the server never reads a local file for a
  // client (PullOptions::allow_local_manifest).
  if (Status s = ValidateManifestRef(r.manifest); !s.ok())
    return InvalidArgumentError("manifest must be a name (home, down1, ...) or a path inside the repository: " +
                                s.message());
  if (r.tp < 1) return InvalidArgumentError("tp must be >= 1, got " + std::to_string(r.tp));
  if (r.rank < 0 || r.rank >= r.tp)
    return InvalidArgumentError("rank must be in [0, " + std::to_string(r.tp - 1) + "], got " +
                                std::to_string(r.rank));
  return Status::Ok();
}

constexpr const char* kColumns =
    "id, repo, revision, manifest, tp, rank, endpoint, pin, state, error, pull_id, attempts, created, updated, "
    "finished, kind, result, make_room, target_commit";

Result<JobInfo> ReadRow(const SqliteStmt& q) {
  JobInfo j;
  j.id = q.Int(0);
  j.request.repo = q.Text(1);
  j.request.revision = q.Text(2);
  j.request.manifest = q.Text(3);
  j.request.tp = static_cast<int>(q.Int(4));
  j.request.rank = static_cast<int>(q.Int(5));
  j.request.endpoint = q.Text(6);
  j.request.pin = q.Text(7);
  EXLR8_ASSIGN_OR_RETURN(j.state, ParseState(q.Text(8)));
  j.error = q.Text(9);
  if (!q.IsNull(10)) j.pull = q.Int(10);
  j.attempts = static_cast<int>(q.Int(11));
  j.created_ms = q.Int(12);
  j.updated_ms = q.Int(13);
  if (!q.IsNull(14)) j.finished_ms = q.Int(14);
  EXLR8_ASSIGN_OR_RETURN(j.request.kind, ParseKind(q.Text(15)));
  j.result = q.Text(16);
  j.request.make_room = q.Int(17) != 0;
  j.target_commit = q.Text(18);
  return j;
}

}  // namespace

std::string_view JobStateName(JobState state) { return kStateNames[static_cast<std::size_t>(state)]; }
std::string_view JobKindName(JobKind kind) { return kKindNames[static_cast<std::size_t>(kind)]; }

bool IsFinished(JobState state) {
  return state == JobState::kDone || state == JobState::kFailed || state == JobState::kCancelled;
}

struct JobStore::Rep {
  Clock* clock = &Clock::Real();
  Mutex mu;
  std::unique_ptr<SqliteDb> db EXLR8_GUARDED_BY(mu);

  // Runs `sql` (binding ?1 = now, ?2 = id, then `bind` for the rest) and
  // fails with `wrong_state` unless it changed exactly one row.
  Status UpdateOne(JobId id, const char* sql, const std::function<void(SqliteStmt&)>& bind,
                   const std::string& wrong_state) EXLR8_EXCLUDES(mu) {
    MutexLock l(&mu);
    EXLR8_ASSIGN_OR_RETURN(SqliteStmt q, db->Prepare(sql));
    q.Bind(1, clock->NowUnixMs()).Bind(2, id);
    if (bind) bind(q);
    EXLR8_RETURN_IF_ERROR(q.Run());
    if (db->Changes() == 1) return Status::Ok();
    EXLR8_ASSIGN_OR_RETURN(SqliteStmt e, db->Prepare("SELECT state FROM jobs WHERE id = ?1"));
    e.Bind(1, id);
    EXLR8_ASSIGN_OR_RETURN(bool row, e.Step());
    if (!row) return NotFoundError("no job " + std::to_string(id));
    return FailedPreconditionError("job " + std::to_string(id) + " is " + e.Text(0) + ": " + wrong_state);
  }
};

JobStore::JobStore(std::unique_ptr<Rep> rep) : rep_(std::move(rep)) {}
JobStore::~JobStore() = default;

Result<std::unique_ptr<JobStore>> JobStore::Open(const std::filesystem::path& path, JobStoreLimits limits) {
  static constexpr auto& kMigrations = serve_schema::kMigrations;
  auto rep = std::make_unique<Rep>();
  if (limits.clock != nullptr) rep->clock = limits.clock;
  MutexLock l(&rep->mu);
  EXLR8_ASSIGN_OR_RETURN(rep->db, SqliteDb::Open(path.string()));
  // The queue is small and written a few times per job: the default
  // rollback journal with FULL sync is plenty, and a job is durable once
  // POST answers.
  EXLR8_RETURN_IF_ERROR(rep->db->Exec("PRAGMA synchronous = FULL"));
  EXLR8_RETURN_IF_ERROR(ApplyMigrations(rep->db.get(), kMigrations));
  auto store = std::unique_ptr<JobStore>(new JobStore(std::move(rep)));
  store->limits_ = limits;
  return store;
}

Result<JobId> JobStore::Add(const JobRequest& r) {
  EXLR8_RETURN_IF_ERROR(CheckRequest(r));
  if (limits_.max_finished < 1 || limits_.max_unfinished < 1)
    return InvalidArgumentError("JobStoreLimits must allow at least one job of each kind");
  MutexLock l(&rep_->mu);
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt q, rep_->db->Prepare(
                                           "INSERT INTO jobs (repo, revision, manifest, tp, rank, endpoint, pin, "
                                           "state, created, updated, kind, make_room) VALUES (?1, ?2, ?3, ?4, ?5, "
                                           "?6, ?7, 'queued', ?8, ?8, ?9, ?10)"));
  q.Bind(1, r.repo).Bind(2, r.revision).Bind(3, r.manifest).Bind(4, std::int64_t{r.tp}).Bind(5, std::int64_t{r.rank});
  q.Bind(6, r.endpoint).Bind(7, r.pin).Bind(8, rep_->clock->NowUnixMs()).Bind(9, JobKindName(r.kind));
  q.Bind(10, std::int64_t{r.make_room ? 1 : 0});
  EXLR8_ASSIGN_OR_RETURN(SqliteTxn txn, SqliteTxn::Begin(rep_->db.get()));
  EXLR8_ASSIGN_OR_RETURN(std::int64_t waiting,
                         rep_->db->QueryInt("SELECT count(*) FROM jobs WHERE state IN ('queued', 'running')"));
  if (static_cast<std::uint64_t>(waiting) >= limits_.max_unfinished)
    return ResourceExhaustedError("the queue already holds " + std::to_string(waiting) +
                                  " unfinished jobs (at most " + std::to_string(limits_.max_unfinished) +
                                  "); wait for some to finish or cancel them");
  EXLR8_RETURN_IF_ERROR(q.Run());
  const JobId id = rep_->db->LastInsertRowId();
  // Finished jobs beyond the newest max_finished go: the queue stays small
  // however long the server runs.
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt prune, rep_->db->Prepare(
                                               "DELETE FROM jobs WHERE finished IS NOT NULL AND id < (SELECT id FROM "
                                               "jobs WHERE finished IS NOT NULL ORDER BY id DESC LIMIT 1 OFFSET ?1)"));
  prune.Bind(1, static_cast<std::int64_t>(limits_.max_finished) - 1);
  EXLR8_RETURN_IF_ERROR(prune.Run());
  EXLR8_RETURN_IF_ERROR(txn.Commit());
  return id;
}

Result<JobInfo> JobStore::Get(JobId id) {
  MutexLock l(&rep_->mu);
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt q,
                         rep_->db->Prepare(std::string("SELECT ") + kColumns + " FROM jobs WHERE id = ?1"));
  q.Bind(1, id);
  EXLR8_ASSIGN_OR_RETURN(bool row, q.Step());
  if (!row) return NotFoundError("no job " + std::to_string(id));
  return ReadRow(q);
}

namespace {

// The jobs `SELECT <kColumns> FROM jobs <where_order>` finds, ?1 bound to `limit`.
Result<std::vector<JobInfo>> SelectJobs(SqliteDb& db, std::string_view where_order, std::size_t limit) {
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt q, db.Prepare(std::string("SELECT ") + kColumns + " FROM jobs " +
                                                  std::string(where_order) + " LIMIT ?1"));
  q.Bind(1, static_cast<std::int64_t>(limit));
  std::vector<JobInfo> out;
  for (;;) {
    EXLR8_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    EXLR8_ASSIGN_OR_RETURN(JobInfo j, ReadRow(q));
    out.push_back(std::move(j));
  }
  return out;
}

}  // namespace

Result<std::vector<JobInfo>> JobStore::List(std::size_t limit, std::optional<JobState> state) {
  MutexLock l(&rep_->mu);
  if (!state) return SelectJobs(*rep_->db, "ORDER BY id DESC", limit);
  // The name is one of JobStateName's constants, never a client's text.
  return SelectJobs(*rep_->db, "WHERE state = '" + std::string(JobStateName(*state)) + "' ORDER BY id DESC", limit);
}

Result<std::vector<JobInfo>> JobStore::Queued(std::size_t limit) {
  MutexLock l(&rep_->mu);
  return SelectJobs(*rep_->db, "WHERE state = 'queued' ORDER BY id", limit);
}

Result<std::map<std::string, std::uint64_t>> JobStore::CountByState() {
  std::map<std::string, std::uint64_t> out;
  for (JobState st : {JobState::kQueued, JobState::kRunning, JobState::kDone, JobState::kFailed, JobState::kCancelled})
    out[std::string(JobStateName(st))] = 0;
  MutexLock l(&rep_->mu);
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt q, rep_->db->Prepare("SELECT state, COUNT(*) FROM jobs GROUP BY state"));
  for (;;) {
    EXLR8_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    out[q.Text(0)] = static_cast<std::uint64_t>(q.Int(1));
  }
  return out;
}

Status JobStore::MarkRunning(JobId id) {
  return rep_->UpdateOne(id,
                         "UPDATE jobs SET state = 'running', attempts = attempts + 1, updated = ?1 "
                         "WHERE id = ?2 AND state = 'queued'",
                         nullptr, "only a queued job starts");
}

Status JobStore::SetPull(JobId id, std::int64_t pull) {
  return rep_->UpdateOne(
      id, "UPDATE jobs SET pull_id = ?3, updated = ?1 WHERE id = ?2 AND state = 'running'",
      [pull](SqliteStmt& q) { q.Bind(3, pull); }, "only a running job has a pull");
}

Status JobStore::SetTargetCommit(JobId id, std::string_view commit) {
  return rep_->UpdateOne(
      id, "UPDATE jobs SET target_commit = ?3, updated = ?1 WHERE id = ?2 AND state = 'running'",
      [commit](SqliteStmt& q) { q.Bind(3, commit); }, "only a running job chooses its commit");
}

Status JobStore::Requeue(JobId id) {
  return rep_->UpdateOne(id, "UPDATE jobs SET state = 'queued', updated = ?1 WHERE id = ?2 AND state = 'running'",
                         nullptr, "only a running job is queued again");
}

Status JobStore::Finish(JobId id, JobState state, std::string_view error, std::string_view result) {
  if (!IsFinished(state))
    return InvalidArgumentError("Finish: '" + std::string(JobStateName(state)) + "' is not a final state");
  return rep_->UpdateOne(
      id,
      "UPDATE jobs SET state = ?3, error = ?4, result = ?5, updated = ?1, finished = ?1 "
      "WHERE id = ?2 AND state IN ('queued', 'running')",
      [&](SqliteStmt& q) { q.Bind(3, JobStateName(state)).Bind(4, error).Bind(5, result); },
      "it has already finished");
}

Status JobStore::CancelQueued(JobId id, std::string_view error) {
  return rep_->UpdateOne(
      id,
      "UPDATE jobs SET state = 'cancelled', error = ?3, updated = ?1, finished = ?1 WHERE id = ?2 AND state = 'queued'",
      [&](SqliteStmt& q) { q.Bind(3, error); }, "it is no longer queued");
}

Result<int> JobStore::RequeueInterrupted() {
  MutexLock l(&rep_->mu);
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt q,
                         rep_->db->Prepare("UPDATE jobs SET state = 'queued', updated = ?1 WHERE state = 'running'"));
  q.Bind(1, rep_->clock->NowUnixMs());
  EXLR8_RETURN_IF_ERROR(q.Run());
  return static_cast<int>(rep_->db->Changes());
}

}  // namespace exlr8
