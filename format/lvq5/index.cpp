#include "format/lvq5/index.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <set>
#include <string_view>
#include <utility>

#include "format/checksum.h"
#include "format/utf8.h"

namespace exlr8::lvq5 {

namespace {

std::string Hex(std::uint64_t v) { return "0x" + Hex64(v); }

// Reads fields in file order from `file`, each bounded by the file size.
// `where_` names the record being read ("matrix record 3 'x' at byte 99")
// so every error says the file, the record, the field and its offset.
class Cursor {
 public:
  explicit Cursor(const ByteSource& file) : file_(file), size_(file.size()) {}

  std::uint64_t pos() const { return pos_; }
  std::uint64_t remaining() const { return size_ - pos_; }
  void SetWhere(std::string where) { where_ = std::move(where); }

  Status Error(std::string_view field, std::uint64_t at, const std::string& problem) const {
    std::string m = file_.name() + ": ";
    if (!where_.empty()) m += where_ + ": ";
    m += std::string(field) + " at byte " + std::to_string(at) + " " + problem;
    return CorruptionError(std::move(m));
  }

  // Checks that `n` more bytes of `field` are in the file.
  Status Need(std::string_view field, std::uint64_t n) const {
    if (n > remaining())
      return Error(field, pos_,
                   "needs " + std::to_string(n) + " bytes but the file ends " + std::to_string(remaining()) +
                       " bytes later (file size " + std::to_string(size_) + ")");
    return Status::Ok();
  }

  Result<std::uint32_t> U32(std::string_view field) {
    std::array<std::byte, 4> b;
    EXLR8_RETURN_IF_ERROR(Read(field, b));
    std::uint32_t v = 0;
    for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<std::uint32_t>(b[i]);
    return v;
  }

  Result<std::uint64_t> U64(std::string_view field) {
    std::array<std::byte, 8> b;
    EXLR8_RETURN_IF_ERROR(Read(field, b));
    std::uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<std::uint64_t>(b[i]);
    return v;
  }

  Status Read(std::string_view field, std::span<std::byte> dst) {
    EXLR8_RETURN_IF_ERROR(Need(field, dst.size()));
    Status s = file_.ReadAt(pos_, dst);
    if (!s.ok()) return s.code() == StatusCode::kCorruption ? Error(field, pos_, s.message()) : s;
    pos_ += dst.size();
    return Status::Ok();
  }

  Status Skip(std::string_view field, std::uint64_t n) {
    EXLR8_RETURN_IF_ERROR(Need(field, n));
    pos_ += n;
    return Status::Ok();
  }

  // u32 length + UTF-8 bytes (spec 1.1).
  Result<std::string> Name(std::string_view field) {
    const std::uint64_t at = pos_;
    EXLR8_ASSIGN_OR_RETURN(std::uint32_t len, U32(std::string(field) + " length"));
    if (len > kMaxNameBytes)
      return Error(std::string(field) + " length", at,
                   "is " + std::to_string(len) + ", more than the " + std::to_string(kMaxNameBytes) +
                       " bytes exlr8d accepts for a name");
    if (len == 0) return Error(std::string(field) + " length", at, "is 0: names must not be empty");
    EXLR8_RETURN_IF_ERROR(Need(field, len));
    std::string s(len, '\0');
    EXLR8_RETURN_IF_ERROR(Read(field, std::as_writable_bytes(std::span<char>(s.data(), s.size()))));
    if (!IsValidUtf8(s)) return Error(field, at + 4, "is not valid UTF-8");
    return s;
  }

 private:
  const ByteSource& file_;
  std::uint64_t size_;
  std::uint64_t pos_ = 0;
  std::string where_;
};

// a * b, or false on overflow.
bool Mul(std::uint64_t a, std::uint64_t b, std::uint64_t* out) { return !__builtin_mul_overflow(a, b, out); }

std::string Quote(const std::string& name) { return "'" + name + "'"; }

Status ReadHeader(Cursor& c, std::uint64_t tetra_fp, Header* h) {
  std::array<std::byte, 4> magic;
  EXLR8_RETURN_IF_ERROR(c.Read("magic", magic));
  if (std::memcmp(magic.data(), kMagic, 4) != 0) {
    const char* m = reinterpret_cast<const char*>(magic.data());
    if (std::memcmp(m, "LVQ", 3) == 0 && m[3] >= '1' && m[3] <= '4')
      return c.Error(
          "magic", 0,
          std::string("is LVQ") + m[3] + ": version " + m[3] + " is not supported: exlr8d reads LVQ5");
    std::string shown;
    for (auto b : magic) {
      char buf[5];
      std::snprintf(buf, sizeof buf, "%02x", static_cast<unsigned>(b));
      shown += buf;
    }
    return c.Error("magic", 0, "is 0x" + shown + ", not 'LVQ5': this is not an LVQ5 file");
  }
  EXLR8_ASSIGN_OR_RETURN(h->matrices, c.U32("matrix record count"));
  EXLR8_ASSIGN_OR_RETURN(h->ball_fingerprint, c.U64("ball map fingerprint"));
  if (h->ball_fingerprint != kBallFingerprint)
    return c.Error("ball map fingerprint", 8,
                   "is " + Hex(h->ball_fingerprint) + ", expected " + Hex(kBallFingerprint));
  EXLR8_ASSIGN_OR_RETURN(h->tetra_fingerprint, c.U64("Tetra map fingerprint"));
  if (h->tetra_fingerprint != tetra_fp)
    return c.Error("Tetra map fingerprint", 16,
                   "is " + Hex(h->tetra_fingerprint) + ", but exlr8d's Tetra tables give " + Hex(tetra_fp) +
                       ": the file was written for another index-to-point map");
  EXLR8_ASSIGN_OR_RETURN(h->default_kind, c.U32("default kind"));
  EXLR8_ASSIGN_OR_RETURN(h->kinds_mask, c.U32("kinds mask"));
  if (h->kinds_mask & ~kKnownKindsMask)
    return c.Error(
        "kinds mask", 28,
        "is " + Hex(h->kinds_mask) + ": unknown kind bits " + Hex(h->kinds_mask & ~kKnownKindsMask));
  if (h->kinds_mask & 1u)
    return c.Error(
        "kinds mask", 28,
        "is " + Hex(h->kinds_mask) + ": it declares the ball kind (bit 0), which exlr8d does not read");
  if (h->default_kind >= 32 || !(h->kinds_mask & (1u << h->default_kind)))
    return c.Error("default kind", 24,
                   "is " + std::to_string(h->default_kind) + " (" + KindName(h->default_kind) +
                       "), not in the kinds mask " + Hex(h->kinds_mask));
  return Status::Ok();
}

// The smallest matrix record: a head with a 1-byte name and the u64 length
// that follows it (Tetra code_len or Int4G128 payload_len).
constexpr std::uint64_t kMinMatrixRecord = 36 + 1 + 8;
constexpr std::uint64_t kMinRawTensor = 4 + 4 + 1 + 4 + 8;  // f16 rank 0
constexpr std::uint64_t kMinBlob = 4 + 1 + 8;

Status ReadTetraBody(Cursor& c, MatrixRecord* r) {
  const std::uint64_t d_out = r->d_out;
  r->nblocks = r->d_in / kTetraBlock;
  r->tail_cols = r->d_in % kTetraBlock;
  r->centroids_offset = c.pos();
  EXLR8_RETURN_IF_ERROR(c.Skip("centroids (2 x f64)", 8ull * r->n_centroids));
  r->row_scales_offset = c.pos();
  EXLR8_RETURN_IF_ERROR(c.Skip("row scales (d_out x f64)", 8 * d_out));
  r->tail_offset = c.pos();
  EXLR8_RETURN_IF_ERROR(c.Skip("tail (d_out x d_in mod 24 x f32)", 4 * d_out * r->tail_cols));
  const std::uint64_t at = c.pos();
  EXLR8_ASSIGN_OR_RETURN(std::uint64_t code_len, c.U64("code_len"));
  const std::uint64_t expected = kTetraWordBytes * d_out * r->nblocks;  // < 2^32 * 2^32 * 6 / 24
  if (code_len != expected)
    return c.Error("code_len", at,
                   "is " + std::to_string(code_len) +
                       ", expected exactly 6 * d_out * floor(d_in/24) = " + std::to_string(expected));
  r->codes_offset = c.pos();
  r->codes_length = code_len;
  return c.Skip("code stream", code_len);
}

Status ReadInt4G128Body(Cursor& c, MatrixRecord* r) {
  if (r->d_in % kInt4G128Group != 0)
    return c.Error("d_in", r->offset + 4 + r->name.size() + 4,
                   "is " + std::to_string(r->d_in) + ", not a multiple of 128 as an Int4G128 record needs");
  std::uint64_t at = c.pos();
  EXLR8_ASSIGN_OR_RETURN(r->payload_length, c.U64("payload_len"));
  EXLR8_RETURN_IF_ERROR(c.Need("payload", r->payload_length));
  r->payload_offset = c.pos();
  std::uint64_t payload_end = r->payload_offset + r->payload_length;
  const std::uint64_t n = static_cast<std::uint64_t>(r->d_out) * r->d_in;
  at = c.pos();
  EXLR8_ASSIGN_OR_RETURN(r->bits, c.U32("payload bits"));
  if (r->bits != 4) return c.Error("payload bits", at, "is " + std::to_string(r->bits) + ", expected 4");
  at = c.pos();
  EXLR8_ASSIGN_OR_RETURN(r->group, c.U32("payload group"));
  if (r->group != kInt4G128Group)
    return c.Error("payload group", at, "is " + std::to_string(r->group) + ", expected 128");
  at = c.pos();
  EXLR8_ASSIGN_OR_RETURN(r->packed_length, c.U64("packed_len"));
  if (r->packed_length != n / 2)
    return c.Error(
        "packed_len", at,
        "is " + std::to_string(r->packed_length) + ", expected d_out * d_in / 2 = " + std::to_string(n / 2));
  r->packed_offset = c.pos();
  EXLR8_RETURN_IF_ERROR(c.Skip("packed nibbles", r->packed_length));
  at = c.pos();
  EXLR8_ASSIGN_OR_RETURN(r->groups, c.U64("groups"));
  if (r->groups != n / kInt4G128Group)
    return c.Error("groups", at,
                   "is " + std::to_string(r->groups) +
                       ", expected d_out * d_in / 128 = " + std::to_string(n / kInt4G128Group));
  r->scales_offset = c.pos();
  EXLR8_RETURN_IF_ERROR(c.Skip("scales (groups x f16)", 2 * r->groups));
  r->biases_offset = c.pos();
  EXLR8_RETURN_IF_ERROR(c.Skip("biases (groups x f16)", 2 * r->groups));
  if (c.pos() != payload_end)
    return c.Error("payload_len", r->payload_offset - 8,
                   "is " + std::to_string(r->payload_length) + ", but its parts take " +
                       std::to_string(c.pos() - r->payload_offset) + " bytes");
  return Status::Ok();
}

Status ReadMatrix(Cursor& c, const Header& h, std::uint32_t index, MatrixRecord* r) {
  r->offset = c.pos();
  c.SetWhere("matrix record " + std::to_string(index) + " at byte " + std::to_string(r->offset));
  EXLR8_ASSIGN_OR_RETURN(r->name, c.Name("name"));
  c.SetWhere("matrix record " + std::to_string(index) + " " + Quote(r->name) + " at byte " +
             std::to_string(r->offset));
  std::uint64_t at = c.pos();
  EXLR8_ASSIGN_OR_RETURN(r->d_out, c.U32("d_out"));
  if (r->d_out == 0) return c.Error("d_out", at, "is 0");
  at = c.pos();
  EXLR8_ASSIGN_OR_RETURN(r->d_in, c.U32("d_in"));
  if (r->d_in == 0) return c.Error("d_in", at, "is 0");
  const std::uint64_t shell_at = c.pos();
  EXLR8_ASSIGN_OR_RETURN(r->shell_cap, c.U32("shell_cap"));
  at = c.pos();
  EXLR8_ASSIGN_OR_RETURN(std::uint32_t kind, c.U32("kind tag"));
  if (kind == static_cast<std::uint32_t>(Kind::kBall))
    return c.Error("kind tag", at, "is 0 (ball): exlr8d does not read v1 ball records");
  if (kind > static_cast<std::uint32_t>(Kind::kInt4G128))
    return c.Error("kind tag", at, "is " + std::to_string(kind) + ", not a known kind");
  if (!(h.kinds_mask & (1u << kind)))
    return c.Error("kind tag", at,
                   "is " + std::to_string(kind) + " (" + KindName(kind) +
                       "), not in the header's kinds mask " + Hex(h.kinds_mask));
  r->kind = static_cast<Kind>(kind);
  const bool tetra = r->kind == Kind::kTetra;
  const std::uint32_t cap = tetra ? kTetraShellCap : kInt4G128ShellCap;
  if (r->shell_cap != cap)
    return c.Error("shell_cap", shell_at,
                   "is " + std::to_string(r->shell_cap) + ", expected " + std::to_string(cap) + " for a" +
                       (tetra ? " Tetra" : "n Int4G128") + " record");
  at = c.pos();
  EXLR8_ASSIGN_OR_RETURN(r->n_centroids, c.U32("n_centroids"));
  const std::uint32_t cent = tetra ? kTetraCentroids : 0;
  if (r->n_centroids != cent)
    return c.Error("n_centroids", at,
                   "is " + std::to_string(r->n_centroids) + ", expected " + std::to_string(cent) + " for a" +
                       (tetra ? " Tetra record (one gain bit per word)" : "n Int4G128 record"));
  at = c.pos();
  EXLR8_ASSIGN_OR_RETURN(r->rotation_seed, c.U64("rotation_seed"));
  if (!tetra && r->rotation_seed != 0)
    return c.Error("rotation_seed", at,
                   "is " + Hex(r->rotation_seed) + ", expected 0 for an Int4G128 record");
  at = c.pos();
  EXLR8_ASSIGN_OR_RETURN(std::uint32_t flag, c.U32("has_rotation"));
  if (flag > 1) return c.Error("has_rotation", at, "is " + std::to_string(flag) + ", expected 0 or 1");
  if (!tetra && flag != 0) return c.Error("has_rotation", at, "is 1, expected 0 for an Int4G128 record");
  r->has_rotation = flag == 1;
  EXLR8_RETURN_IF_ERROR(tetra ? ReadTetraBody(c, r) : ReadInt4G128Body(c, r));
  r->end = c.pos();
  return Status::Ok();
}

Status ReadRaw(Cursor& c, std::uint32_t index, RawTensor* t) {
  t->offset = c.pos();
  c.SetWhere("raw tensor " + std::to_string(index) + " at byte " + std::to_string(t->offset));
  std::uint64_t at = c.pos();
  EXLR8_ASSIGN_OR_RETURN(std::uint32_t tag, c.U32("tag"));
  if (tag > 1) return c.Error("tag", at, "is " + std::to_string(tag) + ", expected 0 (f16) or 1 (quant)");
  t->tag = static_cast<RawTag>(tag);
  EXLR8_ASSIGN_OR_RETURN(t->name, c.Name("name"));
  c.SetWhere("raw tensor " + std::to_string(index) + " " + Quote(t->name) + " at byte " +
             std::to_string(t->offset));
  at = c.pos();
  EXLR8_ASSIGN_OR_RETURN(std::uint32_t rank, c.U32("rank"));
  std::uint64_t dims_bytes = 8ull * rank;
  EXLR8_RETURN_IF_ERROR(c.Need("dims (rank x u64)", dims_bytes));
  if (t->tag == RawTag::kQuant && rank == 0)
    return c.Error("rank", at, "is 0: a quant tensor needs an innermost dimension to group along");
  t->dims.reserve(rank);  // bounded: the rank's bytes are in the file
  std::uint64_t count = 1;
  for (std::uint32_t i = 0; i < rank; ++i) {
    at = c.pos();
    EXLR8_ASSIGN_OR_RETURN(std::uint64_t d, c.U64("dims[" + std::to_string(i) + "]"));
    if (!Mul(count, d, &count))
      return c.Error("dims[" + std::to_string(i) + "]", at,
                     "is " + std::to_string(d) + ": the element count overflows");
    t->dims.push_back(d);
  }
  t->count = count;
  t->row_len = rank == 0 ? 1 : t->dims.back();
  t->rows = t->row_len == 0 ? 0 : count / t->row_len;
  if (t->tag == RawTag::kF16) {
    at = c.pos();
    EXLR8_ASSIGN_OR_RETURN(std::uint64_t n, c.U64("n"));
    if (n != count)
      return c.Error(
          "n", at, "is " + std::to_string(n) + ", but the dims hold " + std::to_string(count) + " elements");
    std::uint64_t len;
    if (!Mul(n, 2, &len)) return c.Error("n", at, "is " + std::to_string(n) + ": the byte length overflows");
    t->data_offset = c.pos();
    t->data_length = len;
    EXLR8_RETURN_IF_ERROR(c.Skip("values (n x f16)", len));
  } else {
    at = c.pos();
    EXLR8_ASSIGN_OR_RETURN(t->bits, c.U32("bits"));
    if (t->bits != 4 && t->bits != 8)
      return c.Error("bits", at, "is " + std::to_string(t->bits) + ", expected 4 or 8");
    at = c.pos();
    EXLR8_ASSIGN_OR_RETURN(t->group, c.U32("group"));
    if (t->group == 0) return c.Error("group", at, "is 0");
    at = c.pos();
    EXLR8_ASSIGN_OR_RETURN(std::uint64_t packed, c.U64("packed_len"));
    // count <= 2^64-1, so count * bits / 8 is computed without overflow as
    // count / 8 * bits + ceil(count % 8 * bits / 8).
    const std::uint64_t expected = count / 8 * t->bits + (count % 8 * t->bits + 7) / 8;
    if (packed != expected)
      return c.Error("packed_len", at,
                     "is " + std::to_string(packed) + ", expected ceil(" + std::to_string(count) + " * " +
                         std::to_string(t->bits) + " / 8) = " + std::to_string(expected));
    t->data_offset = c.pos();
    t->data_length = packed;
    EXLR8_RETURN_IF_ERROR(c.Skip("packed values", packed));
    at = c.pos();
    EXLR8_ASSIGN_OR_RETURN(t->groups, c.U64("groups"));
    const std::uint64_t per_row = t->row_len / t->group + (t->row_len % t->group != 0);
    std::uint64_t expected_groups;
    if (!Mul(t->rows, per_row, &expected_groups) || t->groups != expected_groups)
      return c.Error("groups", at,
                     "is " + std::to_string(t->groups) + ", expected rows * ceil(row_len / group) = " +
                         std::to_string(t->rows) + " * " + std::to_string(per_row));
    std::uint64_t table;
    if (!Mul(t->groups, 2, &table)) return c.Error("groups", at, "overflows");
    t->scales_offset = c.pos();
    EXLR8_RETURN_IF_ERROR(c.Skip("scales (groups x f16)", table));
    t->biases_offset = c.pos();
    EXLR8_RETURN_IF_ERROR(c.Skip("biases (groups x f16)", table));
  }
  t->end = c.pos();
  return Status::Ok();
}

Status ReadBlob(Cursor& c, std::uint32_t index, Blob* b) {
  b->offset = c.pos();
  c.SetWhere("blob " + std::to_string(index) + " at byte " + std::to_string(b->offset));
  EXLR8_ASSIGN_OR_RETURN(b->name, c.Name("name"));
  c.SetWhere("blob " + std::to_string(index) + " " + Quote(b->name) + " at byte " +
             std::to_string(b->offset));
  EXLR8_ASSIGN_OR_RETURN(b->length, c.U64("length"));
  b->data_offset = c.pos();
  EXLR8_RETURN_IF_ERROR(c.Skip("bytes", b->length));
  b->end = c.pos();
  return Status::Ok();
}

// A count read from the file bounds nothing by itself: vectors reserve at
// most what the remaining bytes could hold (`min_bytes` per item), and when
// a walk fails with a count the file cannot hold, the error names the count
// too ("... ; n_raw at byte 99 is 4294967295, but ...").
struct Count {
  std::string field;
  std::uint64_t at, value, fits;
  std::uint64_t min_bytes;
  Count(const Cursor& c, std::string f, std::uint64_t a, std::uint64_t v, std::uint64_t min)
      : field(std::move(f)), at(a), value(v), fits(c.remaining() / min), min_bytes(min) {}
  std::size_t Reserve() const { return static_cast<std::size_t>(std::min(value, fits)); }
  Status Explain(Status s) const {
    if (s.code() != StatusCode::kCorruption || value <= fits) return s;
    return CorruptionError(s.message() + "; " + field + " at byte " + std::to_string(at) + " is " +
                           std::to_string(value) + ", but the bytes after it hold at most " +
                           std::to_string(fits) + " (" + std::to_string(min_bytes) + " bytes each at least)");
  }
};

}  // namespace

std::string KindName(std::uint32_t kind) {
  switch (kind) {
    case 0:
      return "ball";
    case 1:
      return "tetra";
    case 2:
      return "int4g128";
    default:
      return "kind " + std::to_string(kind);
  }
}

const MatrixRecord* FileIndex::FindMatrix(std::string_view name) const {
  for (const auto& m : matrices)
    if (m.name == name) return &m;
  return nullptr;
}
const RawTensor* FileIndex::FindRaw(std::string_view name) const {
  for (const auto& t : raw)
    if (t.name == name) return &t;
  return nullptr;
}
const Blob* FileIndex::FindBlob(std::string_view name) const {
  for (const auto& b : blobs)
    if (b.name == name) return &b;
  return nullptr;
}

// The published value of the map (spec 2.6); exlr8::tetra's built tables
// reproduce it, and once they are linked here the header is compared with
// what they compute.
constexpr std::uint64_t kPublishedTetraFingerprint = 0x9c3060086c7a13e6ULL;

Result<std::uint64_t> ExpectedTetraFingerprint() { return kPublishedTetraFingerprint; }

Result<FileIndex> ReadIndex(const ByteSource& file) {
  EXLR8_ASSIGN_OR_RETURN(std::uint64_t tetra_fp, ExpectedTetraFingerprint());
  FileIndex ix;
  ix.size = file.size();
  Cursor c(file);
  c.SetWhere("header");
  EXLR8_RETURN_IF_ERROR(ReadHeader(c, tetra_fp, &ix.header));
  c.SetWhere("");
  const Count matrices(c, "header: matrix record count", 4, ix.header.matrices, kMinMatrixRecord);
  ix.matrices.reserve(matrices.Reserve());
  std::set<std::string, std::less<>> tensor_names;
  for (std::uint32_t i = 0; i < ix.header.matrices; ++i) {
    MatrixRecord r;
    EXLR8_RETURN_IF_ERROR(matrices.Explain(ReadMatrix(c, ix.header, i, &r)));
    if (!tensor_names.insert(r.name).second)
      return c.Error("name", r.offset + 4, "'" + r.name + "' is used by an earlier record");
    ix.matrices.push_back(std::move(r));
  }
  c.SetWhere("after the matrix records");
  ix.raw_offset = c.pos();
  EXLR8_ASSIGN_OR_RETURN(std::uint32_t n_raw, c.U32("n_raw"));
  const Count raws(c, "n_raw", ix.raw_offset, n_raw, kMinRawTensor);
  ix.raw.reserve(raws.Reserve());
  for (std::uint32_t i = 0; i < n_raw; ++i) {
    RawTensor t;
    EXLR8_RETURN_IF_ERROR(raws.Explain(ReadRaw(c, i, &t)));
    if (!tensor_names.insert(t.name).second)
      return c.Error("name", t.offset + 8, "'" + t.name + "' is used by an earlier record or raw tensor");
    ix.raw.push_back(std::move(t));
  }
  c.SetWhere("after the raw tensors");
  ix.blobs_offset = c.pos();
  EXLR8_ASSIGN_OR_RETURN(std::uint32_t n_blobs, c.U32("n_blobs"));
  const Count blobs(c, "n_blobs", ix.blobs_offset, n_blobs, kMinBlob);
  ix.blobs.reserve(blobs.Reserve());
  std::set<std::string, std::less<>> blob_names;
  for (std::uint32_t i = 0; i < n_blobs; ++i) {
    Blob b;
    EXLR8_RETURN_IF_ERROR(blobs.Explain(ReadBlob(c, i, &b)));
    if (!blob_names.insert(b.name).second)
      return c.Error("name", b.offset + 4, "'" + b.name + "' is used by an earlier blob");
    ix.blobs.push_back(std::move(b));
  }
  c.SetWhere(ix.blobs.empty() ? "after n_blobs" : "after the last blob");
  if (c.remaining() != 0)
    return c.Error("end of file", c.pos(),
                   "expected, but " + std::to_string(c.remaining()) + " more bytes follow (file size " +
                       std::to_string(ix.size) + ")");
  return ix;
}

}  // namespace exlr8::lvq5
