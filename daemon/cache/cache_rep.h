// Internal to daemon/cache: the state behind the Cache facade (its Rep):
// the pieces it owns (Catalog, SpaceAccount) and the data files opened by
// this process. Not part of the library's interface; include cache.h.
#pragma once

#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "daemon/base/file_lock.h"
#include "daemon/base/mutex.h"
#include "daemon/base/posix.h"
#include "daemon/cache/cache.h"
#include "daemon/cache/cache_paths.h"
#include "daemon/cache/catalog.h"
#include "daemon/cache/space_account.h"

namespace exlr8 {
namespace cache_internal {

inline constexpr std::size_t kMaxOpenFiles = 128;  // descriptors kept open for reuse

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

}  // namespace cache_internal

struct Cache::Rep {
  using DataFile = cache_internal::DataFile;
  using FileRow = Catalog::FileRow;

  Rep(std::filesystem::path d, CacheOptions o, bool ro)
      : dir(std::move(d)),
        shown(dir.string()),
        options(std::move(o)),
        read_only(ro),
        catalog(shown, options.clock) {}

  // Immutable after Open; readable without a lock.
  const std::filesystem::path dir;
  const std::string shown;  // dir as a string, for messages
  const CacheOptions options;
  const bool read_only;  // OpenReadOnly: no lock, the index read-only
  UniqueFd root_fd;
  std::unique_ptr<FileLock> lock;  // released last (declared before the index)

  // FailedPrecondition for a change through a read-only view.
  Status Writable() const {
    if (!read_only) return Status::Ok();
    return FailedPreconditionError(shown + ": opened read-only (Cache::OpenReadOnly); nothing changed");
  }

  // The index; its lock (catalog.mu()) is the facade's lock too.
  Catalog catalog;
  // Free space, the reserve and the claims of pulls in flight; borrows
  // root_fd. Set by Open and OpenReadOnly.
  std::unique_ptr<SpaceAccount> space;

  // The table of open data files has a lock of its own (taken after
  // catalog.mu(), never before), so WriteAt of an open file never waits
  // for the index: a commit holds it through its SQLite transaction, whose
  // WAL fsync would otherwise stall every writer.
  Mutex open_mu;
  std::unordered_map<FileId, std::shared_ptr<DataFile>> open_files EXLR8_GUARDED_BY(open_mu);

  std::shared_ptr<DataFile> FindOpen(FileId file) EXLR8_EXCLUDES(open_mu) {
    MutexLock l(&open_mu);
    auto it = open_files.find(file);
    return it == open_files.end() ? nullptr : it->second;
  }

  // Durability state of the data files; a leaf lock (taken after
  // catalog.mu() or without it).
  Mutex sync_mu;
  // Directories (relative, "" = root) holding a data file opened by this
  // process whose name has not been fsynced yet.
  std::set<std::string> unsynced_dirs EXLR8_GUARDED_BY(sync_mu);
  // Data files (by rel) whose fdatasync failed in this process, with its
  // errno. Linux reports a write-back error once per open file: a second
  // fdatasync (another batch's, or of a descriptor opened again) returns 0
  // though pages written before the error may never reach the disk. So no
  // later commit of such a file may succeed in this process; a new process
  // fetches and writes again whatever was not recorded.
  std::map<std::string, int> failed_syncs EXLR8_GUARDED_BY(sync_mu);
  // fdatasync of each file, without the index lock; refused for a file in
  // failed_syncs.
  Status SyncFiles(const std::vector<std::shared_ptr<DataFile>>& files) EXLR8_EXCLUDES(sync_mu);
  // One SyncNewNames at a time; taken before sync_mu, never while holding
  // it or the index lock.
  Mutex dir_sync_mu EXLR8_ACQUIRED_BEFORE(sync_mu);

  // Makes durable the names of every data file opened so far (fsync of the
  // directories in unsynced_dirs), before a commit records bytes of them.
  // The set is taken whole and put back if a sync fails. One caller at a
  // time: a commit that finds a directory taken by another commit's sync
  // must wait for that sync to end, or it could record a file whose name
  // is not yet durable. Taking the set whole keeps a name that a file
  // created meanwhile adds again from being erased with the synced ones. A
  // directory gone since (its fileset evicted) holds nothing to record and
  // is skipped.
  Status SyncNewNames() EXLR8_EXCLUDES(dir_sync_mu, sync_mu) {
    MutexLock one_at_a_time(&dir_sync_mu);
    std::set<std::string> dirs;
    {
      MutexLock l(&sync_mu);
      dirs.swap(unsynced_dirs);
    }
    for (auto d = dirs.begin(); d != dirs.end(); ++d) {
      Status s = FsyncDirBeneath(*d);
      if (!s.ok()) {
        MutexLock l(&sync_mu);
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

  // The open data file, opening it first. With `create`, the file and its
  // directories are created and the file is sized to its remote size
  // (sparse). Without, a file not on disk is NotFound.
  Result<std::shared_ptr<DataFile>> GetDataFile(FileId file, bool create) EXLR8_REQUIRES(catalog.mu());
  // The data file of a known file id that must already be on disk:
  // NotFound for an unknown id, FailedPrecondition if never written.
  Result<std::shared_ptr<DataFile>> OpenWritten(FileId file) EXLR8_REQUIRES(catalog.mu());
  // Cache::SizeOnDisk of the file `row` describes.
  Result<std::optional<std::uint64_t>> SizeOnDisk(FileId id, const FileRow& row) EXLR8_REQUIRES(catalog.mu());

  // Catalog::QueryFilesets with the live process pins (process_pin.h).
  // For the owner a failure to list them fails the query, so that an
  // eviction never takes what a process it could not see holds; a
  // read-only view changes nothing, and reports without them.
  Result<std::vector<FilesetInfo>> QueryFilesets(std::optional<FilesetId> only) EXLR8_REQUIRES(catalog.mu());
  Status RemoveOrphanDirs() EXLR8_REQUIRES(catalog.mu());
  // Evicts, least recently used first, filesets that no pin, process pin,
  // running pull or live claim protects, until the recorded bytes are at
  // most `target` or nothing evictable is left.
  Result<GcResult> EvictDownTo(std::uint64_t target) EXLR8_REQUIRES(catalog.mu());
  // Deletes the filesets' rows in one durable transaction, then their data
  // directories (and any other orphans), and adds them to `result`. A
  // transaction that finds the disk full releases the reserve and is tried
  // once more; with space freed, stale pulls are marked.
  Status EvictFilesets(const std::vector<std::pair<FilesetId, std::uint64_t>>& victims, GcResult* result)
      EXLR8_REQUIRES(catalog.mu());
};

}  // namespace exlr8
