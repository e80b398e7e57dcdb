// Internal to daemon/cache: the state behind Cache (its Rep) and the
// helpers the cache*.cpp files share. Not part of the library's interface;
// include cache.h instead.
#pragma once

#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "daemon/base/file_lock.h"
#include "daemon/base/mutex.h"
#include "daemon/base/posix.h"
#include "daemon/base/sqlite_db.h"
#include "daemon/cache/cache.h"
#include "daemon/cache/cache_paths.h"
#include "daemon/cache/space_account.h"

namespace exlr8 {
namespace cache_internal {

inline constexpr std::size_t kMaxOpenFiles = 128;  // descriptors kept open for reuse
inline constexpr std::uint64_t kMaxSqlInt = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());

// A data file opened by this process. Shared with in-flight writers and
// ByteSources, so it stays valid when dropped from the open-file table.
struct DataFile {
  UniqueFd fd;
  FilesetId fileset = 0;
  std::uint64_t size = 0;
  std::string rel;    // <org>/<name>/<commit>/<path>
  std::string shown;  // <dir>/<rel>, for messages
  // Bytes written since write-back was last started (CacheOptions::write_behind_bytes).
  std::atomic<std::uint64_t> unkicked{0};
};

// The row of a file joined with its fileset.
struct FileRow {
  FilesetId fileset = 0;
  std::uint64_t size = 0;
  std::string rel;
};

}  // namespace cache_internal

struct Cache::Rep {
  using DataFile = cache_internal::DataFile;
  using FileRow = cache_internal::FileRow;

  // Immutable after Open; readable without the lock.
  std::filesystem::path dir;
  std::string shown;  // dir as a string, for messages
  CacheOptions options;
  UniqueFd root_fd;
  std::unique_ptr<FileLock> lock;  // released last (declared before db)
  bool read_only = false;          // OpenReadOnly: no lock, the index read-only

  // FailedPrecondition for a change through a read-only view.
  Status Writable() const {
    if (!read_only) return Status::Ok();
    return FailedPreconditionError(shown + ": opened read-only (Cache::OpenReadOnly); nothing changed");
  }

  Mutex mu;
  std::unique_ptr<SqliteDb> db EXLR8_GUARDED_BY(mu);
  // The table of open data files has a lock of its own (taken after mu,
  // never before), so WriteAt of an open file never waits for mu: a commit
  // holds mu through its SQLite transaction, whose WAL fsync would
  // otherwise stall every writer.
  Mutex open_mu EXLR8_ACQUIRED_AFTER(mu);
  std::unordered_map<FileId, std::shared_ptr<DataFile>> open_files EXLR8_GUARDED_BY(open_mu);

  std::shared_ptr<DataFile> FindOpen(FileId file) EXLR8_EXCLUDES(open_mu) {
    MutexLock l(&open_mu);
    auto it = open_files.find(file);
    return it == open_files.end() ? nullptr : it->second;
  }
  // Free space, the reserve and the claims of pulls in flight; borrows
  // root_fd. Set by Open and OpenReadOnly.
  std::unique_ptr<SpaceAccount> space;

  // Directories (relative, "" = root) holding a data file opened by this
  // process whose name has not been fsynced yet.
  std::set<std::string> unsynced_dirs EXLR8_GUARDED_BY(mu);
  // Data files (by rel) whose fdatasync failed in this process, with its
  // errno. Linux reports a write-back error once per open file: a second
  // fdatasync (another batch's, or of a descriptor opened again) returns 0
  // though pages written before the error may never reach the disk. So no
  // later commit of such a file may succeed in this process; a new process
  // fetches and writes again whatever was not recorded.
  std::map<std::string, int> failed_syncs EXLR8_GUARDED_BY(mu);
  // fdatasync of each file, outside mu; refused for a file in failed_syncs.
  Status SyncFiles(const std::vector<std::shared_ptr<cache_internal::DataFile>>& files) EXLR8_EXCLUDES(mu);
  // One SyncNewNames at a time; taken before mu, never while holding it.
  std::mutex dir_sync_mu;

  // Makes durable the names of every data file opened so far (fsync of the
  // directories in unsynced_dirs), before a commit records bytes of them.
  // The set is taken whole, under mu, and put back if a sync fails. One
  // caller at a time: a commit that finds a directory taken by another
  // commit's sync must wait for that sync to end, or it could record a file
  // whose name is not yet durable. Taking the set whole keeps a name that a
  // file created meanwhile adds again from being erased with the synced
  // ones. A directory gone since (its fileset evicted) holds nothing to
  // record and is skipped.
  Status SyncNewNames() EXLR8_EXCLUDES(mu) {
    std::lock_guard<std::mutex> one_at_a_time(dir_sync_mu);
    std::set<std::string> dirs;
    {
      MutexLock l(&mu);
      dirs.swap(unsynced_dirs);
    }
    for (auto d = dirs.begin(); d != dirs.end(); ++d) {
      Status s = FsyncDirBeneath(*d);
      if (!s.ok()) {
        MutexLock l(&mu);
        unsynced_dirs.insert(d, dirs.end());
        return s;
      }
    }
    return Status::Ok();
  }
  Status FsyncDirBeneath(const std::string& rel) {
    Result<UniqueFd> fd = OpenDirBeneath(root_fd.get(), rel, shown);
    if (fd.status().code() == StatusCode::kNotFound) return Status::Ok();
    if (!fd.ok()) return fd.status();
    if (::fsync(fd->get()) != 0) return ErrnoStatus(errno, "fsync directory " + shown + "/" + rel);
    return Status::Ok();
  }

  std::int64_t Now() EXLR8_REQUIRES(mu) {
    return options.clock->NowUnixMs();
  }

  Result<FileRow> LoadFile(FileId file) EXLR8_REQUIRES(mu) {
    EXLR8_ASSIGN_OR_RETURN(SqliteStmt q, db->Prepare("SELECT f.fileset_id, f.size, f.path, s.repo, s.commit_sha "
                                                     "FROM files f JOIN filesets s ON s.id = f.fileset_id "
                                                     "WHERE f.id = ?"));
    q.Bind(1, file);
    EXLR8_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) return NotFoundError(shown + ": no file with id " + std::to_string(file) + " in the cache index");
    FileRow r;
    r.fileset = q.Int(0);
    r.size = static_cast<std::uint64_t>(q.Int(1));
    r.rel = FilesetDir(q.Text(3), q.Text(4)) + "/" + q.Text(2);
    return r;
  }

  Result<FileId> PutFileLocked(FilesetId fileset, const NewFile& f) EXLR8_REQUIRES(mu);
  // Cache::SizeOnDisk of the file `row` describes.
  Result<std::optional<std::uint64_t>> SizeOnDisk(FileId id, const FileRow& row) EXLR8_REQUIRES(mu);

  Status CheckFilesetExists(FilesetId fileset) EXLR8_REQUIRES(mu) {
    EXLR8_ASSIGN_OR_RETURN(SqliteStmt q, db->Prepare("SELECT 1 FROM filesets WHERE id = ?"));
    q.Bind(1, fileset);
    EXLR8_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) return NotFoundError(shown + ": no fileset with id " + std::to_string(fileset) + " in the cache index");
    return Status::Ok();
  }

  // The open data file, opening it first. With `create`, the file and its
  // directories are created and the file is sized to its remote size
  // (sparse). Without, a file not on disk is NotFound.
  Result<std::shared_ptr<DataFile>> GetDataFile(FileId file, bool create) EXLR8_REQUIRES(mu) {
    if (std::shared_ptr<DataFile> open = FindOpen(file)) return open;
    EXLR8_ASSIGN_OR_RETURN(FileRow row, LoadFile(file));
    EXLR8_ASSIGN_OR_RETURN(BeneathFile opened, OpenBeneath(root_fd.get(), row.rel, create && !read_only, shown,
                                                           read_only));
    if (opened.created) {
      // Created, so it was not there (deleted, or something else in its
      // place), yet the index records bytes of it: never let new writes
      // stand in for them. A pull forgets them first
      // (ForgetLostBytes); met later, it fails.
      EXLR8_ASSIGN_OR_RETURN(std::vector<Extent> recorded, AllExtents(file));
      if (!recorded.empty())
        return CorruptionError(shown + "/" + row.rel + " was not on disk while the index records bytes of it; they "
                               "are lost (the next pull forgets and fetches them again)");
    }
    auto df = std::make_shared<DataFile>();
    df->fd = std::move(opened.fd);
    df->fileset = row.fileset;
    df->size = row.size;
    df->rel = row.rel;
    df->shown = shown + "/" + row.rel;
    struct stat st;
    if (::fstat(df->fd.get(), &st) != 0) return ErrnoStatus(errno, "stat " + df->shown);
    // A read-only view changes nothing: a file of another size stays as it
    // is, and reading past its end fails (shorter than recorded).
    if (!read_only) {
      // A new file, or one a crash left short: extend it to its remote size.
      // Truncation never frees blocks of a file whose size matches. (Bytes
      // recorded past a short file's end were lost: ForgetLostBytes.)
      if (static_cast<std::uint64_t>(st.st_size) != row.size) {
        // Cutting a longer file back never cuts recorded bytes away: an
        // index that records bytes past the listed size disagrees with
        // itself (edited by hand), and cutting would lose recorded bytes.
        if (static_cast<std::uint64_t>(st.st_size) > row.size) {
          EXLR8_ASSIGN_OR_RETURN(std::vector<Extent> recorded, AllExtents(file));
          if (!recorded.empty() && recorded.back().offset + recorded.back().length > row.size)
            return CorruptionError(df->shown + ": the index records bytes up to " +
                                   std::to_string(recorded.back().offset + recorded.back().length) +
                                   ", past the file's listed size of " + std::to_string(row.size) +
                                   " bytes; the file is left as it is");
        }
        if (::ftruncate(df->fd.get(), static_cast<off_t>(row.size)) != 0)
          return ErrnoStatus(errno, "size " + df->shown + " to " + std::to_string(row.size) + " bytes");
      }
      // Its name (and any directory made for it) must be durable before an
      // extent of it is recorded; we cannot know whether a dead predecessor
      // synced them, so every file opened by this process counts.
      for (std::string& d : ParentDirs(row.rel)) unsynced_dirs.insert(std::move(d));
    }
    MutexLock l(&open_mu);
    if (open_files.size() >= cache_internal::kMaxOpenFiles) {
      std::erase_if(open_files, [](const auto& kv) { return kv.second.use_count() == 1; });
    }
    open_files.emplace(file, df);
    return df;
  }

  // The data file of a known file id that must already be on disk:
  // NotFound for an unknown id, FailedPrecondition if never written.
  Result<std::shared_ptr<DataFile>> OpenWritten(FileId file) EXLR8_REQUIRES(mu) {
    if (std::shared_ptr<DataFile> open = FindOpen(file)) return open;
    EXLR8_ASSIGN_OR_RETURN(FileRow row, LoadFile(file));
    Result<std::shared_ptr<DataFile>> f = GetDataFile(file, /*create=*/false);
    if (f.status().code() == StatusCode::kNotFound)
      return FailedPreconditionError(shown + "/" + row.rel + ": not in the cache directory (never written): " +
                                     f.status().message());
    return f;
  }

  // Normalized extents of `file` that overlap or touch [offset, end].
  Result<std::vector<Extent>> ExtentsNear(FileId file, std::uint64_t offset, std::uint64_t end) EXLR8_REQUIRES(mu) {
    std::vector<Extent> out;
    // The last extent starting at or before `offset` may reach into the range.
    EXLR8_ASSIGN_OR_RETURN(SqliteStmt prev, db->Prepare("SELECT start, length FROM extents WHERE file_id = ? AND "
                                                        "start <= ? ORDER BY start DESC LIMIT 1"));
    prev.Bind(1, file).Bind(2, static_cast<std::int64_t>(offset));
    EXLR8_ASSIGN_OR_RETURN(bool row, prev.Step());
    if (row) {
      const Extent e{static_cast<std::uint64_t>(prev.Int(0)), static_cast<std::uint64_t>(prev.Int(1))};
      if (e.end() >= offset) out.push_back(e);
    }
    EXLR8_ASSIGN_OR_RETURN(SqliteStmt next, db->Prepare("SELECT start, length FROM extents WHERE file_id = ? AND "
                                                        "start > ? AND start <= ? ORDER BY start"));
    next.Bind(1, file).Bind(2, static_cast<std::int64_t>(offset)).Bind(3, static_cast<std::int64_t>(end));
    while (true) {
      EXLR8_ASSIGN_OR_RETURN(bool more, next.Step());
      if (!more) break;
      out.push_back({static_cast<std::uint64_t>(next.Int(0)), static_cast<std::uint64_t>(next.Int(1))});
    }
    return out;
  }

  Result<std::vector<Extent>> AllExtents(FileId file) EXLR8_REQUIRES(mu) {
    EXLR8_ASSIGN_OR_RETURN(SqliteStmt q, db->Prepare("SELECT start, length FROM extents WHERE file_id = ? "
                                                     "ORDER BY start"));
    q.Bind(1, file);
    std::vector<Extent> out;
    while (true) {
      EXLR8_ASSIGN_OR_RETURN(bool row, q.Step());
      if (!row) return out;
      out.push_back({static_cast<std::uint64_t>(q.Int(0)), static_cast<std::uint64_t>(q.Int(1))});
    }
  }

  // Merges normalized `adds` into the extent table of `file`, keeping it
  // normalized. REQUIRES: inside a transaction.
  Status MergeExtents(FileId file, std::span<const Extent> adds) EXLR8_REQUIRES(mu) {
    EXLR8_ASSIGN_OR_RETURN(SqliteStmt del, db->Prepare("DELETE FROM extents WHERE file_id = ? AND start = ?"));
    EXLR8_ASSIGN_OR_RETURN(SqliteStmt ins, db->Prepare("INSERT INTO extents (file_id, start, length) VALUES (?, ?, ?)"));
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

  Result<std::uint64_t> RecordedBytes() EXLR8_REQUIRES(mu) {
    EXLR8_ASSIGN_OR_RETURN(std::int64_t n, db->QueryInt("SELECT COALESCE(SUM(length), 0) FROM extents"));
    return static_cast<std::uint64_t>(n);
  }

  Result<std::vector<FilesetInfo>> QueryFilesets(std::optional<FilesetId> only) EXLR8_REQUIRES(mu);
  Result<std::vector<PullInfo>> QueryPulls(std::string_view where, std::int64_t arg) EXLR8_REQUIRES(mu);
  Status RemoveOrphanDirs() EXLR8_REQUIRES(mu);
  // Evicts, least recently used first, filesets that no pin, process pin,
  // running pull or live claim protects, until the recorded bytes are at
  // most `target` or nothing evictable is left.
  Result<GcResult> EvictDownTo(std::uint64_t target) EXLR8_REQUIRES(mu);
  // Deletes the filesets' rows in one durable transaction, then their data
  // directories (and any other orphans), and adds them to `result`. A
  // transaction that finds the disk full releases the reserve and is tried
  // once more; with space freed, stale pulls are marked (MarkStalePulls).
  Status EvictFilesets(const std::vector<std::pair<FilesetId, std::uint64_t>>& victims, GcResult* result)
      EXLR8_REQUIRES(mu);

  // ---- pulls a dead process left 'running' (cache_pulls.cpp) ----

  // Pulls this Cache started and has not finished. For the owner (it holds
  // the lock), a 'running' row not among them is a pull whose process died.
  std::set<PullId> own_pulls EXLR8_GUARDED_BY(mu);
  // Whether such rows were marked 'failed' in the index. Open tries, and so
  // does every eviction until it works: on a full disk the UPDATE fails,
  // and the rows are treated as failed without it (IsStalePull).
  bool stale_pulls_marked EXLR8_GUARDED_BY(mu) = false;
  Status MarkStalePulls() EXLR8_REQUIRES(mu);
  // A row in state 'running' whose pull no process runs: false in a
  // read-only view, which cannot know.
  bool IsStalePull(PullId id) const EXLR8_REQUIRES(mu) { return !read_only && !own_pulls.contains(id); }
  // The filesets with a pull running now (stale rows left out).
  Result<std::set<FilesetId>> FilesetsBeingPulled() EXLR8_REQUIRES(mu);
};

}  // namespace exlr8
