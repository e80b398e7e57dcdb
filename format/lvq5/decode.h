// Decoders for the parts of an LVQ5 file that ReadIndex located.
//
// Every decoder reads its record through the ByteSource in bounded pieces
// and hands the output to a caller's sink in chunks (at most about
// kDecodeChunkValues values each, in file order), so a multi-GB record never
// needs its whole input or output in memory. A sink returning non-OK stops
// the decoder, which returns that status.
//
// REQUIRES: the record comes from ReadIndex on the same file (its offsets
// and lengths are trusted). Errors: IOError/Corruption from the ByteSource,
// Internal if exlr8d's Tetra tables failed their self-check, or the sink's.
// Pure; any thread, as the ByteSource allows.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "format/byte_source.h"
#include "format/lvq5/index.h"
#include "format/status.h"

namespace exlr8::lvq5 {

inline constexpr std::uint64_t kDecodeChunkValues = 1 << 20;

using FloatSink = std::function<Status(std::span<const float>)>;
using Int8Sink = std::function<Status(std::span<const std::int8_t>)>;
using BytesSink = std::function<Status(std::span<const std::byte>)>;

// A Tetra record's lattice coordinates: int8 [d_out][nblocks][24], each
// block in natural order (spec 2.3 step 4). Chunks end on row boundaries.
Status DecodeTetraCoords(const ByteSource& file, const MatrixRecord& r, const Int8Sink& sink);

// A Tetra record reconstructed in the rotated basis, f32 [d_out][d_in]: per
// row the 24 * nblocks block values (spec 2.4's CPU reference, all in f64:
// scale = (centroids[g] * row_scale) / sqrt(16 m), y_j * scale, narrowed to
// f32; m = 0 gives zeros), then the row's d_in mod 24 tail values as stored.
// The rotation is not undone (docs/LVQ5.md says why).
Status DecodeTetraWeights(const ByteSource& file, const MatrixRecord& r, const FloatSink& sink);

// An Int4G128 record as f32 [d_out][d_in]: w = f32(scale) * q + f32(bias)
// computed as two rounded f32 operations (no fused multiply-add).
Status DecodeInt4G128(const ByteSource& file, const MatrixRecord& r, const FloatSink& sink);

// A raw tensor's values as f32 in row-major order: f16 widened exactly;
// quant tensors as scale * q + bias in f32 (no FMA).
Status DecodeRaw(const ByteSource& file, const RawTensor& t, const FloatSink& sink);

// A matrix record of either kind as f32 (DecodeTetraWeights or
// DecodeInt4G128).
Status DecodeMatrix(const ByteSource& file, const MatrixRecord& r, const FloatSink& sink);

// A blob's bytes, verbatim.
Status ReadBlobBytes(const ByteSource& file, const Blob& b, const BytesSink& sink);

}  // namespace exlr8::lvq5
