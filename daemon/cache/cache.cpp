#include "daemon/cache/cache.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <string>

#include "daemon/cache/cache_rep.h"

// Cache, the facade: opening, and the calls that are the catalog's alone
// (filesets, pins, files, pulls), each under the catalog's lock. The data
// files are cache_extents.cpp's; space and eviction cache_space.cpp's.
namespace exlr8 {

Cache::Cache(std::unique_ptr<Rep> rep) : rep_(std::move(rep)) {}
Cache::~Cache() {
  if (rep_->read_only) return;
  // The index first: closing it checkpoints its WAL, which may grow the
  // database. Then the reserve this Cache released, as much of it as is
  // free: a command that freed nothing (unpin, verify) leaves a full disk
  // as full as it found it, with the room for the next one (gc) to work.
  {
    MutexLock l(&rep_->catalog.mu());
    rep_->catalog.Close();
  }
  rep_->space->RestoreReserve(/*keep_free=*/rep_->space->released_reserve() ? 0
                                                                            : rep_->options.reserve_bytes);
}

const std::filesystem::path& Cache::dir() const { return rep_->dir; }

Result<std::unique_ptr<Cache>> Cache::Open(std::filesystem::path dir, CacheOptions options) {
  auto rep = std::make_unique<Rep>(std::move(dir), std::move(options), /*read_only=*/false);
  std::error_code ec;
  std::filesystem::create_directories(rep->dir, ec);
  if (ec) return ErrnoStatus(ec.value(), "create cache directory " + rep->shown);
  rep->root_fd = UniqueFd(::open(rep->dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!rep->root_fd.valid()) return ErrnoStatus(errno, "open cache directory " + rep->shown);
  rep->space = std::make_unique<SpaceAccount>(
      rep->root_fd.get(), rep->shown,
      SpaceAccount::Options{rep->options.byte_budget, rep->options.reserve_bytes, /*read_only=*/false});
  rep->store = std::make_unique<ExtentStore>(
      rep->root_fd.get(), rep->shown,
      ExtentStore::Options{rep->options.write_behind_bytes, /*read_only=*/false});
  EXLR8_ASSIGN_OR_RETURN(rep->lock, FileLock::Acquire(rep->dir / kCacheLockName, rep->options.lock_wait,
                                                         "another exlr8d owns this cache", rep->options.clock));
  // On a full disk, room for the index before SQLite needs it: opening may
  // already write (its shared-memory file, a checkpoint that grows the
  // database).
  if (rep->options.use_reserve) rep->space->ReleaseReserveIfLow();

  MutexLock l(&rep->catalog.mu());
  EXLR8_RETURN_IF_ERROR(rep->catalog.Open((rep->dir / kCacheDbName).string()));
  // What an eviction a crash interrupted left on disk (its rows gone, some
  // of its files not yet): no rerun of that eviction finds the fileset
  // again, so the first owner after it removes them rather than leaving
  // them to a gc that evicts something. Best effort: a failure here
  // is said again by the next eviction, which sweeps too.
  (void)rep->RemoveOrphanDirs();
  // Made when there is room to spare; one released above waits until the
  // work is done (~Cache).
  rep->space->RestoreReserve(/*keep_free=*/rep->options.reserve_bytes);
  return std::unique_ptr<Cache>(new Cache(std::move(rep)));
}

Result<std::unique_ptr<Cache>> Cache::OpenReadOnly(std::filesystem::path dir) {
  auto rep = std::make_unique<Rep>(std::move(dir), CacheOptions{}, /*read_only=*/true);
  rep->root_fd = UniqueFd(::open(rep->dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!rep->root_fd.valid()) return ErrnoStatus(errno, "open cache directory " + rep->shown);
  rep->space = std::make_unique<SpaceAccount>(rep->root_fd.get(), rep->shown,
                                              SpaceAccount::Options{std::nullopt, 0, /*read_only=*/true});
  rep->store = std::make_unique<ExtentStore>(rep->root_fd.get(), rep->shown,
                                             ExtentStore::Options{0, /*read_only=*/true});
  MutexLock l(&rep->catalog.mu());
  EXLR8_RETURN_IF_ERROR(rep->catalog.OpenReadOnly((rep->dir / kCacheDbName).string()));
  return std::unique_ptr<Cache>(new Cache(std::move(rep)));
}

bool Cache::read_only() const { return rep_->read_only; }

// ---- filesets ----

Result<FilesetId> Cache::PutFileset(std::string_view repo, std::string_view revision,
                                    std::string_view commit) {
  EXLR8_RETURN_IF_ERROR(rep_->Writable());
  MutexLock l(&rep_->catalog.mu());
  return rep_->catalog.PutFileset(repo, revision, commit);
}

Result<std::string> Cache::LookupCommit(std::string_view repo, std::string_view revision) {
  MutexLock l(&rep_->catalog.mu());
  return rep_->catalog.LookupCommit(repo, revision);
}

Status Cache::Touch(FilesetId fileset) {
  EXLR8_RETURN_IF_ERROR(rep_->Writable());
  MutexLock l(&rep_->catalog.mu());
  return rep_->catalog.Touch(fileset);
}

Status Cache::Pin(FilesetId fileset, std::string_view holder) {
  EXLR8_RETURN_IF_ERROR(rep_->Writable());
  MutexLock l(&rep_->catalog.mu());
  return rep_->catalog.Pin(fileset, holder);
}

Status Cache::Unpin(FilesetId fileset, std::string_view holder) {
  EXLR8_RETURN_IF_ERROR(rep_->Writable());
  MutexLock l(&rep_->catalog.mu());
  return rep_->catalog.Unpin(fileset, holder);
}

Status Cache::RecordVerified(FilesetId fileset, std::uint64_t checks_failed) {
  EXLR8_RETURN_IF_ERROR(rep_->Writable());
  MutexLock l(&rep_->catalog.mu());
  return rep_->catalog.RecordVerified(fileset, checks_failed);
}

Result<std::vector<FilesetInfo>> Cache::Rep::QueryFilesets(std::optional<FilesetId> only) {
  EXLR8_ASSIGN_OR_RETURN(std::vector<FilesetInfo> out, catalog.QueryFilesets(only));
  Result<std::vector<ProcessPinInfo>> listed = ListProcessPins(dir, /*sweep=*/!read_only);
  if (!listed.ok() && !read_only) return listed.status();
  std::vector<ProcessPinInfo> live = listed.ok() ? std::move(listed).value() : std::vector<ProcessPinInfo>{};
  for (ProcessPinInfo& p : live)
    for (FilesetInfo& f : out)
      if (f.repo == p.repo && f.commit == p.commit) f.process_pins.push_back(p);
  return out;
}

Result<FilesetInfo> Cache::GetFileset(FilesetId fileset) {
  MutexLock l(&rep_->catalog.mu());
  EXLR8_ASSIGN_OR_RETURN(std::vector<FilesetInfo> list, rep_->QueryFilesets(fileset));
  if (list.empty())
    return NotFoundError(rep_->shown + ": no fileset with id " + std::to_string(fileset) +
                         " in the cache index");
  return std::move(list.front());
}

Result<std::vector<FilesetInfo>> Cache::ListFilesets() {
  MutexLock l(&rep_->catalog.mu());
  return rep_->QueryFilesets(std::nullopt);
}

// ---- files ----

Result<FileId> Cache::PutFile(FilesetId fileset, std::string_view path, std::uint64_t size,
                              std::optional<std::string> sha256, std::optional<std::string> git_sha1) {
  EXLR8_ASSIGN_OR_RETURN(
      std::vector<FileId> ids,
      PutFiles(fileset, {{NewFile{std::string(path), size, std::move(sha256), std::move(git_sha1)}}}));
  return ids[0];
}

Result<std::vector<FileId>> Cache::PutFiles(FilesetId fileset, std::span<const NewFile> files) {
  EXLR8_RETURN_IF_ERROR(rep_->Writable());
  MutexLock l(&rep_->catalog.mu());
  return rep_->catalog.PutFiles(fileset, files);
}

Result<FileId> Cache::FindFile(FilesetId fileset, std::string_view path) {
  MutexLock l(&rep_->catalog.mu());
  return rep_->catalog.FindFile(fileset, path);
}

Result<FileInfo> Cache::GetFile(FileId file) {
  MutexLock l(&rep_->catalog.mu());
  return rep_->catalog.GetFile(file);
}

Result<std::vector<FileInfo>> Cache::ListFiles(FilesetId fileset) {
  MutexLock l(&rep_->catalog.mu());
  return rep_->catalog.ListFiles(fileset);
}

Result<std::filesystem::path> Cache::DataPath(FileId file) {
  MutexLock l(&rep_->catalog.mu());
  EXLR8_ASSIGN_OR_RETURN(Catalog::FileRow row, rep_->catalog.LoadFile(file));
  return rep_->dir / row.rel;
}

// ---- pulls ----

Result<PullId> Cache::StartPull(const PullSpec& spec) {
  EXLR8_RETURN_IF_ERROR(rep_->Writable());
  MutexLock l(&rep_->catalog.mu());
  return rep_->catalog.StartPull(spec);
}

Status Cache::UpdatePull(PullId pull, const PullCounters& counters) {
  EXLR8_RETURN_IF_ERROR(rep_->Writable());
  MutexLock l(&rep_->catalog.mu());
  return rep_->catalog.UpdatePull(pull, counters);
}

Status Cache::FinishPull(PullId pull, PullState state, std::string_view error) {
  EXLR8_RETURN_IF_ERROR(rep_->Writable());
  MutexLock l(&rep_->catalog.mu());
  return rep_->catalog.FinishPull(pull, state, error);
}

Result<PullInfo> Cache::GetPull(PullId pull) {
  MutexLock l(&rep_->catalog.mu());
  return rep_->catalog.GetPull(pull);
}

Result<std::vector<PullInfo>> Cache::ListPulls(std::optional<FilesetId> fileset) {
  MutexLock l(&rep_->catalog.mu());
  return rep_->catalog.ListPulls(fileset);
}

}  // namespace exlr8
