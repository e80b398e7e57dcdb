#include "daemon/stage/image_reference.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <tuple>

#include "daemon/stage/image_common.h"
#include "format/byte_source.h"
#include "format/dtype.h"
#include "format/reconstruct.h"
#include "format/trellis.h"

namespace exlr8 {

namespace {

// A stored float vector of the cache as fp32.
Status SourceFloats(const RankImagePlan& plan, std::uint32_t region, std::uint64_t offset, DType dtype,
                    std::span<float> out) {
  std::vector<std::byte> bytes(out.size() * DTypeSize(dtype));
  ReadImageSourceBytes(plan, region, offset, bytes);
  return ConvertToFloat(dtype, bytes, out);
}

// The data tensor suffixes of a format, in table order (spec 10.3).
std::vector<std::string_view> DenseSuffixes(DenseFormat f) {
  switch (f) {
    case DenseFormat::kTrellis:
      return {"trellis", "suh", "svh"};
    case DenseFormat::kInt4:
      return {"q4", "s4"};
    case DenseFormat::kMxfp8:
      return {"fp8", "e8m0"};
    case DenseFormat::kFp8Block:
    case DenseFormat::kFp8Row:
      return {"fp8", "scale"};
    case DenseFormat::kBf16:
      return {"bf16"};
    case DenseFormat::kFp32:
      return {"fp32"};
  }
  return {};
}

}  // namespace

// Its fields moved, no rounding: a tenth of FloatToE4M3's cost, which was a
// quarter of the half reference's.
std::uint8_t ExactE4M3Byte(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const auto sign = static_cast<std::uint8_t>((x >> 24) & 0x80);
  const std::uint32_t ax = x & 0x7FFFFFFFu;
  if (ax >= 0x3C800000u)  // normal: 2^(e-7) (1 + m/8), fp32 exponent e + 120
    return static_cast<std::uint8_t>(sign | (((ax >> 23) - 120) << 3) | ((ax >> 20) & 7));
  return static_cast<std::uint8_t>(sign |
                                   static_cast<std::uint8_t>(std::bit_cast<float>(ax) * 512.0f));  // m * 2^-9
}

void ReadImageSourceBytes(const RankImagePlan& plan, std::uint32_t region, std::uint64_t offset,
                          std::span<std::byte> out) {
  std::uint64_t at = 0;  // region offset of the current piece
  std::size_t done = 0;
  for (const ImageSourcePiece& piece : plan.sources[region].pieces) {
    if (done == out.size()) break;
    const std::uint64_t want = offset + done;
    if (want < at + piece.length) {
      const std::uint64_t in = want - at;
      const std::uint64_t n = std::min<std::uint64_t>(piece.length - in, out.size() - done);
      std::memcpy(out.data() + done, plan.maps[piece.map]->bytes().data() + piece.offset + in, n);
      done += n;
    }
    at += piece.length;
  }
}

std::vector<std::uint32_t> ImageDecodeSample(const ImageTables& t, bool all, double fraction,
                                             std::uint64_t seed, std::uint64_t* of) {
  std::vector<std::uint32_t> halves;
  for (std::uint32_t i = 0; i < t.tensors.size(); ++i)
    if (t.tensors[i].kind == ImageRegionKind::kHalfRecord) halves.push_back(i);
  *of = halves.size();
  if (all || halves.empty()) return halves;
  std::mt19937_64 rng(seed);
  std::map<std::tuple<int, int, int>, std::vector<std::uint32_t>> groups;
  for (std::uint32_t i : halves) {
    const ImageTensor& h = t.tensors[i];
    groups[{h.layer, h.k, h.proj}].push_back(i);
  }
  std::set<std::uint32_t> chosen;
  for (auto& [key, members] : groups) chosen.insert(members[rng() % members.size()]);
  const std::size_t want = static_cast<std::size_t>(
      std::ceil(std::clamp(fraction, 0.0, 1.0) * static_cast<double>(halves.size())));
  std::shuffle(halves.begin(), halves.end(), rng);
  for (std::size_t i = 0; chosen.size() < want && i < halves.size(); ++i) chosen.insert(halves[i]);
  return {chosen.begin(), chosen.end()};
}

Status ReferenceHalf(const RankImagePlan& plan, std::uint32_t region, std::span<std::uint8_t> tiles,
                     std::span<float> weights) {
  const ImageTables& t = plan.layout.tables;
  if (region >= t.tensors.size() || t.tensors[region].kind != ImageRegionKind::kHalfRecord)
    return InvalidArgumentError("ReferenceHalf: region " + std::to_string(region) + " is not a half record");
  const ImageTensor& h = t.tensors[region];
  const std::uint64_t trellis_bytes = h.shape[0], slice = h.shape[1], block = h.shape[2];
  const std::uint64_t hidden = block * kBlock;
  if (h.k == 0 || slice != kBlock || trellis_bytes != 16 * std::uint64_t{h.k} * hidden)
    return CorruptionError(ImageRegionWhat(h) + ": shape {" + std::to_string(trellis_bytes) + ", " +
                           std::to_string(slice) + ", " + std::to_string(block) + "} does not fit width K" +
                           std::to_string(h.k));
  if (tiles.size() != kBlock * hidden || weights.size() != kBlock * hidden)
    return InvalidArgumentError("ReferenceHalf: outputs of " + std::to_string(tiles.size()) + " and " +
                                std::to_string(weights.size()) + " elements for " +
                                std::to_string(kBlock * hidden));
  const bool down = h.proj == static_cast<std::uint8_t>(Proj::kDown);
  const ImageTensor* signs = t.FindSigns(h.layer, down);
  if (signs == nullptr || signs->shape[0] != hidden)
    return CorruptionError(ImageRegionWhat(h) + ": the image has no " + (down ? "signs.out" : "signs.in") +
                           " of " + std::to_string(hidden) + " elements for layer " +
                           std::to_string(h.layer));
  const HalfLayout layout = down ? HalfLayout::kDown : HalfLayout::kGateUp;

  std::vector<std::byte> trellis(trellis_bytes);
  ReadImageSourceBytes(plan, region, 0, trellis);
  EXLR8_RETURN_IF_ERROR(DecodeHalfTiles(trellis, h.k, layout, hidden, weights));
  for (std::size_t i = 0; i < weights.size(); ++i) tiles[i] = ExactE4M3Byte(weights[i]);

  // spec 9.2: the slice is the intermediate side, signs x block row the hidden side.
  std::vector<float> slice_f(kBlock), block_f(block), signs_f(hidden), hidden_f(hidden);
  EXLR8_RETURN_IF_ERROR(SourceFloats(plan, region, trellis_bytes, h.dtype, slice_f));
  EXLR8_RETURN_IF_ERROR(
      SourceFloats(plan, region, trellis_bytes + slice * DTypeSize(h.dtype), h.block_dtype, block_f));
  const auto signs_region = static_cast<std::uint32_t>(signs - t.tensors.data());
  EXLR8_RETURN_IF_ERROR(SourceFloats(plan, signs_region, 0, signs->dtype, signs_f));
  EXLR8_RETURN_IF_ERROR(ExpandHiddenSideVector(signs_f, block_f, hidden_f));
  if (down) {
    EXLR8_RETURN_IF_ERROR(ReconstructHalf(layout, hidden, weights, slice_f, hidden_f));
  } else {
    EXLR8_RETURN_IF_ERROR(ReconstructHalf(layout, hidden, weights, hidden_f, slice_f));
  }
  if (const auto bad = FirstNonFinite(weights)) {
    const std::uint64_t cols = down ? hidden : kBlock;
    return CorruptionError(ImageRegionWhat(h) + " (from " + plan.SourceOf(region, 0) +
                           "): reconstructed weight [" + std::to_string(*bad / cols) + ", " +
                           std::to_string(*bad % cols) +
                           "] overflows fp32: the half's vectors hold absurd scales");
  }
  return Status::Ok();
}

Result<std::vector<ImageDenseMatrix>> ImageDenseMatrices(const ImageTables& t) {
  std::vector<ImageDenseMatrix> out;
  for (std::uint32_t i = 0; i < t.tensors.size();) {
    const ImageTensor& first = t.tensors[i];
    if (first.kind != ImageRegionKind::kDenseData) {
      ++i;
      continue;
    }
    ImageDenseMatrix m;
    m.first = i;
    m.format = static_cast<DenseFormat>(first.format);
    m.out = first.out;
    m.inp = first.inp;
    m.k = first.k;
    m.side = static_cast<DenseSide>(first.side);
    const std::vector<std::string_view> suffixes = DenseSuffixes(m.format);
    const std::string_view lead = suffixes.empty() ? std::string_view{} : suffixes.front();
    if (suffixes.empty() || first.name.size() <= lead.size() + 1 || !first.name.ends_with(lead) ||
        first.name[first.name.size() - lead.size() - 1] != '.')
      return CorruptionError("dense data region " + std::to_string(i) + " '" + first.name +
                             "' does not start a matrix of format " + std::string(DenseFormatName(m.format)));
    m.name = first.name.substr(0, first.name.size() - lead.size() - 1);
    for (std::string_view suffix : suffixes) {
      const std::uint32_t at = i + m.regions;
      const std::string want = m.name + "." + std::string(suffix);
      if (at >= t.tensors.size() || t.tensors[at].kind != ImageRegionKind::kDenseData ||
          t.tensors[at].name != want || t.tensors[at].format != first.format || t.tensors[at].out != m.out ||
          t.tensors[at].inp != m.inp)
        return CorruptionError("dense matrix '" + m.name + "' (from region " + std::to_string(i) +
                               "): region " + std::to_string(at) + " is not its data tensor '" + want + "'");
      ++m.regions;
    }
    i += m.regions;
    out.push_back(std::move(m));
  }
  return out;
}

std::vector<std::size_t> ImageDenseSample(std::span<const ImageDenseMatrix> matrices, bool all,
                                          std::uint64_t seed) {
  std::vector<std::size_t> chosen;
  if (all) {
    for (std::size_t i = 0; i < matrices.size(); ++i) chosen.push_back(i);
    return chosen;
  }
  std::mt19937_64 rng(seed ^ 0xde05e);
  std::map<DenseFormat, std::vector<std::size_t>> by_format;
  for (std::size_t i = 0; i < matrices.size(); ++i) by_format[matrices[i].format].push_back(i);
  for (const auto& [format, members] : by_format) chosen.push_back(members[rng() % members.size()]);
  std::sort(chosen.begin(), chosen.end());
  return chosen;
}

Result<std::vector<float>> ReferenceDense(const RankImagePlan& plan, const ImageDenseMatrix& m) {
  const ImageSourcePiece& piece = plan.sources[m.first].pieces.front();
  const SpanByteSource source(plan.maps[piece.map]->bytes(), plan.map_files[piece.map]);
  EXLR8_ASSIGN_OR_RETURN(const DenseFile file, DenseFile::Read(source));
  for (const DenseMatrix& dm : file.matrices())
    if (!dm.data.empty() && dm.data.front().offset == piece.offset)
      return DecodeDenseMatrix(file, dm, source);
  return CorruptionError("dense matrix '" + m.name + "': no matrix of " + plan.map_files[piece.map] +
                         " has its data at byte " + std::to_string(piece.offset));
}

}  // namespace exlr8
