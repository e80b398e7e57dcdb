// Reader for an expert index file, experts/exlr8-layer-LLL.index.safetensors
// (spec section 4).
//
// Metadata: widths = "2,3,4" (routed), shared_widths = "3,4" (shared expert).
// Tensors, for each routed width K (E experts, H halves, I = 128 H, D hidden):
//   k{K}.index             [E, 3, H, 2] int   (absolute offset, length) in k{K} file
//   k{K}.checksum          [E, 3, H]    int   XXH64 of half (spec 5.3)
//   k{K}.{gate,up}.svh     [E, I]       float output-side per-channel vector
//   k{K}.{gate,up}.su_block[E, D/128]   float input-side block scales
//   k{K}.down.suh          [E, I]       float input-side per-channel vector
//   k{K}.down.sv_block     [E, D/128]   float output-side block scales
// the same with prefix "shared." and E = 1 for each shared width, and
//   signs.in, signs.out    [D]          float ±1
//
// Dimensions come from the tensor shapes, never from constants. Only the
// header and the index/checksum tensors are read (a few hundred KB per width
// at GLM-5.3 scale); vectors stay in the file and are located by ByteRun.
//
// Validation (each failure a Corruption naming file, tensor, byte offset):
// metadata lists parse (spec U-13: split on commas, trim, de-duplicate,
// values 1..8); every tensor present with an allowed dtype (index/checksum:
// any integer dtype of 4 or 8 bytes — I64/U64 in practice, U-6; vectors:
// F16/BF16/F32, U-5) and consistent shapes; every (offset, length) has
// offset >= 0 and length == 16 * K * D.
// Checks that need the width file (offsets inside its data section, no
// overlaps) are in ValidateWidthFile().
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "format/byte_source.h"
#include "format/dtype.h"
#include "format/safetensors.h"
#include "format/status.h"

namespace exlr8 {

enum class Proj : std::uint8_t { kGate = 0, kUp = 1, kDown = 2 };
inline constexpr int kProjCount = 3;
std::string_view ProjName(Proj p);
std::optional<Proj> ProjFromName(std::string_view name);

// Expert number used for the shared expert in every API below.
inline constexpr int kSharedExpert = -1;

// A run of bytes at an absolute offset of some file.
struct ByteRun {
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  std::uint64_t end() const { return offset + length; }
  friend bool operator==(const ByteRun&, const ByteRun&) = default;
};

// Where one half lives in its width file, and its digest.
struct HalfEntry {
  std::uint64_t offset = 0;    // absolute offset in experts/exlr8-layer-LLL.kK.safetensors
  std::uint64_t length = 0;    // 16 * K * hidden
  std::uint64_t checksum = 0;  // XXH64 per spec 5.3 (I64 storage reinterpreted)
};

// A 2-D float tensor of the index file, located but not loaded.
struct VectorRef {
  std::string name;
  DType dtype = DType::kF16;
  std::uint64_t offset = 0;  // absolute file offset of element [0, 0]
  std::uint64_t rows = 0;
  std::uint64_t cols = 0;
  // Elements [row, first .. first + count) as a byte run.
  ByteRun Slice(std::uint64_t row, std::uint64_t first, std::uint64_t count) const {
    const std::uint64_t es = DTypeSize(dtype);
    return {offset + (row * cols + first) * es, count * es};
  }
};

// The tables of one width, for the routed experts or the shared expert.
struct WidthTables {
  int k = 0;
  bool shared = false;
  std::uint32_t experts = 0;      // E (1 for the shared expert)
  std::vector<HalfEntry> halves;  // [e][p][h], E * 3 * H entries
  std::array<VectorRef, kProjCount> channel;  // gate.svh, up.svh, down.suh   [E, I]
  std::array<VectorRef, kProjCount> block;    // gate.su_block, up.su_block, down.sv_block [E, D/128]
};

// Where the halves of one width file lie, found overlap-free in the index
// (ExpertIndex::SpanOfWidth). A few bytes, so a reader that checks width
// file headers as they arrive can keep this and drop the index tables
// (tens of MB at GLM-5.3 scale).
struct WidthFileSpan {
  bool empty = true;                // no half stored at this width
  std::uint64_t lowest_offset = 0;  // of any half
  std::uint64_t highest_end = 0;    // max offset + length (saturating)
  std::string lowest_half;          // "L3 e0 gate h2 K3 [a, b)", for messages
  std::string highest_half;

  // Every half lies inside the data section of the width file whose parsed
  // header and size are given: Corruption naming `file_name`, the half and
  // the section otherwise.
  Status Validate(const SafetensorsHeader& width_header, std::uint64_t width_file_size,
                  std::string_view file_name) const;
};

class ExpertIndex {
 public:
  // Reads and validates an index file. `layer` is the file's layer number
  // (from its name); `source.name()` appears in errors.
  static Result<ExpertIndex> Read(const ByteSource& source, int layer);

  int layer() const { return layer_; }
  std::uint64_t hidden() const { return hidden_; }              // D
  std::uint32_t experts() const { return experts_; }            // E (routed)
  std::uint32_t halves_per_expert() const { return halves_; }   // H
  std::uint64_t intermediate() const { return 128ull * halves_; }
  bool has_shared() const { return !shared_widths_.empty(); }
  const std::vector<int>& widths() const { return widths_; }          // ascending
  const std::vector<int>& shared_widths() const { return shared_widths_; }
  const SafetensorsHeader& header() const { return header_; }
  std::uint64_t file_size() const { return file_size_; }
  const VectorRef& signs_in() const { return signs_in_; }
  const VectorRef& signs_out() const { return signs_out_; }

  // Tables for width k (routed, or shared when expert == kSharedExpert);
  // nullptr if that width is not stored.
  const WidthTables* Tables(int k, bool shared) const;

  // The half (expert e or kSharedExpert, projection p, half h) at width k.
  // NotFound if k is not stored for that expert kind; InvalidArgument if e
  // or h is out of range.
  Result<HalfEntry> Half(int expert, Proj p, std::uint32_t h, int k) const;

  // The index-file byte runs hashed after the half's trellis bytes (spec 5.3):
  // its 128-element channel-vector slice, then its block-vector row.
  // REQUIRES: Half(expert, p, h, k).ok().
  std::array<ByteRun, 2> ChecksumTail(int expert, Proj p, std::uint32_t h, int k) const;

  // Reconstruction vectors of a half (spec 9.2), converted to fp32 exactly:
  // gate/up: u has D entries (signs.in x su_block), v has 128 (svh slice);
  // down: u has 128 (suh slice), v has D (signs.out x sv_block).
  // `source` is the same index file. A non-finite element is Corruption
  // naming the tensor, the element and its byte offset (spec U-10).
  Status LoadHalfVectors(const ByteSource& source, int expert, Proj p, std::uint32_t h, int k,
                         std::vector<float>* u, std::vector<float>* v) const;

  // The lowest offset of any half stored at width k (routed and shared),
  // or nullopt when none is. A valid k file's header ends at or before it
  // (ValidateWidthFile), so a reader can fetch the header in one request.
  std::optional<std::uint64_t> LowestHalfOffset(int k) const;

  // Where the halves stored at width k (routed and shared) lie in the k
  // file: what its header is checked against. Corruption naming both halves
  // if two of them overlap (spec 6).
  Result<WidthFileSpan> SpanOfWidth(int k) const;

  // The width file's checks (spec 4.4, 6): every half stored at width k
  // (routed and shared) lies inside the data section of the k file whose
  // parsed header and size are given, and no two overlap. `file_name` is
  // used in errors. Same as SpanOfWidth(k), then WidthFileSpan::Validate.
  Status ValidateWidthFile(int k, const SafetensorsHeader& width_header, std::uint64_t width_file_size,
                           std::string_view file_name) const;

 private:
  int layer_ = 0;
  std::uint64_t hidden_ = 0;
  std::uint32_t experts_ = 0;
  std::uint32_t halves_ = 0;
  std::uint64_t file_size_ = 0;
  std::vector<int> widths_;
  std::vector<int> shared_widths_;
  std::vector<WidthTables> tables_;  // routed widths, then shared widths
  VectorRef signs_in_;
  VectorRef signs_out_;
  SafetensorsHeader header_;
};

// Parses a width list such as "2,3,4" or " 4, 2,4" (spec U-13): split on
// commas, trim spaces, integers 1..8, de-duplicated, sorted. Corruption on
// anything else (empty list included).
Result<std::vector<int>> ParseWidthList(std::string_view text);

}  // namespace exlr8
