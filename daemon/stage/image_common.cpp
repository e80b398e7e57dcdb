#include "daemon/stage/image_common.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace exlr8 {

std::size_t ImageThreadCount(int threads, std::size_t work) {
  std::size_t n = threads > 0 ? static_cast<std::size_t>(threads)
                              : std::clamp<std::size_t>(std::thread::hardware_concurrency(), 1, 16);
  return std::min(n, std::max<std::size_t>(work, 1));
}

std::vector<ImageCopyItem> ImageCopyItems(const RankImagePlan& plan, std::uint64_t chunk_bytes) {
  const ImageLayout& layout = plan.layout;
  std::vector<ImageCopyItem> items;
  items.push_back({0, layout.header_bytes.data(), layout.header_bytes.size()});
  if (!layout.offset_table_bytes.empty())
    items.push_back({layout.header.offset_table.offset, layout.offset_table_bytes.data(),
                     layout.offset_table_bytes.size()});
  for (std::size_t i = 0; i < plan.sources.size(); ++i) {
    std::uint64_t dst = layout.tables.tensors[i].offset;
    for (const ImageSourcePiece& piece : plan.sources[i].pieces) {
      const std::byte* src = plan.maps[piece.map]->bytes().data() + piece.offset;
      for (std::uint64_t done = 0; done < piece.length; done += chunk_bytes)
        items.push_back({dst + done, src + done, std::min(chunk_bytes, piece.length - done)});
      dst += piece.length;
    }
  }
  return items;
}

Result<std::vector<ImageCopyItem>> SortedImageCopyItems(const RankImagePlan& plan,
                                                        std::uint64_t chunk_bytes) {
  std::vector<ImageCopyItem> items = ImageCopyItems(plan, chunk_bytes);
  std::sort(items.begin(), items.end(),
            [](const ImageCopyItem& x, const ImageCopyItem& y) { return x.dst < y.dst; });
  const std::uint64_t image_bytes = plan.layout.allocation_bytes();
  for (std::size_t i = 0; i < items.size(); ++i)
    if (items[i].dst + items[i].length > (i + 1 < items.size() ? items[i + 1].dst : image_bytes))
      return InternalError("the image plan's pieces overlap or leave the image at offset " +
                           std::to_string(items[i].dst));
  return items;
}

void AssembleImageWindow(std::span<const ImageCopyItem> sorted, std::uint64_t begin,
                         std::span<std::byte> out) {
  const std::uint64_t end = begin + out.size();
  auto it = std::partition_point(sorted.begin(), sorted.end(),
                                 [&](const ImageCopyItem& x) { return x.dst + x.length <= begin; });
  std::uint64_t at = begin;
  for (; it != sorted.end() && it->dst < end; ++it) {
    const std::uint64_t from = std::max(it->dst, begin), to = std::min(it->dst + it->length, end);
    if (from > at) std::memset(out.data() + (at - begin), 0, from - at);
    std::memcpy(out.data() + (from - begin), it->src + (from - it->dst), to - from);
    at = to;
  }
  if (at < end) std::memset(out.data() + (at - begin), 0, end - at);
}

std::uint64_t ImageCheckBytes(const ImageTables& tables) {
  std::uint64_t bytes = 0;
  for (const ImageCheck& c : tables.checks)
    for (const ImageSegment& s : c.segments) bytes += s.length;
  return bytes;
}

Result<UniqueFd> CreateImageMemfd(const std::string& name, std::uint64_t bytes) {
  // memfd names are at most 249 bytes.
  UniqueFd fd(memfd_create(name.substr(0, 200).c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd.valid()) return ErrnoStatus(errno, "memfd_create " + name);
  if (ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0)
    return ErrnoStatus(errno, "sizing the memfd " + name + " to " + std::to_string(bytes) + " bytes");
  return fd;
}

Status SealImageMemfd(int fd, const std::string& name) {
  constexpr unsigned kSeals = F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL;
  if (fcntl(fd, F_ADD_SEALS, kSeals) != 0) return ErrnoStatus(errno, "sealing the memfd " + name);
  return Status::Ok();
}

Result<UniqueFd> WriteSealedTables(const ImageTables& tables, const std::string& name, std::uint64_t* bytes) {
  const std::vector<std::byte> table_bytes = SerializeImageTables(tables);
  EXLR8_ASSIGN_OR_RETURN(UniqueFd fd, CreateImageMemfd(name, table_bytes.size()));
  EXLR8_RETURN_IF_ERROR(PwriteAll(fd.get(), 0, table_bytes, name));
  EXLR8_RETURN_IF_ERROR(SealImageMemfd(fd.get(), name));
  *bytes = table_bytes.size();
  return fd;
}

std::string ImageRegionWhat(const ImageTensor& tensor) {
  const bool signs = tensor.kind == ImageRegionKind::kSignsIn || tensor.kind == ImageRegionKind::kSignsOut;
  return signs ? tensor.What() : std::string(ImageRegionKindName(tensor.kind)) + " " + tensor.What();
}

std::string ImageName(const RankRequest& r, const std::string& commit) {
  return "exlr8-image " + r.repo + "@" + commit.substr(0, 12) + " tp" + std::to_string(r.tp) + " rank" +
         std::to_string(r.rank);
}

}  // namespace exlr8
