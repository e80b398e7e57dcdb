// The cache's catalog: its SQLite index <dir>/exlr8d.db (docs/CACHE.md
// "Schema"). Filesets and the revisions that resolve to them, pins, files,
// the recorded (verified) extents of each file, and the history of pulls.
//
// Owns: the SQLite connection, the clock that stamps its rows, and what
// this process knows about pull rows beyond the index (the pulls it started
// and has not finished; whether the rows of dead pulls were marked).
// Does not own: the data files (ExtentStore: the catalog records extents;
// the caller makes them durable first), process pins (files beside the
// index), space or eviction policy (Cache and SpaceAccount decide which
// filesets go; the catalog deletes their rows).
//
// Durability: synchronous=FULL, so every method that changes the index has
// its change on stable storage when it returns OK; each such method is one
// transaction (all or nothing).
//
// Threads: the catalog is a monitor whose lock the caller holds: every
// method REQUIRES(mu()). The caller takes it once around the steps that
// must see one state: CheckSpace reads the recorded bytes and the claims
// under it, a commit records extents and takes them off its claim under
// it, an eviction chooses and deletes under it. Any thread may hold it.
// Lock order: mu() first; the extent store's and the space account's locks
// may be taken while holding it, never the other way round.
//
// Errors: InvalidArgument for bad names (naming them), NotFound for unknown
// ids, FailedPrecondition for a conflicting re-declaration or a pull no
// longer running, ResourceExhausted when SQLite finds the disk full,
// Corruption for a damaged index.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/base/clock.h"
#include "daemon/base/mutex.h"
#include "daemon/base/sqlite_db.h"
#include "daemon/cache/cache_types.h"
#include "daemon/cache/extent_set.h"
#include "format/status.h"

namespace exlr8 {

// The largest integer an SQLite column holds: sizes and offsets above it
// are refused before they are written.
inline constexpr std::uint64_t kMaxSqlInteger = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());

class Catalog {
 public:
  // `shown` names the cache directory in messages. `clock` stamps rows
  // (last use, pins, pulls); it must outlive the catalog.
  Catalog(std::string shown, Clock* clock) : shown_(std::move(shown)), clock_(clock) {}
  Catalog(const Catalog&) = delete;
  Catalog& operator=(const Catalog&) = delete;

  Mutex& mu() EXLR8_RETURN_CAPABILITY(mu_) { return mu_; }

  // Opens `db_path` for the owner (who holds the cache's lock): WAL mode,
  // synchronous=FULL, foreign keys, the WAL kept for read-only readers,
  // migrated to this binary's schema; then marks pulls left 'running' by a
  // dead process 'failed' (not on a full disk: see MarkStalePulls).
  Status Open(const std::string& db_path) EXLR8_REQUIRES(mu_);
  // Opens `db_path` read-only: FailedPrecondition when its schema version
  // is not this binary's. Pull rows then read as the index says.
  Status OpenReadOnly(const std::string& db_path) EXLR8_REQUIRES(mu_);
  // Closes the connection (checkpointing the WAL). Nothing else may be
  // called after it.
  void Close() EXLR8_REQUIRES(mu_) { db_.reset(); }
  bool read_only() const { return read_only_; }

  // ---- filesets, revisions, pins ----

  // Cache::PutFileset, LookupCommit, Touch, Pin, Unpin, RecordVerified
  // (arguments validated here, the same errors).
  Result<FilesetId> PutFileset(std::string_view repo, std::string_view revision, std::string_view commit)
      EXLR8_REQUIRES(mu_);
  Result<std::string> LookupCommit(std::string_view repo, std::string_view revision) EXLR8_REQUIRES(mu_);
  Status Touch(FilesetId fileset) EXLR8_REQUIRES(mu_);
  Status Pin(FilesetId fileset, std::string_view holder) EXLR8_REQUIRES(mu_);
  Status Unpin(FilesetId fileset, std::string_view holder) EXLR8_REQUIRES(mu_);
  Status RecordVerified(FilesetId fileset, std::uint64_t checks_failed) EXLR8_REQUIRES(mu_);
  // The fileset `only` (or all), most recently used first, with their
  // counts and pins; process_pins left empty (they are not in the index).
  Result<std::vector<FilesetInfo>> QueryFilesets(std::optional<FilesetId> only) EXLR8_REQUIRES(mu_);
  // NotFound naming the id when there is no such fileset.
  Status CheckFilesetExists(FilesetId fileset) EXLR8_REQUIRES(mu_);

  // ---- files ----

  // Cache::PutFiles: one transaction, ids in the order of `files`.
  Result<std::vector<FileId>> PutFiles(FilesetId fileset, std::span<const NewFile> files) EXLR8_REQUIRES(mu_);
  Result<FileId> FindFile(FilesetId fileset, std::string_view path) EXLR8_REQUIRES(mu_);
  Result<FileInfo> GetFile(FileId file) EXLR8_REQUIRES(mu_);
  Result<std::vector<FileInfo>> ListFiles(FilesetId fileset) EXLR8_REQUIRES(mu_);
  // A file's row joined with its fileset: where its data lives.
  using FileRow = FileLocation;
  // NotFound naming the id for an unknown file.
  Result<FileRow> LoadFile(FileId file) EXLR8_REQUIRES(mu_);
  // The file's recorded durable prefix (0 when none). NotFound as LoadFile.
  Result<std::uint64_t> DurablePrefix(FileId file) EXLR8_REQUIRES(mu_);
  // The files of `fileset` with at least one recorded byte.
  Result<std::vector<FileId>> FilesWithExtents(FilesetId fileset) EXLR8_REQUIRES(mu_);

  // ---- recorded extents ----

  // Sum of all recorded extents.
  Result<std::uint64_t> RecordedBytes() EXLR8_REQUIRES(mu_);
  // A file's extents, sorted and merged.
  Result<std::vector<Extent>> AllExtents(FileId file) EXLR8_REQUIRES(mu_);
  // The file's record index, in its order (empty when it has none).
  Result<std::vector<FileRecord>> Records(FileId file) EXLR8_REQUIRES(mu_);
  // The extents of `file` that overlap or touch [offset, end].
  Result<std::vector<Extent>> ExtentsNear(FileId file, std::uint64_t offset, std::uint64_t end)
      EXLR8_REQUIRES(mu_);

  // One commit's records (Cache::CommitVerified), written in one
  // transaction. REQUIRES: every byte named is on stable storage, and so is
  // every named file's name (the caller synced them first).
  struct Commit {
    std::map<FileId, std::vector<Extent>> extents;  // normalized, per file
    std::map<FileId, std::uint64_t> prefixes;       // durable prefixes
    std::set<FileId> whole;                         // checked whole: whole_verified, no prefix
    // The record index of files in `whole` (VerifiedExtent::records).
    std::map<FileId, std::shared_ptr<const std::vector<FileRecord>>> records;
    std::set<FilesetId> filesets;                   // whose last_used becomes now
  };
  Status RecordCommit(const Commit& commit) EXLR8_REQUIRES(mu_);
  // Records [0, size) of each file as its only extent and sets its
  // whole_verified, in one transaction. REQUIRES: durable, as above.
  Status RecordWholeFiles(std::span<const std::pair<FileId, std::uint64_t>> files) EXLR8_REQUIRES(mu_);
  // Removes `ranges` from each file's extents in one transaction; a file
  // that loses a byte loses whole_verified and its durable prefix. Returns
  // the recorded bytes removed. The ranges are the caller's to check.
  Result<std::uint64_t> ForgetRanges(const std::map<FileId, std::vector<Extent>>& ranges) EXLR8_REQUIRES(mu_);

  // ---- eviction ----

  struct EvictionCandidate {
    FilesetId id = 0;
    std::uint64_t bytes = 0;  // recorded bytes
    std::string repo, commit;
  };
  // Unpinned filesets, least recently used first (ties: lowest id). Process
  // pins, claims and running pulls are the caller's to skip.
  Result<std::vector<EvictionCandidate>> EvictionOrder() EXLR8_REQUIRES(mu_);
  // Deletes the filesets' rows (files, extents, pins, pulls, revisions
  // cascade) in one durable transaction.
  Status DeleteFilesets(std::span<const FilesetId> filesets) EXLR8_REQUIRES(mu_);
  // The data directories (<org>/<name>/<commit>) of every fileset.
  Result<std::set<std::string>> FilesetDirs() EXLR8_REQUIRES(mu_);

  // ---- pulls ----

  // Cache::StartPull, UpdatePull, FinishPull (arguments checked here).
  Result<PullId> StartPull(const PullSpec& spec) EXLR8_REQUIRES(mu_);
  Status UpdatePull(PullId pull, const PullCounters& counters) EXLR8_REQUIRES(mu_);
  Status FinishPull(PullId pull, PullState state, std::string_view error) EXLR8_REQUIRES(mu_);
  // One pull, or the pulls of one fileset (all when nullopt), newest first.
  // For the owner, a 'running' row of a pull this process did not start
  // reads as failed ("interrupted"), as MarkStalePulls would leave it.
  Result<PullInfo> GetPull(PullId pull) EXLR8_REQUIRES(mu_);
  Result<std::vector<PullInfo>> ListPulls(std::optional<FilesetId> fileset) EXLR8_REQUIRES(mu_);
  // Marks 'failed' the 'running' rows of pulls this process did not start
  // (for the owner, their process died). Until it works (the UPDATE needs
  // room on disk) such rows are treated as failed without it; an eviction
  // that freed space calls it again.
  Status MarkStalePulls() EXLR8_REQUIRES(mu_);
  // The filesets with a pull running now (stale rows left out).
  Result<std::set<FilesetId>> FilesetsBeingPulled() EXLR8_REQUIRES(mu_);

 private:
  std::int64_t Now() EXLR8_REQUIRES(mu_) { return clock_->NowUnixMs(); }
  Result<FileId> PutFileLocked(FilesetId fileset, const NewFile& f) EXLR8_REQUIRES(mu_);
  Status MergeExtents(FileId file, std::span<const Extent> adds) EXLR8_REQUIRES(mu_);
  Result<std::vector<PullInfo>> QueryPulls(std::string_view where, std::int64_t arg) EXLR8_REQUIRES(mu_);
  // A 'running' row whose pull no process runs: never in a read-only view,
  // which cannot know.
  bool IsStalePull(PullId id) const EXLR8_REQUIRES(mu_) { return !read_only_ && !own_pulls_.contains(id); }

  const std::string shown_;
  Clock* const clock_;
  bool read_only_ = false;  // set by OpenReadOnly, before any other use

  Mutex mu_;
  std::unique_ptr<SqliteDb> db_ EXLR8_GUARDED_BY(mu_);
  // Pulls this process started and has not finished.
  std::set<PullId> own_pulls_ EXLR8_GUARDED_BY(mu_);
  // Whether the rows of pulls not in own_pulls_ were marked 'failed'.
  bool stale_pulls_marked_ EXLR8_GUARDED_BY(mu_) = false;
};

}  // namespace exlr8
