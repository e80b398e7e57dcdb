// The cache's extent store: the data files under <dir>/<org>/<name>/<commit>/
// as this process opens, writes, syncs and reads them. docs/CACHE.md
// "Crash safety" has the rules; this class keeps the half of them that is
// about the disk: a file is created at its listed size (sparse), bytes are
// pwritten at their remote offsets, and Sync makes the bytes and the names
// of every file opened so far durable, so that the caller may then record
// them in the catalog. It records nothing itself.
//
// Owns: the table of open data files (descriptors kept for reuse, shared
// with in-flight writers and ByteSources), the directories whose new
// entries are not yet fsynced, and the files whose fdatasync failed in this
// process. Does not own: what is recorded (Catalog); the caller looks up a
// file's row and, when asked, its recorded extents, under its own lock.
//
// Threads: every method may be called from any thread. open_mu_ guards the
// open-file table and sync_mu_ the durability state; both are leaf locks
// (taken after the catalog's lock or without it). dir_sync_mu_ makes one
// Sync of directory names run at a time; it is taken without any other
// lock. pwrite, fdatasync and fsync run under none of them, so a writer
// never waits for another file's flush or for the index.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "daemon/base/mutex.h"
#include "daemon/base/posix.h"
#include "daemon/cache/cache_types.h"
#include "daemon/cache/extent_set.h"
#include "format/byte_source.h"
#include "format/status.h"

namespace exlr8 {

// OK when [offset, offset + length) lies within a file of `size` bytes;
// otherwise InvalidArgument naming the file as `shown` and the range.
Status CheckFileRange(std::string_view shown, std::uint64_t size, std::uint64_t offset, std::uint64_t length);

// A data file opened by this process. Shared with in-flight writers and
// ByteSources, so it stays valid when dropped from the open-file table.
struct DataFile {
  UniqueFd fd;
  FilesetId fileset = 0;
  std::uint64_t size = 0;  // the listed (remote) size
  std::string rel;         // <org>/<name>/<commit>/<path>
  std::string shown;       // <dir>/<rel>, for messages
  // Bytes written since write-back was last started (write_behind_bytes).
  std::atomic<std::uint64_t> unkicked{0};
};

class ExtentStore {
 public:
  struct Options {
    // CacheOptions::write_behind_bytes; 0 = off.
    std::uint64_t write_behind_bytes = 0;
    // A read-only view opens files O_RDONLY and never creates or resizes
    // them.
    bool read_only = false;
  };
  // `root_fd` is the cache directory, borrowed: it must outlive the store.
  // `shown` names the directory in messages.
  ExtentStore(int root_fd, std::string shown, Options options);
  ExtentStore(const ExtentStore&) = delete;
  ExtentStore& operator=(const ExtentStore&) = delete;

  // The file's recorded extents, sorted; asked for only when opening finds
  // the file missing or longer than listed. Called on the caller's thread,
  // inside Open (so under whatever lock the caller holds).
  using RecordedExtents = std::function<Result<std::vector<Extent>>()>;

  // The file if this process has it open; never blocks on a flush.
  std::shared_ptr<DataFile> FindOpen(FileId file) EXLR8_EXCLUDES(open_mu_);
  // The open data file, opening it first. With `create`, the file and its
  // directories are created and the file is sized to its listed size
  // (sparse); without, a file not on disk is NotFound. Corruption when the
  // file had to be created although bytes of it are recorded, or when it
  // is longer than listed and bytes past its listed size are recorded (it
  // is left as it is). Every file opened for writing counts as having a
  // name not yet durable (a dead predecessor may not have synced it).
  Result<std::shared_ptr<DataFile>> Open(FileId file, const FileLocation& where, bool create,
                                         const RecordedExtents& recorded) EXLR8_EXCLUDES(open_mu_, sync_mu_);
  // Open without create: FailedPrecondition (never written) for a file not
  // on disk.
  Result<std::shared_ptr<DataFile>> OpenWritten(FileId file, const FileLocation& where,
                                                const RecordedExtents& recorded)
      EXLR8_EXCLUDES(open_mu_, sync_mu_);

  // pwrites `data` at `offset` of the file. InvalidArgument if the range
  // is outside the file; ResourceExhausted on ENOSPC, EDQUOT or EFBIG.
  // Every write_behind_bytes of a file it starts write-back (a hint).
  Status Write(DataFile& file, std::uint64_t offset, std::span<const std::byte> data);

  // Makes the files' bytes durable (fdatasync each, write-back of all
  // started first), then the names of every file opened so far (fsync of
  // their directories). Refused for a file whose fdatasync failed earlier
  // in this process. Only when it returns OK may the caller record bytes
  // of these files.
  Status Sync(const std::vector<std::shared_ptr<DataFile>>& files) EXLR8_EXCLUDES(dir_sync_mu_, sync_mu_);

  // The size of the file on disk now, by one stat; nullopt when it is not
  // there (deleted, never written, or deleted while open: then dropped
  // from the open-file table).
  Result<std::optional<std::uint64_t>> SizeOnDisk(FileId file, const FileLocation& where)
      EXLR8_EXCLUDES(open_mu_);
  // Cuts a data file grown past its listed size back to it.
  Status CutToListedSize(DataFile& file);

  // Drops the open files of evicted filesets (their directories are going).
  void CloseFilesets(const std::set<FilesetId>& filesets) EXLR8_EXCLUDES(open_mu_);
  // Forgets pending directory syncs of directories no longer there (an
  // eviction removed them): they hold nothing to record, and a sync of
  // them would fail every later commit.
  void ForgetRemovedDirs() EXLR8_EXCLUDES(sync_mu_);

  // A ByteSource over `file` (may be null when `extents` is empty) that
  // serves only the bytes in `extents` (normalized; a snapshot): a read of
  // any other byte is NotFound naming the first missing offset. It owns a
  // reference to the file and may outlive the store.
  static std::unique_ptr<ByteSource> Source(std::shared_ptr<DataFile> file, std::uint64_t size,
                                            std::vector<Extent> extents, std::string name);

 private:
  Status SyncFiles(const std::vector<std::shared_ptr<DataFile>>& files) EXLR8_EXCLUDES(sync_mu_);
  Status SyncNewNames() EXLR8_EXCLUDES(dir_sync_mu_, sync_mu_);
  Status FsyncDirBeneath(const std::string& rel);
  Status FailedBefore(const DataFile& file) EXLR8_EXCLUDES(sync_mu_);

  const int root_fd_;
  const std::string shown_;
  const Options options_;

  Mutex open_mu_;
  std::unordered_map<FileId, std::shared_ptr<DataFile>> open_files_ EXLR8_GUARDED_BY(open_mu_);

  Mutex dir_sync_mu_;
  Mutex sync_mu_ EXLR8_ACQUIRED_AFTER(dir_sync_mu_);
  // Directories (relative, "" = root) holding a data file opened by this
  // process whose name has not been fsynced yet.
  std::set<std::string> unsynced_dirs_ EXLR8_GUARDED_BY(sync_mu_);
  // Data files (by rel) whose fdatasync failed in this process, with its
  // errno. Linux reports a write-back error once per open file: a second
  // fdatasync (another batch's, or of a descriptor opened again) returns 0
  // though pages written before the error may never reach the disk. So no
  // later commit of such a file may succeed in this process; a new process
  // fetches and writes again whatever was not recorded.
  std::map<std::string, int> failed_syncs_ EXLR8_GUARDED_BY(sync_mu_);
};

}  // namespace exlr8
