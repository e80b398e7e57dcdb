// A half record's weights (spec 9) for exlr8_lease_half_weights: the
// record's geometry checked against its tensor entry and the layer's signs,
// and the CPU computation for host leases (the format library's decode and
// reconstruction, the same code as DecodeExpertHalf). The device kind's
// kernels: client/exlr8client/kernels/half_weights.cu, launched by
// DriverDeviceLease::HalfWeights.
//
// Private to the library (not installed). Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "client/lease/image_layout.h"
#include "format/dtype.h"
#include "format/status.h"

namespace exlr8::client {

// Where a half record's parts lie and what they hold (IMAGE.md's half
// record: trellis bytes | slice | block row).
struct HalfRecordGeometry {
  int k = 0;                 // 1..8
  std::uint64_t hidden = 0;  // trellis bytes / (16 K): a positive multiple of 128
  bool down = false;         // the down projection (128 x hidden), else gate/up (hidden x 128)
  std::uint64_t trellis_bytes = 0;
  std::uint64_t slice_offset = 0;  // from the record's first byte: 128 elements of slice_dtype
  std::uint64_t block_offset = 0;  // hidden/128 elements of block_dtype
  DType slice_dtype = DType::kF32;
  DType block_dtype = DType::kF32;
  DType signs_dtype = DType::kF32;  // the layer's signs.in (gate/up) or signs.out (down): hidden elements
  std::string what;                 // "L3 e7 up h2 K4", for messages

  // The weights' element count, 128 * hidden.
  std::uint64_t elements() const { return 128 * hidden; }
};

// The geometry of half record `half` with the layer's `signs` entry (signs.in
// for gate/up, signs.out for down; nullptr when the image has none).
// Corruption (naming the record) when the entries disagree with IMAGE.md:
// K outside 1..8, trellis bytes not a positive multiple of 16 K x 128, a
// slice of other than 128 elements, a block row of other than hidden/128,
// a dtype other than F16/BF16/F32, the length not the parts' sum, no signs
// or signs of other than hidden elements.
Result<HalfRecordGeometry> HalfWeightsGeometry(const ImageTensor& half, const ImageTensor* signs);

// The weights on the CPU (host leases): `record` and `signs` are the mapped
// bytes of the record and of the layer's signs; `out` holds g.elements()
// floats, (input, output) row-major. The same computation as
// DecodeExpertHalf: DecodeHalfTiles, u and v by ExpandHiddenSideVector from
// the stored vectors, ReconstructHalf. Corruption (naming the record) for a
// non-finite vector element, a sign other than +-1, or weights that overflow
// fp32. `out` is unspecified on error.
Status HostHalfWeights(const HalfRecordGeometry& g, const std::byte* record, const std::byte* signs,
                       std::span<float> out);

}  // namespace exlr8::client
