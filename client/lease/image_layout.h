// The rank image (lease v2): the layout of one allocation holding every
// tensor a TP rank's forward pass reads, and the binary tables that describe
// it. The byte-level format is schema/lease/IMAGE.md; the reasons are
// docs/design/RANK_IMAGE.md. In short:
//
//   image (one allocation, every region on a 256-byte boundary, zero padding):
//     [0, 4096)            header: magic "EXLR8IMG", version, sections, dims
//     section 1 halves     one half record per owned (layer, expert|shared,
//                          proj, half): trellis ‖ vector slice ‖ block row,
//                          exactly the bytes spec 5.3 hashes
//     section 2 vectors    per layer: signs.in, signs.out, as stored
//     section 3 dense      dense data and plain tensors, as stored
//     section 4 offsets    off[layer][expert+1][3][halves], u64 byte offsets
//                          from the base, kImageAbsent where not owned; the
//                          expert row `experts` is the shared expert
//   tables (a sealed memfd beside the image):
//     128-byte table header, 64-byte tensor entries, 80-byte check
//     entries, the string pool (NUL-terminated names), the offset table
//
// Who does what: the holder builds the layout (ImageLayoutBuilder), fills
// the regions, writes the header and the offset table into the image and
// SerializeImageTables' bytes into a memfd. A lessee parses the header
// (ParseImageHeader) and the tables (ParseImageTables), checks that they
// agree (CheckImageAgreement), and then addresses regions through
// ImageTables' lookups. Every parser here is strict (bytes come from another
// process): nothing is used before every count, offset and length is checked,
// and each error is a Corruption naming the table, the entry's index, the
// field and its byte offset in the parsed bytes.
//
// Pure: bytes in, values out; no I/O, no CUDA; safe from any thread on
// distinct objects (const objects may be shared).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "format/dense.h"
#include "format/dtype.h"
#include "format/expert_index.h"  // Proj
#include "format/status.h"

namespace exlr8 {

// --- constants shared by the writer and the readers --------------------

inline constexpr char kImageMagic[8] = {'E', 'X', 'L', 'R', '8', 'I', 'M', 'G'};
inline constexpr char kImageTablesMagic[8] = {'E', 'X', 'L', 'R', '8', 'T', 'B', 'L'};
inline constexpr std::uint32_t kImageLayoutVersion = 1;
inline constexpr std::uint32_t kImageTablesVersion = 1;
inline constexpr std::uint64_t kImageHeaderBytes = 4096;
inline constexpr std::uint64_t kImageTablesHeaderBytes = 128;
inline constexpr std::uint64_t kImageTensorEntryBytes = 64;
inline constexpr std::uint64_t kImageCheckEntryBytes = 80;
// Every region, section and the allocation's size are multiples of this.
inline constexpr std::uint64_t kImageAlignment = 256;
// An offset table entry where the rank owns no half.
inline constexpr std::uint64_t kImageAbsent = UINT64_MAX;
// The commit field of the header: at most 127 bytes, NUL-padded.
inline constexpr std::size_t kImageCommitBytes = 128;
// Field values meaning "none" in a tensor entry.
inline constexpr std::uint16_t kImageNoLayer = 0xFFFF;
inline constexpr std::uint16_t kImageSharedExpert = 0xFFFE;
inline constexpr std::uint16_t kImageNoExpert = 0xFFFF;
inline constexpr std::uint8_t kImageNoProj = 0xFF;
inline constexpr std::uint8_t kImageNoHalf = 0xFF;
inline constexpr std::uint32_t kImageNoName = 0xFFFFFFFF;
// Dimensions: layers < 0xFFFF, experts < 0xFFFE, halves < 0xFF (the "none"
// values above stay free).
inline constexpr std::uint32_t kImageMaxLayers = 0xFFFE;
inline constexpr std::uint32_t kImageMaxExperts = 0xFFFD;
inline constexpr std::uint32_t kImageMaxHalves = 0xFE;
// Caps on the tables' counts (a GLM-5.3 rank at TP 1 has ~230,000
// regions): bound what a reader allocates before it has checked anything.
inline constexpr std::uint64_t kImageMaxTensors = std::uint64_t{1} << 24;
inline constexpr std::uint64_t kImageMaxChecks = std::uint64_t{1} << 25;
inline constexpr std::uint64_t kImageMaxStringBytes = std::uint64_t{1} << 28;
inline constexpr std::uint64_t kImageMaxCheckSegments = 4;
// The largest offset table a builder lays out (GLM-5.3's is 7.4 MB).
inline constexpr std::uint64_t kImageMaxOffsetTableBytes = std::uint64_t{1} << 30;

// Tensor entry byte 30.
enum class ImageRegionKind : std::uint8_t {
  kHalfRecord = 1,
  kSignsIn = 2,
  kSignsOut = 3,
  kDenseData = 4,
  kPlainTensor = 5,
};
inline constexpr int kImageRegionKindCount = 5;
std::string_view ImageRegionKindName(ImageRegionKind k);  // "half record", "signs.in", ...

// Tensor entry byte 31 of a plain tensor: how its bytes encode the tensor.
// An EXLR8 rank's plain tensors are kStored (0, as before this field had a
// use); an LVQ5 fileset's image (daemon/stage/lvq5_image.h) tags each part
// of a record with its record's format, so a lessee knows what it holds
// (schema/lease/IMAGE.md "Plain tensor formats"). Fields by format:
//   kStored, kF16: k = 0, out = inp = 0
//   kTetra48, kInt4G128: k = 0, out = d_out, inp = d_in of the matrix
//   kQuant: k = bits (4 or 8), out = 0, inp = the group size
enum class ImagePlainFormat : std::uint8_t {
  kStored = 0,    // elements of `dtype` as stored (EXLR8)
  kTetra48 = 1,   // a Tetra record: served codes (spec 2.7), centroids, row scales, tail
  kInt4G128 = 2,  // an Int4G128 record: packed nibbles, scales, biases
  kF16 = 3,       // an LVQ5 raw f16 tensor
  kQuant = 4,     // an LVQ5 raw quantized tensor: packed bits, scales, biases
};
inline constexpr std::uint8_t kImagePlainFormatMax = 4;
// "TETRA48", "INT4G128", "F16", "Q4G64" (bits and group), "STORED".
std::string ImagePlainFormatName(ImagePlainFormat f, std::uint8_t bits, std::uint32_t group);
// Whether a plain tensor's format, k, out and inp agree with the table
// above: InvalidArgument otherwise, its message starting with the field's
// name ("format: ", "k: ", "out: ", "inp: ").
Status CheckImagePlainFields(std::uint8_t format, std::uint8_t k, std::uint32_t out, std::uint32_t inp);

// Element dtypes travel as DType's enumerator value (format/dtype.h: 0 BOOL,
// 1 U8, 2 I8, 3 F8_E4M3, 4 F8_E5M2, 5 I16, 6 U16, 7 F16, 8 BF16, 9 I32,
// 10 U32, 11 F32, 12 F64, 13 I64, 14 U64), pinned in IMAGE.md.
static_assert(kDTypeCount == 15, "IMAGE.md's dtype code table must change with DType");

// --- the header (section 0) ---------------------------------------------

struct ImageSection {
  std::uint64_t offset = 0;
  std::uint64_t bytes = 0;  // exact: up to the end of the section's last region
};

struct ImageHeader {
  std::uint32_t version = kImageLayoutVersion;
  std::uint64_t allocation_bytes = 0;  // the image's size (a multiple of 256)
  ImageSection halves, vectors, dense, offset_table;
  std::uint32_t tp = 1, rank = 0;
  std::uint32_t layers = 0, experts = 0, halves_per_proj = 0;
  std::string commit;  // 0..127 bytes, printable ASCII
};

// The offset table's size: layers × (experts + 1) × 3 × halves × 8, or
// nullopt when that overflows.
std::optional<std::uint64_t> ImageOffsetTableBytes(std::uint64_t layers, std::uint64_t experts,
                                                   std::uint64_t halves);

// The 4096 header bytes. REQUIRES: `h` is one ParseImageHeader accepts
// (the builder's is).
std::vector<std::byte> SerializeImageHeader(const ImageHeader& h);

// Parses the first 4096 bytes of `bytes` (the image's start). Corruption
// ("image header: 'field' at byte N: ...") for fewer bytes, a wrong magic
// or version, a header size other than 4096, an allocation size that is not
// a positive multiple of 256, a section not aligned, before the header's
// end, overlapping the one before it or past the allocation, an offset table
// whose size is not the dimensions' product (overflow-checked), dimensions
// past the caps, tp 0 or rank >= tp, a commit that is not printable ASCII
// followed by NULs only, and a reserved byte that is not zero.
Result<ImageHeader> ParseImageHeader(std::span<const std::byte> bytes);

// --- the tables ---------------------------------------------------------

// One region of the image (a 64-byte tensor entry).
struct ImageTensor {
  std::uint64_t offset = 0;  // from the image's base
  std::uint64_t length = 0;
  std::uint64_t xxh64 = 0;  // the region's expected digest as staged
  std::uint16_t layer = kImageNoLayer;
  std::uint16_t expert = kImageNoExpert;  // kImageSharedExpert for the shared one
  std::uint8_t proj = kImageNoProj;       // Proj's value
  std::uint8_t half = kImageNoHalf;
  ImageRegionKind kind = ImageRegionKind::kPlainTensor;
  // DenseFormat for dense data; K for a half record; ImagePlainFormat for a
  // plain tensor (0: stored, every EXLR8 plain tensor); 0 otherwise.
  std::uint8_t format = 0;
  DType dtype = DType::kU8;  // the elements'; a half record's vectors'
  std::uint8_t rank = 0;     // of `shape`, 0..4
  std::uint8_t k = 0;        // trellis width: half records and TRELLIS dense data; kQuant plain: bits; else 0
  std::uint8_t side = 0;     // dense data: spec 10.2 field 4; else 0
  // A half record's block row's elements (byte 35, where dense data has its
  // side): the release may store slices and block rows in different dtypes
  // (spec U-5). kU8 (0) for every other kind.
  DType block_dtype = DType::kU8;
  // The stored tensor's shape; unused dimensions are 0. A half record's is
  // {trellis bytes, slice elements, block row elements} (rank 3): its
  // slice starts at shape[0], its block row at shape[0] + shape[1]·size of
  // dtype.
  std::array<std::uint32_t, 4> shape{};
  std::string name;       // dense and plain tensors: the file's tensor name; else empty
  std::uint32_t out = 0;  // dense data: spec 10.2 field 1; plain: see ImagePlainFormat; else 0
  std::uint32_t inp = 0;  // dense data: field 2; plain: see ImagePlainFormat; else 0

  // "L3 e7 up h2 K4" / "L3 shared gate h0 K3" / "L3 signs.in" / the name.
  std::string What() const;
};

// A byte run of the image, hashed as part of a check.
struct ImageSegment {
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
};

// A digest over 1..4 segments hashed in order (an 80-byte check entry):
// a half record's k{K}.checksum over its record, a dense block's spec 5.4
// checksum over its pieces.
struct ImageCheck {
  std::uint64_t digest = 0;
  std::vector<ImageSegment> segments;  // 1..kImageMaxCheckSegments
};

// The parsed tables and their lookups. A value; owns copies of everything.
struct ImageTables {
  std::uint64_t allocation_bytes = 0;
  std::uint32_t layers = 0, experts = 0, halves_per_proj = 0;
  std::vector<ImageTensor> tensors;
  std::vector<ImageCheck> checks;
  // The offset table as in the image (entry = base-relative byte offset or
  // kImageAbsent), index ImageOffsetIndex(...).
  std::vector<std::uint64_t> offset_table;

  // Index into offset_table of (layer, expert, proj, half); expert
  // kSharedExpert (-1) is the shared one. nullopt outside the dimensions.
  std::optional<std::size_t> OffsetIndex(int layer, int expert, Proj proj, std::uint32_t half) const;
  // The tensor entry of a half record, or nullptr when the rank does not
  // own it (or it lies outside the dimensions).
  const ImageTensor* FindHalf(int layer, int expert, Proj proj, std::uint32_t half) const;
  // A layer's signs.in / signs.out entry, or nullptr.
  const ImageTensor* FindSigns(int layer, bool out) const;
  // The dense or plain tensor of that name, or nullptr.
  const ImageTensor* FindByName(std::string_view name) const;

  // Rebuilds the lookups from `tensors` and the dimensions, for tables
  // edited after ParseImageTables or the builder made them (which build
  // them). No checks: lookups on tables no parser accepted may miss.
  void BuildIndexes();

 private:
  friend Result<ImageTables> ParseImageTables(std::span<const std::byte>, std::uint64_t);
  // Tensor index per offset-table entry (UINT32_MAX none), per layer's
  // signs.in/signs.out, and the named entries sorted by name.
  std::vector<std::uint32_t> half_index_;
  std::vector<std::array<std::uint32_t, 2>> signs_index_;
  std::vector<std::uint32_t> by_name_;
};

// The tables file: header, tensor entries, check entries, string pool
// (names in tensor order, each NUL-terminated), offset table. Writes what
// it is given. REQUIRES: `t` is one ParseImageTables accepts (the
// builder's is), so that its counts fit the fields.
std::vector<std::byte> SerializeImageTables(const ImageTables& t);

// Parses a tables file for an image of `allocation_bytes`. Corruption
// ("image tables: tensors[12] 'offset' at byte 860: ...", "image tables:
// header 'checks' at byte 32: ...") for: a wrong magic or version; counts
// past the caps or disagreeing with the sections' sizes (overflow-checked);
// sections not in order, overlapping, or not ending at the file's end; an
// allocation size that differs from the header's or is not a multiple of
// 256 of at least 4096; a region not aligned to
// 256, before the image header's end, past the allocation, empty, or
// overlapping another; an unknown kind, format, projection or dtype; fields
// a kind does not use that are not their "none" value; a length that is not
// the shape's bytes (a half record: trellis bytes + (slice + block row)
// elements); layer, expert or half past the dimensions; the same half, the
// same layer's signs or the same name twice; a name offset outside the
// pool, without its NUL or not UTF-8; a pool byte that no name uses; a check
// with 0 or more than 4 segments, a non-zero reserved field or unused
// segment, or a segment that is empty or not inside one region; and an
// offset table entry that is not its half record's offset (or not
// kImageAbsent where no record is).
Result<ImageTables> ParseImageTables(std::span<const std::byte> bytes, std::uint64_t allocation_bytes);

// Whether a parsed header and parsed tables describe one image: the same
// allocation size and dimensions, the header's offset table section the
// size of the tables' one, and each region inside its kind's section.
// Corruption naming the first disagreement.
Status CheckImageAgreement(const ImageHeader& header, const ImageTables& tables);

// --- the builder --------------------------------------------------------

struct ImageDims {
  std::uint32_t layers = 0;   // MoE layers indexed in the offset table
  std::uint32_t experts = 0;  // routed experts (the shared one is added)
  std::uint32_t halves = 0;   // halves per projection
  std::uint32_t tp = 1, rank = 0;
  std::string commit;
};

// A half record: trellis bytes (16·K·hidden) ‖ `slice_elems` elements of
// `vector_dtype` ‖ `block_elems` block-row elements of `block_dtype`.
struct ImageHalfSpec {
  int layer = 0;
  int expert = 0;  // kSharedExpert (-1) for the shared expert
  Proj proj = Proj::kGate;
  std::uint32_t half = 0;
  int k = 0;                        // 1..8
  std::uint64_t trellis_bytes = 0;  // a positive multiple of 16·K
  std::uint32_t slice_elems = 128;
  std::uint32_t block_elems = 48;
  DType vector_dtype = DType::kF32;  // the slice's: F16, BF16 or F32
  DType block_dtype = DType::kF32;   // the block row's: F16, BF16 or F32
  std::uint64_t digest = 0;          // k{K}.checksum[e, p, h]
};

// A tensor stored as is: signs, dense data, plain tensors.
struct ImageTensorSpec {
  std::string name;  // the file's tensor name (dense and plain; empty for signs)
  int layer = -1;    // -1: not a layer's (vocabulary, ...)
  DType dtype = DType::kU8;
  std::vector<std::uint64_t> shape;  // rank 0..4 (signs: 1), each dim < 2^32
  std::uint64_t digest = 0;          // XXH64 of the stored bytes
};

// Dense data's record fields (spec 10.2).
struct ImageDenseFields {
  DenseFormat format = DenseFormat::kFp32;
  std::uint32_t out = 0, inp = 0;
  int k = 0;  // TRELLIS: 1..8; else 0
  DenseSide side = DenseSide::kReplicated;
};

// A plain tensor's format fields (ImagePlainFormat says which are used).
struct ImagePlainFields {
  ImagePlainFormat format = ImagePlainFormat::kStored;
  std::uint8_t k = 0;
  std::uint32_t out = 0, inp = 0;
};

// A check segment before the layout exists: bytes [offset, offset + length)
// of the region the Add* call numbered `tensor`.
struct ImageSegmentRef {
  std::uint32_t tensor = 0;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
};

// What Finish returns: everything the holder writes.
struct ImageLayout {
  ImageHeader header;
  ImageTables tables;                         // tensors in Add order, with offsets
  std::vector<std::byte> header_bytes;        // kImageHeaderBytes, for offset 0
  std::vector<std::byte> offset_table_bytes;  // for header.offset_table.offset
  std::uint64_t allocation_bytes() const { return header.allocation_bytes; }
};

// Lays out an image. Add* calls number regions 0, 1, ... in call order (the
// tensor table's order); each returns InvalidArgument (naming the region)
// for something the tables could not hold or a reader would refuse, and
// leaves the builder as it was. A half record also gets its check (one
// segment, its digest). Within a section regions follow Add order.
// Not synchronized: one thread.
class ImageLayoutBuilder {
 public:
  // REQUIRES nothing; bad dims are reported by the first Add or by Finish.
  explicit ImageLayoutBuilder(ImageDims dims);

  Result<std::uint32_t> AddHalf(const ImageHalfSpec& spec);
  // A layer's signs.in (`out` false) or signs.out; rank-1 shape, float dtype.
  Result<std::uint32_t> AddSigns(int layer, bool out, const ImageTensorSpec& spec);
  Result<std::uint32_t> AddDense(const ImageTensorSpec& spec, const ImageDenseFields& fields);
  Result<std::uint32_t> AddPlain(const ImageTensorSpec& spec, const ImagePlainFields& fields = {});
  // A digest over 1..4 pieces of regions already added, hashed in order.
  Status AddCheck(std::uint64_t digest, std::span<const ImageSegmentRef> segments);

  // The layout. InvalidArgument for bad dims or a size past 2^64.
  // Callable once; the builder is spent afterwards.
  Result<ImageLayout> Finish();

 private:
  Status CheckDims() const;
  Result<std::uint32_t> Add(ImageTensor t, std::uint64_t digest);
  Result<std::uint32_t> AddPlainLike(ImageTensor t, const ImageTensorSpec& spec, const std::string& what);

  ImageDims dims_;
  std::vector<ImageTensor> tensors_;
  std::vector<std::vector<ImageSegmentRef>> checks_;
  std::vector<std::uint64_t> check_digests_;
  std::vector<bool> halves_;       // offset-table indexes taken (sized on first use)
  std::set<std::uint64_t> signs_;  // layer * 2 + out
  std::set<std::string> names_;
  bool finished_ = false;
};

}  // namespace exlr8
