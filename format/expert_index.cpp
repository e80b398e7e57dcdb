#include "format/expert_index.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "format/json.h"

namespace exlr8 {

namespace {

// Error helper: "<file>: tensor 'name' at byte N: what".
Status TensorError(const std::string& file, const SafetensorsHeader& hdr, const TensorInfo& t,
                   const std::string& what) {
  return CorruptionError(file + ": tensor '" + t.name + "' at byte " + std::to_string(hdr.AbsoluteOffset(t)) +
                         ": " + what);
}

Result<const TensorInfo*> Require(const std::string& file, const SafetensorsHeader& hdr, const std::string& name) {
  const TensorInfo* t = hdr.Find(name);
  if (!t) return CorruptionError(file + ": missing tensor '" + name + "'");
  return t;
}

Status CheckShape(const std::string& file, const SafetensorsHeader& hdr, const TensorInfo& t,
                  const std::vector<std::uint64_t>& want) {
  if (t.shape != want)
    return TensorError(file, hdr, t, "shape " + ShapeToString(t.shape) + ", expected " + ShapeToString(want));
  return Status::Ok();
}

Status CheckFloat(const std::string& file, const SafetensorsHeader& hdr, const TensorInfo& t) {
  if (!IsFloatVectorDType(t.dtype))
    return TensorError(file, hdr, t, "dtype " + std::string(DTypeName(t.dtype)) + ", expected F16, BF16 or F32");
  return Status::Ok();
}

Result<std::vector<std::byte>> ReadTensor(const ByteSource& src, const SafetensorsHeader& hdr, const TensorInfo& t) {
  std::vector<std::byte> buf(t.byte_size());
  EXLR8_RETURN_IF_ERROR(src.ReadAt(hdr.AbsoluteOffset(t), buf));
  return buf;
}

// The hidden-side sign vectors must hold exactly +1 or -1 (spec 4.2). No
// checksum covers them (spec 5.3), so this is the only thing that stands
// between a damaged vector and silently wrong weights: a 0 would zero a
// channel of every expert of the layer.
Status CheckSigns(const std::string& file, const VectorRef& ref, std::span<const std::byte> bytes) {
  std::vector<float> values(ref.cols);
  EXLR8_RETURN_IF_ERROR(ConvertToFloat(ref.dtype, bytes, values));
  for (std::uint64_t i = 0; i < values.size(); ++i) {
    if (values[i] == 1.0f || values[i] == -1.0f) continue;
    char shown[32];
    auto [end, ec] = std::to_chars(shown, shown + sizeof shown, values[i]);
    return CorruptionError(file + ": tensor '" + ref.name + "' element [" + std::to_string(i) + "] at byte " +
                           std::to_string(ref.Slice(0, i, 1).offset) + ": " +
                           std::string(shown, ec == std::errc() ? end : shown) +
                           ", expected +1 or -1 (a hidden-side sign)");
  }
  return Status::Ok();
}

}  // namespace

Result<std::vector<int>> ParseWidthList(std::string_view text) {
  std::vector<int> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string_view::npos) comma = text.size();
    std::string_view item = text.substr(pos, comma - pos);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    int v = 0;
    auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || p != item.data() + item.size() || v < 1 || v > 8)
      return CorruptionError("width list '" + EscapeForMessage(text) + "': item '" + EscapeForMessage(item) +
                             "' is not an integer in 1..8");
    out.push_back(v);
    pos = comma + 1;
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

Result<ExpertIndex> ExpertIndex::Read(const ByteSource& src, int layer) {
  const std::string& file = src.name();
  ExpertIndex ix;
  ix.layer_ = layer;
  ix.file_size_ = src.size();

  // header
  std::array<std::byte, 8> first{};
  if (src.size() < 8) return CorruptionError(file + ": " + std::to_string(src.size()) + " bytes, too short for a safetensors file");
  EXLR8_RETURN_IF_ERROR(src.ReadAt(0, first));
  EXLR8_ASSIGN_OR_RETURN(std::uint64_t header_size, SafetensorsHeaderSize(first, src.size(), file));
  std::vector<std::byte> header_bytes(header_size);
  EXLR8_RETURN_IF_ERROR(src.ReadAt(0, header_bytes));
  EXLR8_ASSIGN_OR_RETURN(ix.header_, ParseSafetensorsHeader(header_bytes, src.size(), file));
  const SafetensorsHeader& hdr = ix.header_;

  // metadata (U-13, U-14)
  auto meta = hdr.metadata().find("widths");
  if (meta == hdr.metadata().end())
    return CorruptionError(file + ": __metadata__ has no 'widths' (not an EXLR8 v2 expert index file?)");
  auto widths = ParseWidthList(meta->second);
  if (!widths.ok()) return widths.status().WithContext(file + ": __metadata__ 'widths'");
  ix.widths_ = *widths;
  auto smeta = hdr.metadata().find("shared_widths");
  if (smeta == hdr.metadata().end())
    return CorruptionError(file + ": __metadata__ has no 'shared_widths' (not an EXLR8 v2 expert index file?)");
  if (!smeta->second.empty()) {  // an empty list means: this release has no shared expert
    auto sw = ParseWidthList(smeta->second);
    if (!sw.ok()) return sw.status().WithContext(file + ": __metadata__ 'shared_widths'");
    ix.shared_widths_ = *sw;
  } else {
    // Then a shared tensor is a contradiction, not something to ignore:
    // reading past it would silently drop the layer's shared expert.
    for (const TensorInfo& t : hdr.tensors())
      if (t.name.starts_with("shared."))
        return TensorError(file, hdr, t,
                           "a shared-expert tensor, but __metadata__ 'shared_widths' is empty (no shared expert)");
  }

  // geometry: hidden from signs.in, E and H from the first routed index
  EXLR8_ASSIGN_OR_RETURN(const TensorInfo* signs_in, Require(file, hdr, "signs.in"));
  EXLR8_ASSIGN_OR_RETURN(const TensorInfo* signs_out, Require(file, hdr, "signs.out"));
  EXLR8_RETURN_IF_ERROR(CheckFloat(file, hdr, *signs_in));
  EXLR8_RETURN_IF_ERROR(CheckFloat(file, hdr, *signs_out));
  if (signs_in->shape.size() != 1 || signs_in->shape[0] == 0 || signs_in->shape[0] % 128 != 0)
    return TensorError(file, hdr, *signs_in, "shape " + ShapeToString(signs_in->shape) +
                                                  ", expected [D] with D a positive multiple of 128");
  ix.hidden_ = signs_in->shape[0];
  EXLR8_RETURN_IF_ERROR(CheckShape(file, hdr, *signs_out, {ix.hidden_}));
  ix.signs_in_ = {signs_in->name, signs_in->dtype, hdr.AbsoluteOffset(*signs_in), 1, ix.hidden_};
  ix.signs_out_ = {signs_out->name, signs_out->dtype, hdr.AbsoluteOffset(*signs_out), 1, ix.hidden_};
  for (const VectorRef* ref : {&ix.signs_in_, &ix.signs_out_}) {
    std::vector<std::byte> bytes(ref->Slice(0, 0, ref->cols).length);
    EXLR8_RETURN_IF_ERROR(src.ReadAt(ref->offset, bytes));
    EXLR8_RETURN_IF_ERROR(CheckSigns(file, *ref, bytes));
  }
  const std::uint64_t blocks = ix.hidden_ / 128;

  {
    const std::string first_name = "k" + std::to_string(ix.widths_.front()) + ".index";
    EXLR8_ASSIGN_OR_RETURN(const TensorInfo* t, Require(file, hdr, first_name));
    if (t->shape.size() != 4 || t->shape[0] == 0 || t->shape[1] != 3 || t->shape[2] == 0 || t->shape[3] != 2 ||
        t->shape[0] > (1u << 20) || t->shape[2] > (1u << 16))
      return TensorError(file, hdr, *t, "shape " + ShapeToString(t->shape) + ", expected [E, 3, H, 2]");
    ix.experts_ = static_cast<std::uint32_t>(t->shape[0]);
    ix.halves_ = static_cast<std::uint32_t>(t->shape[2]);
  }
  const std::uint64_t inter = ix.intermediate();

  auto load_tables = [&](int k, bool shared) -> Status {
    WidthTables wt;
    wt.k = k;
    wt.shared = shared;
    wt.experts = shared ? 1 : ix.experts_;
    const std::string pre = std::string(shared ? "shared." : "") + "k" + std::to_string(k) + ".";
    const std::uint64_t E = wt.experts, H = ix.halves_;

    // index: [E, 3, H, 2], integer of 4 or 8 bytes
    EXLR8_ASSIGN_OR_RETURN(const TensorInfo* it, Require(file, hdr, pre + "index"));
    if (!IsIntegerDType(it->dtype) || DTypeSize(it->dtype) < 4)
      return TensorError(file, hdr, *it, "dtype " + std::string(DTypeName(it->dtype)) + ", expected I64 or U64");
    EXLR8_RETURN_IF_ERROR(CheckShape(file, hdr, *it, {E, 3, H, 2}));
    EXLR8_ASSIGN_OR_RETURN(const TensorInfo* ct, Require(file, hdr, pre + "checksum"));
    if (!IsIntegerDType(ct->dtype) || DTypeSize(ct->dtype) != 8)
      return TensorError(file, hdr, *ct, "dtype " + std::string(DTypeName(ct->dtype)) + ", expected U64 or I64");
    EXLR8_RETURN_IF_ERROR(CheckShape(file, hdr, *ct, {E, 3, H}));

    EXLR8_ASSIGN_OR_RETURN(std::vector<std::byte> ib, ReadTensor(src, hdr, *it));
    EXLR8_ASSIGN_OR_RETURN(std::vector<std::byte> cb, ReadTensor(src, hdr, *ct));
    const bool is_signed = it->dtype == DType::kI64 || it->dtype == DType::kI32;
    const std::uint64_t want_len = 16ull * static_cast<std::uint64_t>(k) * ix.hidden_;
    wt.halves.resize(E * 3 * H);
    for (std::uint64_t i = 0; i < wt.halves.size(); ++i) {
      HalfEntry& he = wt.halves[i];
      const std::uint64_t raw_off = ReadIntAsU64(it->dtype, ib, 2 * i);
      const std::uint64_t raw_len = ReadIntAsU64(it->dtype, ib, 2 * i + 1);
      auto where = [&] {
        const std::uint64_t e = i / (3 * H), p = (i / H) % 3, h = i % H;
        return "entry [" + (shared ? std::string("shared") : std::to_string(e)) + ", " +
               std::string(ProjName(static_cast<Proj>(p))) + ", h" + std::to_string(h) + "] at byte " +
               std::to_string(hdr.AbsoluteOffset(*it) + 2 * i * DTypeSize(it->dtype));
      };
      if (is_signed && (static_cast<std::int64_t>(raw_off) < 0 || static_cast<std::int64_t>(raw_len) < 0))
        return CorruptionError(file + ": tensor '" + it->name + "' " + where() + ": negative offset or length");
      if (raw_len != want_len)
        return CorruptionError(file + ": tensor '" + it->name + "' " + where() + ": length " + std::to_string(raw_len) +
                               ", expected 16*K*hidden = " + std::to_string(want_len));
      if (raw_off > (1ull << 62))
        return CorruptionError(file + ": tensor '" + it->name + "' " + where() + ": absurd offset " +
                               std::to_string(raw_off));
      he.offset = raw_off;
      he.length = raw_len;
      he.checksum = ReadIntAsU64(ct->dtype, cb, i);
    }

    // vectors
    static constexpr std::array<std::string_view, 3> kChannel = {"gate.svh", "up.svh", "down.suh"};
    static constexpr std::array<std::string_view, 3> kBlock = {"gate.su_block", "up.su_block", "down.sv_block"};
    for (int p = 0; p < kProjCount; ++p) {
      EXLR8_ASSIGN_OR_RETURN(const TensorInfo* vt, Require(file, hdr, pre + std::string(kChannel[p])));
      EXLR8_RETURN_IF_ERROR(CheckFloat(file, hdr, *vt));
      EXLR8_RETURN_IF_ERROR(CheckShape(file, hdr, *vt, {E, inter}));
      wt.channel[p] = {vt->name, vt->dtype, hdr.AbsoluteOffset(*vt), E, inter};
      EXLR8_ASSIGN_OR_RETURN(const TensorInfo* bt, Require(file, hdr, pre + std::string(kBlock[p])));
      EXLR8_RETURN_IF_ERROR(CheckFloat(file, hdr, *bt));
      EXLR8_RETURN_IF_ERROR(CheckShape(file, hdr, *bt, {E, blocks}));
      wt.block[p] = {bt->name, bt->dtype, hdr.AbsoluteOffset(*bt), E, blocks};
    }
    ix.tables_.push_back(std::move(wt));
    return Status::Ok();
  };
  for (int k : ix.widths_) EXLR8_RETURN_IF_ERROR(load_tables(k, false));
  for (int k : ix.shared_widths_) EXLR8_RETURN_IF_ERROR(load_tables(k, true));
  return ix;
}

const WidthTables* ExpertIndex::Tables(int k, bool shared) const {
  for (const auto& t : tables_)
    if (t.k == k && t.shared == shared) return &t;
  return nullptr;
}

Result<HalfEntry> ExpertIndex::Half(int expert, Proj p, std::uint32_t h, int k) const {
  const bool shared = expert == kSharedExpert;
  const WidthTables* t = Tables(k, shared);
  if (!t)
    return NotFoundError("layer " + std::to_string(layer_) + ": width K" + std::to_string(k) + " is not stored for " +
                         (shared ? "the shared expert" : "routed experts"));
  if (!shared && (expert < 0 || static_cast<std::uint32_t>(expert) >= experts_))
    return InvalidArgumentError("expert " + std::to_string(expert) + " out of range (layer " + std::to_string(layer_) +
                                " has " + std::to_string(experts_) + ")");
  if (h >= halves_)
    return InvalidArgumentError("half " + std::to_string(h) + " out of range (" + std::to_string(halves_) +
                                " halves per expert)");
  const std::uint64_t e = shared ? 0 : static_cast<std::uint64_t>(expert);
  return t->halves[(e * 3 + static_cast<std::uint64_t>(p)) * halves_ + h];
}

std::array<ByteRun, 2> ExpertIndex::ChecksumTail(int expert, Proj p, std::uint32_t h, int k) const {
  const bool shared = expert == kSharedExpert;
  const WidthTables* t = Tables(k, shared);
  const std::uint64_t e = shared ? 0 : static_cast<std::uint64_t>(expert);
  const auto pi = static_cast<size_t>(p);
  return {t->channel[pi].Slice(e, 128ull * h, 128), t->block[pi].Slice(e, 0, hidden_ / 128)};
}

Status ExpertIndex::LoadHalfVectors(const ByteSource& src, int expert, Proj p, std::uint32_t h, int k,
                                    std::vector<float>* u, std::vector<float>* v) const {
  EXLR8_RETURN_IF_ERROR(Half(expert, p, h, k).status());
  const bool shared = expert == kSharedExpert;
  const WidthTables* t = Tables(k, shared);
  const std::uint64_t e = shared ? 0 : static_cast<std::uint64_t>(expert);
  const auto pi = static_cast<size_t>(p);
  // Elements [row, first ..) of `ref`; a non-finite one is Corruption naming
  // the tensor, the element and its byte (spec U-10).
  auto read_floats = [&](const VectorRef& ref, std::uint64_t row, std::uint64_t first, std::uint64_t count,
                         std::vector<float>* out) -> Status {
    const ByteRun run = ref.Slice(row, first, count);
    std::vector<std::byte> buf(run.length);
    EXLR8_RETURN_IF_ERROR(src.ReadAt(run.offset, buf));
    out->resize(count);
    EXLR8_RETURN_IF_ERROR(ConvertToFloat(ref.dtype, buf, *out));
    for (std::uint64_t i = 0; i < count; ++i)
      if (!std::isfinite((*out)[i]))
        return CorruptionError(src.name() + ": tensor '" + ref.name + "' element [" + std::to_string(row) + ", " +
                               std::to_string(first + i) + "] at byte " +
                               std::to_string(run.offset + i * DTypeSize(ref.dtype)) + ": non-finite value");
    return Status::Ok();
  };
  std::vector<float> channel, block, signs;
  EXLR8_RETURN_IF_ERROR(read_floats(t->channel[pi], e, 128ull * h, 128, &channel));
  EXLR8_RETURN_IF_ERROR(read_floats(t->block[pi], e, 0, hidden_ / 128, &block));
  // The signs are read again, not taken from Read: `src` may be another
  // reader of the file (a cache that changed since), so they are checked
  // again too. Being ±1, they cannot make the finite block scales overflow.
  const VectorRef& sref = p == Proj::kDown ? signs_out_ : signs_in_;
  {
    const ByteRun run = sref.Slice(0, 0, hidden_);
    std::vector<std::byte> buf(run.length);
    EXLR8_RETURN_IF_ERROR(src.ReadAt(run.offset, buf));
    EXLR8_RETURN_IF_ERROR(CheckSigns(src.name(), sref, buf));
    signs.resize(hidden_);
    EXLR8_RETURN_IF_ERROR(ConvertToFloat(sref.dtype, buf, signs));
  }
  std::vector<float> hidden_side(hidden_);
  for (std::uint64_t i = 0; i < hidden_; ++i) hidden_side[i] = signs[i] * block[i / 128];
  if (p == Proj::kDown) {
    *u = std::move(channel);
    *v = std::move(hidden_side);
  } else {
    *u = std::move(hidden_side);
    *v = std::move(channel);
  }
  return Status::Ok();
}

std::optional<std::uint64_t> ExpertIndex::LowestHalfOffset(int k) const {
  std::optional<std::uint64_t> lowest;
  for (bool shared : {false, true})
    if (const WidthTables* t = Tables(k, shared))
      for (const HalfEntry& h : t->halves) lowest = std::min(lowest.value_or(h.offset), h.offset);
  return lowest;
}

Result<WidthFileSpan> ExpertIndex::SpanOfWidth(int k) const {
  struct Item {
    std::uint64_t offset, length;
    int expert;
    size_t idx;
  };
  std::vector<Item> items;
  for (bool shared : {false, true}) {
    const WidthTables* t = Tables(k, shared);
    if (!t) continue;
    for (size_t i = 0; i < t->halves.size(); ++i)
      items.push_back({t->halves[i].offset, t->halves[i].length, shared ? kSharedExpert : static_cast<int>(i / (3 * halves_)), i});
  }
  auto describe = [&](const Item& it) {
    const std::uint64_t p = (it.idx / halves_) % 3, h = it.idx % halves_;
    return std::string("L") + std::to_string(layer_) + " " +
           (it.expert == kSharedExpert ? std::string("shared") : "e" + std::to_string(it.expert)) + " " +
           std::string(ProjName(static_cast<Proj>(p))) + " h" + std::to_string(h) + " K" + std::to_string(k) + " [" +
           std::to_string(it.offset) + ", " + std::to_string(it.offset + it.length) + ")";
  };
  auto end_of = [](const Item& it) {
    return it.length > UINT64_MAX - it.offset ? UINT64_MAX : it.offset + it.length;
  };
  WidthFileSpan span;
  if (items.empty()) return span;
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.offset < b.offset; });
  for (size_t i = 1; i < items.size(); ++i)
    if (items[i].offset < end_of(items[i - 1]))
      return CorruptionError("halves overlap: " + describe(items[i - 1]) + " and " + describe(items[i]));
  const Item* highest = &items[0];
  for (const Item& it : items)
    if (end_of(it) > end_of(*highest)) highest = &it;
  span.empty = false;
  span.lowest_offset = items[0].offset;
  span.lowest_half = describe(items[0]);
  span.highest_end = end_of(*highest);
  span.highest_half = describe(*highest);
  return span;
}

Status WidthFileSpan::Validate(const SafetensorsHeader& wh, std::uint64_t size, std::string_view file_name) const {
  if (empty) return Status::Ok();
  auto outside = [&](const std::string& half) {
    return CorruptionError(std::string(file_name) + ": half " + half + " lies outside the data section [" +
                           std::to_string(wh.data_start()) + ", " + std::to_string(size) + ")");
  };
  if (lowest_offset < wh.data_start()) return outside(lowest_half);
  if (highest_end > size) return outside(highest_half);
  return Status::Ok();
}

Status ExpertIndex::ValidateWidthFile(int k, const SafetensorsHeader& wh, std::uint64_t size,
                                      std::string_view file_name) const {
  Result<WidthFileSpan> span = SpanOfWidth(k);
  if (!span.ok()) return span.status().WithContext(std::string(file_name));
  return span->Validate(wh, size, file_name);
}

}  // namespace exlr8
