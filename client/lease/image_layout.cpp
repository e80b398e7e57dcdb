// ImageLayoutBuilder: lays a rank image out (client/lease/image_layout.h).
#include "client/lease/image_layout.h"

#include <limits>
#include <utility>

#include "format/json.h"  // EscapeForMessage
#include "format/utf8.h"

namespace exlr8 {

namespace {

std::string LN(std::uint64_t v) { return std::to_string(v); }

std::optional<std::uint64_t> AlignUp(std::uint64_t v) {
  if (v > std::numeric_limits<std::uint64_t>::max() - (kImageAlignment - 1)) return std::nullopt;
  return (v + kImageAlignment - 1) & ~(kImageAlignment - 1);
}

}  // namespace

ImageLayoutBuilder::ImageLayoutBuilder(ImageDims dims) : dims_(std::move(dims)) {}

Status ImageLayoutBuilder::CheckDims() const {
  const auto err = [](const std::string& what) { return InvalidArgumentError("image layout: " + what); };
  if (dims_.layers > kImageMaxLayers) return err("layers " + LN(dims_.layers) + " > " + LN(kImageMaxLayers));
  if (dims_.experts > kImageMaxExperts)
    return err("experts " + LN(dims_.experts) + " > " + LN(kImageMaxExperts));
  if (dims_.halves > kImageMaxHalves) return err("halves " + LN(dims_.halves) + " > " + LN(kImageMaxHalves));
  const auto table = ImageOffsetTableBytes(dims_.layers, dims_.experts, dims_.halves);
  if (!table || *table > kImageMaxOffsetTableBytes)
    return err("an offset table of more than " + LN(kImageMaxOffsetTableBytes) + " bytes");
  if (dims_.tp == 0 || dims_.tp > static_cast<std::uint32_t>(std::numeric_limits<int>::max()) ||
      dims_.rank >= dims_.tp)
    return err("rank " + LN(dims_.rank) + " of tp " + LN(dims_.tp));
  if (dims_.commit.size() >= kImageCommitBytes) return err("a commit of 128 bytes or more");
  for (char c : dims_.commit)
    if (c < 0x20 || c > 0x7E) return err("a commit that is not printable ASCII");
  return Status::Ok();
}

Result<std::uint32_t> ImageLayoutBuilder::Add(ImageTensor t, std::uint64_t digest) {
  if (finished_) return FailedPreconditionError("image layout: Add after Finish");
  if (tensors_.size() >= kImageMaxTensors)
    return InvalidArgumentError("image layout: more than 2^24 regions");
  t.xxh64 = digest;
  tensors_.push_back(std::move(t));
  return static_cast<std::uint32_t>(tensors_.size() - 1);
}

Result<std::uint32_t> ImageLayoutBuilder::AddHalf(const ImageHalfSpec& s) {
  EXLR8_RETURN_IF_ERROR(CheckDims());
  ImageTensor t;
  t.kind = ImageRegionKind::kHalfRecord;
  const std::string what = "image layout: half L" +
                           LN(static_cast<std::uint64_t>(s.layer < 0 ? 0 : s.layer)) +
                           (s.expert == kSharedExpert ? " shared" : " e" + std::to_string(s.expert)) + " " +
                           std::string(ProjName(s.proj)) + " h" + LN(s.half) + ": ";
  const auto err = [&](const std::string& m) { return InvalidArgumentError(what + m); };
  if (s.layer < 0 || static_cast<std::uint64_t>(s.layer) >= dims_.layers)
    return err("layer outside the image's " + LN(dims_.layers));
  if (s.expert < kSharedExpert || (s.expert >= 0 && static_cast<std::uint64_t>(s.expert) >= dims_.experts))
    return err("expert outside the image's " + LN(dims_.experts));
  if (static_cast<int>(s.proj) >= kProjCount) return err("unknown projection");
  if (s.half >= dims_.halves) return err("half outside the image's " + LN(dims_.halves));
  if (s.k < 1 || s.k > 8) return err("K " + std::to_string(s.k) + " is not in 1..8");
  if (s.trellis_bytes == 0 || s.trellis_bytes % (16 * static_cast<std::uint64_t>(s.k)) != 0 ||
      s.trellis_bytes > std::numeric_limits<std::uint32_t>::max())
    return err("trellis bytes " + LN(s.trellis_bytes) + " are not a positive multiple of 16 x K below 2^32");
  if (!IsFloatVectorDType(s.vector_dtype)) return err("vector dtype is not F16, BF16 or F32");
  if (!IsFloatVectorDType(s.block_dtype)) return err("block row dtype is not F16, BF16 or F32");
  t.layer = static_cast<std::uint16_t>(s.layer);
  t.expert = s.expert == kSharedExpert ? kImageSharedExpert : static_cast<std::uint16_t>(s.expert);
  t.proj = static_cast<std::uint8_t>(s.proj);
  t.half = static_cast<std::uint8_t>(s.half);
  t.format = t.k = static_cast<std::uint8_t>(s.k);
  t.dtype = s.vector_dtype;
  t.block_dtype = s.block_dtype;
  t.rank = 3;
  t.shape = {static_cast<std::uint32_t>(s.trellis_bytes), s.slice_elems, s.block_elems, 0};
  t.length = s.trellis_bytes + std::uint64_t{s.slice_elems} * DTypeSize(s.vector_dtype) +
             std::uint64_t{s.block_elems} * DTypeSize(s.block_dtype);
  const std::uint64_t e = s.expert == kSharedExpert ? dims_.experts : static_cast<std::uint64_t>(s.expert);
  const std::uint64_t key =
      ((static_cast<std::uint64_t>(s.layer) * (dims_.experts + std::uint64_t{1}) + e) * 3 +
       static_cast<std::uint64_t>(s.proj)) *
          dims_.halves +
      s.half;
  if (halves_.empty()) halves_.resize(*ImageOffsetTableBytes(dims_.layers, dims_.experts, dims_.halves) / 8);
  if (halves_[key]) return err("added twice");
  EXLR8_ASSIGN_OR_RETURN(const std::uint32_t index, Add(std::move(t), s.digest));
  halves_[key] = true;
  checks_.push_back({ImageSegmentRef{index, 0, tensors_[index].length}});
  check_digests_.push_back(s.digest);
  return index;
}

namespace {

// Shape and length of a tensor stored as is; InvalidArgument naming it.
Status FillStored(const ImageTensorSpec& s, const std::string& what, ImageTensor& t) {
  if (s.dtype >= static_cast<DType>(kDTypeCount)) return InvalidArgumentError(what + "unknown dtype");
  if (s.shape.size() > 4) return InvalidArgumentError(what + "rank " + LN(s.shape.size()) + " > 4");
  std::uint64_t length = DTypeSize(s.dtype);
  for (std::size_t d = 0; d < s.shape.size(); ++d) {
    if (s.shape[d] > std::numeric_limits<std::uint32_t>::max())
      return InvalidArgumentError(what + "dimension " + LN(d) + " is 2^32 or more");
    if (__builtin_mul_overflow(length, s.shape[d], &length))
      return InvalidArgumentError(what + "size overflows");
    t.shape[d] = static_cast<std::uint32_t>(s.shape[d]);
  }
  if (length == 0) return InvalidArgumentError(what + "empty tensor");
  t.rank = static_cast<std::uint8_t>(s.shape.size());
  t.dtype = s.dtype;
  t.length = length;
  return Status::Ok();
}

}  // namespace

Result<std::uint32_t> ImageLayoutBuilder::AddSigns(int layer, bool out, const ImageTensorSpec& s) {
  EXLR8_RETURN_IF_ERROR(CheckDims());
  const std::string what = "image layout: L" + std::to_string(layer) + (out ? " signs.out: " : " signs.in: ");
  if (layer < 0 || static_cast<std::uint64_t>(layer) >= dims_.layers)
    return InvalidArgumentError(what + "layer outside the image's " + LN(dims_.layers));
  if (!IsFloatVectorDType(s.dtype) || s.shape.size() != 1)
    return InvalidArgumentError(what + "not a rank-1 F16, BF16 or F32 vector");
  if (!s.name.empty()) return InvalidArgumentError(what + "signs carry no name");
  ImageTensor t;
  t.kind = out ? ImageRegionKind::kSignsOut : ImageRegionKind::kSignsIn;
  t.layer = static_cast<std::uint16_t>(layer);
  EXLR8_RETURN_IF_ERROR(FillStored(s, what, t));
  const std::uint64_t key = static_cast<std::uint64_t>(layer) * 2 + (out ? 1 : 0);
  if (signs_.count(key) != 0) return InvalidArgumentError(what + "added twice");
  EXLR8_ASSIGN_OR_RETURN(const std::uint32_t index, Add(std::move(t), s.digest));
  signs_.insert(key);
  return index;
}

Result<std::uint32_t> ImageLayoutBuilder::AddDense(const ImageTensorSpec& s, const ImageDenseFields& f) {
  const std::string what = "image layout: dense '" + EscapeForMessage(s.name) + "': ";
  const int format = static_cast<int>(f.format);
  if (format < 1 || format > kDenseFormatCount) return InvalidArgumentError(what + "unknown format");
  const bool trellis = f.format == DenseFormat::kTrellis;
  if (trellis ? (f.k < 1 || f.k > 8) : f.k != 0)
    return InvalidArgumentError(what + "K " + std::to_string(f.k) +
                                (trellis ? " is not in 1..8" : ", expected 0"));
  if (static_cast<int>(f.side) > 2) return InvalidArgumentError(what + "side is not 0, 1 or 2");
  if (f.out == 0 || f.inp == 0) return InvalidArgumentError(what + "out and inp must be positive");
  if (s.shape.empty()) return InvalidArgumentError(what + "dense data of rank 0");
  ImageTensor t;
  t.kind = ImageRegionKind::kDenseData;
  t.format = static_cast<std::uint8_t>(format);
  t.k = static_cast<std::uint8_t>(f.k);
  t.side = static_cast<std::uint8_t>(f.side);
  t.out = f.out;
  t.inp = f.inp;
  return AddPlainLike(std::move(t), s, what);
}

Result<std::uint32_t> ImageLayoutBuilder::AddPlain(const ImageTensorSpec& s, const ImagePlainFields& f) {
  const std::string what = "image layout: plain '" + EscapeForMessage(s.name) + "': ";
  if (Status fs = CheckImagePlainFields(static_cast<std::uint8_t>(f.format), f.k, f.out, f.inp); !fs.ok())
    return InvalidArgumentError(what + fs.message());
  ImageTensor t;
  t.kind = ImageRegionKind::kPlainTensor;
  t.format = static_cast<std::uint8_t>(f.format);
  t.k = f.k;
  t.out = f.out;
  t.inp = f.inp;
  return AddPlainLike(std::move(t), s, what);
}

Result<std::uint32_t> ImageLayoutBuilder::AddPlainLike(ImageTensor t, const ImageTensorSpec& s,
                                                       const std::string& what) {
  if (s.name.empty()) return InvalidArgumentError(what + "no name");
  if (s.name.find('\0') != std::string::npos || !IsValidUtf8(s.name))
    return InvalidArgumentError(what + "a name with a NUL or not UTF-8");
  if (s.layer < -1 || s.layer >= static_cast<int>(kImageNoLayer))
    return InvalidArgumentError(what + "layer " + std::to_string(s.layer) + " outside [-1, 0xFFFF)");
  if (names_.count(s.name) != 0) return InvalidArgumentError(what + "added twice");
  t.layer = s.layer < 0 ? kImageNoLayer : static_cast<std::uint16_t>(s.layer);
  t.name = s.name;
  EXLR8_RETURN_IF_ERROR(FillStored(s, what, t));
  EXLR8_ASSIGN_OR_RETURN(const std::uint32_t index, Add(std::move(t), s.digest));
  names_.insert(s.name);
  return index;
}

Status ImageLayoutBuilder::AddCheck(std::uint64_t digest, std::span<const ImageSegmentRef> segments) {
  if (finished_) return FailedPreconditionError("image layout: AddCheck after Finish");
  const std::string what = "image layout: check " + LN(checks_.size()) + ": ";
  if (segments.empty() || segments.size() > kImageMaxCheckSegments)
    return InvalidArgumentError(what + LN(segments.size()) + " segments, expected 1 to 4");
  if (checks_.size() >= kImageMaxChecks) return InvalidArgumentError(what + "more than 2^25 checks");
  for (const ImageSegmentRef& s : segments) {
    if (s.tensor >= tensors_.size()) return InvalidArgumentError(what + "no region " + LN(s.tensor));
    const std::uint64_t length = tensors_[s.tensor].length;
    if (s.length == 0 || s.offset > length || s.length > length - s.offset)
      return InvalidArgumentError(what + "[" + LN(s.offset) + ", +" + LN(s.length) +
                                  ") is not inside region " + LN(s.tensor) + " of " + LN(length) + " bytes");
  }
  checks_.emplace_back(segments.begin(), segments.end());
  check_digests_.push_back(digest);
  return Status::Ok();
}

Result<ImageLayout> ImageLayoutBuilder::Finish() {
  if (finished_) return FailedPreconditionError("image layout: Finish twice");
  EXLR8_RETURN_IF_ERROR(CheckDims());
  finished_ = true;
  ImageLayout out;
  ImageHeader& h = out.header;
  h.tp = dims_.tp;
  h.rank = dims_.rank;
  h.layers = dims_.layers;
  h.experts = dims_.experts;
  h.halves_per_proj = dims_.halves;
  h.commit = dims_.commit;

  // Sections in order; regions of a section in Add order, each aligned.
  const auto overflow = [] {
    return InvalidArgumentError("image layout: the image is larger than 2^64 bytes");
  };
  std::uint64_t cursor = kImageHeaderBytes;
  const auto place = [&](ImageSection& section, auto belongs) -> Status {
    section.offset = cursor;
    std::uint64_t end = cursor;
    for (ImageTensor& t : tensors_) {
      if (!belongs(t.kind)) continue;
      const auto at = AlignUp(end);
      if (!at || t.length > std::numeric_limits<std::uint64_t>::max() - *at) return overflow();
      t.offset = *at;
      end = *at + t.length;
    }
    section.bytes = end - section.offset;
    const auto next = AlignUp(end);
    if (!next) return overflow();
    cursor = *next;
    return Status::Ok();
  };
  EXLR8_RETURN_IF_ERROR(place(h.halves, [](ImageRegionKind k) { return k == ImageRegionKind::kHalfRecord; }));
  EXLR8_RETURN_IF_ERROR(place(h.vectors, [](ImageRegionKind k) {
    return k == ImageRegionKind::kSignsIn || k == ImageRegionKind::kSignsOut;
  }));
  EXLR8_RETURN_IF_ERROR(place(h.dense, [](ImageRegionKind k) {
    return k == ImageRegionKind::kDenseData || k == ImageRegionKind::kPlainTensor;
  }));
  h.offset_table.offset = cursor;
  h.offset_table.bytes = *ImageOffsetTableBytes(dims_.layers, dims_.experts, dims_.halves);
  if (h.offset_table.bytes > std::numeric_limits<std::uint64_t>::max() - cursor) return overflow();
  const auto total = AlignUp(cursor + h.offset_table.bytes);
  if (!total) return overflow();
  h.allocation_bytes = *total;

  ImageTables& t = out.tables;
  t.allocation_bytes = h.allocation_bytes;
  t.layers = dims_.layers;
  t.experts = dims_.experts;
  t.halves_per_proj = dims_.halves;
  t.tensors = std::move(tensors_);
  t.offset_table.assign(h.offset_table.bytes / 8, kImageAbsent);
  for (const ImageTensor& e : t.tensors) {
    if (e.kind != ImageRegionKind::kHalfRecord) continue;
    const int expert = e.expert == kImageSharedExpert ? kSharedExpert : e.expert;
    t.offset_table[*t.OffsetIndex(e.layer, expert, static_cast<Proj>(e.proj), e.half)] = e.offset;
  }
  t.BuildIndexes();
  t.checks.resize(checks_.size());
  for (std::size_t i = 0; i < checks_.size(); ++i) {
    t.checks[i].digest = check_digests_[i];
    for (const ImageSegmentRef& s : checks_[i])
      t.checks[i].segments.push_back({t.tensors[s.tensor].offset + s.offset, s.length});
  }
  out.header_bytes = SerializeImageHeader(h);
  out.offset_table_bytes.resize(h.offset_table.bytes);
  for (std::size_t j = 0; j < t.offset_table.size(); ++j)
    StoreLE64(out.offset_table_bytes.data() + 8 * j, t.offset_table[j]);
  return out;
}

}  // namespace exlr8
