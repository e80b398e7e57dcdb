#include "daemon/cache/cache.h"

#include <set>
#include <string>
#include <vector>

#include "daemon/cache/cache_rep.h"

// Cache: the record of each pull (its plan, state and counters).
namespace exlr8 {

using cache_internal::kMaxSqlInt;

std::string_view PullStateName(PullState state) {
  switch (state) {
    case PullState::kRunning: return "running";
    case PullState::kDone: return "done";
    case PullState::kFailed: return "failed";
    case PullState::kCancelled: return "cancelled";
  }
  return "unknown";
}

namespace {

Result<PullState> ParsePullState(std::string_view s) {
  for (PullState p : {PullState::kRunning, PullState::kDone, PullState::kFailed, PullState::kCancelled})
    if (PullStateName(p) == s) return p;
  return CorruptionError("unknown pull state '" + EscapeForMessage(s) + "' in exlr8d.db");
}

constexpr std::string_view kInterrupted = "interrupted: the exlr8d that ran it stopped";

}  // namespace

// ---- pulls a dead process left 'running' ----

Status Cache::Rep::MarkStalePulls() {
  if (stale_pulls_marked) return Status::Ok();
  std::string own;  // ids: integers, safe in the text
  for (PullId id : own_pulls) own += (own.empty() ? "" : ", ") + std::to_string(id);
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt q,
                         db->Prepare("UPDATE pulls SET state = 'failed', error = ?2, finished = ?1, "
                                     "updated = ?1 WHERE state = 'running' AND id NOT IN (" +
                                     own + ")"));
  EXLR8_RETURN_IF_ERROR(q.Bind(1, Now()).Bind(2, kInterrupted).Run());
  stale_pulls_marked = true;
  return Status::Ok();
}

Result<std::set<FilesetId>> Cache::Rep::FilesetsBeingPulled() {
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt q,
                         db->Prepare("SELECT id, fileset_id FROM pulls WHERE state = 'running'"));
  std::set<FilesetId> out;
  while (true) {
    EXLR8_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) return out;
    if (!IsStalePull(q.Int(0))) out.insert(q.Int(1));
  }
}

// ---- pulls ----

Result<PullId> Cache::StartPull(const PullSpec& spec) {
  EXLR8_RETURN_IF_ERROR(rep_->Writable());
  if (spec.tp < 1 || spec.rank < 0 || spec.rank >= spec.tp)
    return InvalidArgumentError("pull of '" + EscapeForMessage(spec.manifest) + "': rank " +
                                std::to_string(spec.rank) + " is not in [0, tp = " + std::to_string(spec.tp) + ")");
  EXLR8_RETURN_IF_ERROR(ValidateRepoPath(spec.manifest));
  Rep& r = *rep_;
  MutexLock l(&r.mu);
  EXLR8_RETURN_IF_ERROR(r.CheckFilesetExists(spec.fileset));
  const std::int64_t now = r.Now();
  EXLR8_ASSIGN_OR_RETURN(SqliteTxn txn, SqliteTxn::Begin(r.db.get()));
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt ins, r.db->Prepare("INSERT INTO pulls (fileset_id, manifest, tp, rank, "
                                                       "plan_summary, state, started, updated) "
                                                       "VALUES (?1, ?2, ?3, ?4, ?5, 'running', ?6, ?7)"));
  EXLR8_RETURN_IF_ERROR(ins.Bind(1, spec.fileset)
                            .Bind(2, spec.manifest)
                            .Bind(3, std::int64_t{spec.tp})
                            .Bind(4, std::int64_t{spec.rank})
                            .Bind(5, spec.plan_summary_json)
                            .Bind(6, spec.started_ms > 0 && spec.started_ms <= now ? spec.started_ms : now)
                            .Bind(7, now)
                            .Run());
  const PullId id = r.db->LastInsertRowId();
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt touch, r.db->Prepare("UPDATE filesets SET last_used = ? WHERE id = ?"));
  EXLR8_RETURN_IF_ERROR(touch.Bind(1, now).Bind(2, spec.fileset).Run());
  EXLR8_RETURN_IF_ERROR(txn.Commit());
  r.own_pulls.insert(id);
  return id;
}

Status Cache::UpdatePull(PullId pull, const PullCounters& c) {
  EXLR8_RETURN_IF_ERROR(rep_->Writable());
  for (std::uint64_t v : {c.bytes_planned, c.bytes_fetched, c.bytes_reused, c.requests, c.retries,
                          c.checksum_failures})
    if (v > kMaxSqlInt) return InvalidArgumentError("pull " + std::to_string(pull) + ": counter out of range");
  Rep& r = *rep_;
  MutexLock l(&r.mu);
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt q, r.db->Prepare("UPDATE pulls SET bytes_planned = ?, bytes_fetched = ?, "
                                                     "bytes_reused = ?, requests = ?, retries = ?, "
                                                     "checksum_failures = ?, updated = ? "
                                                     "WHERE id = ? AND state = 'running'"));
  EXLR8_RETURN_IF_ERROR(q.Bind(1, static_cast<std::int64_t>(c.bytes_planned))
                            .Bind(2, static_cast<std::int64_t>(c.bytes_fetched))
                            .Bind(3, static_cast<std::int64_t>(c.bytes_reused))
                            .Bind(4, static_cast<std::int64_t>(c.requests))
                            .Bind(5, static_cast<std::int64_t>(c.retries))
                            .Bind(6, static_cast<std::int64_t>(c.checksum_failures))
                            .Bind(7, r.Now())
                            .Bind(8, pull)
                            .Run());
  if (r.db->Changes() == 0)
    return FailedPreconditionError(r.shown + ": pull " + std::to_string(pull) + " is unknown or no longer running");
  return Status::Ok();
}

Status Cache::FinishPull(PullId pull, PullState state, std::string_view error) {
  EXLR8_RETURN_IF_ERROR(rep_->Writable());
  if (state == PullState::kRunning)
    return InvalidArgumentError("pull " + std::to_string(pull) + ": FinishPull needs a final state");
  Rep& r = *rep_;
  MutexLock l(&r.mu);
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt q, r.db->Prepare("UPDATE pulls SET state = ?1, error = ?2, finished = ?3, "
                                                     "updated = ?3 WHERE id = ?4 AND state = 'running'"));
  // Over in this process whether or not its end is recorded (a full disk):
  // a row left 'running' is then reported interrupted, and bars no eviction.
  r.own_pulls.erase(pull);
  if (Status s = q.Bind(1, PullStateName(state)).Bind(2, error).Bind(3, r.Now()).Bind(4, pull).Run();
      !s.ok()) {
    r.stale_pulls_marked = false;  // the next eviction marks it
    return s;
  }
  if (r.db->Changes() == 0)
    return FailedPreconditionError(r.shown + ": pull " + std::to_string(pull) + " is unknown or already finished");
  return Status::Ok();
}

Result<std::vector<PullInfo>> Cache::Rep::QueryPulls(std::string_view where, std::int64_t arg) {
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt q,
                         db->Prepare("SELECT id, fileset_id, manifest, tp, rank, plan_summary, state, error, "
                                     "bytes_planned, bytes_fetched, bytes_reused, requests, retries, "
                                     "checksum_failures, started, updated, finished FROM pulls " +
                                     std::string(where) + " ORDER BY id DESC"));
  if (!where.empty()) q.Bind(1, arg);
  std::vector<PullInfo> out;
  while (true) {
    EXLR8_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) return out;
    PullInfo p;
    p.id = q.Int(0);
    p.spec.fileset = q.Int(1);
    p.spec.manifest = q.Text(2);
    p.spec.tp = static_cast<int>(q.Int(3));
    p.spec.rank = static_cast<int>(q.Int(4));
    p.spec.plan_summary_json = q.Text(5);
    EXLR8_ASSIGN_OR_RETURN(p.state, ParsePullState(q.Text(6)));
    p.error = q.Text(7);
    p.counters.bytes_planned = static_cast<std::uint64_t>(q.Int(8));
    p.counters.bytes_fetched = static_cast<std::uint64_t>(q.Int(9));
    p.counters.bytes_reused = static_cast<std::uint64_t>(q.Int(10));
    p.counters.requests = static_cast<std::uint64_t>(q.Int(11));
    p.counters.retries = static_cast<std::uint64_t>(q.Int(12));
    p.counters.checksum_failures = static_cast<std::uint64_t>(q.Int(13));
    p.started_ms = q.Int(14);
    p.updated_ms = q.Int(15);
    if (!q.IsNull(16)) p.finished_ms = q.Int(16);
    if (p.state == PullState::kRunning && IsStalePull(p.id)) {  // as MarkStalePulls would have left it
      p.state = PullState::kFailed;
      p.error = kInterrupted;
      p.finished_ms = p.updated_ms;
    }
    out.push_back(std::move(p));
  }
}

Result<PullInfo> Cache::GetPull(PullId pull) {
  Rep& r = *rep_;
  MutexLock l(&r.mu);
  EXLR8_ASSIGN_OR_RETURN(std::vector<PullInfo> list, r.QueryPulls("WHERE id = ?", pull));
  if (list.empty()) return NotFoundError(r.shown + ": no pull with id " + std::to_string(pull));
  return std::move(list.front());
}

Result<std::vector<PullInfo>> Cache::ListPulls(std::optional<FilesetId> fileset) {
  MutexLock l(&rep_->mu);
  if (fileset) return rep_->QueryPulls("WHERE fileset_id = ?", *fileset);
  return rep_->QueryPulls("", 0);
}

}  // namespace exlr8
