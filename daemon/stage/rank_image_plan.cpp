#include "daemon/stage/rank_image_plan.h"

#include <algorithm>
#include <atomic>
#include <limits>
#include <map>
#include <utility>

#include "daemon/cache/cache.h"
#include "daemon/cache/cached_rank.h"
#include "daemon/cache/extent_set.h"
#include "daemon/stage/image_common.h"
#include "format/byte_source.h"
#include "format/checksum.h"
#include "format/dense.h"
#include "format/layout.h"
#include "format/safetensors.h"

namespace exlr8 {

namespace {

bool PlanCancelled(const std::atomic<bool>* cancel) {
  return cancel != nullptr && cancel->load(std::memory_order_relaxed);
}

// Builds the plan's sources beside the layout builder.
class Planner {
 public:
  Planner(const RankRequest& request, OpenedRank& opened, RankImagePlan& out)
      : r_(request), opened_(opened), out_(out) {}

  // The file `path` of the plan mapped, after checking that `need` lies in
  // its verified extents (`what` names the bytes in the NotFound).
  Result<std::size_t> Map(const std::string& path, Extent need, const std::string& what) {
    const auto file = opened_.planned.by_path.find(path);
    if (file == opened_.planned.by_path.end())
      return CorruptionError(path + " is not in " + opened_.set.repo + "@" + opened_.set.commit);
    auto& verified = verified_[path];
    if (!verified) {
      EXLR8_ASSIGN_OR_RETURN(std::vector<Extent> extents, opened_.cache->VerifiedExtents(file->second->id));
      verified = std::move(extents);
    }
    if (!ExtentsCover(*verified, need))
      return NotFoundError(what + " (" + FileAtByte(path, need.offset) +
                           ") is not verified in the cache: run exlr8d pull for TP " + std::to_string(r_.tp) +
                           " rank " + std::to_string(r_.rank) + " first");
    const auto known = map_of_.find(path);
    if (known != map_of_.end()) return known->second;
    EXLR8_ASSIGN_OR_RETURN(auto map, MapCacheFile(*opened_.cache, *file->second));
    out_.maps.push_back(std::move(map));
    out_.map_files.push_back(path);
    map_of_[path] = out_.maps.size() - 1;
    return out_.maps.size() - 1;
  }

  std::span<const std::byte> Bytes(const ImageSourcePiece& p) const {
    return out_.maps[p.map]->bytes().subspan(p.offset, p.length);
  }

  // Records region `index`'s source (regions are numbered in Add order).
  void Source(std::uint32_t index, ImageRegionSource s) {
    if (out_.sources.size() <= index) out_.sources.resize(index + 1);
    out_.sources[index] = std::move(s);
  }

  // The XXH64 of a region stored as is, from the cache's verified bytes.
  std::uint64_t HashOf(const ImageSourcePiece& p) const { return Xxh64::Hash(Bytes(p)); }

 private:
  const RankRequest& r_;
  OpenedRank& opened_;
  RankImagePlan& out_;
  std::map<std::string, std::optional<std::vector<Extent>>> verified_;
  std::map<std::string, std::size_t> map_of_;
};

Result<ImageDims> DimsOf(const CachedRankPlan& planned, const std::string& commit, int tp, int rank) {
  ImageDims d;
  d.tp = static_cast<std::uint32_t>(tp);
  d.rank = static_cast<std::uint32_t>(rank);
  d.commit = commit;
  bool first = true;
  for (const auto& [layer, index] : planned.indexes) {
    if (first) {
      d.experts = index.experts();
      d.halves = index.halves_per_expert();
      first = false;
    } else if (index.experts() != d.experts || index.halves_per_expert() != d.halves) {
      return CorruptionError(ExpertIndexPath(layer) + ": " + std::to_string(index.experts()) +
                             " experts of " + std::to_string(index.halves_per_expert()) +
                             " halves, while another layer has " + std::to_string(d.experts) + " of " +
                             std::to_string(d.halves));
    }
    d.layers = std::max<std::uint32_t>(d.layers, static_cast<std::uint32_t>(layer) + 1);
  }
  return d;
}

Status AddHalves(Planner& p, ImageLayoutBuilder& builder, const CachedRankPlan& planned,
                 const RankRequest& r) {
  for (const PlanFile& f : planned.plan.files) {
    if (f.whole || f.ranges.empty()) continue;
    if (PlanCancelled(r.cancel)) return CancelledError("stopped while planning the rank's image");
    for (const PlanRange& range : f.ranges) {
      if (range.kind != PlanRange::Kind::kHalf) continue;
      const HalfTag& tag = range.tag;
      EXLR8_ASSIGN_OR_RETURN(const std::size_t width_map,
                             p.Map(f.path, {range.offset, range.length}, range.What()));
      const auto index = planned.indexes.find(tag.layer);
      const WidthTables* tables =
          index == planned.indexes.end() ? nullptr : index->second.Tables(tag.k, tag.expert == kSharedExpert);
      if (tables == nullptr)
        return CorruptionError(range.What() + ": no index tables for it in " + f.index_path);
      const DType slice_dtype = tables->channel[static_cast<int>(tag.proj)].dtype;
      const std::uint64_t elem = DTypeSize(slice_dtype);
      ImageRegionSource src;
      src.pieces.push_back({width_map, range.offset, range.length});
      std::uint64_t tail_bytes = 0;
      for (const ByteRun& run : range.checksum_tail) {
        EXLR8_ASSIGN_OR_RETURN(const std::size_t index_map,
                               p.Map(f.index_path, {run.offset, run.length}, range.What() + "'s vectors"));
        src.pieces.push_back({index_map, run.offset, run.length});
        tail_bytes += run.length;
      }
      // The slice and the block row each in its own stored dtype (spec U-5
      // leaves them free to differ; the fixture has F16 slices and F32
      // block rows).
      const DType block_dtype = tables->block[static_cast<int>(tag.proj)].dtype;
      const std::uint64_t block_elem = DTypeSize(block_dtype);
      const std::uint64_t slice_bytes = range.checksum_tail[0].length;
      const std::uint64_t block_bytes = range.checksum_tail[1].length;
      if (slice_bytes % elem != 0 || block_bytes % block_elem != 0 || tail_bytes == 0)
        return CorruptionError(range.What() + ": its vectors (" + std::to_string(slice_bytes) + " bytes of " +
                               std::string(DTypeName(slice_dtype)) + " + " + std::to_string(block_bytes) +
                               " bytes of " + std::string(DTypeName(block_dtype)) + " in " + f.index_path +
                               ") are not whole elements");
      ImageHalfSpec spec;
      spec.layer = tag.layer;
      spec.expert = tag.expert;
      spec.proj = tag.proj;
      spec.half = tag.half;
      spec.k = tag.k;
      spec.trellis_bytes = range.length;
      spec.slice_elems = static_cast<std::uint32_t>(slice_bytes / elem);
      spec.block_elems = static_cast<std::uint32_t>(block_bytes / block_elem);
      spec.vector_dtype = slice_dtype;
      spec.block_dtype = block_dtype;
      spec.digest = range.xxh64;
      EXLR8_ASSIGN_OR_RETURN(const std::uint32_t i, builder.AddHalf(spec));
      p.Source(i, std::move(src));
    }
  }
  return Status::Ok();
}

Status AddSigns(Planner& p, ImageLayoutBuilder& builder, const CachedRankPlan& planned, RankImagePlan& out) {
  for (const auto& [layer, index] : planned.indexes) {
    const std::string path = ExpertIndexPath(layer);
    for (bool is_out : {false, true}) {
      const VectorRef& v = is_out ? index.signs_out() : index.signs_in();
      const std::uint64_t length = v.rows * v.cols * DTypeSize(v.dtype);
      EXLR8_ASSIGN_OR_RETURN(const std::size_t map, p.Map(path, {v.offset, length}, v.name));
      ImageRegionSource src;
      src.pieces.push_back({map, v.offset, length});
      src.digest_from_cache = true;
      ImageTensorSpec spec;
      spec.layer = layer;
      spec.dtype = v.dtype;
      spec.shape = {v.rows * v.cols};
      spec.digest = p.HashOf(src.pieces[0]);
      EXLR8_ASSIGN_OR_RETURN(const std::uint32_t i, builder.AddSigns(layer, is_out, spec));
      const ImageSegmentRef whole{i, 0, length};
      EXLR8_RETURN_IF_ERROR(builder.AddCheck(spec.digest, {&whole, 1}));
      out.check_region.push_back(i);
      ++out.regions_without_release_digest;
      out.bytes_without_release_digest += length;
      p.Source(i, std::move(src));
    }
  }
  return Status::Ok();
}

// A matrix's block check: its spec 5.4 runs as segments of its data regions
// (contiguous runs within one region merged).
Status AddDenseBlockCheck(ImageLayoutBuilder& builder, const DenseMatrix& m, std::uint64_t block,
                          const std::vector<std::uint32_t>& data_regions, const std::string& path,
                          RankImagePlan& out) {
  EXLR8_ASSIGN_OR_RETURN(std::vector<ByteRun> runs, DenseBlockRuns(m, block));
  std::vector<ImageSegmentRef> segments;
  for (const ByteRun& run : runs) {
    if (run.length == 0) continue;
    std::size_t t = 0;
    while (t < m.data.size() &&
           !(run.offset >= m.data[t].offset && run.end() <= m.data[t].offset + m.data[t].length))
      ++t;
    if (t == m.data.size())
      return CorruptionError("matrix '" + m.name + "' block " + std::to_string(block) + ": checksum run " +
                             FileAtByte(path, run.offset) + " is not inside one of its data tensors");
    const ImageSegmentRef seg{data_regions[t], run.offset - m.data[t].offset, run.length};
    if (!segments.empty() && segments.back().tensor == seg.tensor &&
        segments.back().offset + segments.back().length == seg.offset) {
      segments.back().length += seg.length;
    } else {
      segments.push_back(seg);
    }
  }
  if (segments.empty() || segments.size() > kImageMaxCheckSegments)
    return CorruptionError("matrix '" + m.name + "' block " + std::to_string(block) + " in " + path + ": " +
                           std::to_string(segments.size()) + " runs, an image check holds 1 to 4");
  EXLR8_RETURN_IF_ERROR(builder.AddCheck(m.checksums[block], segments));
  out.check_region.push_back(segments[0].tensor);
  return Status::Ok();
}

// Tensor names are per file (spec 10.1): a dense layer file's get the
// prefix "layers.{L}." in the image (names there are unique); the
// vocabulary file's stay as they are.
std::string ImageName(const std::string& name, int layer) {
  return layer < 0 ? name : "layers." + std::to_string(layer) + "." + name;
}

Result<ImageTensorSpec> StoredSpec(const DenseTensor& t, int layer) {
  ImageTensorSpec spec;
  spec.name = ImageName(t.name, layer);
  spec.layer = layer;
  spec.dtype = t.dtype;
  spec.shape = t.shape;
  return spec;
}

Status AddDenseFile(Planner& p, ImageLayoutBuilder& builder, const PlanFile& f, int layer, RankImagePlan& out,
                    const RankRequest& r) {
  // Dense and vocabulary files are whole files of the plan: all of one
  // must be verified.
  EXLR8_ASSIGN_OR_RETURN(const std::size_t map, p.Map(f.path, {0, f.size}, f.path));
  const SpanByteSource source(out.maps[map]->bytes(), f.path);
  EXLR8_ASSIGN_OR_RETURN(DenseFile dense, DenseFile::Read(source));
  for (const DenseMatrix& m : dense.matrices()) {
    if (PlanCancelled(r.cancel)) return CancelledError("stopped while planning the rank's image");
    constexpr std::uint64_t kU32 = std::numeric_limits<std::uint32_t>::max();
    if (m.record.out > kU32 || m.record.inp > kU32)
      return InvalidArgumentError("matrix '" + m.name + "' in " + f.path + ": out " +
                                  std::to_string(m.record.out) + " or inp " + std::to_string(m.record.inp) +
                                  " is 2^32 or more");
    ImageDenseFields fields;
    fields.format = m.record.format;
    fields.out = static_cast<std::uint32_t>(m.record.out);
    fields.inp = static_cast<std::uint32_t>(m.record.inp);
    fields.k = m.record.format == DenseFormat::kTrellis ? m.record.k : 0;
    fields.side = m.record.side;
    std::vector<std::uint32_t> regions;
    for (const DenseTensor& t : m.data) {
      EXLR8_ASSIGN_OR_RETURN(ImageTensorSpec spec, StoredSpec(t, layer));
      // The tensor entry's digest is the region's XXH64, set by the holder
      // once the block checks proved the bytes (host_image.cpp).
      EXLR8_ASSIGN_OR_RETURN(const std::uint32_t i, builder.AddDense(spec, fields));
      ImageRegionSource src;
      src.pieces.push_back({map, t.offset, t.length});
      p.Source(i, std::move(src));
      regions.push_back(i);
    }
    for (std::uint64_t b = 0; b < m.num_blocks(); ++b)
      EXLR8_RETURN_IF_ERROR(AddDenseBlockCheck(builder, m, b, regions, f.path, out));
  }
  for (const DenseTensor& t : dense.plain()) {
    if (IsPaddingName(t.name) || t.length == 0) continue;
    EXLR8_ASSIGN_OR_RETURN(ImageTensorSpec spec, StoredSpec(t, layer));
    ImageRegionSource src;
    src.pieces.push_back({map, t.offset, t.length});
    src.digest_from_cache = true;
    spec.digest = p.HashOf(src.pieces[0]);
    EXLR8_ASSIGN_OR_RETURN(const std::uint32_t i, builder.AddPlain(spec));
    const ImageSegmentRef whole{i, 0, t.length};
    EXLR8_RETURN_IF_ERROR(builder.AddCheck(spec.digest, {&whole, 1}));
    out.check_region.push_back(i);
    ++out.regions_without_release_digest;
    out.bytes_without_release_digest += t.length;
    p.Source(i, std::move(src));
  }
  return Status::Ok();
}

}  // namespace

std::string RankImagePlan::SourceOf(std::uint32_t tensor, std::uint64_t offset) const {
  if (tensor >= sources.size()) return "region " + std::to_string(tensor);
  for (const ImageSourcePiece& piece : sources[tensor].pieces) {
    if (offset < piece.length) return FileAtByte(map_files[piece.map], piece.offset + offset);
    offset -= piece.length;
  }
  return "region " + std::to_string(tensor);
}

Result<RankImagePlan> PlanRankImage(const RankRequest& r) {
  EXLR8_ASSIGN_OR_RETURN(OpenedRank opened, OpenRankInCache(r));
  RankImagePlan out;
  out.pin = std::move(opened.pin);
  out.pin_error = std::move(opened.pin_error);
  out.commit = opened.set.commit;
  EXLR8_ASSIGN_OR_RETURN(ImageDims dims, DimsOf(opened.planned, out.commit, r.tp, r.rank));
  ImageLayoutBuilder builder(std::move(dims));
  Planner p(r, opened, out);
  // Half records' checks are the builder's own (one per record, in order).
  EXLR8_RETURN_IF_ERROR(AddHalves(p, builder, opened.planned, r));
  for (std::uint32_t i = 0; i < out.sources.size(); ++i) out.check_region.push_back(i);
  EXLR8_RETURN_IF_ERROR(AddSigns(p, builder, opened.planned, out));
  for (const PlanFile& f : opened.planned.plan.files) {
    const ReleasePath rp = ClassifyReleasePath(f.path);
    if (rp.kind != ReleaseFileKind::kDense && rp.kind != ReleaseFileKind::kVocab) continue;
    EXLR8_RETURN_IF_ERROR(
        AddDenseFile(p, builder, f, rp.kind == ReleaseFileKind::kDense ? rp.layer : -1, out, r));
  }
  EXLR8_ASSIGN_OR_RETURN(out.layout, builder.Finish());
  if (out.sources.size() != out.layout.tables.tensors.size() ||
      out.check_region.size() != out.layout.tables.checks.size())
    return InternalError("rank image plan: " + std::to_string(out.sources.size()) + " sources for " +
                         std::to_string(out.layout.tables.tensors.size()) + " regions, " +
                         std::to_string(out.check_region.size()) + " check regions for " +
                         std::to_string(out.layout.tables.checks.size()) + " checks");
  for (const ImageTensor& t : out.layout.tables.tensors) out.region_bytes += t.length;
  return out;
}

}  // namespace exlr8
