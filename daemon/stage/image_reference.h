// The CPU side of a rank image's decode checks (device_image.h's decode
// step): which half records and dense matrices are decoded, and their CPU
// reference decoded from the cache's bytes (the plan's sources), never from
// the image. No CUDA: the GPU side is device_image_check.h.
//
// Pure apart from reading the plan's read-only mappings; safe from several
// threads on one plan.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "client/lease/image_layout.h"
#include "daemon/stage/rank_image_plan.h"
#include "format/dense.h"
#include "format/status.h"

namespace exlr8 {

// Bytes [offset, offset + out.size()) of region `region` as the cache holds
// them (its source pieces). REQUIRES: the range lies inside the region.
void ReadImageSourceBytes(const RankImagePlan& plan, std::uint32_t region, std::uint64_t offset,
                          std::span<std::byte> out);

// The E4M3 byte of `f`. REQUIRES: f is an exact E4M3 value (not NaN), as
// every decoded tile value is (spec 7.5); FloatToE4M3 rounds any float.
std::uint8_t ExactE4M3Byte(float f);

// The half records decoded, as tensor indices in ascending order: all of
// them with `all`, else a sample seeded by `seed`: one record chosen at
// random from each (layer, width, projection) present, then random ones
// until at least ceil(fraction * halves). *of = the number of half records.
std::vector<std::uint32_t> ImageDecodeSample(const ImageTables& t, bool all, double fraction,
                                             std::uint64_t seed, std::uint64_t* of);

// A half record's CPU reference from the cache's bytes (spec 9.4): its tile
// values as E4M3 bytes into `tiles` and its reconstructed weights into
// `weights` (DecodeHalfTiles, then ReconstructHalf with the u and v of spec
// 9.2: the record's slice and block row, each in its stored dtype, and the
// layer's signs.in (gate/up) or signs.out (down) region). Both hold
// 128 * hidden elements, (input, output) row-major.
// Errors: InvalidArgument when `region` is not a half record or the spans
// have the wrong size; Corruption when the layer's signs region is missing,
// the record's shape does not fit its width, or a reconstructed weight
// overflows fp32.
Status ReferenceHalf(const RankImagePlan& plan, std::uint32_t region, std::span<std::uint8_t> tiles,
                     std::span<float> weights);

// A dense matrix of the image: its data regions (consecutive tensor
// entries, in spec 10.3's table order) and record fields.
struct ImageDenseMatrix {
  std::string name;           // the matrix's image name (the regions' names without the suffix)
  std::uint32_t first = 0;    // tensor index of its first data region
  std::uint32_t regions = 0;  // 1..3
  DenseFormat format = DenseFormat::kFp32;
  std::uint32_t out = 0, inp = 0;
  int k = 0;
  DenseSide side = DenseSide::kReplicated;
};

// Every dense matrix of the image, in tensor order. Corruption when a
// matrix's data regions do not have the number its format needs.
Result<std::vector<ImageDenseMatrix>> ImageDenseMatrices(const ImageTables& t);

// The matrices decoded (indices into `matrices`, ascending): all with
// `all`, else one of each format present, chosen with `seed`.
std::vector<std::size_t> ImageDenseSample(std::span<const ImageDenseMatrix> matrices, bool all,
                                          std::uint64_t seed);

// The matrix's CPU reference: DecodeDenseMatrix of the cache file its data
// regions come from, the (out, inp) fp32 HF weight. Errors:
// DecodeDenseMatrix's and the file's parse errors; Corruption when no
// matrix of that file has the data regions' source.
Result<std::vector<float>> ReferenceDense(const RankImagePlan& plan, const ImageDenseMatrix& m);

}  // namespace exlr8
