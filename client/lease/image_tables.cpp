// The rank image's header and tables: serialization, strict parsing and
// lookups (client/lease/image_layout.h; byte layout schema/lease/IMAGE.md).
// Longer than the project's ~500 lines because it holds one rule per field
// of every entry, next to the writer of that field: split, a rule and the
// bytes it guards would sit in different files.
#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>
#include <utility>

#include "client/lease/image_layout.h"
#include "format/json.h"  // EscapeForMessage
#include "format/utf8.h"

namespace exlr8 {

namespace {

constexpr std::uint32_t kNone32 = std::numeric_limits<std::uint32_t>::max();

std::string Hex(std::uint64_t v) {
  static const char* digits = "0123456789abcdef";
  std::string s = "0x";
  bool started = false;
  for (int shift = 60; shift >= 0; shift -= 4) {
    const unsigned d = static_cast<unsigned>((v >> shift) & 0xF);
    if (d != 0 || started || shift == 0) {
      s += digits[d];
      started = true;
    }
  }
  return s;
}

std::string TN(std::uint64_t v) { return std::to_string(v); }

// Bounds-checked little-endian reads of one parse; every value read knows
// its absolute offset for the message.
class Reader {
 public:
  explicit Reader(std::span<const std::byte> b) : b_(b) {}
  std::uint8_t U8(std::uint64_t at) const { return std::to_integer<std::uint8_t>(b_[at]); }
  std::uint16_t U16(std::uint64_t at) const { return LoadLE16(b_.data() + at); }
  std::uint32_t U32(std::uint64_t at) const { return LoadLE32(b_.data() + at); }
  std::uint64_t U64(std::uint64_t at) const { return LoadLE64(b_.data() + at); }
  // The first non-zero byte in [from, to), or nullopt.
  std::optional<std::uint64_t> NonZero(std::uint64_t from, std::uint64_t to) const {
    for (std::uint64_t i = from; i < to; ++i)
      if (b_[i] != std::byte{0}) return i;
    return std::nullopt;
  }

 private:
  std::span<const std::byte> b_;
};

std::optional<std::uint64_t> MulU64(std::uint64_t a, std::uint64_t b) {
  std::uint64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}
std::optional<std::uint64_t> AddU64(std::uint64_t a, std::uint64_t b) {
  std::uint64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

void Put16(std::vector<std::byte>& o, std::uint64_t at, std::uint16_t v) { StoreLE16(o.data() + at, v); }
void Put32(std::vector<std::byte>& o, std::uint64_t at, std::uint32_t v) { StoreLE32(o.data() + at, v); }
void Put64(std::vector<std::byte>& o, std::uint64_t at, std::uint64_t v) { StoreLE64(o.data() + at, v); }

// --- header field offsets (IMAGE.md, "The header") ---
constexpr std::uint64_t kHVersion = 8, kHHeaderBytes = 12, kHAllocation = 16, kHSections = 24, kHTp = 88,
                        kHRank = 92, kHLayers = 96, kHExperts = 100, kHHalves = 104, kHReserved = 108,
                        kHCommit = 128, kHTail = 256;
constexpr const char* kSectionNames[4] = {"halves", "vectors", "dense", "offset_table"};

// --- tables header field offsets ---
constexpr std::uint64_t kTVersion = 8, kTHeaderBytes = 12, kTAllocation = 16, kTLayers = 24, kTExperts = 28,
                        kTHalves = 32, kTReserved0 = 36, kTTensors = 40, kTTensorsAt = 48, kTChecks = 56,
                        kTChecksAt = 64, kTStringsAt = 72, kTStringsBytes = 80, kTOffsetsAt = 88,
                        kTOffsetsBytes = 96, kTReserved1 = 104;

std::uint64_t Align8(std::uint64_t v) { return (v + 7) & ~std::uint64_t{7}; }

}  // namespace

std::string ImagePlainFormatName(ImagePlainFormat f, std::uint8_t bits, std::uint32_t group) {
  switch (f) {
    case ImagePlainFormat::kStored:
      return "STORED";
    case ImagePlainFormat::kTetra48:
      return "TETRA48";
    case ImagePlainFormat::kInt4G128:
      return "INT4G128";
    case ImagePlainFormat::kF16:
      return "F16";
    case ImagePlainFormat::kQuant:
      return "Q" + std::to_string(bits) + "G" + std::to_string(group);
  }
  return "format " + std::to_string(static_cast<int>(f));
}

Status CheckImagePlainFields(std::uint8_t format, std::uint8_t k, std::uint32_t out, std::uint32_t inp) {
  if (format > kImagePlainFormatMax)
    return InvalidArgumentError("format: unknown plain tensor format " + std::to_string(format));
  const auto f = static_cast<ImagePlainFormat>(format);
  const std::string name = ImagePlainFormatName(f, k, inp);
  const bool quant = f == ImagePlainFormat::kQuant;
  if (quant ? (k != 4 && k != 8) : k != 0)
    return InvalidArgumentError("k: " + std::to_string(k) + " for " + name +
                                (quant ? ", expected the bits 4 or 8" : ", expected 0"));
  const bool matrix = f == ImagePlainFormat::kTetra48 || f == ImagePlainFormat::kInt4G128;
  if (matrix ? out == 0 : out != 0)
    return InvalidArgumentError("out: " + std::to_string(out) + " for " + name +
                                (matrix ? ", expected the matrix's d_out" : ", expected 0"));
  if ((matrix || quant) ? inp == 0 : inp != 0)
    return InvalidArgumentError("inp: " + std::to_string(inp) + " for " + name +
                                (matrix  ? ", expected the matrix's d_in"
                                 : quant ? ", expected the group size"
                                         : ", expected 0"));
  return Status::Ok();
}

std::string_view ImageRegionKindName(ImageRegionKind k) {
  switch (k) {
    case ImageRegionKind::kHalfRecord:
      return "half record";
    case ImageRegionKind::kSignsIn:
      return "signs.in";
    case ImageRegionKind::kSignsOut:
      return "signs.out";
    case ImageRegionKind::kDenseData:
      return "dense data";
    case ImageRegionKind::kPlainTensor:
      return "plain tensor";
  }
  return "unknown";
}

std::optional<std::uint64_t> ImageOffsetTableBytes(std::uint64_t layers, std::uint64_t experts,
                                                   std::uint64_t halves) {
  std::optional<std::uint64_t> n = MulU64(layers, experts + 1);
  if (n) n = MulU64(*n, 3);
  if (n) n = MulU64(*n, halves);
  if (n) n = MulU64(*n, 8);
  return n;
}

std::string ImageTensor::What() const {
  switch (kind) {
    case ImageRegionKind::kHalfRecord: {
      std::string s = "L" + TN(layer) + (expert == kImageSharedExpert ? " shared " : " e" + TN(expert) + " ");
      s += proj < 3 ? std::string(ProjName(static_cast<Proj>(proj))) : "proj?";
      return s + " h" + TN(half) + " K" + TN(k);
    }
    case ImageRegionKind::kSignsIn:
    case ImageRegionKind::kSignsOut:
      return "L" + TN(layer) + " " + std::string(ImageRegionKindName(kind));
    default:
      return "'" + EscapeForMessage(name) + "'";
  }
}

// ---------------------------------------------------------------- header

std::vector<std::byte> SerializeImageHeader(const ImageHeader& h) {
  std::vector<std::byte> o(kImageHeaderBytes);
  std::memcpy(o.data(), kImageMagic, 8);
  Put32(o, kHVersion, h.version);
  Put32(o, kHHeaderBytes, static_cast<std::uint32_t>(kImageHeaderBytes));
  Put64(o, kHAllocation, h.allocation_bytes);
  const ImageSection* sections[4] = {&h.halves, &h.vectors, &h.dense, &h.offset_table};
  for (int i = 0; i < 4; ++i) {
    Put64(o, kHSections + 16 * i, sections[i]->offset);
    Put64(o, kHSections + 16 * i + 8, sections[i]->bytes);
  }
  Put32(o, kHTp, h.tp);
  Put32(o, kHRank, h.rank);
  Put32(o, kHLayers, h.layers);
  Put32(o, kHExperts, h.experts);
  Put32(o, kHHalves, h.halves_per_proj);
  std::memcpy(o.data() + kHCommit, h.commit.data(), std::min(h.commit.size(), kImageCommitBytes - 1));
  return o;
}

Result<ImageHeader> ParseImageHeader(std::span<const std::byte> bytes) {
  const auto err = [](std::string_view field, std::uint64_t at, const std::string& what) {
    return CorruptionError("image header: '" + std::string(field) + "' at byte " + TN(at) + ": " + what);
  };
  if (bytes.size() < kImageHeaderBytes)
    return CorruptionError("image header: " + TN(bytes.size()) + " bytes, expected at least " +
                           TN(kImageHeaderBytes));
  const Reader r(bytes);
  if (std::memcmp(bytes.data(), kImageMagic, 8) != 0) return err("magic", 0, "not \"EXLR8IMG\"");
  ImageHeader h;
  h.version = r.U32(kHVersion);
  if (h.version != kImageLayoutVersion)
    return err("version", kHVersion,
               "layout version " + TN(h.version) + " is unknown (this reader knows " +
                   TN(kImageLayoutVersion) + ")");
  if (r.U32(kHHeaderBytes) != kImageHeaderBytes)
    return err("header_bytes", kHHeaderBytes,
               TN(r.U32(kHHeaderBytes)) + ", expected " + TN(kImageHeaderBytes));
  h.allocation_bytes = r.U64(kHAllocation);
  if (h.allocation_bytes < kImageHeaderBytes || h.allocation_bytes % kImageAlignment != 0)
    return err("allocation_bytes", kHAllocation,
               TN(h.allocation_bytes) + " is not a multiple of 256 of at least " + TN(kImageHeaderBytes));
  ImageSection* sections[4] = {&h.halves, &h.vectors, &h.dense, &h.offset_table};
  std::uint64_t end = kImageHeaderBytes;
  for (int i = 0; i < 4; ++i) {
    const std::uint64_t at = kHSections + 16 * static_cast<std::uint64_t>(i);
    sections[i]->offset = r.U64(at);
    sections[i]->bytes = r.U64(at + 8);
    const std::string name = std::string(kSectionNames[i]);
    if (sections[i]->offset % kImageAlignment != 0)
      return err(name + ".offset", at, TN(sections[i]->offset) + " is not a multiple of 256");
    if (sections[i]->offset < end)
      return err(name + ".offset", at,
                 TN(sections[i]->offset) + " lies before the end of the previous part (" + TN(end) + ")");
    const auto section_end = AddU64(sections[i]->offset, sections[i]->bytes);
    if (!section_end || *section_end > h.allocation_bytes)
      return err(name + ".bytes", at + 8,
                 TN(sections[i]->offset) + " + " + TN(sections[i]->bytes) + " lies past the allocation of " +
                     TN(h.allocation_bytes) + " bytes");
    end = *section_end;
  }
  h.tp = r.U32(kHTp);
  h.rank = r.U32(kHRank);
  if (h.tp == 0 || h.tp > static_cast<std::uint32_t>(std::numeric_limits<int>::max()))
    return err("tp", kHTp, TN(h.tp) + " is not in [1, 2^31)");
  if (h.rank >= h.tp) return err("rank", kHRank, TN(h.rank) + " is not below tp " + TN(h.tp));
  h.layers = r.U32(kHLayers);
  h.experts = r.U32(kHExperts);
  h.halves_per_proj = r.U32(kHHalves);
  if (h.layers > kImageMaxLayers) return err("layers", kHLayers, TN(h.layers) + " > " + TN(kImageMaxLayers));
  if (h.experts > kImageMaxExperts)
    return err("experts", kHExperts, TN(h.experts) + " > " + TN(kImageMaxExperts));
  if (h.halves_per_proj > kImageMaxHalves)
    return err("halves", kHHalves, TN(h.halves_per_proj) + " > " + TN(kImageMaxHalves));
  const auto table = ImageOffsetTableBytes(h.layers, h.experts, h.halves_per_proj);
  if (!table || *table != h.offset_table.bytes)
    return err("offset_table.bytes", kHSections + 56,
               TN(h.offset_table.bytes) + ", expected layers x (experts + 1) x 3 x halves x 8 = " +
                   (table ? TN(*table) : std::string("(overflow)")));
  if (auto nz = r.NonZero(kHReserved, kHCommit)) return err("reserved", *nz, "not zero");
  std::uint64_t i = kHCommit;
  for (; i < kHCommit + kImageCommitBytes && r.U8(i) != 0; ++i) {
    const std::uint8_t c = r.U8(i);
    if (c < 0x20 || c > 0x7E) return err("commit", i, "byte " + Hex(c) + " is not printable ASCII");
  }
  if (i == kHCommit + kImageCommitBytes) return err("commit", kHCommit, "no NUL within 128 bytes");
  h.commit.assign(reinterpret_cast<const char*>(bytes.data() + kHCommit), i - kHCommit);
  if (auto nz = r.NonZero(i, kHTail)) return err("commit", *nz, "a byte after the commit's NUL is not zero");
  if (auto nz = r.NonZero(kHTail, kImageHeaderBytes)) return err("reserved", *nz, "not zero");
  return h;
}

// ---------------------------------------------------------------- tables

std::optional<std::size_t> ImageTables::OffsetIndex(int layer, int expert, Proj proj,
                                                    std::uint32_t half) const {
  if (layer < 0 || static_cast<std::uint32_t>(layer) >= layers || expert < kSharedExpert ||
      (expert >= 0 && static_cast<std::uint32_t>(expert) >= experts) || half >= halves_per_proj ||
      static_cast<int>(proj) >= kProjCount)
    return std::nullopt;
  const std::size_t e = expert == kSharedExpert ? experts : static_cast<std::size_t>(expert);
  return ((static_cast<std::size_t>(layer) * (experts + std::size_t{1}) + e) * 3 +
          static_cast<std::size_t>(proj)) *
             halves_per_proj +
         half;
}

const ImageTensor* ImageTables::FindHalf(int layer, int expert, Proj proj, std::uint32_t half) const {
  const auto i = OffsetIndex(layer, expert, proj, half);
  if (!i || *i >= half_index_.size() || half_index_[*i] == kNone32) return nullptr;
  return &tensors[half_index_[*i]];
}

const ImageTensor* ImageTables::FindSigns(int layer, bool out) const {
  if (layer < 0 || static_cast<std::size_t>(layer) >= signs_index_.size()) return nullptr;
  const std::uint32_t i = signs_index_[static_cast<std::size_t>(layer)][out ? 1 : 0];
  return i == kNone32 ? nullptr : &tensors[i];
}

const ImageTensor* ImageTables::FindByName(std::string_view name) const {
  const auto it = std::lower_bound(by_name_.begin(), by_name_.end(), name,
                                   [&](std::uint32_t i, std::string_view n) { return tensors[i].name < n; });
  if (it == by_name_.end() || tensors[*it].name != name) return nullptr;
  return &tensors[*it];
}

void ImageTables::BuildIndexes() {
  half_index_.assign(offset_table.size(), kNone32);
  signs_index_.assign(layers, {kNone32, kNone32});
  by_name_.clear();
  for (std::uint32_t i = 0; i < tensors.size(); ++i) {
    const ImageTensor& t = tensors[i];
    if (t.kind == ImageRegionKind::kHalfRecord) {
      const int expert = t.expert == kImageSharedExpert ? kSharedExpert : t.expert;
      const auto j = OffsetIndex(t.layer, expert, static_cast<Proj>(t.proj), t.half);
      if (j && *j < half_index_.size()) half_index_[*j] = i;
    } else if (t.kind == ImageRegionKind::kSignsIn || t.kind == ImageRegionKind::kSignsOut) {
      if (t.layer < signs_index_.size()) signs_index_[t.layer][t.kind == ImageRegionKind::kSignsOut] = i;
    } else if (!t.name.empty()) {
      by_name_.push_back(i);
    }
  }
  std::sort(by_name_.begin(), by_name_.end(),
            [&](std::uint32_t a, std::uint32_t b) { return tensors[a].name < tensors[b].name; });
}

std::vector<std::byte> SerializeImageTables(const ImageTables& t) {
  std::uint64_t strings = 0;
  for (const ImageTensor& e : t.tensors)
    if (!e.name.empty()) strings += e.name.size() + 1;
  const std::uint64_t tensors_at = kImageTablesHeaderBytes;
  const std::uint64_t checks_at = tensors_at + t.tensors.size() * kImageTensorEntryBytes;
  const std::uint64_t strings_at = checks_at + t.checks.size() * kImageCheckEntryBytes;
  const std::uint64_t offsets_at = Align8(strings_at + strings);
  const std::uint64_t offsets_bytes = t.offset_table.size() * 8;
  std::vector<std::byte> o(offsets_at + offsets_bytes);
  std::memcpy(o.data(), kImageTablesMagic, 8);
  Put32(o, kTVersion, kImageTablesVersion);
  Put32(o, kTHeaderBytes, static_cast<std::uint32_t>(kImageTablesHeaderBytes));
  Put64(o, kTAllocation, t.allocation_bytes);
  Put32(o, kTLayers, t.layers);
  Put32(o, kTExperts, t.experts);
  Put32(o, kTHalves, t.halves_per_proj);
  Put64(o, kTTensors, t.tensors.size());
  Put64(o, kTTensorsAt, tensors_at);
  Put64(o, kTChecks, t.checks.size());
  Put64(o, kTChecksAt, checks_at);
  Put64(o, kTStringsAt, strings_at);
  Put64(o, kTStringsBytes, strings);
  Put64(o, kTOffsetsAt, offsets_at);
  Put64(o, kTOffsetsBytes, offsets_bytes);
  std::uint64_t pool = 0;
  for (std::size_t i = 0; i < t.tensors.size(); ++i) {
    const ImageTensor& e = t.tensors[i];
    const std::uint64_t b = tensors_at + i * kImageTensorEntryBytes;
    Put64(o, b + 0, e.offset);
    Put64(o, b + 8, e.length);
    Put64(o, b + 16, e.xxh64);
    Put16(o, b + 24, e.layer);
    Put16(o, b + 26, e.expert);
    o[b + 28] = std::byte{e.proj};
    o[b + 29] = std::byte{e.half};
    o[b + 30] = std::byte{static_cast<std::uint8_t>(e.kind)};
    o[b + 31] = std::byte{e.format};
    o[b + 32] = std::byte{static_cast<std::uint8_t>(e.dtype)};
    o[b + 33] = std::byte{e.rank};
    o[b + 34] = std::byte{e.k};
    o[b + 35] =
        std::byte{e.kind == ImageRegionKind::kHalfRecord ? static_cast<std::uint8_t>(e.block_dtype) : e.side};
    for (int d = 0; d < 4; ++d) Put32(o, b + 36 + 4 * static_cast<std::uint64_t>(d), e.shape[d]);
    if (e.name.empty()) {
      Put32(o, b + 52, kImageNoName);
    } else {
      Put32(o, b + 52, static_cast<std::uint32_t>(pool));
      std::memcpy(o.data() + strings_at + pool, e.name.data(), e.name.size());
      pool += e.name.size() + 1;  // the NUL is already zero
    }
    Put32(o, b + 56, e.out);
    Put32(o, b + 60, e.inp);
  }
  for (std::size_t i = 0; i < t.checks.size(); ++i) {
    const ImageCheck& c = t.checks[i];
    const std::uint64_t b = checks_at + i * kImageCheckEntryBytes;
    Put64(o, b, c.digest);
    Put32(o, b + 8, static_cast<std::uint32_t>(c.segments.size()));
    for (std::size_t s = 0; s < c.segments.size() && s < kImageMaxCheckSegments; ++s) {
      Put64(o, b + 16 + 16 * s, c.segments[s].offset);
      Put64(o, b + 24 + 16 * s, c.segments[s].length);
    }
  }
  for (std::size_t i = 0; i < t.offset_table.size(); ++i) Put64(o, offsets_at + 8 * i, t.offset_table[i]);
  return o;
}

Result<ImageTables> ParseImageTables(std::span<const std::byte> bytes, std::uint64_t allocation_bytes) {
  const Reader r(bytes);
  const auto head = [](std::string_view field, std::uint64_t at, const std::string& what) {
    return CorruptionError("image tables: header '" + std::string(field) + "' at byte " + TN(at) + ": " +
                           what);
  };
  if (bytes.size() < kImageTablesHeaderBytes)
    return CorruptionError("image tables: " + TN(bytes.size()) + " bytes, shorter than the " +
                           TN(kImageTablesHeaderBytes) + "-byte header");
  if (std::memcmp(bytes.data(), kImageTablesMagic, 8) != 0) return head("magic", 0, "not \"EXLR8TBL\"");
  if (r.U32(kTVersion) != kImageTablesVersion)
    return head("version", kTVersion, "version " + TN(r.U32(kTVersion)) + " is unknown");
  if (r.U32(kTHeaderBytes) != kImageTablesHeaderBytes)
    return head("header_bytes", kTHeaderBytes, TN(r.U32(kTHeaderBytes)) + ", expected 128");
  if (auto nz = r.NonZero(kTReserved0, kTReserved0 + 4)) return head("reserved", *nz, "not zero");
  if (auto nz = r.NonZero(kTReserved1, kImageTablesHeaderBytes)) return head("reserved", *nz, "not zero");

  ImageTables t;
  t.allocation_bytes = r.U64(kTAllocation);
  if (t.allocation_bytes < kImageHeaderBytes || t.allocation_bytes % kImageAlignment != 0)
    return head("allocation_bytes", kTAllocation,
                TN(t.allocation_bytes) + " is not a multiple of 256 of at least " + TN(kImageHeaderBytes));
  if (t.allocation_bytes != allocation_bytes)
    return head("allocation_bytes", kTAllocation,
                TN(t.allocation_bytes) + ", but the image is " + TN(allocation_bytes) + " bytes");
  t.layers = r.U32(kTLayers);
  t.experts = r.U32(kTExperts);
  t.halves_per_proj = r.U32(kTHalves);
  if (t.layers > kImageMaxLayers) return head("layers", kTLayers, TN(t.layers) + " > " + TN(kImageMaxLayers));
  if (t.experts > kImageMaxExperts)
    return head("experts", kTExperts, TN(t.experts) + " > " + TN(kImageMaxExperts));
  if (t.halves_per_proj > kImageMaxHalves)
    return head("halves", kTHalves, TN(t.halves_per_proj) + " > " + TN(kImageMaxHalves));

  // Sections: contiguous, in order, ending at the file's end; counts capped
  // before any product is taken.
  const std::uint64_t n_tensors = r.U64(kTTensors), n_checks = r.U64(kTChecks);
  if (n_tensors > kImageMaxTensors)
    return head("tensors", kTTensors, TN(n_tensors) + " entries, more than " + TN(kImageMaxTensors));
  if (n_checks > kImageMaxChecks)
    return head("checks", kTChecks, TN(n_checks) + " entries, more than " + TN(kImageMaxChecks));
  const std::uint64_t tensors_at = r.U64(kTTensorsAt);
  if (tensors_at != kImageTablesHeaderBytes)
    return head("tensors_offset", kTTensorsAt, TN(tensors_at) + ", expected " + TN(kImageTablesHeaderBytes));
  const std::uint64_t checks_at = r.U64(kTChecksAt);
  if (checks_at != tensors_at + n_tensors * kImageTensorEntryBytes)
    return head("checks_offset", kTChecksAt,
                TN(checks_at) + ", expected " + TN(tensors_at + n_tensors * kImageTensorEntryBytes) +
                    " (after " + TN(n_tensors) + " tensor entries)");
  const std::uint64_t strings_at = r.U64(kTStringsAt);
  if (strings_at != checks_at + n_checks * kImageCheckEntryBytes)
    return head("strings_offset", kTStringsAt,
                TN(strings_at) + ", expected " + TN(checks_at + n_checks * kImageCheckEntryBytes) +
                    " (after " + TN(n_checks) + " check entries)");
  const std::uint64_t strings = r.U64(kTStringsBytes);
  if (strings > kImageMaxStringBytes)
    return head("strings_bytes", kTStringsBytes, TN(strings) + ", more than " + TN(kImageMaxStringBytes));
  const std::uint64_t offsets_at = r.U64(kTOffsetsAt);
  if (offsets_at != Align8(strings_at + strings))
    return head("offset_table_offset", kTOffsetsAt,
                TN(offsets_at) + ", expected " + TN(Align8(strings_at + strings)) +
                    " (the pool's end, aligned to 8)");
  const std::uint64_t offsets_bytes = r.U64(kTOffsetsBytes);
  const auto want_table = ImageOffsetTableBytes(t.layers, t.experts, t.halves_per_proj);
  if (!want_table || offsets_bytes != *want_table)
    return head("offset_table_bytes", kTOffsetsBytes,
                TN(offsets_bytes) + ", expected layers x (experts + 1) x 3 x halves x 8 = " +
                    (want_table ? TN(*want_table) : std::string("(overflow)")));
  const auto file_end = AddU64(offsets_at, offsets_bytes);
  if (!file_end || *file_end != bytes.size())
    return head("offset_table_bytes", kTOffsetsBytes,
                "the sections end at " + (file_end ? TN(*file_end) : std::string("(overflow)")) +
                    ", but the file has " + TN(bytes.size()) + " bytes");
  if (auto nz = r.NonZero(strings_at + strings, offsets_at))
    return head("strings_bytes", *nz, "padding not zero");

  // Tensor entries, each on its own.
  const auto entry = [](std::uint64_t i, std::string_view field, std::uint64_t at, const std::string& what) {
    return CorruptionError("image tables: tensors[" + TN(i) + "] '" + std::string(field) + "' at byte " +
                           TN(at) + ": " + what);
  };
  const std::string_view pool(reinterpret_cast<const char*>(bytes.data() + strings_at), strings);
  std::uint64_t pool_next = 0;
  t.tensors.resize(n_tensors);
  for (std::uint64_t i = 0; i < n_tensors; ++i) {
    const std::uint64_t b = tensors_at + i * kImageTensorEntryBytes;
    ImageTensor& e = t.tensors[i];
    e.offset = r.U64(b);
    e.length = r.U64(b + 8);
    e.xxh64 = r.U64(b + 16);
    e.layer = r.U16(b + 24);
    e.expert = r.U16(b + 26);
    e.proj = r.U8(b + 28);
    e.half = r.U8(b + 29);
    const std::uint8_t kind = r.U8(b + 30);
    e.format = r.U8(b + 31);
    const std::uint8_t dtype = r.U8(b + 32);
    e.rank = r.U8(b + 33);
    e.k = r.U8(b + 34);
    const std::uint8_t byte35 = r.U8(b + 35);
    if (kind == static_cast<std::uint8_t>(ImageRegionKind::kHalfRecord)) {
      if (byte35 >= kDTypeCount) return entry(i, "block_dtype", b + 35, "unknown dtype code " + TN(byte35));
      e.block_dtype = static_cast<DType>(byte35);
    } else {
      e.side = byte35;
    }
    for (int d = 0; d < 4; ++d) e.shape[d] = r.U32(b + 36 + 4 * static_cast<std::uint64_t>(d));
    const std::uint32_t name_at = r.U32(b + 52);
    e.out = r.U32(b + 56);
    e.inp = r.U32(b + 60);

    if (e.offset % kImageAlignment != 0)
      return entry(i, "offset", b, TN(e.offset) + " is not a multiple of 256");
    if (e.offset < kImageHeaderBytes)
      return entry(i, "offset", b, TN(e.offset) + " lies inside the image header (the first 4096 bytes)");
    if (e.length == 0) return entry(i, "length", b + 8, "empty region");
    const auto end = AddU64(e.offset, e.length);
    if (!end || *end > allocation_bytes)
      return entry(i, "length", b + 8,
                   TN(e.offset) + " + " + TN(e.length) + " lies past the allocation of " +
                       TN(allocation_bytes) + " bytes");
    if (kind < 1 || kind > kImageRegionKindCount) return entry(i, "kind", b + 30, "unknown kind " + TN(kind));
    e.kind = static_cast<ImageRegionKind>(kind);
    if (dtype >= kDTypeCount) return entry(i, "dtype", b + 32, "unknown dtype code " + TN(dtype));
    e.dtype = static_cast<DType>(dtype);
    if (e.rank > 4) return entry(i, "rank", b + 33, TN(e.rank) + " > 4");
    for (int d = e.rank; d < 4; ++d)
      if (e.shape[d] != 0)
        return entry(i, "shape", b + 36 + 4 * static_cast<std::uint64_t>(d),
                     "dimension " + TN(d) + " is " + TN(e.shape[d]) + " beyond rank " + TN(e.rank));

    const bool half = e.kind == ImageRegionKind::kHalfRecord;
    const bool signs = e.kind == ImageRegionKind::kSignsIn || e.kind == ImageRegionKind::kSignsOut;
    const bool dense = e.kind == ImageRegionKind::kDenseData;
    const std::string kind_name(ImageRegionKindName(e.kind));
    // identity
    if (half || signs) {
      if (e.layer >= t.layers)
        return entry(i, "layer", b + 24,
                     TN(e.layer) + " is not below the image's " + TN(t.layers) + " layers");
    }
    if (half) {
      if (e.expert != kImageSharedExpert && e.expert >= t.experts)
        return entry(
            i, "expert", b + 26,
            TN(e.expert) + " is neither below the image's " + TN(t.experts) + " experts nor 0xFFFE (shared)");
      if (e.proj >= kProjCount) return entry(i, "proj", b + 28, "unknown projection " + TN(e.proj));
      if (e.half >= t.halves_per_proj)
        return entry(i, "half", b + 29,
                     TN(e.half) + " is not below the image's " + TN(t.halves_per_proj) + " halves");
    } else {
      if (e.expert != kImageNoExpert)
        return entry(i, "expert", b + 26, TN(e.expert) + " for a " + kind_name + ", expected 0xFFFF");
      if (e.proj != kImageNoProj)
        return entry(i, "proj", b + 28, TN(e.proj) + " for a " + kind_name + ", expected 0xFF");
      if (e.half != kImageNoHalf)
        return entry(i, "half", b + 29, TN(e.half) + " for a " + kind_name + ", expected 0xFF");
    }
    // format, K, side, out, inp
    if (half) {
      if (e.k < 1 || e.k > 8) return entry(i, "k", b + 34, "trellis width " + TN(e.k) + " is not in 1..8");
      if (e.format != e.k)
        return entry(i, "format", b + 31, TN(e.format) + ", expected the width K " + TN(e.k));
    } else if (dense) {
      if (e.format < 1 || e.format > kDenseFormatCount)
        return entry(i, "format", b + 31, "unknown dense format " + TN(e.format));
      const bool trellis = e.format == static_cast<std::uint8_t>(DenseFormat::kTrellis);
      if (trellis && (e.k < 1 || e.k > 8))
        return entry(i, "k", b + 34, "trellis width " + TN(e.k) + " is not in 1..8");
      if (!trellis && e.k != 0)
        return entry(i, "k", b + 34, TN(e.k) + " for a non-TRELLIS format, expected 0");
      if (e.side > 2) return entry(i, "side", b + 35, "side " + TN(e.side) + " is not 0, 1 or 2");
      if (e.out == 0) return entry(i, "out", b + 56, "0");
      if (e.inp == 0) return entry(i, "inp", b + 60, "0");
    } else if (e.kind == ImageRegionKind::kPlainTensor) {
      if (e.side != 0) return entry(i, "side", b + 35, TN(e.side) + " for a " + kind_name + ", expected 0");
      if (Status fs = CheckImagePlainFields(e.format, e.k, e.out, e.inp); !fs.ok()) {
        // The message starts with the field's name: "format: ...".
        const std::string& m = fs.message();
        const std::string field = m.substr(0, m.find(':'));
        const std::uint64_t at = field == "format" ? 31 : field == "k" ? 34 : field == "out" ? 56 : 60;
        return entry(i, field, b + at, m.substr(field.size() + 2));
      }
    } else {
      if (e.format != 0)
        return entry(i, "format", b + 31, TN(e.format) + " for a " + kind_name + ", expected 0");
      if (e.k != 0) return entry(i, "k", b + 34, TN(e.k) + " for a " + kind_name + ", expected 0");
    }
    if (!dense && e.kind != ImageRegionKind::kPlainTensor) {
      if (!half && e.side != 0)
        return entry(i, "side", b + 35, TN(e.side) + " for a " + kind_name + ", expected 0");
      if (e.out != 0) return entry(i, "out", b + 56, TN(e.out) + " for a " + kind_name + ", expected 0");
      if (e.inp != 0) return entry(i, "inp", b + 60, TN(e.inp) + " for a " + kind_name + ", expected 0");
    }
    // dtype, shape, length
    if ((half || signs) && !IsFloatVectorDType(e.dtype))
      return entry(i, "dtype", b + 32,
                   std::string(DTypeName(e.dtype)) + " for a " + kind_name + ", expected F16, BF16 or F32");
    if (half && !IsFloatVectorDType(e.block_dtype))
      return entry(i, "block_dtype", b + 35,
                   std::string(DTypeName(e.block_dtype)) +
                       " for a half record's block row, expected F16, BF16 or F32");
    std::optional<std::uint64_t> want;
    if (half) {
      if (e.rank != 3) return entry(i, "rank", b + 33, TN(e.rank) + " for a half record, expected 3");
      if (e.shape[0] == 0 || e.shape[0] % (16 * std::uint64_t{e.k}) != 0)
        return entry(i, "shape", b + 36,
                     "trellis bytes " + TN(e.shape[0]) + " are not a positive multiple of 16 x K");
      want = std::uint64_t{e.shape[0]} + std::uint64_t{e.shape[1]} * DTypeSize(e.dtype) +
             std::uint64_t{e.shape[2]} * DTypeSize(e.block_dtype);
    } else {
      if (signs && e.rank != 1)
        return entry(i, "rank", b + 33, TN(e.rank) + " for a " + kind_name + ", expected 1");
      if (dense && e.rank == 0) return entry(i, "rank", b + 33, "0 for dense data");
      want = DTypeSize(e.dtype);
      for (int d = 0; d < e.rank && want; ++d) want = MulU64(*want, e.shape[d]);
    }
    if (!want || *want != e.length)
      return entry(
          i, "length", b + 8,
          TN(e.length) + ", but the shape and dtype make " + (want ? TN(*want) : std::string("(overflow)")));
    // name
    if (half || signs) {
      if (name_at != kImageNoName)
        return entry(i, "name", b + 52, TN(name_at) + " for a " + kind_name + ", expected 0xFFFFFFFF");
    } else {
      if (name_at == kImageNoName) return entry(i, "name", b + 52, "a " + kind_name + " without a name");
      if (name_at != pool_next)
        return entry(i, "name", b + 52,
                     "pool offset " + TN(name_at) + ", expected " + TN(pool_next) +
                         " (names are packed in tensor order)");
      const std::size_t nul = pool.find('\0', name_at);
      if (nul == std::string_view::npos)
        return entry(i, "name", b + 52,
                     "the name at pool offset " + TN(name_at) + " has no NUL before the pool's end");
      if (nul == name_at) return entry(i, "name", b + 52, "empty name at pool offset " + TN(name_at));
      e.name.assign(pool.substr(name_at, nul - name_at));
      if (!IsValidUtf8(e.name))
        return entry(i, "name", b + 52, "the name at pool offset " + TN(name_at) + " is not UTF-8");
      pool_next = nul + 1;
    }
  }
  if (pool_next != strings)
    return head("strings_bytes", kTStringsBytes,
                TN(strings) + ", but the names take " + TN(pool_next) + " (no unused pool bytes)");

  // Across entries: no overlap, no duplicate identity.
  std::vector<std::uint32_t> order(n_tensors);
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
    return std::pair(t.tensors[a].offset, a) < std::pair(t.tensors[b].offset, b);
  });
  for (std::size_t j = 1; j < order.size(); ++j) {
    const ImageTensor& prev = t.tensors[order[j - 1]];
    const std::uint32_t i = order[j];
    if (t.tensors[i].offset < prev.offset + prev.length)
      return entry(i, "offset", tensors_at + i * kImageTensorEntryBytes,
                   "region " + TN(t.tensors[i].offset) + " overlaps tensors[" + TN(order[j - 1]) + "] (" +
                       TN(prev.offset) + " + " + TN(prev.length) + ")");
  }
  t.offset_table.resize(offsets_bytes / 8);
  for (std::size_t i = 0; i < t.offset_table.size(); ++i) t.offset_table[i] = r.U64(offsets_at + 8 * i);
  t.half_index_.assign(t.offset_table.size(), kNone32);
  t.signs_index_.assign(t.layers, {kNone32, kNone32});
  for (std::uint32_t i = 0; i < n_tensors; ++i) {
    const ImageTensor& e = t.tensors[i];
    const std::uint64_t b = tensors_at + i * kImageTensorEntryBytes;
    if (e.kind == ImageRegionKind::kHalfRecord) {
      const int expert = e.expert == kImageSharedExpert ? kSharedExpert : e.expert;
      const std::size_t j = *t.OffsetIndex(e.layer, expert, static_cast<Proj>(e.proj), e.half);
      if (t.half_index_[j] != kNone32)
        return entry(i, "layer", b + 24, e.What() + " is also tensors[" + TN(t.half_index_[j]) + "]");
      t.half_index_[j] = i;
    } else if (e.kind == ImageRegionKind::kSignsIn || e.kind == ImageRegionKind::kSignsOut) {
      std::uint32_t& slot = t.signs_index_[e.layer][e.kind == ImageRegionKind::kSignsOut];
      if (slot != kNone32) return entry(i, "layer", b + 24, e.What() + " is also tensors[" + TN(slot) + "]");
      slot = i;
    } else {
      t.by_name_.push_back(i);
    }
  }
  std::sort(t.by_name_.begin(), t.by_name_.end(), [&](std::uint32_t a, std::uint32_t b) {
    return std::pair<std::string_view, std::uint32_t>(t.tensors[a].name, a) <
           std::pair<std::string_view, std::uint32_t>(t.tensors[b].name, b);
  });
  for (std::size_t j = 1; j < t.by_name_.size(); ++j) {
    const std::uint32_t i = t.by_name_[j];
    if (t.tensors[i].name == t.tensors[t.by_name_[j - 1]].name)
      return entry(i, "name", tensors_at + i * kImageTensorEntryBytes + 52,
                   t.tensors[i].What() + " is also tensors[" + TN(t.by_name_[j - 1]) + "]'s name");
  }

  // The offset table: each entry its half record's offset, or absent.
  for (std::size_t j = 0; j < t.offset_table.size(); ++j) {
    const std::uint32_t i = t.half_index_[j];
    const std::uint64_t want = i == kNone32 ? kImageAbsent : t.tensors[i].offset;
    if (t.offset_table[j] != want)
      return CorruptionError(
          "image tables: offset_table[" + TN(j) + "] at byte " + TN(offsets_at + 8 * j) + ": " +
          (t.offset_table[j] == kImageAbsent ? std::string("absent") : TN(t.offset_table[j])) +
          ", expected " +
          (i == kNone32 ? std::string("absent (no half record)")
                        : TN(want) + " (tensors[" + TN(i) + "], " + t.tensors[i].What() + ")"));
  }

  // Check entries: each segment inside one region.
  const auto check_err = [](std::uint64_t i, std::string_view field, std::uint64_t at,
                            const std::string& what) {
    return CorruptionError("image tables: checks[" + TN(i) + "] '" + std::string(field) + "' at byte " +
                           TN(at) + ": " + what);
  };
  t.checks.resize(n_checks);
  for (std::uint64_t i = 0; i < n_checks; ++i) {
    const std::uint64_t b = checks_at + i * kImageCheckEntryBytes;
    ImageCheck& c = t.checks[i];
    c.digest = r.U64(b);
    const std::uint32_t count = r.U32(b + 8);
    if (count < 1 || count > kImageMaxCheckSegments)
      return check_err(i, "segments", b + 8, TN(count) + " segments, expected 1 to 4");
    if (r.U32(b + 12) != 0) return check_err(i, "reserved", b + 12, "not zero");
    if (auto nz = r.NonZero(b + 16 + 16 * count, b + kImageCheckEntryBytes))
      return check_err(i, "segments", *nz, "an unused segment is not zero");
    c.segments.resize(count);
    for (std::uint32_t s = 0; s < count; ++s) {
      const std::uint64_t at = b + 16 + 16 * std::uint64_t{s};
      ImageSegment& seg = c.segments[s];
      seg.offset = r.U64(at);
      seg.length = r.U64(at + 8);
      const std::string field = "segment " + TN(s);
      if (seg.length == 0) return check_err(i, field, at + 8, "empty segment");
      const auto end = AddU64(seg.offset, seg.length);
      if (!end || *end > allocation_bytes)
        return check_err(i, field, at,
                         TN(seg.offset) + " + " + TN(seg.length) + " lies past the allocation of " +
                             TN(allocation_bytes) + " bytes");
      // The region holding seg.offset: the last one starting at or before it.
      auto it =
          std::upper_bound(order.begin(), order.end(), seg.offset,
                           [&](std::uint64_t off, std::uint32_t x) { return off < t.tensors[x].offset; });
      const ImageTensor* region = it == order.begin() ? nullptr : &t.tensors[*(it - 1)];
      if (region == nullptr || *end > region->offset + region->length)
        return check_err(
            i, field, at,
            "[" + TN(seg.offset) + ", " + TN(*end) + ") is not inside one region of the tensor table");
    }
  }
  return t;
}

Status CheckImageAgreement(const ImageHeader& h, const ImageTables& t) {
  const auto err = [](const std::string& what) {
    return CorruptionError("image header and tables disagree: " + what);
  };
  if (h.allocation_bytes != t.allocation_bytes)
    return err("allocation " + TN(h.allocation_bytes) + " vs " + TN(t.allocation_bytes) + " bytes");
  if (h.layers != t.layers || h.experts != t.experts || h.halves_per_proj != t.halves_per_proj)
    return err("dimensions " + TN(h.layers) + "x" + TN(h.experts) + "x" + TN(h.halves_per_proj) + " vs " +
               TN(t.layers) + "x" + TN(t.experts) + "x" + TN(t.halves_per_proj));
  if (h.offset_table.bytes != t.offset_table.size() * 8)
    return err("offset table " + TN(h.offset_table.bytes) + " vs " + TN(t.offset_table.size() * 8) +
               " bytes");
  for (std::size_t i = 0; i < t.tensors.size(); ++i) {
    const ImageTensor& e = t.tensors[i];
    const ImageSection& s = e.kind == ImageRegionKind::kHalfRecord ? h.halves
                            : (e.kind == ImageRegionKind::kSignsIn || e.kind == ImageRegionKind::kSignsOut)
                                ? h.vectors
                                : h.dense;
    if (e.offset < s.offset || e.offset + e.length > s.offset + s.bytes)
      return err("tensors[" + TN(i) + "] (" + e.What() + ", " + TN(e.offset) + " + " + TN(e.length) +
                 ") lies outside its section [" + TN(s.offset) + ", " + TN(s.offset + s.bytes) + ")");
  }
  return Status::Ok();
}

}  // namespace exlr8
