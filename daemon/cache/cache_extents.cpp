#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "daemon/cache/cache.h"
#include "daemon/cache/cache_rep.h"
#include "daemon/cache/extent_store.h"

// Cache, the facade: the calls that write, make durable, record and read
// data. Each runs in the order docs/CACHE.md "Crash safety" sets: the
// extent store writes and syncs without the catalog's lock, and only then
// does the catalog record, under it.
namespace exlr8 {

// ---- the data files ----

Result<std::shared_ptr<DataFile>> Cache::Rep::GetDataFile(FileId file, bool create) {
  if (std::shared_ptr<DataFile> open = store->FindOpen(file)) return open;
  EXLR8_ASSIGN_OR_RETURN(FileRow row, catalog.LoadFile(file));
  return store->Open(file, row, create, [&]() -> Result<std::vector<Extent>> {
    catalog.mu()
        .AssertHeld();  // runs inside Open, under this caller's lock; the analysis does not follow lambdas
    return catalog.AllExtents(file);
  });
}

Result<std::shared_ptr<DataFile>> Cache::Rep::OpenWritten(FileId file) {
  if (std::shared_ptr<DataFile> open = store->FindOpen(file)) return open;
  EXLR8_ASSIGN_OR_RETURN(FileRow row, catalog.LoadFile(file));
  return store->OpenWritten(file, row, [&]() -> Result<std::vector<Extent>> {
    catalog.mu().AssertHeld();  // as above
    return catalog.AllExtents(file);
  });
}

// ---- writing ----

Status Cache::WriteAt(FileId file, std::uint64_t offset, std::span<const std::byte> data) {
  EXLR8_RETURN_IF_ERROR(rep_->Writable());
  std::shared_ptr<DataFile> f = rep_->store->FindOpen(file);  // without the index lock: see ExtentStore
  if (!f) {
    MutexLock l(&rep_->catalog.mu());
    EXLR8_ASSIGN_OR_RETURN(f, rep_->GetDataFile(file, /*create=*/true));
  }
  return rep_->store->Write(*f, offset, data);
}

Status Cache::CommitVerified(std::span<const VerifiedExtent> extents, std::span<const DurablePrefix> prefixes,
                             const std::function<void()>& on_recorded) {
  EXLR8_RETURN_IF_ERROR(rep_->Writable());
  Rep& r = *rep_;
  Catalog::Commit commit;
  for (const VerifiedExtent& e : extents) {
    if (e.length > 0) commit.extents[e.file].push_back({e.offset, e.length});
    if (e.whole_file) {
      commit.whole.insert(e.file);
      commit.records[e.file] = e.records;
      commit.extents[e.file];
    }
  }
  for (const DurablePrefix& p : prefixes) {
    commit.prefixes[p.file] = p.bytes;  // the last one per file wins
    commit.extents[p.file];             // its file is synced with the others
  }
  if (commit.extents.empty()) {  // nothing to record
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
    for (auto& [id, list] : commit.extents) {
      Result<std::shared_ptr<DataFile>> f = r.OpenWritten(id);
      if (!f.ok()) return f.status();
      for (const Extent& e : list)
        EXLR8_RETURN_IF_ERROR(CheckFileRange((*f)->shown, (*f)->size, e.offset, e.length));
      if (commit.whole.contains(id))
        for (const VerifiedExtent& e : extents)
          if (e.file == id && e.whole_file && (e.offset != 0 || e.length != (*f)->size))
            return InvalidArgumentError((*f)->shown + ": a whole-file extent [" + std::to_string(e.offset) +
                                        ", " + std::to_string(e.offset + e.length) +
                                        ") is not the whole file (" + std::to_string((*f)->size) + " bytes)");
      if (auto p = commit.prefixes.find(id); p != commit.prefixes.end())
        EXLR8_RETURN_IF_ERROR(CheckFileRange((*f)->shown, (*f)->size, 0, p->second));
      list = NormalizeExtents(std::move(list));
      commit.filesets.insert((*f)->fileset);
      files.push_back(*std::move(f));
    }
  }
  // 2. make the bytes and the files' names durable, without blocking readers
  EXLR8_RETURN_IF_ERROR(r.store->Sync(files));
  // 3. record them, all in one transaction
  MutexLock l(&r.catalog.mu());
  EXLR8_RETURN_IF_ERROR(r.catalog.RecordCommit(commit));
  if (on_recorded) on_recorded();  // under the index lock still: see CheckSpace
  return Status::Ok();
}

Status Cache::MarkWholeFileVerified(FileId file) { return MarkWholeFilesVerified({&file, 1}); }

Status Cache::MarkWholeFilesVerified(std::span<const FileId> ids) {
  EXLR8_RETURN_IF_ERROR(rep_->Writable());
  if (ids.empty()) return Status::Ok();
  Rep& r = *rep_;
  std::vector<std::shared_ptr<DataFile>> files;
  {
    MutexLock l(&r.catalog.mu());
    for (FileId file : ids) {
      EXLR8_ASSIGN_OR_RETURN(Catalog::FileRow row, r.catalog.LoadFile(file));
      // An empty file has no bytes to write, so nobody else creates it.
      if (row.size == 0) {
        EXLR8_ASSIGN_OR_RETURN(files.emplace_back(), r.GetDataFile(file, /*create=*/true));
      } else {
        EXLR8_ASSIGN_OR_RETURN(files.emplace_back(), r.OpenWritten(file));
      }
    }
  }
  EXLR8_RETURN_IF_ERROR(r.store->Sync(files));
  std::vector<std::pair<FileId, std::uint64_t>> sized;
  for (std::size_t i = 0; i < ids.size(); ++i) sized.emplace_back(ids[i], files[i]->size);
  MutexLock l(&r.catalog.mu());
  return r.catalog.RecordWholeFiles(sized);
}

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

// ---- what was lost or damaged ----

Result<std::optional<std::uint64_t>> Cache::SizeOnDisk(FileId file) {
  Rep& r = *rep_;
  MutexLock l(&r.catalog.mu());
  EXLR8_ASSIGN_OR_RETURN(Catalog::FileRow row, r.catalog.LoadFile(file));
  return r.store->SizeOnDisk(file, row);
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
      EXLR8_ASSIGN_OR_RETURN(Catalog::FileRow row, r.catalog.LoadFile(id));
      EXLR8_ASSIGN_OR_RETURN(std::optional<std::uint64_t> size, r.store->SizeOnDisk(id, row));
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
  return r.store->CutToListedSize(*f);
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
    EXLR8_ASSIGN_OR_RETURN(Catalog::FileRow row, r.catalog.LoadFile(id));
    for (const Extent& e : list)
      EXLR8_RETURN_IF_ERROR(CheckFileRange(r.shown + "/" + row.rel, row.size, e.offset, e.length));
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

Result<std::vector<FileRecord>> Cache::Records(FileId file) {
  Rep& r = *rep_;
  MutexLock l(&r.catalog.mu());
  EXLR8_RETURN_IF_ERROR(r.catalog.LoadFile(file).status());
  return r.catalog.Records(file);
}

Result<std::vector<Extent>> Cache::MissingRanges(FileId file, std::uint64_t offset, std::uint64_t length) {
  Rep& r = *rep_;
  MutexLock l(&r.catalog.mu());
  EXLR8_ASSIGN_OR_RETURN(Catalog::FileRow row, r.catalog.LoadFile(file));
  EXLR8_RETURN_IF_ERROR(CheckFileRange(r.shown + "/" + row.rel, row.size, offset, length));
  if (length == 0) return std::vector<Extent>{};
  EXLR8_ASSIGN_OR_RETURN(std::vector<Extent> near, r.catalog.ExtentsNear(file, offset, offset + length));
  return MissingExtents(near, {offset, length});
}

Result<std::unique_ptr<ByteSource>> Cache::OpenVerified(FileId file) {
  Rep& r = *rep_;
  MutexLock l(&r.catalog.mu());
  EXLR8_ASSIGN_OR_RETURN(Catalog::FileRow row, r.catalog.LoadFile(file));
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
  return ExtentStore::Source(std::move(df), row.size, std::move(extents), r.shown + "/" + row.rel);
}

Result<std::unique_ptr<ByteSource>> Cache::OpenCheckedByCaller(FileId file) {
  Rep& r = *rep_;
  MutexLock l(&r.catalog.mu());
  EXLR8_ASSIGN_OR_RETURN(Catalog::FileRow row, r.catalog.LoadFile(file));
  std::shared_ptr<DataFile> df;
  std::vector<Extent> all;
  if (row.size > 0) {
    EXLR8_ASSIGN_OR_RETURN(df, r.OpenWritten(file));
    all.push_back({0, row.size});
  }
  return ExtentStore::Source(std::move(df), row.size, std::move(all), r.shown + "/" + row.rel);
}

}  // namespace exlr8
