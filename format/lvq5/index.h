// The LVQ5 sealed container (spec TETRA-LVQ5.md section 1): a strict reader
// that walks a whole file and returns where every part of it lies.
//
// An LVQ5 file has no table of contents: a record's offset depends on every
// record before it. ReadIndex walks the records once, reading only heads and
// small fields (never a code stream, payload, tensor or blob), and checks
// every structural rule of spec 1 on the way (docs/LVQ5.md lists them and
// the choices exlr8d makes where the spec leaves one open). The offsets it
// returns are absolute file offsets, each range [x, x + length) lies inside
// the file, and the records tile the file with no gap and nothing after the
// last blob.
//
// Pure: bytes in through a ByteSource, results out. Any thread (ReadIndex
// holds no state; the ByteSource's own rules apply).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "format/byte_source.h"
#include "format/status.h"

namespace exlr8::lvq5 {

inline constexpr char kMagic[4] = {'L', 'V', 'Q', '5'};
inline constexpr std::uint64_t kHeaderSize = 32;
// The "v1 ball" index map's fingerprint: compared as a constant, since
// recomputing it needs the ball indexer that no sealed file uses (spec 4.3).
inline constexpr std::uint64_t kBallFingerprint = 0x338f420f11866319ULL;
// shell_cap sentinels (spec 1.3).
inline constexpr std::uint32_t kTetraShellCap = 12;
inline constexpr std::uint32_t kInt4G128ShellCap = 0xFFFFFFFFu;
inline constexpr std::uint32_t kTetraCentroids = 2;  // one gain bit per word
inline constexpr std::uint32_t kTetraBlock = 24;     // weights per 48-bit word
inline constexpr std::uint32_t kTetraWordBytes = 6;
inline constexpr std::uint32_t kInt4G128Group = 128;
// Names longer than this are refused (checkpoint names are < 100 bytes); it
// keeps a damaged length from making the reader allocate the file's size.
inline constexpr std::uint32_t kMaxNameBytes = 65536;

enum class Kind : std::uint32_t { kBall = 0, kTetra = 1, kInt4G128 = 2 };
inline constexpr std::uint32_t kKnownKindsMask = 0b111;

// "ball", "tetra", "int4g128", or "kind N".
std::string KindName(std::uint32_t kind);

struct Header {
  std::uint32_t matrices = 0;
  std::uint64_t ball_fingerprint = 0;
  std::uint64_t tetra_fingerprint = 0;
  std::uint32_t default_kind = 0;
  std::uint32_t kinds_mask = 0;
};

// One matrix record. `offset` is where its head starts (the name_len field),
// `end` one past its last byte. Fields of the other kind are 0.
struct MatrixRecord {
  std::string name;
  Kind kind = Kind::kTetra;
  std::uint32_t d_out = 0;
  std::uint32_t d_in = 0;
  std::uint32_t shell_cap = 0;
  std::uint32_t n_centroids = 0;
  std::uint64_t rotation_seed = 0;
  bool has_rotation = false;
  std::uint64_t offset = 0;
  std::uint64_t end = 0;

  // Tetra: n_centroids f64, d_out f64 row scales, d_out * tail_cols f32
  // (row-major), then code_len and codes_length bytes of 6-byte disk words,
  // row i block j at codes_offset + 6 * (i * nblocks + j).
  std::uint32_t nblocks = 0;    // floor(d_in / 24)
  std::uint32_t tail_cols = 0;  // d_in mod 24
  std::uint64_t centroids_offset = 0;
  std::uint64_t row_scales_offset = 0;
  std::uint64_t tail_offset = 0;
  std::uint64_t codes_offset = 0;
  std::uint64_t codes_length = 0;  // == 6 * d_out * nblocks

  // Int4G128: payload = u32 bits, u32 group, u64 packed_len, packed bytes
  // (row-major nibbles, low first), u64 groups, groups f16 scales, groups
  // f16 biases; group g covers row g / (d_in/128), columns 128 * (g mod
  // (d_in/128)) onwards.
  std::uint64_t payload_offset = 0;
  std::uint64_t payload_length = 0;
  std::uint32_t bits = 0;
  std::uint32_t group = 0;
  std::uint64_t packed_offset = 0;
  std::uint64_t packed_length = 0;
  std::uint64_t groups = 0;
  std::uint64_t scales_offset = 0;
  std::uint64_t biases_offset = 0;
};

enum class RawTag : std::uint32_t { kF16 = 0, kQuant = 1 };

// One raw tensor (spec 1.6). `count` is the product of dims (1 for rank 0);
// `rows` the product of all dims but the innermost, `row_len` the innermost
// (a rank-0 tensor is one row of one).
struct RawTensor {
  std::string name;
  RawTag tag = RawTag::kF16;
  std::vector<std::uint64_t> dims;
  std::uint64_t count = 0;
  std::uint64_t rows = 0;
  std::uint64_t row_len = 0;
  std::uint64_t offset = 0;  // the tag field
  std::uint64_t end = 0;
  // f16: count values at data_offset (data_length = 2 * count).
  // quant: data_offset/data_length are the packed bytes (low nibble first
  // for 4 bits, one stream over the whole tensor in row-major order).
  std::uint64_t data_offset = 0;
  std::uint64_t data_length = 0;
  std::uint32_t bits = 0;    // quant: 4 or 8
  std::uint32_t group = 0;   // quant: >= 1; groups run along the innermost dim
  std::uint64_t groups = 0;  // quant: rows * ceil(row_len / group)
  std::uint64_t scales_offset = 0;
  std::uint64_t biases_offset = 0;
};

struct Blob {
  std::string name;
  std::uint64_t offset = 0;       // the name_len field
  std::uint64_t data_offset = 0;  // the bytes
  std::uint64_t length = 0;
  std::uint64_t end = 0;
};

struct FileIndex {
  Header header;
  std::uint64_t size = 0;
  std::vector<MatrixRecord> matrices;
  std::uint64_t raw_offset = 0;  // the n_raw field
  std::vector<RawTensor> raw;
  std::uint64_t blobs_offset = 0;  // the n_blobs field
  std::vector<Blob> blobs;

  // The record or raw tensor named `name`, or nullptr. Names are unique
  // among matrix records and raw tensors together, and among blobs.
  const MatrixRecord* FindMatrix(std::string_view name) const;
  const RawTensor* FindRaw(std::string_view name) const;
  const Blob* FindBlob(std::string_view name) const;
};

// The Tetra map fingerprint a header must carry: the one computed from the
// tables exlr8d builds (spec 2.6). Returns Internal if those tables failed
// their self-check (a bug in exlr8d), so files are refused, not misread.
Result<std::uint64_t> ExpectedTetraFingerprint();

// Walks `file` and checks every rule of spec 1 plus exlr8d's stricter ones
// (docs/LVQ5.md). Returns Corruption for a file that breaks one, with a
// message naming the file, the record (section, index and name when known),
// the field and its byte offset, e.g. "x.bin: matrix record 2
// 'model.layers.0.mlp.gate_proj.weight' at byte 9120: shell_cap at byte
// 9168 is 13, expected 12 for a Tetra record". Older containers (LVQ1-LVQ4)
// get "version N is not supported: exlr8d reads LVQ5". IOError if a read
// fails; Internal if exlr8d's own Tetra tables are broken.
// Allocation is bounded by the file size: no count or length is trusted
// before the bytes it claims are known to be in the file.
Result<FileIndex> ReadIndex(const ByteSource& file);

}  // namespace exlr8::lvq5
