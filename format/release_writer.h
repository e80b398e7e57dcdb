// Synthesizes complete, valid EXLR8 v2 releases of any geometry (spec
// sections 2-6, 10, 11, 16) for tests, benchmarks, the hub simulator and the
// planner. Contents are random but deterministic in SynthOptions::seed; every
// checksum is computed exactly as a reader verifies it.
//
// What gets written (paths relative to the release root, spec section 2;
// names built by format/layout.h):
//   config.json
//   experts/exlr8-layer-LLL.index.safetensors   per MoE layer
//   experts/exlr8-layer-LLL.kK.safetensors      per MoE layer and K in
//                                               widths ∪ shared_widths
//   dense/exlr8-dense-LLL.safetensors           per layer in dense_layers ∪ moe_layers
//   dense/exlr8-vocab.safetensors
//   manifests/exlr8-manifest-{home,down1,up1}.json
//
// Choices (where spec section 14 lists an unknown) follow the shared fixture
// exlr8-tiny by default (TinyFixtureGeometry()) and can be varied:
//   - index file: for each K in widths k{K}.index, .checksum, .gate.svh,
//     .gate.su_block, .up.svh, .up.su_block, .down.suh, .down.sv_block; then
//     the same with "shared." for each K in shared_widths; then signs.in,
//     signs.out. Metadata widths, shared_widths, hidden, experts, layer.
//   - width file k{K}: one U8 tensor per half named e{e}.{proj}.h{h}
//     (eshared.* for the shared expert), in half_order; metadata format,
//     width. With width_alignment A > 1 each pair of consecutive halves (or
//     each half, align_pairs = false) starts at a multiple of A, and the data
//     start is aligned to max(8, A).
//   - dense layer file (every layer): self_attn.q_proj TRELLIS side 1 K4
//     (out hidden+128), self_attn.o_proj TRELLIS side 2 K3 (inp hidden+128),
//     self_attn.kv_proj INT4 side 2 (out 128), input_layernorm.weight BF16.
//     Dense-MLP layers add mlp.gate_proj FP8_BLOCK, mlp.up_proj MXFP8 (both
//     out 2*hidden), mlp.down_proj INT4 side 1 (inp 2*hidden),
//     mlp.extra_proj FP8_ROW (hidden x hidden). MoE layers add the router
//     mlp.gate FP32 side 0 [E, hidden] and mlp.gate.e_score_correction_bias.
//     Together with the vocab file every one of the seven formats appears.
//   - vocab file: embed_tokens BF16 side 1, lm_head INT4 side 1 (both
//     [vocab, hidden]), norm.weight BF16 [hidden].
//   - manifests: home (see ManifestMix), down1 (every routed width one step
//     down in `widths`, floor at the smallest), up1 (one step up, cap at the
//     largest); the shared expert at its widest width in all three.
//
// Index-only mode: width files are sparse (header + total size, payload
// reads as zeros) and so are the large data tensors of dense records
// (trellis, q4, fp8, bf16, fp32). Every checksum is computed over those
// zero bytes, so an index-only release is still fully valid and verifiable,
// and planning works at full scale (GLM-5.3: ~0.8 GB of real bytes instead
// of ~830 GB).
//
// Value ranges: trellis and q4 bytes uniform random (any bytes are valid);
// per-channel vectors (svh, suh) ±[2^-7, 2^-3) ≈ ±0.008..0.125; block vectors
// and norms [0.5, 2); signs ±1; FP8 bytes never 0x7F/0xFF (NaN); E8M0 in
// 117..129; FP8 scales [2^-9, 2^-6). All values are exactly representable in
// every float dtype, so changing a dtype changes only the stored encoding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "format/byte_source.h"
#include "format/dtype.h"
#include "format/status.h"

namespace exlr8 {

// ---------------------------------------------------------------------------
// Output interface
// ---------------------------------------------------------------------------

// A run of bytes at a fixed offset of a sparse file.
struct SparseExtent {
  std::uint64_t offset = 0;
  std::span<const std::byte> bytes;
};

// Where the writer puts files. `rel_path` uses '/' separators and is
// relative to the release root ("experts/exlr8-layer-003.k2.safetensors");
// the writer never passes absolute paths or "..". Writing a path twice
// replaces the file. Calls come from the writer's thread only; the span
// arguments are valid only during the call.
class ReleaseSink {
 public:
  virtual ~ReleaseSink() = default;
  // A whole file.
  virtual Status WriteFile(std::string_view rel_path, std::span<const std::byte> bytes) = 0;
  // A file of `total_size` bytes of which only `extents` are given; all
  // other bytes read as zero. REQUIRES (InvalidArgument otherwise): extents
  // sorted by offset, non-overlapping, each inside total_size.
  virtual Status WriteSparseFile(std::string_view rel_path, std::span<const SparseExtent> extents,
                                 std::uint64_t total_size) = 0;
};

// Checks the REQUIRES of WriteSparseFile (sinks call it).
Status ValidateSparseExtents(std::string_view rel_path, std::span<const SparseExtent> extents,
                             std::uint64_t total_size);

// An in-memory ReleaseSink for tests: path -> contents. Sparse files keep
// only their extents, so full-scale index-only releases fit in memory.
class MemoryReleaseSink final : public ReleaseSink {
 public:
  struct File {
    std::uint64_t size = 0;
    bool sparse = false;
    // offset -> bytes; a whole file is one extent at offset 0.
    std::map<std::uint64_t, std::vector<std::byte>> extents;
  };

  Status WriteFile(std::string_view rel_path, std::span<const std::byte> bytes) override;
  Status WriteSparseFile(std::string_view rel_path, std::span<const SparseExtent> extents,
                         std::uint64_t total_size) override;

  const std::map<std::string, File, std::less<>>& files() const { return files_; }
  // nullptr if absent.
  const File* Find(std::string_view rel_path) const;
  // Bytes [offset, offset + dst.size()) with zeros in holes. NotFound if
  // the file is absent, Corruption if the range runs past its end.
  Status ReadAt(std::string_view rel_path, std::uint64_t offset, std::span<std::byte> dst) const;
  // The whole file (holes as zeros). ResourceExhausted over `max_bytes`.
  Result<std::vector<std::byte>> ReadAll(std::string_view rel_path,
                                         std::uint64_t max_bytes = std::uint64_t{1} << 30) const;
  // A ByteSource over one file. The sink must outlive it and must not be
  // written to meanwhile. NotFound if absent.
  Result<std::unique_ptr<ByteSource>> Open(std::string_view rel_path) const;

 private:
  std::map<std::string, File, std::less<>> files_;
};

// ---------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------

// Order of halves inside a width file.
enum class HalfOrder : std::uint8_t {
  kExpertMajor,      // e, then gate/up/down, then h; shared expert last (the fixture's)
  kProjectionMajor,  // gate/up/down, then e (shared last), then h
  kShuffled,         // a seeded random permutation
};

// How the home manifest picks routed widths.
enum class ManifestMix : std::uint8_t {
  // Per expert one width for all its halves (like GLM-5.3 home): ⌈E/4⌉
  // experts chosen at random at the widest stored width, the rest at the
  // next narrower one.
  kPerExpert,
  // A random stored width per gate/up half and per expert for down (the
  // fixture's).
  kRandomPerHalf,
};

struct SynthOptions {
  // geometry
  std::uint64_t hidden = 256;      // multiple of 128
  std::uint32_t halves = 16;       // H: intermediate = 128 * H
  std::uint32_t experts = 4;       // E routed experts per MoE layer
  std::vector<int> moe_layers = {3, 4};
  std::vector<int> dense_layers = {0};  // layers with a dense MLP (no experts)
  int num_hidden_layers = 5;            // config.json; > every layer number
  std::vector<int> widths = {2, 3, 4};         // routed stored widths, 1..8
  std::vector<int> shared_widths = {3, 4};     // shared expert widths (required, non-empty)
  std::uint64_t vocab_size = 512;
  std::uint64_t seed = 1;

  // dtypes
  DType index_dtype = DType::kI64;         // k{K}.index: I64 or U64
  DType checksum_dtype = DType::kU64;      // k{K}.checksum and dense checksums: U64 or I64
  DType vector_dtype = DType::kF16;        // svh, suh (experts and dense TRELLIS)
  DType block_vector_dtype = DType::kF32;  // su_block, sv_block
  DType signs_dtype = DType::kF16;         // signs.in, signs.out
  DType record_dtype = DType::kI64;        // {m}.record: I64, U64 or I32
  DType int4_scale_dtype = DType::kF16;    // INT4 s4
  DType fp8_scale_dtype = DType::kF32;     // FP8_BLOCK / FP8_ROW scale
  // Byte payloads: the halves of the width files and the dense trellis, q4,
  // fp8 and e8m0 tensors. U8 or I8 (spec 3.2: 1-byte integers).
  DType byte_dtype = DType::kU8;

  // width-file layout
  std::uint64_t width_alignment = 4096;  // power of two; 1 = packed
  bool align_pairs = true;               // align pairs of halves (else every half)
  std::uint64_t width_leading_padding = 0;  // `__pad.` bytes before the first half
  HalfOrder half_order = HalfOrder::kExpertMajor;

  ManifestMix home_mix = ManifestMix::kPerExpert;

  // Sparse width files and dense payloads (see top of file).
  bool index_only = false;
  // Refuse (InvalidArgument) to materialize any single file larger than this
  // in memory when !index_only.
  std::uint64_t max_materialized_file_bytes = std::uint64_t{2} << 30;
};

// The shared fixture's geometry (spec 16), with home_mix = kRandomPerHalf.
SynthOptions TinyFixtureGeometry();
// GLM-5.3 (spec 1): hidden 6144, H 16, E 256, MoE layers 3..77, dense
// layers 0..2, 78 layers, widths 2/3/4, shared 3/4, vocab 154880, width
// alignment 64 KiB. Meant for index_only = true (set by this preset).
SynthOptions Glm53Geometry();

// InvalidArgument naming the field for anything out of range: hidden not a
// positive multiple of 128, halves or experts 0 or too large, widths empty,
// out of 1..8 or duplicated, moe/dense layers negative, overlapping or >=
// num_hidden_layers (or > 999), a dtype not allowed above, alignment not a
// power of two or > 1 GiB, vocab_size 0.
Status ValidateSynthOptions(const SynthOptions& options);

// ---------------------------------------------------------------------------
// Synthesis
// ---------------------------------------------------------------------------

struct SynthFile {
  std::string path;          // relative, e.g. "dense/exlr8-vocab.safetensors"
  std::uint64_t size = 0;    // logical size
  std::uint64_t stored = 0;  // bytes actually given to the sink (== size unless sparse)
  bool sparse = false;
};

struct SynthSummary {
  std::vector<SynthFile> files;  // in writing order
  std::uint64_t total_bytes = 0;   // sum of sizes
  std::uint64_t stored_bytes = 0;  // sum of stored
};

// Writes a whole release to `sink`. Errors: those of ValidateSynthOptions,
// and any sink error (returned unchanged, with the path as context).
// Deterministic: the same options give the same bytes.
Result<SynthSummary> SynthesizeRelease(const SynthOptions& options, ReleaseSink& sink);

}  // namespace exlr8
