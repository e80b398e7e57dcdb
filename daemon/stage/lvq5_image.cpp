#include "daemon/stage/lvq5_image.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <utility>

#include "daemon/cache/cache.h"
#include "daemon/cache/cached_rank.h"
#include "daemon/stage/image_common.h"
#include "format/byte_source.h"
#include "format/checksum.h"
#include "format/lvq5/index.h"
#include "format/tetra/served.h"

namespace exlr8 {

namespace {

// Copies, transcodes and hashes go in pieces of about this, so a large
// tensor is shared between threads and a stop is seen soon.
constexpr std::uint64_t kLvq5ChunkBytes = std::uint64_t{16} << 20;

// A region before the layout: what AddPlain gets, and where its bytes are.
struct PlannedRegion {
  ImageTensorSpec spec;
  ImagePlainFields fields;
  Lvq5RegionSource source;
  std::string file;  // repo path, for messages
};

// Rows of `nblocks` blocks per transcode chunk (at least one).
std::uint64_t RowsPerChunk(std::uint64_t nblocks) {
  return std::max<std::uint64_t>(1, kLvq5ChunkBytes / (6 * nblocks));
}

// The staged bytes of a region: the file's, or its transcoded code rows.
// `scratch` is the caller's buffer for transcoding.
Status ForEachStagedChunk(const Lvq5RegionSource& s, std::span<const std::byte> file,
                          std::vector<std::byte>& scratch,
                          const std::function<void(std::span<const std::byte>)>& sink) {
  const std::span<const std::byte> bytes = file.subspan(s.offset, s.length);
  if (s.tetra_nblocks == 0) {
    for (std::uint64_t at = 0; at < bytes.size(); at += kLvq5ChunkBytes)
      sink(bytes.subspan(at, std::min<std::uint64_t>(kLvq5ChunkBytes, bytes.size() - at)));
    return Status::Ok();
  }
  const std::uint64_t disk_row = 6 * s.tetra_nblocks;
  const std::uint64_t served_row = tetra::ServedRowStride(s.tetra_nblocks);
  const std::uint64_t rows = bytes.size() / disk_row;
  const std::uint64_t step = RowsPerChunk(s.tetra_nblocks);
  for (std::uint64_t row = 0; row < rows; row += step) {
    const std::uint64_t n = std::min(step, rows - row);
    scratch.resize(n * served_row);
    EXLR8_RETURN_IF_ERROR(
        tetra::DiskToServed(bytes.subspan(row * disk_row, n * disk_row), s.tetra_nblocks, scratch));
    sink(scratch);
  }
  return Status::Ok();
}

// The regions of one LVQ5 file, from its index.
Status AddFileRegions(const lvq5::FileIndex& index, std::size_t map, const std::string& path,
                      std::vector<PlannedRegion>& out, Lvq5ImagePlan& plan) {
  const auto add = [&](std::string name, DType dtype, std::vector<std::uint64_t> shape, ImagePlainFields f,
                       std::uint64_t offset, std::uint64_t length, std::uint64_t nblocks = 0) {
    PlannedRegion r;
    r.spec.name = std::move(name);
    r.spec.dtype = dtype;
    r.spec.shape = std::move(shape);
    r.fields = f;
    r.source = {map, offset, length, nblocks};
    r.file = path;
    out.push_back(std::move(r));
  };
  for (const lvq5::MatrixRecord& m : index.matrices) {
    if (m.kind == lvq5::Kind::kTetra) {
      const ImagePlainFields f{ImagePlainFormat::kTetra48, 0, m.d_out, m.d_in};
      if (m.nblocks > 0)
        add(m.name, DType::kU8, {m.d_out, tetra::ServedRowStride(m.nblocks)}, f, m.codes_offset,
            m.codes_length, m.nblocks);
      add(m.name + ".centroids", DType::kF64, {m.n_centroids}, f, m.centroids_offset, 8ull * m.n_centroids);
      add(m.name + ".row_scales", DType::kF64, {m.d_out}, f, m.row_scales_offset, 8ull * m.d_out);
      if (m.tail_cols > 0)
        add(m.name + ".tail", DType::kF32, {m.d_out, m.tail_cols}, f, m.tail_offset,
            4ull * m.d_out * m.tail_cols);
      ++plan.tetra_records;
    } else if (m.kind == lvq5::Kind::kInt4G128) {
      const ImagePlainFields f{ImagePlainFormat::kInt4G128, 0, m.d_out, m.d_in};
      add(m.name, DType::kU8, {m.packed_length}, f, m.packed_offset, m.packed_length);
      add(m.name + ".scales", DType::kF16, {m.groups}, f, m.scales_offset, 2 * m.groups);
      add(m.name + ".biases", DType::kF16, {m.groups}, f, m.biases_offset, 2 * m.groups);
    } else {
      return InvalidArgumentError(FileAtByte(path, m.offset) + ": matrix record '" + m.name + "' is of kind " +
                                  lvq5::KindName(static_cast<std::uint32_t>(m.kind)) +
                                  ", which exlr8d does not stage");
    }
    ++plan.records;
  }
  for (const lvq5::RawTensor& t : index.raw) {
    if (t.dims.size() > 4)
      return InvalidArgumentError(FileAtByte(path, t.offset) + ": raw tensor '" + t.name + "' has rank " +
                                  std::to_string(t.dims.size()) + "; the image tables hold rank <= 4");
    if (t.tag == lvq5::RawTag::kF16) {
      add(t.name, DType::kF16, t.dims, {ImagePlainFormat::kF16, 0, 0, 0}, t.data_offset, t.data_length);
    } else {
      const ImagePlainFields f{ImagePlainFormat::kQuant, static_cast<std::uint8_t>(t.bits), 0, t.group};
      add(t.name, DType::kU8, {t.data_length}, f, t.data_offset, t.data_length);
      add(t.name + ".scales", DType::kF16, {t.groups}, f, t.scales_offset, 2 * t.groups);
      add(t.name + ".biases", DType::kF16, {t.groups}, f, t.biases_offset, 2 * t.groups);
    }
    ++plan.records;
  }
  for (const lvq5::Blob& b : index.blobs) {
    ++plan.blobs;
    plan.blob_bytes += b.length;
  }
  return Status::Ok();
}

// The record index and the walked index agree on every record's name and
// bytes (the index was computed by the same walk when the file was pulled).
Status CrossCheck(const lvq5::FileIndex& index, const std::vector<FileRecord>& records,
                  const std::string& path) {
  std::vector<std::pair<std::string, std::pair<std::uint64_t, std::uint64_t>>> walked;
  for (const auto& m : index.matrices) walked.push_back({m.name, {m.offset, m.end - m.offset}});
  for (const auto& t : index.raw) walked.push_back({t.name, {t.offset, t.end - t.offset}});
  for (const auto& b : index.blobs) walked.push_back({b.name, {b.offset, b.end - b.offset}});
  if (walked.size() != records.size())
    return CorruptionError(path + ": " + std::to_string(walked.size()) + " records in the file, " +
                           std::to_string(records.size()) +
                           " in the cache's record index ('exlr8d verify' rechecks it)");
  for (std::size_t i = 0; i < walked.size(); ++i) {
    const FileRecord& r = records[i];
    if (walked[i].first != r.name || walked[i].second.first != r.offset ||
        walked[i].second.second != r.length)
      return CorruptionError(path + ": record " + std::to_string(i) + " '" + walked[i].first + "' at byte " +
                             std::to_string(walked[i].second.first) +
                             " differs from the cache's record index ('" + r.name + "' at byte " +
                             std::to_string(r.offset) + ")");
  }
  return Status::Ok();
}

// A writable shared mapping of the image memfd, unmapped on destruction.
struct Writable {
  std::byte* data = nullptr;
  std::size_t size = 0;
  ~Writable() { Unmap(); }
  void Unmap() {
    if (data != nullptr) munmap(data, size);
    data = nullptr;
  }
};

}  // namespace

Result<Lvq5ImagePlan> PlanLvq5Image(const RankRequest& r) {
  if (!r.manifest.empty() || r.tp != 1 || r.rank != 0)
    return InvalidArgumentError("an LVQ5 fileset is staged whole: no manifest, TP 1 rank 0");
  Lvq5ImagePlan plan;
  EXLR8_ASSIGN_OR_RETURN(std::unique_ptr<Cache> cache, Cache::OpenReadOnly(r.cache_dir));
  EXLR8_ASSIGN_OR_RETURN(FilesetInfo set, FindPulledFileset(*cache, r.repo, r.revision));
  plan.commit = set.commit;
  if (!r.pin_holder.empty()) {
    auto pin = ProcessPin::Acquire(r.cache_dir, set.repo, set.commit, r.pin_holder);
    if (pin.ok()) {
      plan.pin = std::move(*pin);
    } else if (pin.status().code() == StatusCode::kInvalidArgument) {
      return pin.status();
    } else {
      plan.pin_error = pin.status().ToString();
    }
  }
  const std::string fileset = set.repo + "@" + set.commit;

  // The LVQ5 files (those with a record index), verified whole, mapped.
  EXLR8_ASSIGN_OR_RETURN(std::vector<FileInfo> files, cache->ListFiles(set.id));
  std::sort(files.begin(), files.end(), [](const FileInfo& a, const FileInfo& b) { return a.path < b.path; });
  std::vector<std::vector<FileRecord>> records;
  for (const FileInfo& f : files) {
    EXLR8_ASSIGN_OR_RETURN(std::vector<FileRecord> recs, cache->Records(f.id));
    if (!f.whole_verified) {
      if (f.path.size() > 4 && f.path.ends_with(".bin"))
        return NotFoundError(f.path + " of " + fileset +
                             " is not verified whole in the cache: run exlr8d pull for it first");
      continue;
    }
    if (recs.empty()) continue;
    EXLR8_ASSIGN_OR_RETURN(auto map, MapCacheFile(*cache, f));
    plan.maps.push_back(std::move(map));
    plan.map_files.push_back(f.path);
    records.push_back(std::move(recs));
  }
  if (plan.maps.empty())
    return NotFoundError(fileset +
                         " has no LVQ5 file verified in the cache (no record index): give --manifest "
                         "to stage an EXLR8 rank, or run exlr8d pull for the fileset");

  // Every record still hashes to the record index: a file changed on disk
  // since it was verified is refused before anything is staged.
  struct RecordRef {
    std::size_t file;
    std::size_t record;
  };
  std::vector<RecordRef> refs;
  for (std::size_t f = 0; f < records.size(); ++f)
    for (std::size_t i = 0; i < records[f].size(); ++i) refs.push_back({f, i});
  std::vector<char> bad(refs.size(), 0);
  ImageParallelFor(refs.size(), r.threads, r.cancel, [&](std::size_t i) {
    const FileRecord& rec = records[refs[i].file][refs[i].record];
    const auto bytes = plan.maps[refs[i].file]->bytes();
    bad[i] = rec.offset > bytes.size() || rec.length > bytes.size() - rec.offset ||
             Xxh64::Hash(bytes.subspan(rec.offset, rec.length)) != rec.xxh64;
  });
  if (ImageBuildCancelled(r.cancel)) return CancelledError("stopped while checking the fileset's records");
  if (const auto it = std::find(bad.begin(), bad.end(), 1); it != bad.end()) {
    const RecordRef ref = refs[static_cast<std::size_t>(it - bad.begin())];
    const FileRecord& rec = records[ref.file][ref.record];
    return CorruptionError(plan.map_files[ref.file] + " of " + fileset + ": " + rec.kind + " record '" +
                           rec.name + "' at byte " + std::to_string(rec.offset) +
                           ": XXH64 differs from the cache's record index; the file changed on disk since it "
                           "was verified ('exlr8d verify' forgets it, then 'exlr8d pull' fetches it again)");
  }

  // The regions, from each file's walked index.
  std::vector<PlannedRegion> regions;
  for (std::size_t f = 0; f < plan.maps.size(); ++f) {
    SpanByteSource source(plan.maps[f]->bytes(), plan.map_files[f]);
    EXLR8_ASSIGN_OR_RETURN(lvq5::FileIndex index, lvq5::ReadIndex(source));
    EXLR8_RETURN_IF_ERROR(CrossCheck(index, records[f], plan.map_files[f]));
    EXLR8_RETURN_IF_ERROR(AddFileRegions(index, f, plan.map_files[f], regions, plan));
  }

  // Each region's digest over its bytes as staged.
  std::vector<Status> errors(regions.size());
  ImageParallelFor(regions.size(), r.threads, r.cancel, [&](std::size_t i) {
    PlannedRegion& region = regions[i];
    std::vector<std::byte> scratch;
    Xxh64 xxh;
    errors[i] = ForEachStagedChunk(region.source, plan.maps[region.source.map]->bytes(), scratch,
                                   [&](std::span<const std::byte> b) { xxh.Update(b); });
    region.spec.digest = xxh.Digest();
  });
  if (ImageBuildCancelled(r.cancel)) return CancelledError("stopped while hashing the fileset's regions");
  for (std::size_t i = 0; i < regions.size(); ++i)
    if (!errors[i].ok())
      return CorruptionError(FileAtByte(regions[i].file, regions[i].source.offset) + ": '" + regions[i].spec.name +
                             "': " + errors[i].message());

  ImageDims dims;
  dims.commit = set.commit;
  ImageLayoutBuilder builder(dims);
  for (const PlannedRegion& region : regions) {
    EXLR8_RETURN_IF_ERROR(builder.AddPlain(region.spec, region.fields).status());
    plan.sources.push_back(region.source);
  }
  // One check per region, over all of it (lengths known once added).
  for (std::uint32_t i = 0; i < regions.size(); ++i) {
    std::uint64_t length = DTypeSize(regions[i].spec.dtype);
    for (std::uint64_t d : regions[i].spec.shape) length *= d;
    const ImageSegmentRef whole{i, 0, length};
    EXLR8_RETURN_IF_ERROR(builder.AddCheck(regions[i].spec.digest, {&whole, 1}));
    plan.region_bytes += length;
  }
  EXLR8_ASSIGN_OR_RETURN(plan.layout, builder.Finish());
  return plan;
}

Result<HostRankImage> BuildHostLvq5Image(const RankRequest& r, Lvq5ImagePlan* keep) {
  const auto t0 = std::chrono::steady_clock::now();
  EXLR8_ASSIGN_OR_RETURN(Lvq5ImagePlan plan, PlanLvq5Image(r));
  const ImageLayout& layout = plan.layout;
  const ImageTables& tables = layout.tables;
  const std::uint64_t size = layout.allocation_bytes();
  const std::string name = ImageName(r, plan.commit);
  if (r.progress != nullptr)
    r.progress->bytes_total.store(plan.region_bytes + layout.header_bytes.size() + ImageCheckBytes(tables));
  if (r.before_reading) EXLR8_RETURN_IF_ERROR(r.before_reading());

  // Fill: header, then every region in chunks (code rows transcoded).
  struct Item {
    std::uint32_t region;
    std::uint64_t begin, end;  // rows for Tetra codes, bytes otherwise
  };
  std::vector<Item> items;
  for (std::uint32_t i = 0; i < plan.sources.size(); ++i) {
    const Lvq5RegionSource& s = plan.sources[i];
    const std::uint64_t count = s.tetra_nblocks ? s.length / (6 * s.tetra_nblocks) : s.length;
    const std::uint64_t step = s.tetra_nblocks ? RowsPerChunk(s.tetra_nblocks) : kLvq5ChunkBytes;
    for (std::uint64_t at = 0; at < count; at += step) items.push_back({i, at, std::min(count, at + step)});
  }
  EXLR8_ASSIGN_OR_RETURN(UniqueFd image_fd, CreateImageMemfd(name, size));
  {
    Writable out;
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, image_fd.get(), 0);
    if (p == MAP_FAILED) return ErrnoStatus(errno, "mmap of " + name);
    out.data = static_cast<std::byte*>(p);
    out.size = size;
    std::memcpy(out.data, layout.header_bytes.data(), layout.header_bytes.size());
    std::memcpy(out.data + layout.header.offset_table.offset, layout.offset_table_bytes.data(),
                layout.offset_table_bytes.size());
    std::vector<Status> errors(items.size());
    ImageParallelFor(items.size(), r.threads, r.cancel, [&](std::size_t k) {
      const Item& it = items[k];
      const Lvq5RegionSource& s = plan.sources[it.region];
      const auto file = plan.maps[s.map]->bytes();
      std::byte* dst = out.data + tables.tensors[it.region].offset;
      std::uint64_t bytes = 0;
      if (s.tetra_nblocks == 0) {
        bytes = it.end - it.begin;
        std::memcpy(dst + it.begin, file.data() + s.offset + it.begin, bytes);
      } else {
        const std::uint64_t disk_row = 6 * s.tetra_nblocks,
                            served_row = tetra::ServedRowStride(s.tetra_nblocks);
        bytes = (it.end - it.begin) * served_row;
        errors[k] =
            tetra::DiskToServed(file.subspan(s.offset + it.begin * disk_row, (it.end - it.begin) * disk_row),
                                s.tetra_nblocks, {dst + it.begin * served_row, bytes});
      }
      if (r.progress != nullptr) r.progress->bytes_checked.fetch_add(bytes, std::memory_order_relaxed);
    });
    if (ImageBuildCancelled(r.cancel)) return CancelledError("stopped while filling the fileset's image");
    for (const Status& s : errors)
      if (!s.ok()) return InternalError("transcoding into the image: " + s.message());
    out.Unmap();  // no writable mapping may remain for F_SEAL_WRITE
  }
  EXLR8_RETURN_IF_ERROR(SealImageMemfd(image_fd.get(), name));
  EXLR8_ASSIGN_OR_RETURN(ReadOnlyMapping image, ReadOnlyMapping::Map(image_fd.get(), size, name));
  const auto t1 = std::chrono::steady_clock::now();

  // Hash the sealed bytes: every check against its digest.
  const std::byte* base = image.bytes().data();
  std::vector<char> bad(tables.checks.size(), 0);
  std::atomic<std::uint64_t> hashed{0};
  ImageParallelFor(tables.checks.size(), r.threads, r.cancel, [&](std::size_t i) {
    const ImageCheck& c = tables.checks[i];
    Xxh64 xxh;
    std::uint64_t bytes = 0;
    for (const ImageSegment& s : c.segments) {
      xxh.Update({base + s.offset, s.length});
      bytes += s.length;
    }
    bad[i] = xxh.Digest() != c.digest;
    hashed.fetch_add(bytes, std::memory_order_relaxed);
    if (r.progress != nullptr) r.progress->bytes_checked.fetch_add(bytes, std::memory_order_relaxed);
  });
  if (ImageBuildCancelled(r.cancel)) return CancelledError("stopped while hashing the fileset's image");
  if (const auto it = std::find(bad.begin(), bad.end(), 1); it != bad.end()) {
    const std::size_t i = static_cast<std::size_t>(it - bad.begin());
    return CorruptionError("'" + tables.tensors[i].name + "' (region " + std::to_string(i) +
                           " at image offset " + std::to_string(tables.tensors[i].offset) + ", from " +
                           FileAtByte(plan.map_files[plan.sources[i].map], plan.sources[i].offset) +
                           "): XXH64 of the staged bytes differs from the plan's");
  }
  const auto t2 = std::chrono::steady_clock::now();

  HostRankImage out;
  out.commit = plan.commit;
  if (keep != nullptr) {
    keep->commit = plan.commit;
    keep->layout = plan.layout;
    keep->sources = std::move(plan.sources);
    keep->maps = std::move(plan.maps);
    keep->map_files = std::move(plan.map_files);
    keep->region_bytes = plan.region_bytes;
    keep->records = plan.records;
    keep->tetra_records = plan.tetra_records;
    keep->blobs = plan.blobs;
    keep->blob_bytes = plan.blob_bytes;
  }
  out.layout = std::move(plan.layout);
  EXLR8_ASSIGN_OR_RETURN(out.tables_fd,
                         WriteSealedTables(out.layout.tables, name + " tables", &out.tables_bytes));
  out.image_fd = std::move(image_fd);
  out.image = std::move(image);
  out.proof.commit = out.commit;
  out.proof.hashed_regions = out.layout.tables.checks.size();
  out.proof.hashed_bytes = hashed.load();
  out.proof.hashed_mismatches = 0;
  out.proof.seconds_read = std::chrono::duration<double>(t1 - t0).count();
  out.proof.seconds_hash = std::chrono::duration<double>(t2 - t1).count();
  // Every digest was computed here from the cache's verified bytes (the
  // file's SHA-256 and record XXH64s anchor them).
  out.regions_without_release_digest = out.layout.tables.checks.size();
  out.bytes_without_release_digest = hashed.load();
  out.pin = std::move(plan.pin);
  out.pin_error = std::move(plan.pin_error);
  return out;
}

}  // namespace exlr8
