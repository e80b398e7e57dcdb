#include "client/exlr8client/half_weights.h"

#include <charconv>
#include <cmath>
#include <vector>

#include "format/reconstruct.h"
#include "format/trellis.h"

namespace exlr8::client {

namespace {

std::string TN(std::uint64_t v) { return std::to_string(v); }

// `count` elements of a float dtype at `bytes`, as fp32; Corruption naming
// the part and the element for a non-finite one (spec U-10).
Status ReadVector(const std::byte* bytes, DType dtype, std::uint64_t count, const std::string& what,
                  std::vector<float>* out) {
  out->resize(count);
  EXLR8_RETURN_IF_ERROR(ConvertToFloat(dtype, {bytes, count * DTypeSize(dtype)}, *out));
  for (std::uint64_t i = 0; i < count; ++i)
    if (!std::isfinite((*out)[i])) return CorruptionError(what + " element " + TN(i) + ": non-finite value");
  return Status::Ok();
}

}  // namespace

Result<HalfRecordGeometry> HalfWeightsGeometry(const ImageTensor& half, const ImageTensor* signs) {
  HalfRecordGeometry g;
  g.what = half.What();
  auto bad = [&](const std::string& why) { return CorruptionError("half record " + g.what + ": " + why); };
  if (half.kind != ImageRegionKind::kHalfRecord) return bad("not a half record");
  if (half.k < kMinTrellisK || half.k > kMaxTrellisK)
    return bad("trellis width K=" + TN(half.k) + " outside 1..8");
  g.k = half.k;
  g.down = half.proj == static_cast<std::uint8_t>(Proj::kDown);
  g.trellis_bytes = half.shape[0];
  const std::uint64_t per_row = 16 * static_cast<std::uint64_t>(g.k);
  if (g.trellis_bytes == 0 || g.trellis_bytes % (per_row * kBlock) != 0)
    return bad(TN(g.trellis_bytes) +
               " trellis bytes are not a positive multiple of 16 K x 128 = " + TN(per_row * kBlock));
  g.hidden = g.trellis_bytes / per_row;
  if (half.shape[1] != kBlock) return bad("a slice of " + TN(half.shape[1]) + " elements, expected 128");
  if (half.shape[2] != g.hidden / kBlock)
    return bad("a block row of " + TN(half.shape[2]) +
               " elements, expected hidden / 128 = " + TN(g.hidden / kBlock));
  if (!IsFloatVectorDType(half.dtype))
    return bad("slice dtype " + std::string(DTypeName(half.dtype)) + ", expected F16, BF16 or F32");
  if (!IsFloatVectorDType(half.block_dtype))
    return bad("block row dtype " + std::string(DTypeName(half.block_dtype)) + ", expected F16, BF16 or F32");
  g.slice_dtype = half.dtype;
  g.block_dtype = half.block_dtype;
  g.slice_offset = g.trellis_bytes;
  g.block_offset = g.slice_offset + kBlock * DTypeSize(g.slice_dtype);
  const std::uint64_t length = g.block_offset + half.shape[2] * DTypeSize(g.block_dtype);
  if (half.length != length) return bad("length " + TN(half.length) + ", the parts' sum is " + TN(length));
  const char* signs_name = g.down ? "signs.out" : "signs.in";
  if (signs == nullptr)
    return bad("the image has no " + std::string(signs_name) + " for layer " + TN(half.layer));
  if (!IsFloatVectorDType(signs->dtype) || signs->length != g.hidden * DTypeSize(signs->dtype))
    return bad(std::string("the layer's ") + signs_name + " (" + std::string(DTypeName(signs->dtype)) + ", " +
               TN(signs->length) + " bytes) are not " + TN(g.hidden) + " F16, BF16 or F32 elements");
  g.signs_dtype = signs->dtype;
  return g;
}

Status HostHalfWeights(const HalfRecordGeometry& g, const std::byte* record, const std::byte* signs,
                       std::span<float> out) {
  if (out.size() != g.elements())
    return InvalidArgumentError(g.what + ": " + TN(out.size()) + " output elements, expected " +
                                TN(g.elements()));
  const std::string rec = "half record " + g.what;
  const HalfLayout layout = g.down ? HalfLayout::kDown : HalfLayout::kGateUp;
  EXLR8_RETURN_IF_ERROR(DecodeHalfTiles({record, g.trellis_bytes}, g.k, layout, g.hidden, out));
  std::vector<float> slice, block, sign_values;
  EXLR8_RETURN_IF_ERROR(ReadVector(record + g.slice_offset, g.slice_dtype, kBlock, rec + ": slice", &slice));
  EXLR8_RETURN_IF_ERROR(
      ReadVector(record + g.block_offset, g.block_dtype, g.hidden / kBlock, rec + ": block row", &block));
  const char* signs_name = g.down ? "signs.out" : "signs.in";
  EXLR8_RETURN_IF_ERROR(ReadVector(signs, g.signs_dtype, g.hidden, rec + ": " + signs_name, &sign_values));
  for (std::uint64_t i = 0; i < g.hidden; ++i)
    if (sign_values[i] != 1.0f && sign_values[i] != -1.0f) {
      char shown[32];
      auto [end, ec] = std::to_chars(shown, shown + sizeof shown, sign_values[i]);
      return CorruptionError(rec + ": " + signs_name + " element " + TN(i) + " is " +
                             std::string(shown, ec == std::errc() ? end : shown) + ", expected +1 or -1");
    }
  std::vector<float> hidden_side(g.hidden);
  EXLR8_RETURN_IF_ERROR(ExpandHiddenSideVector(sign_values, block, hidden_side));
  const std::span<const float> u =
      g.down ? std::span<const float>(slice) : std::span<const float>(hidden_side);
  const std::span<const float> v =
      g.down ? std::span<const float>(hidden_side) : std::span<const float>(slice);
  EXLR8_RETURN_IF_ERROR(ReconstructHalf(layout, g.hidden, out, u, v));
  if (const auto first = FirstNonFinite(out)) {
    const std::uint64_t cols = g.down ? g.hidden : kBlock;
    return CorruptionError(rec + ": reconstructed weight [" + TN(*first / cols) + ", " + TN(*first % cols) +
                           "] overflows fp32: the record's vectors hold absurd scales");
  }
  return Status::Ok();
}

}  // namespace exlr8::client
