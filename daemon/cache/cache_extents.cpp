#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "daemon/cache/cache.h"
#include "daemon/cache/cache_rep.h"

// Cache: writing data, making it durable and recording it as verified
// extents; reading back what is verified.
namespace exlr8 {

using cache_internal::DataFile;
using FileRow = Catalog::FileRow;

namespace {

// [offset, offset + length) must lie within a file of `size` bytes.
Status CheckRange(std::string_view shown, std::uint64_t size, std::uint64_t offset, std::uint64_t length) {
  if (offset > size || length > size - offset)
    return InvalidArgumentError(std::string(shown) + ": range [" + std::to_string(offset) + ", +" +
                                std::to_string(length) + ") is outside the file (" + std::to_string(size) +
                                " bytes)");
  return Status::Ok();
}

}  // namespace

// fdatasync each file, outside the index lock (sync_mu is taken only to
// consult and note failures: see Rep::failed_syncs).
Status Cache::Rep::SyncFiles(const std::vector<std::shared_ptr<DataFile>>& files) {
  Rep& r = *this;
  auto failed_before = [&](const DataFile& f) -> Status {
    MutexLock l(&r.sync_mu);
    auto it = r.failed_syncs.find(f.rel);
    if (it == r.failed_syncs.end()) return Status::Ok();
    return ErrnoStatus(it->second, "fdatasync " + f.shown +
                                       " failed earlier in this process, so bytes written to it "
                                       "may be lost (nothing more of it is recorded until exlr8d restarts)");
  };
  // Start write-back of every file first, so the device works on all of
  // them at once instead of one fdatasync after another. Only a hint: the
  // fdatasync below is what makes the bytes durable.
  if (files.size() > 1)
    for (const auto& f : files) (void)::sync_file_range(f->fd.get(), 0, 0, SYNC_FILE_RANGE_WRITE);
  for (const auto& f : files) {
    EXLR8_RETURN_IF_ERROR(failed_before(*f));
    while (::fdatasync(f->fd.get()) != 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      {
        MutexLock l(&r.sync_mu);
        r.failed_syncs.emplace(f->rel, e);
      }
      return ErrnoStatus(e, "fdatasync " + f->shown);
    }
    EXLR8_RETURN_IF_ERROR(failed_before(*f));  // another commit's sync of it failed meanwhile
  }
  return Status::Ok();
}

// ---- the data files ----

Result<std::shared_ptr<DataFile>> Cache::Rep::GetDataFile(FileId file, bool create) {
  if (std::shared_ptr<DataFile> open = FindOpen(file)) return open;
  EXLR8_ASSIGN_OR_RETURN(FileRow row, catalog.LoadFile(file));
  EXLR8_ASSIGN_OR_RETURN(BeneathFile opened,
                         OpenBeneath(root_fd.get(), row.rel, create && !read_only, shown, read_only));
  if (opened.created) {
    // Created, so it was not there (deleted, or something else in its
    // place), yet the index records bytes of it: never let new writes
    // stand in for them. A pull forgets them first
    // (ForgetLostBytes); met later, it fails.
    EXLR8_ASSIGN_OR_RETURN(std::vector<Extent> recorded, catalog.AllExtents(file));
    if (!recorded.empty())
      return CorruptionError(shown + "/" + row.rel +
                             " was not on disk while the index records bytes of it; they "
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
        EXLR8_ASSIGN_OR_RETURN(std::vector<Extent> recorded, catalog.AllExtents(file));
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
    MutexLock sync_lock(&sync_mu);
    for (std::string& d : ParentDirs(row.rel)) unsynced_dirs.insert(std::move(d));
  }
  MutexLock l(&open_mu);
  if (open_files.size() >= cache_internal::kMaxOpenFiles) {
    std::erase_if(open_files, [](const auto& kv) { return kv.second.use_count() == 1; });
  }
  open_files.emplace(file, df);
  return df;
}

Result<std::shared_ptr<DataFile>> Cache::Rep::OpenWritten(FileId file) {
  if (std::shared_ptr<DataFile> open = FindOpen(file)) return open;
  EXLR8_ASSIGN_OR_RETURN(FileRow row, catalog.LoadFile(file));
  Result<std::shared_ptr<DataFile>> f = GetDataFile(file, /*create=*/false);
  if (f.status().code() == StatusCode::kNotFound)
    return FailedPreconditionError(shown + "/" + row.rel +
                                   ": not in the cache directory (never written): " + f.status().message());
  return f;
}

// ---- writing ----

Status Cache::WriteAt(FileId file, std::uint64_t offset, std::span<const std::byte> data) {
  EXLR8_RETURN_IF_ERROR(rep_->Writable());
  std::shared_ptr<DataFile> f = rep_->FindOpen(file);  // without mu: see open_mu
  if (!f) {
    MutexLock l(&rep_->catalog.mu());
    EXLR8_ASSIGN_OR_RETURN(f, rep_->GetDataFile(file, /*create=*/true));
  }
  EXLR8_RETURN_IF_ERROR(CheckRange(f->shown, f->size, offset, data.size()));
  EXLR8_RETURN_IF_ERROR(PwriteAll(f->fd.get(), offset, data, f->shown));
  const std::uint64_t every = rep_->options.write_behind_bytes;
  if (every > 0 && f->unkicked.fetch_add(data.size(), std::memory_order_relaxed) + data.size() >= every) {
    f->unkicked.store(0, std::memory_order_relaxed);
    // Whole file: the kernel walks only the dirty pages, and several workers
    // write one file at different offsets. A hint, so failure is harmless.
    (void)::sync_file_range(f->fd.get(), 0, 0, SYNC_FILE_RANGE_WRITE);
  }
  return Status::Ok();
}

Status Cache::CommitVerified(std::span<const VerifiedExtent> extents, std::span<const DurablePrefix> prefixes,
                             const std::function<void()>& on_recorded) {
  EXLR8_RETURN_IF_ERROR(rep_->Writable());
  Rep& r = *rep_;
  std::map<FileId, std::vector<Extent>> by_file;
  std::set<FileId> whole;  // checked whole by the caller
  for (const VerifiedExtent& e : extents) {
    if (e.length > 0) by_file[e.file].push_back({e.offset, e.length});
    if (e.whole_file) {
      whole.insert(e.file);
      by_file[e.file];
    }
  }
  std::map<FileId, std::uint64_t> prefix_of;  // the last one per file wins
  for (const DurablePrefix& p : prefixes) {
    prefix_of[p.file] = p.bytes;
    by_file[p.file];  // its file is synced with the others
  }
  if (by_file.empty()) {  // nothing to record
    if (on_recorded) {
      MutexLock l(&r.catalog.mu());
      on_recorded();
    }
    return Status::Ok();
  }

  // 1. resolve and check every extent
  std::vector<std::shared_ptr<DataFile>> files;
  {
    MutexLock l(&r.catalog.mu());
    for (auto& [id, list] : by_file) {
      Result<std::shared_ptr<DataFile>> f = r.OpenWritten(id);
      if (!f.ok()) return f.status();
      for (const Extent& e : list)
        EXLR8_RETURN_IF_ERROR(CheckRange((*f)->shown, (*f)->size, e.offset, e.length));
      if (whole.contains(id))
        for (const VerifiedExtent& e : extents)
          if (e.file == id && e.whole_file && (e.offset != 0 || e.length != (*f)->size))
            return InvalidArgumentError((*f)->shown + ": a whole-file extent [" + std::to_string(e.offset) +
                                        ", " + std::to_string(e.offset + e.length) +
                                        ") is not the whole file (" + std::to_string((*f)->size) + " bytes)");
      if (auto p = prefix_of.find(id); p != prefix_of.end())
        EXLR8_RETURN_IF_ERROR(CheckRange((*f)->shown, (*f)->size, 0, p->second));
      list = NormalizeExtents(std::move(list));
      files.push_back(*std::move(f));
    }
  }
  // 2. make the bytes and the files' names durable, without blocking readers
  EXLR8_RETURN_IF_ERROR(r.SyncFiles(files));
  EXLR8_RETURN_IF_ERROR(r.SyncNewNames());
  // 3. record them, all in one transaction
  Catalog::Commit commit;
  commit.extents = std::move(by_file);
  commit.prefixes = std::move(prefix_of);
  commit.whole = std::move(whole);
  for (const auto& f : files) commit.filesets.insert(f->fileset);
  MutexLock l(&r.catalog.mu());
  EXLR8_RETURN_IF_ERROR(r.catalog.RecordCommit(commit));
  if (on_recorded) on_recorded();  // under the index lock still: see CheckSpace
  return Status::Ok();
}

Status Cache::MarkWholeFileVerified(FileId file) { return MarkWholeFilesVerified({&file, 1}); }

Status Cache::ReadDurablePrefix(FileId file, std::uint64_t offset, std::span<std::byte> out) {
  Rep& r = *rep_;
  std::shared_ptr<DataFile> f;
  {
    MutexLock l(&r.catalog.mu());
    EXLR8_ASSIGN_OR_RETURN(const std::uint64_t prefix, r.catalog.DurablePrefix(file));
    if (offset > prefix || out.size() > prefix - offset)
      return FailedPreconditionError(r.shown + ": file " + std::to_string(file) + " bytes [" +
                                     std::to_string(offset) + ", " + std::to_string(offset + out.size()) +
                                     ") are beyond its durable prefix (" + std::to_string(prefix) +
                                     " bytes)");
    EXLR8_ASSIGN_OR_RETURN(f, r.OpenWritten(file));
  }
  return PreadAll(f->fd.get(), offset, out, f->shown);
}

Status Cache::MarkWholeFilesVerified(std::span<const FileId> ids) {
  EXLR8_RETURN_IF_ERROR(rep_->Writable());
  if (ids.empty()) return Status::Ok();
  Rep& r = *rep_;
  std::vector<std::shared_ptr<DataFile>> files;
  {
    MutexLock l(&r.catalog.mu());
    for (FileId file : ids) {
      EXLR8_ASSIGN_OR_RETURN(FileRow row, r.catalog.LoadFile(file));
      // An empty file has no bytes to write, so nobody else creates it.
      if (row.size == 0) {
        EXLR8_ASSIGN_OR_RETURN(files.emplace_back(), r.GetDataFile(file, /*create=*/true));
      } else {
        EXLR8_ASSIGN_OR_RETURN(files.emplace_back(), r.OpenWritten(file));
      }
    }
  }
  EXLR8_RETURN_IF_ERROR(r.SyncFiles(files));
  EXLR8_RETURN_IF_ERROR(r.SyncNewNames());
  MutexLock l(&r.catalog.mu());
  std::vector<std::pair<FileId, std::uint64_t>> sized;
  for (std::size_t i = 0; i < ids.size(); ++i) sized.emplace_back(ids[i], files[i]->size);
  return r.catalog.RecordWholeFiles(sized);
}

Result<std::optional<std::uint64_t>> Cache::Rep::SizeOnDisk(FileId id, const FileRow& row) {
  if (std::shared_ptr<DataFile> open = FindOpen(id)) {
    struct stat st;
    if (::fstat(open->fd.get(), &st) != 0) return ErrnoStatus(errno, "stat " + open->shown);
    if (st.st_nlink > 0) return std::optional<std::uint64_t>(static_cast<std::uint64_t>(st.st_size));
    // Deleted while open: what it held is gone (writes to it would land
    // nowhere), whatever the path names by now.
    MutexLock open_lock(&open_mu);
    open_files.erase(id);
    return std::optional<std::uint64_t>();
  }
  Result<BeneathFile> f = OpenBeneath(root_fd.get(), row.rel, /*create=*/false, shown, /*read_only=*/true);
  if (f.status().code() == StatusCode::kNotFound) return std::optional<std::uint64_t>();
  if (!f.ok()) return f.status();
  struct stat st;
  if (::fstat(f->fd.get(), &st) != 0) return ErrnoStatus(errno, "stat " + shown + "/" + row.rel);
  return std::optional<std::uint64_t>(static_cast<std::uint64_t>(st.st_size));
}

Result<std::optional<std::uint64_t>> Cache::SizeOnDisk(FileId file) {
  Rep& r = *rep_;
  MutexLock l(&r.catalog.mu());
  EXLR8_ASSIGN_OR_RETURN(FileRow row, r.catalog.LoadFile(file));
  return r.SizeOnDisk(file, row);
}

Result<std::uint64_t> Cache::ForgetLostBytes(FilesetId fileset) {
  EXLR8_RETURN_IF_ERROR(rep_->Writable());
  Rep& r = *rep_;
  std::vector<VerifiedExtent> lost;
  {
    MutexLock l(&r.catalog.mu());
    EXLR8_RETURN_IF_ERROR(r.catalog.CheckFilesetExists(fileset));
    EXLR8_ASSIGN_OR_RETURN(const std::vector<FileId> ids, r.catalog.FilesWithExtents(fileset));
    for (FileId id : ids) {
      EXLR8_ASSIGN_OR_RETURN(FileRow row, r.catalog.LoadFile(id));
      EXLR8_ASSIGN_OR_RETURN(std::optional<std::uint64_t> size, r.SizeOnDisk(id, row));
      const std::uint64_t on_disk = size.value_or(0);  // bytes of the file that exist
      if (on_disk < row.size) lost.push_back({id, on_disk, row.size - on_disk});
    }
  }
  if (lost.empty()) return std::uint64_t{0};
  return ForgetExtents(lost);
}

Status Cache::CutToListedSize(FileId file) {
  EXLR8_RETURN_IF_ERROR(rep_->Writable());
  Rep& r = *rep_;
  MutexLock l(&r.catalog.mu());
  EXLR8_ASSIGN_OR_RETURN(std::shared_ptr<DataFile> f, r.OpenWritten(file));
  struct stat st;
  if (::fstat(f->fd.get(), &st) != 0) return ErrnoStatus(errno, "stat " + f->shown);
  if (static_cast<std::uint64_t>(st.st_size) > f->size &&
      ::ftruncate(f->fd.get(), static_cast<off_t>(f->size)) != 0)
    return ErrnoStatus(errno, "cut " + f->shown + " back to " + std::to_string(f->size) + " bytes");
  return Status::Ok();
}

Result<std::uint64_t> Cache::ForgetExtents(std::span<const VerifiedExtent> ranges) {
  EXLR8_RETURN_IF_ERROR(rep_->Writable());
  Rep& r = *rep_;
  std::map<FileId, std::vector<Extent>> by_file;
  for (const VerifiedExtent& e : ranges)
    if (e.length > 0) by_file[e.file].push_back({e.offset, e.length});
  if (by_file.empty()) return std::uint64_t{0};
  MutexLock l(&r.catalog.mu());
  for (const auto& [id, list] : by_file) {
    EXLR8_ASSIGN_OR_RETURN(FileRow row, r.catalog.LoadFile(id));
    for (const Extent& e : list)
      EXLR8_RETURN_IF_ERROR(CheckRange(r.shown + "/" + row.rel, row.size, e.offset, e.length));
  }
  return r.catalog.ForgetRanges(by_file);
}

// ---- reading ----

Result<bool> Cache::Covers(FileId file, std::uint64_t offset, std::uint64_t length) {
  EXLR8_ASSIGN_OR_RETURN(std::vector<Extent> holes, MissingRanges(file, offset, length));
  return holes.empty();
}

Result<std::vector<Extent>> Cache::VerifiedExtents(FileId file) {
  Rep& r = *rep_;
  MutexLock l(&r.catalog.mu());
  EXLR8_RETURN_IF_ERROR(r.catalog.LoadFile(file).status());
  return r.catalog.AllExtents(file);
}

Result<std::vector<Extent>> Cache::MissingRanges(FileId file, std::uint64_t offset, std::uint64_t length) {
  Rep& r = *rep_;
  MutexLock l(&r.catalog.mu());
  EXLR8_ASSIGN_OR_RETURN(FileRow row, r.catalog.LoadFile(file));
  EXLR8_RETURN_IF_ERROR(CheckRange(r.shown + "/" + row.rel, row.size, offset, length));
  if (length == 0) return std::vector<Extent>{};
  EXLR8_ASSIGN_OR_RETURN(std::vector<Extent> near, r.catalog.ExtentsNear(file, offset, offset + length));
  return MissingExtents(near, {offset, length});
}

namespace {

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

Result<std::unique_ptr<ByteSource>> Cache::OpenVerified(FileId file) {
  Rep& r = *rep_;
  MutexLock l(&r.catalog.mu());
  EXLR8_ASSIGN_OR_RETURN(FileRow row, r.catalog.LoadFile(file));
  EXLR8_ASSIGN_OR_RETURN(std::vector<Extent> extents, r.catalog.AllExtents(file));
  std::shared_ptr<DataFile> df;
  if (!extents.empty()) {
    Result<std::shared_ptr<DataFile>> opened = r.OpenWritten(file);
    if (opened.status().code() == StatusCode::kFailedPrecondition)
      return CorruptionError(r.shown + "/" + row.rel +
                             ": the index records verified bytes but the file is missing (" +
                             opened.status().message() + ")");
    if (!opened.ok()) return opened.status();
    df = *std::move(opened);
  }
  return std::unique_ptr<ByteSource>(
      new VerifiedFileSource(std::move(df), row.size, std::move(extents), r.shown + "/" + row.rel));
}

Result<std::unique_ptr<ByteSource>> Cache::OpenCheckedByCaller(FileId file) {
  Rep& r = *rep_;
  MutexLock l(&r.catalog.mu());
  EXLR8_ASSIGN_OR_RETURN(FileRow row, r.catalog.LoadFile(file));
  std::shared_ptr<DataFile> df;
  std::vector<Extent> all;
  if (row.size > 0) {
    EXLR8_ASSIGN_OR_RETURN(df, r.OpenWritten(file));
    all.push_back({0, row.size});
  }
  return std::unique_ptr<ByteSource>(
      new VerifiedFileSource(std::move(df), row.size, std::move(all), r.shown + "/" + row.rel));
}

}  // namespace exlr8
