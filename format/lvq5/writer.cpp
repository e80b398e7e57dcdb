#include "format/lvq5/writer.h"

#include <cstring>

#include "format/dtype.h"

namespace exlr8::lvq5 {

namespace {

struct SplitMix64 {
  std::uint64_t s;
  std::uint64_t Next() {
    std::uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1) with 53 bits.
  double Unit() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
};

constexpr std::uint64_t kWordMask = (1ULL << 48) - 1;

std::vector<double> RandomRowScales(SplitMix64& rng, std::uint32_t n) {
  std::vector<double> v(n);
  for (auto& x : v) x = 0.5 + 1.5 * rng.Unit();
  return v;
}

std::uint16_t RandomHalf(SplitMix64& rng, double lo, double hi) {
  return FloatToHalf(static_cast<float>(lo + (hi - lo) * rng.Unit()));
}

template <typename T>
std::span<const std::byte> Bytes(const std::vector<T>& v) {
  return std::as_bytes(std::span<const T>(v));
}

}  // namespace

void WordToDiskBytes(std::uint64_t w, std::byte* six) {
  const std::uint64_t label = w & ((1ULL << 47) - 1);
  const std::uint64_t gain = (w >> 47) & 1;
  const std::uint64_t v = (label << 1) | gain;
  for (int i = 0; i < 6; ++i) six[i] = static_cast<std::byte>(v >> (8 * (5 - i)));
}

TetraRecordSpec RandomTetra(std::string name, std::uint32_t d_out, std::uint32_t d_in, std::uint64_t seed) {
  SplitMix64 rng{seed};
  TetraRecordSpec r;
  r.name = std::move(name);
  r.d_out = d_out;
  r.d_in = d_in;
  r.rotation_seed = rng.Next();
  r.has_rotation = true;
  r.centroids[0] = 0.25 + 0.5 * rng.Unit();
  r.centroids[1] = 0.75 + 0.5 * rng.Unit();
  r.row_scales = RandomRowScales(rng, d_out);
  r.tail.resize(static_cast<std::size_t>(d_out) * (d_in % kTetraBlock));
  for (auto& x : r.tail) x = static_cast<float>(2 * rng.Unit() - 1);
  r.words.resize(static_cast<std::size_t>(d_out) * (d_in / kTetraBlock));
  for (auto& w : r.words) w = rng.Next() & kWordMask;
  return r;
}

Int4G128RecordSpec RandomInt4G128(std::string name, std::uint32_t d_out, std::uint32_t d_in,
                                  std::uint64_t seed) {
  SplitMix64 rng{seed};
  Int4G128RecordSpec r;
  r.name = std::move(name);
  r.d_out = d_out;
  r.d_in = d_in;
  const std::uint64_t n = static_cast<std::uint64_t>(d_out) * d_in;
  r.packed.resize(n / 2);
  for (auto& b : r.packed) b = static_cast<std::uint8_t>(rng.Next());
  r.scales.resize(n / kInt4G128Group);
  r.biases.resize(n / kInt4G128Group);
  for (auto& s : r.scales) s = RandomHalf(rng, 0.001, 0.05);
  for (auto& b : r.biases) b = RandomHalf(rng, -0.4, 0.0);
  return r;
}

RawTensorSpec RandomRawF16(std::string name, std::vector<std::uint64_t> dims, std::uint64_t seed) {
  SplitMix64 rng{seed};
  RawTensorSpec t;
  t.name = std::move(name);
  t.tag = RawTag::kF16;
  std::uint64_t n = 1;
  for (auto d : dims) n *= d;
  t.dims = std::move(dims);
  t.f16.resize(n);
  for (auto& v : t.f16) v = RandomHalf(rng, -2.0, 2.0);
  return t;
}

RawTensorSpec RandomRawQuant(std::string name, std::vector<std::uint64_t> dims, std::uint32_t bits,
                             std::uint32_t group, std::uint64_t seed) {
  SplitMix64 rng{seed};
  RawTensorSpec t;
  t.name = std::move(name);
  t.tag = RawTag::kQuant;
  t.bits = bits;
  t.group = group;
  std::uint64_t n = 1;
  for (auto d : dims) n *= d;
  const std::uint64_t row_len = dims.empty() ? 1 : dims.back();
  const std::uint64_t rows = row_len ? n / row_len : 0;
  t.dims = std::move(dims);
  t.packed.resize((n * bits + 7) / 8);
  for (auto& b : t.packed) b = static_cast<std::uint8_t>(rng.Next());
  const std::uint64_t groups = rows * ((row_len + group - 1) / group);
  t.scales.resize(groups);
  t.biases.resize(groups);
  for (auto& s : t.scales) s = RandomHalf(rng, 0.001, 0.05);
  for (auto& b : t.biases) b = RandomHalf(rng, -0.4, 0.0);
  return t;
}

Status Writer::Put(std::span<const std::byte> b) {
  if (b.empty()) return Status::Ok();
  EXLR8_RETURN_IF_ERROR(sink_(b));
  written_ += b.size();
  return Status::Ok();
}

Status Writer::U32(std::uint32_t v) {
  std::byte b[4];
  for (int i = 0; i < 4; ++i) b[i] = static_cast<std::byte>(v >> (8 * i));
  return Put(b);
}

Status Writer::U64(std::uint64_t v) {
  std::byte b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<std::byte>(v >> (8 * i));
  return Put(b);
}

Status Writer::Str(const std::string& s) {
  EXLR8_RETURN_IF_ERROR(U32(static_cast<std::uint32_t>(s.size())));
  return Put(std::as_bytes(std::span<const char>(s.data(), s.size())));
}

Status Writer::WriteHeader(const Header& h, const char magic[4]) {
  if (written_ != 0) return InvalidArgumentError("lvq5 writer: header written twice");
  EXLR8_RETURN_IF_ERROR(Put(std::as_bytes(std::span<const char>(magic, 4))));
  EXLR8_RETURN_IF_ERROR(U32(h.matrices));
  EXLR8_RETURN_IF_ERROR(U64(h.ball_fingerprint));
  EXLR8_RETURN_IF_ERROR(U64(h.tetra_fingerprint));
  EXLR8_RETURN_IF_ERROR(U32(h.default_kind));
  EXLR8_RETURN_IF_ERROR(U32(h.kinds_mask));
  matrices_left_ = h.matrices;
  return Status::Ok();
}

Status Writer::Head(const std::string& name, std::uint32_t d_out, std::uint32_t d_in, std::uint32_t shell_cap,
                    Kind kind, std::uint32_t n_centroids, std::uint64_t seed, bool rot) {
  if (matrices_left_ == 0)
    return InvalidArgumentError("lvq5 writer: more matrix records than the header says");
  --matrices_left_;
  EXLR8_RETURN_IF_ERROR(Str(name));
  EXLR8_RETURN_IF_ERROR(U32(d_out));
  EXLR8_RETURN_IF_ERROR(U32(d_in));
  EXLR8_RETURN_IF_ERROR(U32(shell_cap));
  EXLR8_RETURN_IF_ERROR(U32(static_cast<std::uint32_t>(kind)));
  EXLR8_RETURN_IF_ERROR(U32(n_centroids));
  EXLR8_RETURN_IF_ERROR(U64(seed));
  return U32(rot ? 1 : 0);
}

Status Writer::WriteTetraRecord(const TetraRecordSpec& r) {
  const std::uint64_t nblocks = r.d_in / kTetraBlock, tail = r.d_in % kTetraBlock;
  if (r.row_scales.size() != r.d_out || r.tail.size() != r.d_out * tail ||
      r.words.size() != r.d_out * nblocks)
    return InvalidArgumentError("lvq5 writer: Tetra record '" + r.name + "' has inconsistent sizes");
  EXLR8_RETURN_IF_ERROR(Head(r.name, r.d_out, r.d_in, kTetraShellCap, Kind::kTetra, kTetraCentroids,
                             r.rotation_seed, r.has_rotation));
  EXLR8_RETURN_IF_ERROR(Put(std::as_bytes(std::span<const double>(r.centroids, 2))));
  EXLR8_RETURN_IF_ERROR(Put(Bytes(r.row_scales)));
  EXLR8_RETURN_IF_ERROR(Put(Bytes(r.tail)));
  EXLR8_RETURN_IF_ERROR(U64(kTetraWordBytes * r.words.size()));
  std::vector<std::byte> codes(kTetraWordBytes * r.words.size());
  for (std::size_t i = 0; i < r.words.size(); ++i) WordToDiskBytes(r.words[i], &codes[kTetraWordBytes * i]);
  return Put(codes);
}

Status Writer::WriteRandomTetraRecord(const std::string& name, std::uint32_t d_out, std::uint32_t d_in,
                                      std::uint64_t seed) {
  // The small fields as RandomTetra with no words; the words from a second
  // stream, one row at a time.
  TetraRecordSpec r = RandomTetra(name, d_out, d_in % kTetraBlock, seed);
  r.d_in = d_in;
  const std::uint64_t nblocks = d_in / kTetraBlock;
  EXLR8_RETURN_IF_ERROR(Head(r.name, r.d_out, r.d_in, kTetraShellCap, Kind::kTetra, kTetraCentroids,
                             r.rotation_seed, r.has_rotation));
  EXLR8_RETURN_IF_ERROR(Put(std::as_bytes(std::span<const double>(r.centroids, 2))));
  EXLR8_RETURN_IF_ERROR(Put(Bytes(r.row_scales)));
  EXLR8_RETURN_IF_ERROR(Put(Bytes(r.tail)));
  EXLR8_RETURN_IF_ERROR(U64(kTetraWordBytes * nblocks * d_out));
  SplitMix64 rng{seed ^ 0x5745524453ULL};
  std::vector<std::byte> row(kTetraWordBytes * nblocks);
  for (std::uint32_t i = 0; i < d_out; ++i) {
    for (std::uint64_t j = 0; j < nblocks; ++j)
      WordToDiskBytes(rng.Next() & kWordMask, &row[kTetraWordBytes * j]);
    EXLR8_RETURN_IF_ERROR(Put(row));
  }
  return Status::Ok();
}

Status Writer::WriteInt4G128Record(const Int4G128RecordSpec& r) {
  const std::uint64_t n = static_cast<std::uint64_t>(r.d_out) * r.d_in;
  if (r.packed.size() != n / 2 || r.scales.size() != n / kInt4G128Group || r.biases.size() != r.scales.size())
    return InvalidArgumentError("lvq5 writer: Int4G128 record '" + r.name + "' has inconsistent sizes");
  EXLR8_RETURN_IF_ERROR(Head(r.name, r.d_out, r.d_in, kInt4G128ShellCap, Kind::kInt4G128, 0, 0, false));
  EXLR8_RETURN_IF_ERROR(U64(4 + 4 + 8 + r.packed.size() + 8 + 4 * r.scales.size()));
  EXLR8_RETURN_IF_ERROR(U32(4));
  EXLR8_RETURN_IF_ERROR(U32(kInt4G128Group));
  EXLR8_RETURN_IF_ERROR(U64(r.packed.size()));
  EXLR8_RETURN_IF_ERROR(Put(Bytes(r.packed)));
  EXLR8_RETURN_IF_ERROR(U64(r.scales.size()));
  EXLR8_RETURN_IF_ERROR(Put(Bytes(r.scales)));
  return Put(Bytes(r.biases));
}

Status Writer::BeginRaw(std::uint32_t n) {
  if (matrices_left_ != 0 || raw_left_ >= 0)
    return InvalidArgumentError("lvq5 writer: raw tensors begin after all matrix records, once");
  raw_left_ = n;
  return U32(n);
}

Status Writer::WriteRaw(const RawTensorSpec& t) {
  if (raw_left_ <= 0) return InvalidArgumentError("lvq5 writer: more raw tensors than BeginRaw said");
  --raw_left_;
  EXLR8_RETURN_IF_ERROR(U32(static_cast<std::uint32_t>(t.tag)));
  EXLR8_RETURN_IF_ERROR(Str(t.name));
  EXLR8_RETURN_IF_ERROR(U32(static_cast<std::uint32_t>(t.dims.size())));
  for (auto d : t.dims) EXLR8_RETURN_IF_ERROR(U64(d));
  if (t.tag == RawTag::kF16) {
    EXLR8_RETURN_IF_ERROR(U64(t.f16.size()));
    return Put(Bytes(t.f16));
  }
  EXLR8_RETURN_IF_ERROR(U32(t.bits));
  EXLR8_RETURN_IF_ERROR(U32(t.group));
  EXLR8_RETURN_IF_ERROR(U64(t.packed.size()));
  EXLR8_RETURN_IF_ERROR(Put(Bytes(t.packed)));
  EXLR8_RETURN_IF_ERROR(U64(t.scales.size()));
  EXLR8_RETURN_IF_ERROR(Put(Bytes(t.scales)));
  return Put(Bytes(t.biases));
}

Status Writer::BeginBlobs(std::uint32_t n) {
  if (raw_left_ != 0 || blobs_left_ >= 0)
    return InvalidArgumentError("lvq5 writer: blobs begin after all raw tensors, once");
  blobs_left_ = n;
  return U32(n);
}

Status Writer::WriteBlob(const std::string& name, std::span<const std::byte> bytes) {
  if (blobs_left_ <= 0) return InvalidArgumentError("lvq5 writer: more blobs than BeginBlobs said");
  --blobs_left_;
  EXLR8_RETURN_IF_ERROR(Str(name));
  EXLR8_RETURN_IF_ERROR(U64(bytes.size()));
  return Put(bytes);
}

Status Writer::Finish() {
  if (blobs_left_ != 0)
    return InvalidArgumentError("lvq5 writer: fewer records, raw tensors or blobs than declared");
  return Status::Ok();
}

Result<std::vector<std::byte>> WriteFile(const FileSpec& spec) {
  std::vector<std::byte> out;
  Writer w([&out](std::span<const std::byte> b) {
    out.insert(out.end(), b.begin(), b.end());
    return Status::Ok();
  });
  Header h;
  h.matrices = static_cast<std::uint32_t>(spec.tetra.size() + spec.int4.size());
  h.ball_fingerprint = kBallFingerprint;
  EXLR8_ASSIGN_OR_RETURN(h.tetra_fingerprint, ExpectedTetraFingerprint());
  h.default_kind =
      static_cast<std::uint32_t>(spec.tetra.empty() && !spec.int4.empty() ? Kind::kInt4G128 : Kind::kTetra);
  h.kinds_mask = 6;
  EXLR8_RETURN_IF_ERROR(w.WriteHeader(h));
  for (const auto& r : spec.tetra) EXLR8_RETURN_IF_ERROR(w.WriteTetraRecord(r));
  for (const auto& r : spec.int4) EXLR8_RETURN_IF_ERROR(w.WriteInt4G128Record(r));
  EXLR8_RETURN_IF_ERROR(w.BeginRaw(static_cast<std::uint32_t>(spec.raw.size())));
  for (const auto& t : spec.raw) EXLR8_RETURN_IF_ERROR(w.WriteRaw(t));
  EXLR8_RETURN_IF_ERROR(w.BeginBlobs(static_cast<std::uint32_t>(spec.blobs.size())));
  for (const auto& [name, bytes] : spec.blobs)
    EXLR8_RETURN_IF_ERROR(
        w.WriteBlob(name, std::as_bytes(std::span<const char>(bytes.data(), bytes.size()))));
  EXLR8_RETURN_IF_ERROR(w.Finish());
  return out;
}

}  // namespace exlr8::lvq5
