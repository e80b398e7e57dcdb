#include "daemon/stage/host_image.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "daemon/stage/image_common.h"
#include "daemon/stage/rank_image_plan.h"
#include "format/checksum.h"

namespace exlr8 {

namespace {

// Copies and hashes go in pieces of at most this, so a large dense tensor
// is shared between threads and a stop is seen soon.
constexpr std::uint64_t kChunkBytes = std::uint64_t{16} << 20;

// A writable shared mapping, unmapped on destruction (or by Unmap).
class WritableMapping {
 public:
  static Result<WritableMapping> Map(int fd, std::size_t bytes, const std::string& what) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return ErrnoStatus(errno, "mmap of " + what);
    WritableMapping m;
    m.data_ = static_cast<std::byte*>(p);
    m.size_ = bytes;
    return m;
  }
  WritableMapping() = default;
  WritableMapping(WritableMapping&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  WritableMapping& operator=(WritableMapping&&) = delete;
  ~WritableMapping() { Unmap(); }
  void Unmap() {
    if (data_ != nullptr) munmap(data_, size_);
    data_ = nullptr;
  }
  std::byte* data() const { return data_; }

 private:
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

// Where in the image's regions a check's first mismatching byte is: the
// region, named, with its source.
std::string DescribeMismatch(const RankImagePlan& plan, std::size_t check, std::uint64_t mismatches) {
  const ImageTables& t = plan.layout.tables;
  const ImageCheck& c = t.checks[check];
  const std::uint32_t region = plan.check_region[check];
  const ImageTensor& tensor = t.tensors[region];
  const std::uint64_t offset = c.segments.front().offset;
  const std::string what = ImageRegionWhat(tensor);
  return what + " (region " + std::to_string(region) + ", check " + std::to_string(check) +
         " at image offset " + std::to_string(offset) + ", from " +
         plan.SourceOf(region, offset - tensor.offset) + "): XXH64 mismatch in the cache (" +
         std::to_string(mismatches) +
         " check(s) failed); the bytes changed on disk since they were verified ('exlr8d verify' forgets "
         "them, "
         "then 'exlr8d pull' fetches them again)";
}

}  // namespace

Result<ReadOnlyMapping> ReadOnlyMapping::Map(int fd, std::size_t bytes, const std::string& what) {
  void* p = mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return ErrnoStatus(errno, "mmap of " + what);
  ReadOnlyMapping m;
  m.data_ = static_cast<const std::byte*>(p);
  m.size_ = bytes;
  return m;
}

ReadOnlyMapping::~ReadOnlyMapping() {
  if (data_ != nullptr) munmap(const_cast<std::byte*>(data_), size_);
}

ReadOnlyMapping::ReadOnlyMapping(ReadOnlyMapping&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}

ReadOnlyMapping& ReadOnlyMapping::operator=(ReadOnlyMapping&& o) noexcept {
  if (this != &o) {
    if (data_ != nullptr) munmap(const_cast<std::byte*>(data_), size_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

Result<HostRankImage> BuildHostRankImage(const RankRequest& r) {
  const auto t0 = std::chrono::steady_clock::now();
  EXLR8_ASSIGN_OR_RETURN(RankImagePlan plan, PlanRankImage(r));
  const ImageLayout& layout = plan.layout;
  const std::uint64_t size = layout.allocation_bytes();
  const std::string name = ImageName(r, plan.commit);

  const std::uint64_t hash_bytes = ImageCheckBytes(layout.tables);
  const std::uint64_t copy_bytes =
      plan.region_bytes + layout.header_bytes.size() + layout.offset_table_bytes.size();
  if (r.progress != nullptr) r.progress->bytes_total.store(copy_bytes + hash_bytes);
  if (r.before_reading) EXLR8_RETURN_IF_ERROR(r.before_reading());

  // Copy: the header, the offset table and every region, in chunks.
  const std::vector<ImageCopyItem> items = ImageCopyItems(plan, kChunkBytes);
  EXLR8_ASSIGN_OR_RETURN(UniqueFd image_fd, CreateImageMemfd(name, size));
  {
    EXLR8_ASSIGN_OR_RETURN(WritableMapping out, WritableMapping::Map(image_fd.get(), size, name));
    ImageParallelFor(items.size(), r.threads, r.cancel, [&](std::size_t i) {
      std::memcpy(out.data() + items[i].dst, items[i].src, items[i].length);
      if (r.progress != nullptr)
        r.progress->bytes_checked.fetch_add(items[i].length, std::memory_order_relaxed);
    });
    if (ImageBuildCancelled(r.cancel))
      return CancelledError("stopped while copying the rank's image into host memory");
    // No writable mapping may remain for F_SEAL_WRITE.
    out.Unmap();
  }
  EXLR8_RETURN_IF_ERROR(SealImageMemfd(image_fd.get(), name));
  EXLR8_ASSIGN_OR_RETURN(ReadOnlyMapping image, ReadOnlyMapping::Map(image_fd.get(), size, name));
  const auto t1 = std::chrono::steady_clock::now();

  // Hash the sealed bytes: every check against its digest, then each dense
  // data region whole for its tensor entry (its blocks proved it).
  const ImageTables& tables = layout.tables;
  const std::byte* base = image.bytes().data();
  std::vector<std::uint32_t> dense;
  for (std::uint32_t i = 0; i < tables.tensors.size(); ++i)
    if (tables.tensors[i].kind == ImageRegionKind::kDenseData) dense.push_back(i);
  std::vector<char> bad(tables.checks.size(), 0);
  std::vector<std::uint64_t> dense_digest(dense.size());
  std::atomic<std::uint64_t> hashed{0};
  ImageParallelFor(tables.checks.size() + dense.size(), r.threads, r.cancel, [&](std::size_t i) {
    if (i < tables.checks.size()) {
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
    } else {
      const ImageTensor& t = tables.tensors[dense[i - tables.checks.size()]];
      dense_digest[i - tables.checks.size()] = Xxh64::Hash({base + t.offset, t.length});
    }
  });
  if (ImageBuildCancelled(r.cancel)) return CancelledError("stopped while hashing the rank's image");
  const std::uint64_t mismatches = static_cast<std::uint64_t>(std::count(bad.begin(), bad.end(), 1));
  if (mismatches != 0) {
    const std::size_t first = static_cast<std::size_t>(std::find(bad.begin(), bad.end(), 1) - bad.begin());
    return CorruptionError(DescribeMismatch(plan, first, mismatches));
  }
  const auto t2 = std::chrono::steady_clock::now();

  const std::uint64_t check_count = tables.checks.size();
  HostRankImage out;
  out.commit = plan.commit;
  out.layout = std::move(plan.layout);
  for (std::size_t i = 0; i < dense.size(); ++i) out.layout.tables.tensors[dense[i]].xxh64 = dense_digest[i];
  EXLR8_ASSIGN_OR_RETURN(out.tables_fd,
                         WriteSealedTables(out.layout.tables, name + " tables", &out.tables_bytes));
  out.image_fd = std::move(image_fd);
  out.image = std::move(image);
  out.proof.commit = out.commit;
  out.proof.hashed_regions = check_count;
  out.proof.hashed_bytes = hashed.load();
  out.proof.hashed_mismatches = 0;
  out.proof.seconds_read = std::chrono::duration<double>(t1 - t0).count();
  out.proof.seconds_hash = std::chrono::duration<double>(t2 - t1).count();
  out.regions_without_release_digest = plan.regions_without_release_digest;
  out.bytes_without_release_digest = plan.bytes_without_release_digest;
  out.pin = std::move(plan.pin);
  out.pin_error = std::move(plan.pin_error);
  return out;
}

LeaseDescriptionV2 DescribeHostImage(const HostRankImage& img, const RankRequest& r,
                                     std::uint32_t release_deadline_s) {
  const ImageHeader& h = img.layout.header;
  const ImageTables& t = img.layout.tables;
  LeaseDescriptionV2 d;
  d.repo = r.repo;
  d.commit = img.commit;
  d.manifest = r.manifest;
  d.tp = r.tp;
  d.rank = r.rank;
  d.memory_kind = LeaseMemoryKind::kHost;
  d.allocations.push_back({h.allocation_bytes, "fd"});
  d.image.allocation = 0;
  d.image.header_offset = 0;
  d.image.bytes = h.allocation_bytes;
  d.image.offset_table = h.offset_table.offset;
  d.image.offset_table_bytes = h.offset_table.bytes;
  d.image.layers = h.layers;
  d.image.experts = h.experts;
  d.image.halves = h.halves_per_proj;
  d.tables.bytes = img.tables_bytes;
  d.tables.tensors = t.tensors.size();
  d.tables.checks = t.checks.size();
  for (const ImageTensor& tensor : t.tensors)
    if (!tensor.name.empty()) d.tables.strings += tensor.name.size() + 1;
  d.proof = img.proof;
  for (const ImageTensor& tensor : t.tensors)
    d.proof.decoded_of += tensor.kind == ImageRegionKind::kHalfRecord;
  d.proof.tiles_bit_exact = true;  // nothing decoded, nothing differed
  d.release_deadline_s = release_deadline_s;
  return d;
}

}  // namespace exlr8
