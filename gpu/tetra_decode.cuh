// GPU decode of Tetra words (TETRA-LVQ5.md 2.3, 2.7): the CUDA twin of
// format/tetra/word.h's DecodeDiskWords, for codes in the served layout
// (format/tetra/served.h), and a byte comparison for checking it in place.
//
//   DeviceTetraTables   the decode tables of BuiltTables() in device memory,
//                       uploaded once per device (18,816 B: rows, branches,
//                       prefixes, suffixes, invnorm; then the 24-byte order).
//   LaunchTetraDecode   a served matrix (d_out rows of nblocks words, any row
//                       stride >= ServedRowStride(nblocks)) -> int8
//                       coordinates in natural order, [d_out][nblocks][24]:
//                       the bytes DecodeDiskWords gives for the disk stream.
//   LaunchTetraReconstruct  a served matrix -> f32 rows in the rotated basis
//                       as golden.json and tetra::ReconstructBlock compute
//                       them: per row the 24 * nblocks block values, then the
//                       d_in mod 24 tail values (spec 2.4; f64 as the CPU).
//   LaunchCompareBytes  two byte buffers: how many bytes differ, the first.
//
// The kernel reads each word with spec 2.7's two aligned u32 loads, does the
// six table loads of spec 2.3 from shared memory, expands each section's 8
// ranks with __byte_perm against the value lists of spec 2.3 (o = p and
// o = p + 2, picked per byte by the pattern bits) and moves trio order to
// natural order with a permutation fixed at compile time from the spec's
// octads (Upload refuses tables whose order differs).
//
// This header has no device code and may be included from .cpp files.
// Thread safety: launchers only enqueue work on the given stream; callable
// from any host thread. Every pointer is device memory of the current device
// and must stay alive until the stream has passed the launch.
#pragma once

#include <cstddef>
#include <cstdint>

#include "format/status.h"
#include "gpu/device_buffer.h"
#include "gpu/reconstruct.cuh"  // CompareResult
#include "gpu/stream.h"

namespace exlr8 {

// Bytes of the device tables: the 18,816 decode bytes of spec 2.5 step 6 and
// the 24-byte trio order, rounded up to 16.
inline constexpr std::size_t kTetraDeviceTableBytes = 18848;

class DeviceTetraTables {
 public:
  // Packs tetra::BuiltTables() and copies it to the current device on
  // `stream`, then synchronises the stream. Errors: Internal when
  // tetra::TablesStatus() is not OK or the built order is not the one the
  // kernel was compiled with; Unavailable without a device;
  // ResourceExhausted; Internal for other CUDA failures.
  static Result<DeviceTetraTables> Upload(CudaStreamView stream);

  const std::byte* data() const { return buf_.data_as<std::byte>(); }

 private:
  DeviceBuffer buf_;
};

// A served-layout matrix in device memory: row i at codes + i * row_stride.
struct TetraServedMatrix {
  const std::byte* codes = nullptr;  // 4-byte aligned
  std::uint64_t d_out = 0;           // rows (any count, 0 is a no-op)
  std::uint64_t nblocks = 0;         // words per row, 1..2^26
  std::uint64_t row_stride = 0;      // bytes; a multiple of 4, >= ServedRowStride(nblocks)
};

// Enqueues the decode of `m` into out[(i * nblocks + j) * 24 + c] (int8,
// natural order), d_out * nblocks * 24 bytes. The gain bit does not move the
// point. REQUIRES: the codes and out are device memory of the current device,
// `tables` was uploaded to it, row i's bytes [0, ServedRowStride(nblocks))
// are readable. Errors: InvalidArgument for a null pointer, nblocks outside
// 1..2^26, a stride below ServedRowStride(nblocks) or not a multiple of 4,
// codes not 4-byte aligned, out not 8-byte aligned, or a size that
// overflows; Internal for a failed launch.
Status LaunchTetraDecode(const TetraServedMatrix& m, std::int8_t* out, const DeviceTetraTables& tables,
                         CudaStreamView stream);

// The per-matrix inputs of a reconstruction, device memory.
struct TetraScales {
  const double* centroids = nullptr;   // [2], indexed by the gain bit
  const double* row_scales = nullptr;  // [d_out]
  const float* tail = nullptr;         // [d_out][tail_cols]; may be null when tail_cols == 0
  std::uint64_t tail_cols = 0;         // d_in mod 24: 0..23
};

// Enqueues the reconstruction of `m` into out[i * d_in + c] (f32), d_in =
// 24 * nblocks + tail_cols: block j of row i is (float)(y * scale) with
// scale = (centroids[gain] * row_scales[i]) / sqrt(16m) in f64, each
// operation rounded on its own (no contraction), zeros for m = 0; then the
// row's tail values as they are. Bit for bit tetra::ReconstructBlock.
// REQUIRES and errors: as LaunchTetraDecode, plus InvalidArgument for null
// centroids or row scales, tail_cols > 23, a null tail with tail_cols > 0, or
// out not 4-byte aligned.
Status LaunchTetraReconstruct(const TetraServedMatrix& m, const TetraScales& scales, float* out,
                              const DeviceTetraTables& tables, CudaStreamView stream);

// Enqueues a byte comparison of a[0, n) and b[0, n): out->mismatches counts
// the bytes that differ and out->first is the lowest such index (UINT64_MAX
// when none). `out` (device) is reset by the launch. Any alignment (16-byte
// aligned a and b take the fast path). Errors: InvalidArgument for a null
// pointer; Internal for a failed launch.
Status LaunchCompareBytes(const std::byte* a, const std::byte* b, std::uint64_t n, CompareResult* out,
                          CudaStreamView stream);

// Where byte `index` of a decoded [d_out][nblocks][24] buffer lies.
struct TetraCoordIndex {
  std::uint64_t row = 0, block = 0, coord = 0;
};
inline TetraCoordIndex LocateTetraCoord(std::uint64_t index, std::uint64_t nblocks) {
  const std::uint64_t word = index / 24;
  return {word / nblocks, word % nblocks, index % 24};
}

}  // namespace exlr8
