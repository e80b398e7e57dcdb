#include "daemon/cache/record_index.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <string>

#include "format/checksum.h"
#include "format/lvq5/index.h"

namespace exlr8 {

namespace {

constexpr std::uint64_t kChunk = 4u << 20;

std::string JoinDims(const std::vector<std::uint64_t>& dims) {
  std::string out;
  for (std::uint64_t d : dims) {
    if (!out.empty()) out += 'x';
    out += std::to_string(d);
  }
  return out;
}

}  // namespace

bool MayBeLvq5(std::string_view path) { return path.size() >= 4 && path.substr(path.size() - 4) == ".bin"; }

Result<bool> HasLvq5Magic(const ByteSource& file) {
  if (file.size() < sizeof lvq5::kMagic) return false;
  std::array<std::byte, sizeof lvq5::kMagic> head{};
  EXLR8_RETURN_IF_ERROR(file.ReadAt(0, head));
  return std::memcmp(head.data(), lvq5::kMagic, head.size()) == 0;
}

Result<std::uint64_t> HashRange(const ByteSource& file, std::uint64_t offset, std::uint64_t length) {
  if (offset > file.size() || length > file.size() - offset)
    return CorruptionError(file.name() + ": range [" + std::to_string(offset) + ", " +
                           std::to_string(offset + length) + ") is outside the file (" +
                           std::to_string(file.size()) + " bytes)");
  Xxh64 h;
  std::vector<std::byte> buf(static_cast<std::size_t>(std::min(length, kChunk)));
  for (std::uint64_t at = 0; at < length;) {
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(buf.size(), length - at));
    EXLR8_RETURN_IF_ERROR(file.ReadAt(offset + at, std::span(buf).first(n)));
    h.Update(std::span<const std::byte>(buf).first(n));
    at += n;
  }
  return h.Digest();
}

Result<std::vector<FileRecord>> IndexLvq5File(const ByteSource& file) {
  EXLR8_ASSIGN_OR_RETURN(lvq5::FileIndex index, lvq5::ReadIndex(file));
  std::vector<FileRecord> out;
  out.reserve(index.matrices.size() + index.raw.size() + index.blobs.size());
  for (const lvq5::MatrixRecord& m : index.matrices)
    out.push_back({m.name, lvq5::KindName(static_cast<std::uint32_t>(m.kind)),
                   std::to_string(m.d_out) + "x" + std::to_string(m.d_in), m.offset, m.end - m.offset, 0});
  for (const lvq5::RawTensor& t : index.raw)
    out.push_back({t.name, t.tag == lvq5::RawTag::kF16 ? "f16" : "quant", JoinDims(t.dims), t.offset,
                   t.end - t.offset, 0});
  for (const lvq5::Blob& b : index.blobs) out.push_back({b.name, "blob", "", b.offset, b.end - b.offset, 0});
  for (FileRecord& r : out) {
    Result<std::uint64_t> h = HashRange(file, r.offset, r.length);
    if (!h.ok()) return h.status().WithContext(file.name() + ": record '" + r.name + "'");
    r.xxh64 = *h;
  }
  return out;
}

}  // namespace exlr8
