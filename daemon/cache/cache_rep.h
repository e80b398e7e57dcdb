// Internal to daemon/cache: the state behind the Cache facade (its Rep):
// the pieces it owns (Catalog, ExtentStore, SpaceAccount), the cache
// directory and its lock. Not part of the library's interface; include
// cache.h.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "daemon/base/file_lock.h"
#include "daemon/base/mutex.h"
#include "daemon/base/posix.h"
#include "daemon/cache/cache.h"
#include "daemon/cache/cache_paths.h"
#include "daemon/cache/catalog.h"
#include "daemon/cache/extent_store.h"
#include "daemon/cache/space_account.h"

namespace exlr8 {

struct Cache::Rep {
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

  // The data files this process opened, and whether their bytes and
  // names are durable; borrows root_fd. Set by Open and OpenReadOnly.
  std::unique_ptr<ExtentStore> store;

  // ExtentStore::Open and OpenWritten of a file looked up in the catalog
  // (NotFound for an unknown id); an open file is found without the lookup.
  Result<std::shared_ptr<DataFile>> GetDataFile(FileId file, bool create) EXLR8_REQUIRES(catalog.mu());
  Result<std::shared_ptr<DataFile>> OpenWritten(FileId file) EXLR8_REQUIRES(catalog.mu());

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
