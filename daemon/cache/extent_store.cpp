#include "daemon/cache/extent_store.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <utility>

#include "daemon/cache/cache_paths.h"

namespace exlr8 {

namespace {

inline constexpr std::size_t kMaxOpenFiles = 128;  // descriptors kept open for reuse

// Serves the verified bytes of one cached file, as of when it was opened.
class VerifiedFileSource final : public ByteSource {
 public:
  VerifiedFileSource(std::shared_ptr<DataFile> file, std::uint64_t size, std::vector<Extent> extents,
                     std::string name)
      : file_(std::move(file)), size_(size), extents_(std::move(extents)), name_(std::move(name)) {}

  std::uint64_t size() const override { return size_; }
  const std::string& name() const override { return name_; }

  Status ReadAt(std::uint64_t offset, std::span<std::byte> dst) const override {
    if (offset > size_ || dst.size() > size_ - offset)
      return CorruptionError(name_ + ": read of " + std::to_string(dst.size()) + " bytes at offset " +
                             std::to_string(offset) + " runs past the end (" + std::to_string(size_) +
                             " bytes)");
    if (dst.empty()) return Status::Ok();
    const std::vector<Extent> holes = MissingExtents(extents_, {offset, dst.size()});
    if (!holes.empty())
      return NotFoundError(
          name_ + ": bytes [" + std::to_string(offset) + ", " + std::to_string(offset + dst.size()) +
          ") are not verified in the cache; first missing offset " + std::to_string(holes.front().offset));
    return PreadAll(file_->fd.get(), offset, dst, name_);
  }

 private:
  std::shared_ptr<DataFile> file_;  // null when nothing is verified
  std::uint64_t size_;
  std::vector<Extent> extents_;  // normalized snapshot
  std::string name_;
};

}  // namespace

Status CheckFileRange(std::string_view shown, std::uint64_t size, std::uint64_t offset, std::uint64_t length) {
  if (offset > size || length > size - offset)
    return InvalidArgumentError(std::string(shown) + ": range [" + std::to_string(offset) + ", +" +
                                std::to_string(length) + ") is outside the file (" + std::to_string(size) +
                                " bytes)");
  return Status::Ok();
}

ExtentStore::ExtentStore(int root_fd, std::string shown, Options options)
    : root_fd_(root_fd), shown_(std::move(shown)), options_(options) {}

std::shared_ptr<DataFile> ExtentStore::FindOpen(FileId file) {
  MutexLock l(&open_mu_);
  auto it = open_files_.find(file);
  return it == open_files_.end() ? nullptr : it->second;
}

Result<std::shared_ptr<DataFile>> ExtentStore::Open(FileId file, const FileLocation& row, bool create,
                                                    const RecordedExtents& recorded) {
  if (std::shared_ptr<DataFile> open = FindOpen(file)) return open;
  const bool read_only = options_.read_only;
  EXLR8_ASSIGN_OR_RETURN(BeneathFile opened,
                         OpenBeneath(root_fd_, row.rel, create && !read_only, shown_, read_only));
  if (opened.created) {
    // Created, so it was not there (deleted, or something else in its
    // place), yet the index records bytes of it: never let new writes
    // stand in for them. A pull forgets them first (ForgetLostBytes); met
    // later, it fails.
    EXLR8_ASSIGN_OR_RETURN(std::vector<Extent> have, recorded());
    if (!have.empty())
      return CorruptionError(
          shown_ + "/" + row.rel +
          " was not on disk while the index records bytes of it; they are lost (the next pull "
          "forgets and fetches them again)");
  }
  auto df = std::make_shared<DataFile>();
  df->fd = std::move(opened.fd);
  df->fileset = row.fileset;
  df->size = row.size;
  df->rel = row.rel;
  df->shown = shown_ + "/" + row.rel;
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
        EXLR8_ASSIGN_OR_RETURN(std::vector<Extent> have, recorded());
        if (!have.empty() && have.back().offset + have.back().length > row.size)
          return CorruptionError(df->shown + ": the index records bytes up to " +
                                 std::to_string(have.back().offset + have.back().length) +
                                 ", past the file's listed size of " + std::to_string(row.size) +
                                 " bytes; the file is left as it is");
      }
      if (::ftruncate(df->fd.get(), static_cast<off_t>(row.size)) != 0)
        return ErrnoStatus(errno, "size " + df->shown + " to " + std::to_string(row.size) + " bytes");
    }
    // Its name (and any directory made for it) must be durable before an
    // extent of it is recorded; we cannot know whether a dead predecessor
    // synced them, so every file opened by this process counts.
    MutexLock l(&sync_mu_);
    for (std::string& d : ParentDirs(row.rel)) unsynced_dirs_.insert(std::move(d));
  }
  MutexLock l(&open_mu_);
  if (open_files_.size() >= kMaxOpenFiles)
    std::erase_if(open_files_, [](const auto& kv) { return kv.second.use_count() == 1; });
  open_files_.emplace(file, df);
  return df;
}

Result<std::shared_ptr<DataFile>> ExtentStore::OpenWritten(FileId file, const FileLocation& row,
                                                           const RecordedExtents& recorded) {
  Result<std::shared_ptr<DataFile>> f = Open(file, row, /*create=*/false, recorded);
  if (f.status().code() == StatusCode::kNotFound)
    return FailedPreconditionError(shown_ + "/" + row.rel +
                                   ": not in the cache directory (never written): " + f.status().message());
  return f;
}

Status ExtentStore::Write(DataFile& f, std::uint64_t offset, std::span<const std::byte> data) {
  EXLR8_RETURN_IF_ERROR(CheckFileRange(f.shown, f.size, offset, data.size()));
  EXLR8_RETURN_IF_ERROR(PwriteAll(f.fd.get(), offset, data, f.shown));
  const std::uint64_t every = options_.write_behind_bytes;
  if (every > 0 && f.unkicked.fetch_add(data.size(), std::memory_order_relaxed) + data.size() >= every) {
    f.unkicked.store(0, std::memory_order_relaxed);
    // Whole file: the kernel walks only the dirty pages, and several workers
    // write one file at different offsets. A hint, so failure is harmless.
    (void)::sync_file_range(f.fd.get(), 0, 0, SYNC_FILE_RANGE_WRITE);
  }
  return Status::Ok();
}

// ---- durability ----

Status ExtentStore::Sync(const std::vector<std::shared_ptr<DataFile>>& files) {
  EXLR8_RETURN_IF_ERROR(SyncFiles(files));
  return SyncNewNames();
}

Status ExtentStore::FailedBefore(const DataFile& f) {
  MutexLock l(&sync_mu_);
  auto it = failed_syncs_.find(f.rel);
  if (it == failed_syncs_.end()) return Status::Ok();
  return ErrnoStatus(it->second, "fdatasync " + f.shown +
                                     " failed earlier in this process, so bytes written to it "
                                     "may be lost (nothing more of it is recorded until exlr8d restarts)");
}

Status ExtentStore::SyncFiles(const std::vector<std::shared_ptr<DataFile>>& files) {
  // Start write-back of every file first, so the device works on all of
  // them at once instead of one fdatasync after another. Only a hint: the
  // fdatasync below is what makes the bytes durable.
  if (files.size() > 1)
    for (const auto& f : files) (void)::sync_file_range(f->fd.get(), 0, 0, SYNC_FILE_RANGE_WRITE);
  for (const auto& f : files) {
    EXLR8_RETURN_IF_ERROR(FailedBefore(*f));
    while (::fdatasync(f->fd.get()) != 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      {
        MutexLock l(&sync_mu_);
        failed_syncs_.emplace(f->rel, e);
      }
      return ErrnoStatus(e, "fdatasync " + f->shown);
    }
    EXLR8_RETURN_IF_ERROR(FailedBefore(*f));  // another commit's sync of it failed meanwhile
  }
  return Status::Ok();
}

// The set is taken whole and put back if a sync fails. One caller at a
// time: a commit that finds a directory taken by another commit's sync
// must wait for that sync to end, or it could record a file whose name is
// not yet durable. Taking the set whole keeps a name that a file created
// meanwhile adds again from being erased with the synced ones. A directory
// gone since (its fileset evicted) holds nothing to record and is skipped.
Status ExtentStore::SyncNewNames() {
  MutexLock one_at_a_time(&dir_sync_mu_);
  std::set<std::string> dirs;
  {
    MutexLock l(&sync_mu_);
    dirs.swap(unsynced_dirs_);
  }
  for (auto d = dirs.begin(); d != dirs.end(); ++d) {
    Status s = FsyncDirBeneath(*d);
    if (!s.ok()) {
      MutexLock l(&sync_mu_);
      unsynced_dirs_.insert(d, dirs.end());
      return s;
    }
  }
  return Status::Ok();
}

Status ExtentStore::FsyncDirBeneath(const std::string& rel) {
  Result<UniqueFd> fd = OpenDirBeneath(root_fd_, rel, shown_);
  if (fd.status().code() == StatusCode::kNotFound) return Status::Ok();
  if (!fd.ok()) return fd.status();
  if (::fsync(fd->get()) != 0) return ErrnoStatus(errno, "fsync directory " + shown_ + "/" + rel);
  return Status::Ok();
}

// ---- what is on disk ----

Result<std::optional<std::uint64_t>> ExtentStore::SizeOnDisk(FileId id, const FileLocation& row) {
  if (std::shared_ptr<DataFile> open = FindOpen(id)) {
    struct stat st;
    if (::fstat(open->fd.get(), &st) != 0) return ErrnoStatus(errno, "stat " + open->shown);
    if (st.st_nlink > 0) return std::optional<std::uint64_t>(static_cast<std::uint64_t>(st.st_size));
    // Deleted while open: what it held is gone (writes to it would land
    // nowhere), whatever the path names by now.
    MutexLock l(&open_mu_);
    open_files_.erase(id);
    return std::optional<std::uint64_t>();
  }
  Result<BeneathFile> f = OpenBeneath(root_fd_, row.rel, /*create=*/false, shown_, /*read_only=*/true);
  if (f.status().code() == StatusCode::kNotFound) return std::optional<std::uint64_t>();
  if (!f.ok()) return f.status();
  struct stat st;
  if (::fstat(f->fd.get(), &st) != 0) return ErrnoStatus(errno, "stat " + shown_ + "/" + row.rel);
  return std::optional<std::uint64_t>(static_cast<std::uint64_t>(st.st_size));
}

Status ExtentStore::CutToListedSize(DataFile& f) {
  struct stat st;
  if (::fstat(f.fd.get(), &st) != 0) return ErrnoStatus(errno, "stat " + f.shown);
  if (static_cast<std::uint64_t>(st.st_size) > f.size &&
      ::ftruncate(f.fd.get(), static_cast<off_t>(f.size)) != 0)
    return ErrnoStatus(errno, "cut " + f.shown + " back to " + std::to_string(f.size) + " bytes");
  return Status::Ok();
}

void ExtentStore::CloseFilesets(const std::set<FilesetId>& filesets) {
  MutexLock l(&open_mu_);
  std::erase_if(open_files_, [&](const auto& kv) { return filesets.count(kv.second->fileset) > 0; });
}

void ExtentStore::ForgetRemovedDirs() {
  MutexLock l(&sync_mu_);
  std::erase_if(unsynced_dirs_, [&](const std::string& d) {
    struct stat st;
    return !d.empty() && !(::fstatat(root_fd_, d.c_str(), &st, 0) == 0 && S_ISDIR(st.st_mode));
  });
}

std::unique_ptr<ByteSource> ExtentStore::Source(std::shared_ptr<DataFile> file, std::uint64_t size,
                                                std::vector<Extent> extents, std::string name) {
  return std::make_unique<VerifiedFileSource>(std::move(file), size, std::move(extents), std::move(name));
}

}  // namespace exlr8
