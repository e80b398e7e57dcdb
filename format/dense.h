// Dense and vocabulary files, dense/exlr8-dense-LLL.safetensors and
// dense/exlr8-vocab.safetensors (spec section 10, checksums 5.4).
//
// A matrix named m is stored as
//   {m}.record    integer [8]: format, out, inp, K, side, 3 reserved   (10.2)
//   {m}.checksum  I64/U64 [ceil(dim/128)], dim = inp if side 2 else out
//   {m}.<suffix>  the format's data tensors (table 10.3):
//     1 TRELLIS   trellis U8 [G, 16*K*len]  (side 2: G = inp/128, len = out;
//                                            side 0/1: G = out/128, len = inp)
//                 suh float [inp], svh float [out]
//     2 INT4      side 0/1: q4 U8 [out, inp/2], s4 float [out, inp/32]
//                 side 2:   q4 U8 [inp/128, out, 64], s4 float [inp/128, out, 4]
//     3 MXFP8     fp8 U8 [out, inp], e8m0 U8 [out, inp/32]
//     4 FP8_BLOCK fp8 U8 [out, inp], scale float [ceil(out/128), ceil(inp/128)]
//     5 FP8_ROW   fp8 U8 [out, inp], scale float [out]
//     6 BF16      bf16 BF16 [out, inp]
//     7 FP32      fp32 F32 [out, inp]
// ("float" = F16, BF16 or F32, spec U-5.) Every other non-"__pad." tensor,
// including one that merely shares a matrix's prefix such as
// "mlp.gate.e_score_correction_bias", is a plain tensor used as stored.
//
// Parsing is strict; each failure is a Corruption naming the file
// (ByteSource::name()), the matrix, the tensor or field and its absolute
// byte offset: unknown format code, side outside 0..2, K outside 1..8
// (TRELLIS), non-positive or oversized dimensions, TRELLIS dimensions not
// multiples of 128, INT4/MXFP8 inp not a multiple of 32 (128 for INT4 side
// 2), a missing or mis-shaped or mis-typed tensor, a checksum count not equal
// to ceil(dim/128), and side 2 with MXFP8/FP8_BLOCK/FP8_ROW/BF16/FP32 (spec
// U-9: the loader's block slicing is inconsistent there, so such records are
// refused rather than guessed at).
//
// Decoding (DecodeDenseMatrix) additionally rejects, as Corruption, E4M3 NaN
// bytes (0x7F/0xFF), E8M0 = 255 and non-finite scale/vector elements
// (U-10), and finite scales or vectors whose products overflow fp32 (the
// scale element or TRELLIS entry is named). BF16/FP32 weights are returned
// as stored.
//
// Ownership and threads: DenseFile is a value holding copies of what it
// needs (names, shapes, absolute offsets, checksums); it does not refer to
// the SafetensorsHeader or the ByteSource after Parse returns. All functions
// are pure apart from ByteSource reads, and may run concurrently on distinct
// sources (or on one source whose ReadAt is thread-safe).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "format/byte_source.h"
#include "format/dtype.h"
#include "format/expert_index.h"  // ByteRun
#include "format/safetensors.h"
#include "format/status.h"

namespace exlr8 {

enum class DenseFormat : std::uint8_t {
  kTrellis = 1, kInt4 = 2, kMxfp8 = 3, kFp8Block = 4, kFp8Row = 5, kBf16 = 6, kFp32 = 7,
};
inline constexpr int kDenseFormatCount = 7;
// "TRELLIS", "INT4", ...
std::string_view DenseFormatName(DenseFormat f);

// Record field 4: along which dimension the matrix may be TP-sharded.
enum class DenseSide : std::uint8_t { kReplicated = 0, kOutput = 1, kInput = 2 };

// Caps on one matrix: dimensions and decoded elements (16 GiB of fp32).
inline constexpr std::uint64_t kMaxDenseDim = std::uint64_t{1} << 31;
inline constexpr std::uint64_t kMaxDenseElements = std::uint64_t{1} << 32;

struct DenseRecord {
  DenseFormat format = DenseFormat::kFp32;
  std::uint64_t out = 0;  // rows of the HF weight
  std::uint64_t inp = 0;  // columns of the HF weight
  int k = 0;              // trellis width (TRELLIS only; stored value otherwise)
  DenseSide side = DenseSide::kReplicated;
  std::array<std::int64_t, 3> reserved{};  // fields 5..7, ignored
};

// A tensor of the file, located by absolute offset.
struct DenseTensor {
  std::string name;  // full tensor name
  DType dtype = DType::kU8;
  std::vector<std::uint64_t> shape;
  std::uint64_t offset = 0;  // absolute file offset of the first byte
  std::uint64_t length = 0;  // bytes
  // Bytes of one first-dimension slice (length for rank 0).
  std::uint64_t SliceBytes() const;
};

struct DenseMatrix {
  std::string name;  // m, without ".record"
  DenseRecord record;
  DenseTensor record_tensor;
  DenseTensor checksum_tensor;
  std::vector<std::uint64_t> checksums;  // one XXH64 per block (I64 reinterpreted)
  // The format's data tensors in table order: TRELLIS trellis, suh, svh;
  // INT4 q4, s4; MXFP8 fp8, e8m0; FP8_BLOCK/FP8_ROW fp8, scale; BF16 bf16;
  // FP32 fp32.
  std::vector<DenseTensor> data;

  // ceil(inp/128) for side 2, ceil(out/128) otherwise.
  std::uint64_t num_blocks() const { return checksums.size(); }
  // The data tensor with that suffix ("q4"), or nullptr.
  const DenseTensor* Data(std::string_view suffix) const;
};

class DenseFile {
 public:
  // Reads records and checksum vectors through `source` (a few bytes per
  // matrix) and validates everything listed above. `header` must be the
  // parsed header of the same file.
  static Result<DenseFile> Parse(const SafetensorsHeader& header, const ByteSource& source);
  // The same from the file alone: reads and parses its safetensors header
  // (ParseSafetensorsHeader against source.size(): every tensor inside the
  // file, none overlapping), then Parse. Corruption naming the file, the
  // tensor or field and its byte offset.
  static Result<DenseFile> Read(const ByteSource& source);

  const std::string& file_name() const { return file_name_; }
  const std::vector<DenseMatrix>& matrices() const { return matrices_; }  // in file order
  const std::vector<DenseTensor>& plain() const { return plain_; }        // in file order
  const DenseMatrix* FindMatrix(std::string_view name) const;
  const DenseTensor* FindPlain(std::string_view name) const;

 private:
  std::string file_name_;
  std::vector<DenseMatrix> matrices_;
  std::vector<DenseTensor> plain_;
};

// The absolute byte runs hashed, in order, for block `block` of `m` (spec
// 5.4). Adjacent runs are not merged. InvalidArgument if block >=
// m.num_blocks().
Result<std::vector<ByteRun>> DenseBlockRuns(const DenseMatrix& m, std::uint64_t block);

// Hashes the runs of one block / of every block with XXH64 and compares
// with {m}.checksum. Corruption on mismatch, naming file, matrix, block,
// the block's first file offset, and expected vs actual digests (hex).
// ByteSource errors are passed through.
Status VerifyDenseBlock(const DenseFile& file, const DenseMatrix& m, std::uint64_t block,
                        const ByteSource& source);
Status VerifyDenseMatrix(const DenseFile& file, const DenseMatrix& m, const ByteSource& source);

// What a dense or vocab file is checked against as a whole, by `exlr8
// verify` on a release directory and by exlr8d before it records the file
// (a pull) or keeps it recorded (`exlr8d verify`): one function, so both say
// the same of the same bytes.
struct DenseVerifyReport {
  std::uint64_t matrices = 0;
  std::uint64_t blocks_ok = 0;
  // One line per failed block: file, matrix, block, byte offset, digests.
  std::vector<std::string> mismatches;
};

// DenseFile::Read (the header and every record), then every block checksum
// of every matrix (spec 5.4). Corruption for a file whose structure is bad;
// block checksum mismatches are listed in the report, not returned.
// ByteSource errors are passed through.
Result<DenseVerifyReport> VerifyDenseFile(const ByteSource& file);

// VerifyDenseFile as one verdict: OK when the structure is valid and every
// block matches; otherwise Corruption with the first problem (and how many
// blocks failed).
Status CheckDenseFile(const ByteSource& file);

// Decodes the HF weight, (out, inp) fp32 row-major (spec 10.3; TRELLIS via
// sections 8.3 and 9). TRELLIS values agree with other implementations per
// 128 x 128 block within 1e-5 * block max (spec 9.3); all other formats are
// exact. Does not verify checksums (call VerifyDenseMatrix first if wanted).
Result<std::vector<float>> DecodeDenseMatrix(const DenseFile& file, const DenseMatrix& m,
                                             const ByteSource& source);

// A plain tensor of float dtype (F16, BF16, F32) converted exactly to fp32,
// row-major. InvalidArgument for any other dtype; Corruption if its element
// count exceeds kMaxDenseElements.
Result<std::vector<float>> ReadPlainTensorAsFloat(const DenseTensor& t, const ByteSource& source);

}  // namespace exlr8
