#include <limits>
#include <utility>

#include "daemon/cache/cache_paths.h"
#include "daemon/cache/catalog.h"

// Catalog: the recorded extents of files and the history of pulls.
namespace exlr8 {

namespace {

Result<PullState> ParsePullState(std::string_view s) {
  for (PullState p : {PullState::kRunning, PullState::kDone, PullState::kFailed, PullState::kCancelled})
    if (PullStateName(p) == s) return p;
  return CorruptionError("unknown pull state '" + EscapeForMessage(s) + "' in exlr8d.db");
}

constexpr std::string_view kInterrupted = "interrupted: the exlr8d that ran it stopped";

}  // namespace

std::string_view PullStateName(PullState state) {
  switch (state) {
    case PullState::kRunning:
      return "running";
    case PullState::kDone:
      return "done";
    case PullState::kFailed:
      return "failed";
    case PullState::kCancelled:
      return "cancelled";
  }
  return "unknown";
}

// ---- recorded extents ----

Result<std::uint64_t> Catalog::RecordedBytes() {
  EXLR8_ASSIGN_OR_RETURN(std::int64_t n, db_->QueryInt("SELECT COALESCE(SUM(length), 0) FROM extents"));
  return static_cast<std::uint64_t>(n);
}

Result<std::vector<Extent>> Catalog::AllExtents(FileId file) {
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt q, db_->Prepare("SELECT start, length FROM extents WHERE file_id = ? "
                                                    "ORDER BY start"));
  q.Bind(1, file);
  std::vector<Extent> out;
  while (true) {
    EXLR8_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) return out;
    out.push_back({static_cast<std::uint64_t>(q.Int(0)), static_cast<std::uint64_t>(q.Int(1))});
  }
}

Result<std::vector<FileRecord>> Catalog::Records(FileId file) {
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt q,
                         db_->Prepare("SELECT name, kind, shape, start, length, xxh64 FROM records "
                                      "WHERE file_id = ? ORDER BY seq"));
  q.Bind(1, file);
  std::vector<FileRecord> out;
  while (true) {
    EXLR8_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) return out;
    out.push_back({q.Text(0), q.Text(1), q.Text(2), static_cast<std::uint64_t>(q.Int(3)),
                   static_cast<std::uint64_t>(q.Int(4)), static_cast<std::uint64_t>(q.Int(5))});
  }
}

Result<std::vector<Extent>> Catalog::ExtentsNear(FileId file, std::uint64_t offset, std::uint64_t end) {
  std::vector<Extent> out;
  // The last extent starting at or before `offset` may reach into the range.
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt prev,
                         db_->Prepare("SELECT start, length FROM extents WHERE file_id = ? AND "
                                      "start <= ? ORDER BY start DESC LIMIT 1"));
  prev.Bind(1, file).Bind(2, static_cast<std::int64_t>(offset));
  EXLR8_ASSIGN_OR_RETURN(bool row, prev.Step());
  if (row) {
    const Extent e{static_cast<std::uint64_t>(prev.Int(0)), static_cast<std::uint64_t>(prev.Int(1))};
    if (e.end() >= offset) out.push_back(e);
  }
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt next,
                         db_->Prepare("SELECT start, length FROM extents WHERE file_id = ? AND "
                                      "start > ? AND start <= ? ORDER BY start"));
  next.Bind(1, file).Bind(2, static_cast<std::int64_t>(offset)).Bind(3, static_cast<std::int64_t>(end));
  while (true) {
    EXLR8_ASSIGN_OR_RETURN(bool more, next.Step());
    if (!more) break;
    out.push_back({static_cast<std::uint64_t>(next.Int(0)), static_cast<std::uint64_t>(next.Int(1))});
  }
  return out;
}

// Merges normalized `adds` into the extent table of `file`, keeping it
// normalized. REQUIRES: inside a transaction.
Status Catalog::MergeExtents(FileId file, std::span<const Extent> adds) {
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt del, db_->Prepare("DELETE FROM extents WHERE file_id = ? AND start = ?"));
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt ins,
                         db_->Prepare("INSERT INTO extents (file_id, start, length) VALUES (?, ?, ?)"));
  for (const Extent& add : adds) {
    EXLR8_ASSIGN_OR_RETURN(std::vector<Extent> near, ExtentsNear(file, add.offset, add.end()));
    for (const Extent& e : near) {
      del.Reset();
      EXLR8_RETURN_IF_ERROR(del.Bind(1, file).Bind(2, static_cast<std::int64_t>(e.offset)).Run());
    }
    near.push_back(add);
    for (const Extent& m : NormalizeExtents(std::move(near))) {
      ins.Reset();
      EXLR8_RETURN_IF_ERROR(ins.Bind(1, file)
                                .Bind(2, static_cast<std::int64_t>(m.offset))
                                .Bind(3, static_cast<std::int64_t>(m.length))
                                .Run());
    }
  }
  return Status::Ok();
}

Status Catalog::RecordCommit(const Commit& commit) {
  EXLR8_ASSIGN_OR_RETURN(SqliteTxn txn, SqliteTxn::Begin(db_.get()));
  for (const auto& [id, list] : commit.extents)
    if (!list.empty()) EXLR8_RETURN_IF_ERROR(MergeExtents(id, list));
  if (!commit.prefixes.empty()) {
    EXLR8_ASSIGN_OR_RETURN(SqliteStmt set, db_->Prepare("UPDATE files SET durable_prefix = ? WHERE id = ?"));
    for (const auto& [id, bytes] : commit.prefixes) {
      if (commit.whole.contains(id)) continue;  // done: no resume point any more
      set.Reset();
      EXLR8_RETURN_IF_ERROR(set.Bind(1, static_cast<std::int64_t>(bytes)).Bind(2, id).Run());
    }
  }
  if (!commit.whole.empty()) {
    EXLR8_ASSIGN_OR_RETURN(
        SqliteStmt up, db_->Prepare("UPDATE files SET whole_verified = 1, durable_prefix = 0 WHERE id = ?"));
    for (FileId id : commit.whole) {
      up.Reset();
      EXLR8_RETURN_IF_ERROR(up.Bind(1, id).Run());
    }
    // The record index goes with the flag: replaced whole, so no moment
    // exists at which the file is verified and its records are another
    // download's.
    EXLR8_ASSIGN_OR_RETURN(SqliteStmt del, db_->Prepare("DELETE FROM records WHERE file_id = ?"));
    EXLR8_ASSIGN_OR_RETURN(SqliteStmt ins,
                           db_->Prepare("INSERT INTO records (file_id, seq, name, kind, shape, "
                                        "start, length, xxh64) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"));
    for (FileId id : commit.whole) {
      del.Reset();
      EXLR8_RETURN_IF_ERROR(del.Bind(1, id).Run());
      auto it = commit.records.find(id);
      if (it == commit.records.end() || !it->second) continue;
      std::int64_t seq = 0;
      for (const FileRecord& rec : *it->second) {
        ins.Reset();
        EXLR8_RETURN_IF_ERROR(ins.Bind(1, id)
                                  .Bind(2, seq++)
                                  .Bind(3, rec.name)
                                  .Bind(4, rec.kind)
                                  .Bind(5, rec.shape)
                                  .Bind(6, static_cast<std::int64_t>(rec.offset))
                                  .Bind(7, static_cast<std::int64_t>(rec.length))
                                  .Bind(8, static_cast<std::int64_t>(rec.xxh64))
                                  .Run());
      }
    }
  }
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt touch, db_->Prepare("UPDATE filesets SET last_used = ? WHERE id = ?"));
  const std::int64_t now = Now();
  for (FilesetId fs : commit.filesets) {
    touch.Reset();
    EXLR8_RETURN_IF_ERROR(touch.Bind(1, now).Bind(2, fs).Run());
  }
  return txn.Commit();
}

Status Catalog::RecordWholeFiles(std::span<const std::pair<FileId, std::uint64_t>> files) {
  EXLR8_ASSIGN_OR_RETURN(SqliteTxn txn, SqliteTxn::Begin(db_.get()));
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt del, db_->Prepare("DELETE FROM extents WHERE file_id = ?"));
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt ins, db_->Prepare("INSERT INTO extents (file_id, start, length) "
                                                      "VALUES (?, 0, ?)"));
  EXLR8_ASSIGN_OR_RETURN(
      SqliteStmt up, db_->Prepare("UPDATE files SET whole_verified = 1, durable_prefix = 0 WHERE id = ?"));
  for (const auto& [id, size] : files) {
    del.Reset();
    EXLR8_RETURN_IF_ERROR(del.Bind(1, id).Run());
    if (size > 0) {
      ins.Reset();
      EXLR8_RETURN_IF_ERROR(ins.Bind(1, id).Bind(2, static_cast<std::int64_t>(size)).Run());
    }
    up.Reset();
    EXLR8_RETURN_IF_ERROR(up.Bind(1, id).Run());
  }
  return txn.Commit();
}

Result<std::uint64_t> Catalog::ForgetRanges(const std::map<FileId, std::vector<Extent>>& ranges) {
  EXLR8_ASSIGN_OR_RETURN(SqliteTxn txn, SqliteTxn::Begin(db_.get()));
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt del, db_->Prepare("DELETE FROM extents WHERE file_id = ?"));
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt ins,
                         db_->Prepare("INSERT INTO extents (file_id, start, length) VALUES (?, ?, ?)"));
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt demote,
                         db_->Prepare("UPDATE files SET whole_verified = 0, durable_prefix = 0 "
                                      "WHERE id = ?"));
  std::uint64_t forgotten = 0;
  for (const auto& [id, list] : ranges) {
    EXLR8_ASSIGN_OR_RETURN(std::vector<Extent> have, AllExtents(id));
    const std::vector<Extent> keep = SubtractExtents(have, list);
    const std::uint64_t lost = TotalLength(have) - TotalLength(keep);
    if (lost == 0) continue;
    forgotten += lost;
    del.Reset();
    EXLR8_RETURN_IF_ERROR(del.Bind(1, id).Run());
    for (const Extent& e : keep) {
      ins.Reset();
      EXLR8_RETURN_IF_ERROR(ins.Bind(1, id)
                                .Bind(2, static_cast<std::int64_t>(e.offset))
                                .Bind(3, static_cast<std::int64_t>(e.length))
                                .Run());
    }
    demote.Reset();
    EXLR8_RETURN_IF_ERROR(demote.Bind(1, id).Run());
  }
  EXLR8_RETURN_IF_ERROR(txn.Commit());
  return forgotten;
}

// ---- pulls ----

Status Catalog::MarkStalePulls() {
  if (stale_pulls_marked_) return Status::Ok();
  std::string own;  // ids: integers, safe in the text
  for (PullId id : own_pulls_) own += (own.empty() ? "" : ", ") + std::to_string(id);
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt q,
                         db_->Prepare("UPDATE pulls SET state = 'failed', error = ?2, finished = ?1, "
                                      "updated = ?1 WHERE state = 'running' AND id NOT IN (" +
                                      own + ")"));
  EXLR8_RETURN_IF_ERROR(q.Bind(1, Now()).Bind(2, kInterrupted).Run());
  stale_pulls_marked_ = true;
  return Status::Ok();
}

Result<std::set<FilesetId>> Catalog::FilesetsBeingPulled() {
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt q,
                         db_->Prepare("SELECT id, fileset_id FROM pulls WHERE state = 'running'"));
  std::set<FilesetId> out;
  while (true) {
    EXLR8_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) return out;
    if (!IsStalePull(q.Int(0))) out.insert(q.Int(1));
  }
}

Result<PullId> Catalog::StartPull(const PullSpec& spec) {
  if (spec.tp < 1 || spec.rank < 0 || spec.rank >= spec.tp)
    return InvalidArgumentError("pull of '" + EscapeForMessage(spec.manifest) + "': rank " +
                                std::to_string(spec.rank) + " is not in [0, tp = " + std::to_string(spec.tp) +
                                ")");
  if (!spec.manifest.empty()) EXLR8_RETURN_IF_ERROR(ValidateRepoPath(spec.manifest));
  EXLR8_RETURN_IF_ERROR(CheckFilesetExists(spec.fileset));
  const std::int64_t now = Now();
  EXLR8_ASSIGN_OR_RETURN(SqliteTxn txn, SqliteTxn::Begin(db_.get()));
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt ins, db_->Prepare("INSERT INTO pulls (fileset_id, manifest, tp, rank, "
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
  const PullId id = db_->LastInsertRowId();
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt touch, db_->Prepare("UPDATE filesets SET last_used = ? WHERE id = ?"));
  EXLR8_RETURN_IF_ERROR(touch.Bind(1, now).Bind(2, spec.fileset).Run());
  EXLR8_RETURN_IF_ERROR(txn.Commit());
  own_pulls_.insert(id);
  return id;
}

Status Catalog::UpdatePull(PullId pull, const PullCounters& c) {
  for (std::uint64_t v :
       {c.bytes_planned, c.bytes_fetched, c.bytes_reused, c.requests, c.retries, c.checksum_failures})
    if (v > kMaxSqlInteger)
      return InvalidArgumentError("pull " + std::to_string(pull) + ": counter out of range");
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt q, db_->Prepare("UPDATE pulls SET bytes_planned = ?, bytes_fetched = ?, "
                                                    "bytes_reused = ?, requests = ?, retries = ?, "
                                                    "checksum_failures = ?, updated = ? "
                                                    "WHERE id = ? AND state = 'running'"));
  EXLR8_RETURN_IF_ERROR(q.Bind(1, static_cast<std::int64_t>(c.bytes_planned))
                            .Bind(2, static_cast<std::int64_t>(c.bytes_fetched))
                            .Bind(3, static_cast<std::int64_t>(c.bytes_reused))
                            .Bind(4, static_cast<std::int64_t>(c.requests))
                            .Bind(5, static_cast<std::int64_t>(c.retries))
                            .Bind(6, static_cast<std::int64_t>(c.checksum_failures))
                            .Bind(7, Now())
                            .Bind(8, pull)
                            .Run());
  if (db_->Changes() == 0)
    return FailedPreconditionError(shown_ + ": pull " + std::to_string(pull) +
                                   " is unknown or no longer running");
  return Status::Ok();
}

Status Catalog::FinishPull(PullId pull, PullState state, std::string_view error) {
  if (state == PullState::kRunning)
    return InvalidArgumentError("pull " + std::to_string(pull) + ": FinishPull needs a final state");
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt q, db_->Prepare("UPDATE pulls SET state = ?1, error = ?2, finished = ?3, "
                                                    "updated = ?3 WHERE id = ?4 AND state = 'running'"));
  // Over in this process whether or not its end is recorded (a full disk):
  // a row left 'running' is then reported interrupted, and bars no eviction.
  own_pulls_.erase(pull);
  if (Status s = q.Bind(1, PullStateName(state)).Bind(2, error).Bind(3, Now()).Bind(4, pull).Run(); !s.ok()) {
    stale_pulls_marked_ = false;  // the next eviction marks it
    return s;
  }
  if (db_->Changes() == 0)
    return FailedPreconditionError(shown_ + ": pull " + std::to_string(pull) +
                                   " is unknown or already finished");
  return Status::Ok();
}

Result<std::vector<PullInfo>> Catalog::QueryPulls(std::string_view where, std::int64_t arg) {
  EXLR8_ASSIGN_OR_RETURN(SqliteStmt q,
                         db_->Prepare("SELECT id, fileset_id, manifest, tp, rank, plan_summary, "
                                      "state, error, bytes_planned, bytes_fetched, bytes_reused, "
                                      "requests, retries, checksum_failures, started, updated, "
                                      "finished FROM pulls " +
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

Result<PullInfo> Catalog::GetPull(PullId pull) {
  EXLR8_ASSIGN_OR_RETURN(std::vector<PullInfo> list, QueryPulls("WHERE id = ?", pull));
  if (list.empty()) return NotFoundError(shown_ + ": no pull with id " + std::to_string(pull));
  return std::move(list.front());
}

Result<std::vector<PullInfo>> Catalog::ListPulls(std::optional<FilesetId> fileset) {
  if (fileset) return QueryPulls("WHERE fileset_id = ?", *fileset);
  return QueryPulls("", 0);
}

}  // namespace exlr8
