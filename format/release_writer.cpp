// One file of about 1,000 lines, on purpose: the Synthesizer below holds
// one release's layout while it writes it (the widths of each layer, the
// order halves take in each width file, the offsets and checksums the
// index files then record), and every file it writes reads that state.
// Split by file kind, each piece would take the whole layout as input.
// It is the test fixtures' and `exlr8 synth`'s writer, not on a serving
// path.
#include "format/release_writer.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <numeric>
#include <optional>

#include "format/checksum.h"
#include "format/expert_index.h"
#include "format/layout.h"
#include "format/safetensors_writer.h"

namespace exlr8 {

// ---------------------------------------------------------------------------
// Sinks
// ---------------------------------------------------------------------------

Status ValidateSparseExtents(std::string_view rel_path, std::span<const SparseExtent> extents,
                             std::uint64_t total_size) {
  std::uint64_t prev_end = 0;
  for (std::size_t i = 0; i < extents.size(); ++i) {
    const SparseExtent& x = extents[i];
    if (x.offset < prev_end)
      return InvalidArgumentError(std::string(rel_path) + ": sparse extent " + std::to_string(i) + " at offset " +
                                  std::to_string(x.offset) + " overlaps or precedes the previous one (ends at " +
                                  std::to_string(prev_end) + ")");
    if (x.offset > total_size || x.bytes.size() > total_size - x.offset)
      return InvalidArgumentError(std::string(rel_path) + ": sparse extent " + std::to_string(i) + " [" +
                                  std::to_string(x.offset) + ", +" + std::to_string(x.bytes.size()) +
                                  ") runs past the file size " + std::to_string(total_size));
    prev_end = x.offset + x.bytes.size();
  }
  return Status::Ok();
}

Status MemoryReleaseSink::WriteFile(std::string_view rel_path, std::span<const std::byte> bytes) {
  File f;
  f.size = bytes.size();
  f.extents.emplace(0, std::vector<std::byte>(bytes.begin(), bytes.end()));
  files_.insert_or_assign(std::string(rel_path), std::move(f));
  return Status::Ok();
}

Status MemoryReleaseSink::WriteSparseFile(std::string_view rel_path, std::span<const SparseExtent> extents,
                                          std::uint64_t total_size) {
  EXLR8_RETURN_IF_ERROR(ValidateSparseExtents(rel_path, extents, total_size));
  File f;
  f.size = total_size;
  f.sparse = true;
  for (const SparseExtent& x : extents)
    if (!x.bytes.empty()) f.extents.emplace(x.offset, std::vector<std::byte>(x.bytes.begin(), x.bytes.end()));
  files_.insert_or_assign(std::string(rel_path), std::move(f));
  return Status::Ok();
}

const MemoryReleaseSink::File* MemoryReleaseSink::Find(std::string_view rel_path) const {
  auto it = files_.find(rel_path);
  return it == files_.end() ? nullptr : &it->second;
}

namespace {

Status ReadFileRange(const MemoryReleaseSink::File& f, std::string_view name, std::uint64_t offset,
                     std::span<std::byte> dst) {
  if (offset > f.size || dst.size() > f.size - offset)
    return CorruptionError(std::string(name) + ": read of " + std::to_string(dst.size()) + " bytes at offset " +
                           std::to_string(offset) + " runs past the end (" + std::to_string(f.size) + " bytes)");
  std::fill(dst.begin(), dst.end(), std::byte{0});
  const std::uint64_t end = offset + dst.size();
  auto it = f.extents.upper_bound(offset);
  if (it != f.extents.begin()) --it;
  for (; it != f.extents.end() && it->first < end; ++it) {
    const std::uint64_t x_begin = it->first;
    const std::uint64_t x_end = x_begin + it->second.size();
    const std::uint64_t lo = std::max(x_begin, offset);
    const std::uint64_t hi = std::min(x_end, end);
    if (lo < hi) std::memcpy(dst.data() + (lo - offset), it->second.data() + (lo - x_begin), hi - lo);
  }
  return Status::Ok();
}

class MemoryFileSource final : public ByteSource {
 public:
  MemoryFileSource(const MemoryReleaseSink::File* file, std::string name) : file_(file), name_(std::move(name)) {}
  std::uint64_t size() const override { return file_->size; }
  Status ReadAt(std::uint64_t offset, std::span<std::byte> dst) const override {
    return ReadFileRange(*file_, name_, offset, dst);
  }
  const std::string& name() const override { return name_; }

 private:
  const MemoryReleaseSink::File* file_;
  std::string name_;
};

}  // namespace

Status MemoryReleaseSink::ReadAt(std::string_view rel_path, std::uint64_t offset, std::span<std::byte> dst) const {
  const File* f = Find(rel_path);
  if (f == nullptr) return NotFoundError(std::string(rel_path) + ": no such file in the memory sink");
  return ReadFileRange(*f, rel_path, offset, dst);
}

Result<std::vector<std::byte>> MemoryReleaseSink::ReadAll(std::string_view rel_path, std::uint64_t max_bytes) const {
  const File* f = Find(rel_path);
  if (f == nullptr) return NotFoundError(std::string(rel_path) + ": no such file in the memory sink");
  if (f->size > max_bytes)
    return ResourceExhaustedError(std::string(rel_path) + ": " + std::to_string(f->size) + " bytes exceed the cap " +
                                  std::to_string(max_bytes));
  std::vector<std::byte> out(f->size);
  EXLR8_RETURN_IF_ERROR(ReadFileRange(*f, rel_path, 0, out));
  return out;
}

Result<std::unique_ptr<ByteSource>> MemoryReleaseSink::Open(std::string_view rel_path) const {
  const File* f = Find(rel_path);
  if (f == nullptr) return NotFoundError(std::string(rel_path) + ": no such file in the memory sink");
  return std::unique_ptr<ByteSource>(std::make_unique<MemoryFileSource>(f, std::string(rel_path)));
}

// ---------------------------------------------------------------------------
// Presets and validation
// ---------------------------------------------------------------------------

SynthOptions TinyFixtureGeometry() {
  SynthOptions o;
  o.home_mix = ManifestMix::kRandomPerHalf;
  return o;
}

SynthOptions Glm53Geometry() {
  SynthOptions o;
  o.hidden = 6144;
  o.halves = 16;
  o.experts = 256;
  o.moe_layers.clear();
  for (int l = 3; l <= 77; ++l) o.moe_layers.push_back(l);
  o.dense_layers = {0, 1, 2};
  o.num_hidden_layers = 78;
  o.widths = {2, 3, 4};
  o.shared_widths = {3, 4};
  o.vocab_size = 154880;
  o.width_alignment = 65536;
  o.align_pairs = true;
  o.home_mix = ManifestMix::kPerExpert;
  o.index_only = true;
  return o;
}

namespace {

constexpr std::uint64_t kMaxHidden = 65536;
constexpr std::uint32_t kMaxHalves = 256;
constexpr std::uint32_t kMaxExperts = 4096;
constexpr std::uint64_t kMaxVocab = std::uint64_t{1} << 24;
constexpr int kMaxLayers = 1000;

Status CheckWidthList(std::string_view field, const std::vector<int>& widths) {
  if (widths.empty()) return InvalidArgumentError("synth: " + std::string(field) + " is empty");
  for (std::size_t i = 0; i < widths.size(); ++i) {
    if (widths[i] < 1 || widths[i] > 8)
      return InvalidArgumentError("synth: " + std::string(field) + " has width " + std::to_string(widths[i]) +
                                  ", outside 1..8");
    for (std::size_t j = 0; j < i; ++j)
      if (widths[j] == widths[i])
        return InvalidArgumentError("synth: " + std::string(field) + " lists width " + std::to_string(widths[i]) +
                                    " twice");
  }
  return Status::Ok();
}

Status CheckLayerList(std::string_view field, const std::vector<int>& layers, int num_layers) {
  for (std::size_t i = 0; i < layers.size(); ++i) {
    if (layers[i] < 0 || layers[i] >= num_layers)
      return InvalidArgumentError("synth: " + std::string(field) + " has layer " + std::to_string(layers[i]) +
                                  ", outside 0.." + std::to_string(num_layers - 1) + " (num_hidden_layers " +
                                  std::to_string(num_layers) + ")");
    for (std::size_t j = 0; j < i; ++j)
      if (layers[j] == layers[i])
        return InvalidArgumentError("synth: " + std::string(field) + " lists layer " + std::to_string(layers[i]) +
                                    " twice");
  }
  return Status::Ok();
}

Status CheckDType(std::string_view field, DType d, std::initializer_list<DType> allowed) {
  for (DType a : allowed)
    if (a == d) return Status::Ok();
  std::string list;
  for (DType a : allowed) list += (list.empty() ? "" : ", ") + std::string(DTypeName(a));
  return InvalidArgumentError("synth: " + std::string(field) + " dtype " + std::string(DTypeName(d)) +
                              " is not one of " + list);
}

}  // namespace

Status ValidateSynthOptions(const SynthOptions& o) {
  if (o.hidden == 0 || o.hidden % 128 != 0 || o.hidden > kMaxHidden)
    return InvalidArgumentError("synth: hidden " + std::to_string(o.hidden) +
                                " must be a positive multiple of 128, at most " + std::to_string(kMaxHidden));
  if (o.halves == 0 || o.halves > kMaxHalves)
    return InvalidArgumentError("synth: halves " + std::to_string(o.halves) + " outside 1.." +
                                std::to_string(kMaxHalves));
  if (o.experts == 0 || o.experts > kMaxExperts)
    return InvalidArgumentError("synth: experts " + std::to_string(o.experts) + " outside 1.." +
                                std::to_string(kMaxExperts));
  if (o.vocab_size == 0 || o.vocab_size > kMaxVocab)
    return InvalidArgumentError("synth: vocab_size " + std::to_string(o.vocab_size) + " outside 1.." +
                                std::to_string(kMaxVocab));
  if (o.num_hidden_layers < 1 || o.num_hidden_layers > kMaxLayers)
    return InvalidArgumentError("synth: num_hidden_layers " + std::to_string(o.num_hidden_layers) + " outside 1.." +
                                std::to_string(kMaxLayers));
  if (o.moe_layers.empty()) return InvalidArgumentError("synth: moe_layers is empty");
  EXLR8_RETURN_IF_ERROR(CheckLayerList("moe_layers", o.moe_layers, o.num_hidden_layers));
  EXLR8_RETURN_IF_ERROR(CheckLayerList("dense_layers", o.dense_layers, o.num_hidden_layers));
  for (int l : o.dense_layers)
    if (std::find(o.moe_layers.begin(), o.moe_layers.end(), l) != o.moe_layers.end())
      return InvalidArgumentError("synth: layer " + std::to_string(l) + " is in both moe_layers and dense_layers");
  EXLR8_RETURN_IF_ERROR(CheckWidthList("widths", o.widths));
  EXLR8_RETURN_IF_ERROR(CheckWidthList("shared_widths", o.shared_widths));
  EXLR8_RETURN_IF_ERROR(CheckDType("index", o.index_dtype, {DType::kI64, DType::kU64}));
  EXLR8_RETURN_IF_ERROR(CheckDType("checksum", o.checksum_dtype, {DType::kU64, DType::kI64}));
  EXLR8_RETURN_IF_ERROR(CheckDType("vector", o.vector_dtype, {DType::kF16, DType::kBF16, DType::kF32}));
  EXLR8_RETURN_IF_ERROR(CheckDType("block vector", o.block_vector_dtype, {DType::kF16, DType::kBF16, DType::kF32}));
  EXLR8_RETURN_IF_ERROR(CheckDType("signs", o.signs_dtype, {DType::kF16, DType::kBF16, DType::kF32}));
  EXLR8_RETURN_IF_ERROR(CheckDType("record", o.record_dtype, {DType::kI64, DType::kU64, DType::kI32}));
  EXLR8_RETURN_IF_ERROR(CheckDType("int4 scale", o.int4_scale_dtype, {DType::kF16, DType::kBF16, DType::kF32}));
  EXLR8_RETURN_IF_ERROR(CheckDType("fp8 scale", o.fp8_scale_dtype, {DType::kF16, DType::kBF16, DType::kF32}));
  EXLR8_RETURN_IF_ERROR(CheckDType("byte payload", o.byte_dtype, {DType::kU8, DType::kI8}));
  const std::uint64_t a = o.width_alignment;
  if (a == 0 || (a & (a - 1)) != 0 || a > (std::uint64_t{1} << 30))
    return InvalidArgumentError("synth: width_alignment " + std::to_string(a) +
                                " must be a power of two, at most 1 GiB");
  if (o.width_leading_padding > (std::uint64_t{1} << 30))
    return InvalidArgumentError("synth: width_leading_padding " + std::to_string(o.width_leading_padding) +
                                " is more than 1 GiB");
  return Status::Ok();
}

// ---------------------------------------------------------------------------
// Synthesis
// ---------------------------------------------------------------------------

namespace {

// splitmix64: fast, good enough for synthetic data, trivially seedable.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t Next() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n). REQUIRES: n > 0. (Modulo bias is irrelevant here.)
  std::uint64_t Below(std::uint64_t n) { return Next() % n; }

 private:
  std::uint64_t state_;
};

// An independent stream per purpose, so that changing one option (say the
// vector dtype) does not reshuffle unrelated content.
Rng StreamRng(std::uint64_t seed, std::uint64_t tag, std::uint64_t a = 0, std::uint64_t b = 0) {
  Rng r(seed ^ 0x6A09E667F3BCC909ULL);
  std::uint64_t s = r.Next() ^ (tag * 0x9E3779B97F4A7C15ULL);
  s = Rng(s).Next() ^ (a * 0xC2B2AE3D27D4EB4FULL);
  s = Rng(s).Next() ^ (b * 0x165667B19E3779F9ULL);
  return Rng(Rng(s).Next());
}

enum StreamTag : std::uint64_t {
  kTagExpertVectors = 1, kTagSigns, kTagWidthFile, kTagHalfOrder, kTagDense, kTagVocab, kTagManifest,
};

void FillRandomBytes(std::span<std::byte> out, Rng& rng) {
  std::size_t i = 0;
  for (; i + 8 <= out.size(); i += 8) StoreLE64(out.data() + i, rng.Next());
  if (i < out.size()) {
    std::uint64_t v = rng.Next();
    for (; i < out.size(); ++i, v >>= 8) out[i] = std::byte(v & 0xFF);
  }
}

// Values ±2^e·(1 + m/128), e in [emin, emin + erange), m 7 random bits (or 0):
// exactly representable in F16 (for e >= -14), BF16 and F32.
struct ValueRange {
  int emin;
  int erange;
  bool random_sign;
  bool random_mantissa;
};
constexpr ValueRange kSmallSigned{-7, 4, true, true};     // svh/suh, s4 magnitude ±0.008..0.125
constexpr ValueRange kUnitPositive{-1, 2, false, true};   // block vectors, norms [0.5, 2)
constexpr ValueRange kSigns{0, 1, true, false};           // ±1
constexpr ValueRange kFp8Scale{-9, 3, false, true};       // [2^-9, 2^-6)
constexpr ValueRange kWeightSigned{-7, 3, true, true};    // bf16/fp32 matrices ±0.008..0.06
constexpr ValueRange kBiasSigned{-2, 3, true, true};      // ±0.25..2

std::uint32_t EncodeValue(DType dtype, bool neg, int e, std::uint32_t m7) {
  const std::uint32_t s = neg ? 1u : 0u;
  switch (dtype) {
    case DType::kF16:
      return (s << 15) | (static_cast<std::uint32_t>(e + 15) << 10) | (m7 << 3);
    case DType::kBF16:
      return (s << 15) | (static_cast<std::uint32_t>(e + 127) << 7) | m7;
    default:  // F32
      return (s << 31) | (static_cast<std::uint32_t>(e + 127) << 23) | (m7 << 16);
  }
}

// `count` values of a float dtype (F16, BF16, F32), little-endian.
std::vector<std::byte> RandomFloats(DType dtype, std::size_t count, const ValueRange& range, Rng& rng) {
  const std::size_t es = DTypeSize(dtype);
  std::vector<std::byte> out(count * es);
  std::uint64_t bits = 0;
  int left = 0;
  for (std::size_t i = 0; i < count; ++i) {
    if (left == 0) {
      bits = rng.Next();
      left = 4;
    }
    const std::uint32_t r = static_cast<std::uint32_t>(bits & 0xFFFF);
    bits >>= 16;
    --left;
    const bool neg = range.random_sign && (r & 1);
    const std::uint32_t m7 = range.random_mantissa ? ((r >> 1) & 0x7F) : 0;
    const int e = range.emin + static_cast<int>((r >> 8) % static_cast<std::uint32_t>(range.erange));
    const std::uint32_t v = EncodeValue(dtype, neg, e, m7);
    if (es == 2) {
      StoreLE16(out.data() + i * 2, static_cast<std::uint16_t>(v));
    } else {
      StoreLE32(out.data() + i * 4, v);
    }
  }
  return out;
}

// Digests of n zero bytes, cached per length (index-only payloads are zeros,
// and every checksum starts with its payload part).
class ZeroHashCache {
 public:
  const Xxh64& After(std::uint64_t n) {
    auto it = cache_.find(n);
    if (it != cache_.end()) return it->second;
    static const std::array<std::byte, 1 << 16> kZeros{};
    Xxh64 h;
    for (std::uint64_t left = n; left > 0;) {
      const std::size_t step = static_cast<std::size_t>(std::min<std::uint64_t>(left, kZeros.size()));
      h.Update(std::span<const std::byte>(kZeros.data(), step));
      left -= step;
    }
    return cache_.emplace(n, std::move(h)).first->second;
  }

 private:
  std::map<std::uint64_t, Xxh64> cache_;
};

void StoreInt(DType dtype, std::byte* p, std::uint64_t v) {
  if (DTypeSize(dtype) == 4) {
    StoreLE32(p, static_cast<std::uint32_t>(v));
  } else {
    StoreLE64(p, v);
  }
}

std::span<const std::byte> Slice(const std::vector<std::byte>& v, std::uint64_t offset, std::uint64_t len) {
  return std::span<const std::byte>(v.data() + offset, len);
}

std::string JoinWidths(const std::vector<int>& w) {
  std::string s;
  for (int k : w) s += (s.empty() ? "" : ",") + std::to_string(k);
  return s;
}

constexpr std::array<const char*, 3> kVecNames = {"gate.svh", "up.svh", "down.suh"};
constexpr std::array<const char*, 3> kBlockNames = {"gate.su_block", "up.su_block", "down.sv_block"};

// The index-file tensors of one expert group (routed or shared) at one K.
struct ExpertTensors {
  std::uint32_t experts = 0;
  std::vector<std::byte> index;     // [E, 3, H, 2]
  std::vector<std::byte> checksum;  // [E, 3, H]
  std::array<std::vector<std::byte>, 3> vec;    // [E, 128 H]
  std::array<std::vector<std::byte>, 3> block;  // [E, hidden / 128]
};

struct HalfRef {
  bool shared;
  std::uint32_t e;
  int p;
  std::uint32_t h;
};

class Synthesizer {
 public:
  Synthesizer(const SynthOptions& o, ReleaseSink& sink) : o_(o), sink_(sink) {
    widths_ = o.widths;
    std::sort(widths_.begin(), widths_.end());
    shared_widths_ = o.shared_widths;
    std::sort(shared_widths_.begin(), shared_widths_.end());
    all_widths_ = widths_;
    for (int k : shared_widths_)
      if (std::find(all_widths_.begin(), all_widths_.end(), k) == all_widths_.end()) all_widths_.push_back(k);
    std::sort(all_widths_.begin(), all_widths_.end());
    moe_layers_ = o.moe_layers;
    std::sort(moe_layers_.begin(), moe_layers_.end());
    dense_file_layers_ = o.moe_layers;
    dense_file_layers_.insert(dense_file_layers_.end(), o.dense_layers.begin(), o.dense_layers.end());
    std::sort(dense_file_layers_.begin(), dense_file_layers_.end());
    blocks_ = o.hidden / 128;
    inter_ = std::uint64_t{128} * o.halves;
  }

  Result<SynthSummary> Run() {
    if (!o_.index_only) {
      // the largest files first, so that nothing is written if one is too big
      for (int k : all_widths_) {
        EXLR8_ASSIGN_OR_RETURN(auto layout, WidthLayout(moe_layers_.front(), k));
        EXLR8_RETURN_IF_ERROR(CheckMaterialize(ExpertWidthPath(moe_layers_.front(), k), layout.second.file_size));
      }
    }
    EXLR8_RETURN_IF_ERROR(WriteConfig());
    for (int layer : moe_layers_) EXLR8_RETURN_IF_ERROR(WriteExpertLayer(layer));
    for (int layer : dense_file_layers_) EXLR8_RETURN_IF_ERROR(WriteDenseLayer(layer));
    EXLR8_RETURN_IF_ERROR(WriteVocab());
    EXLR8_RETURN_IF_ERROR(WriteManifests());
    return std::move(summary_);
  }

 private:
  // ---- output ----
  Status Emit(const std::string& path, std::span<const std::byte> bytes) {
    Status s = sink_.WriteFile(path, bytes);
    if (!s.ok()) return s.WithContext(path);
    summary_.files.push_back(SynthFile{path, bytes.size(), bytes.size(), false});
    summary_.total_bytes += bytes.size();
    summary_.stored_bytes += bytes.size();
    return Status::Ok();
  }
  Status EmitSparse(const std::string& path, std::span<const SparseExtent> extents, std::uint64_t size) {
    Status s = sink_.WriteSparseFile(path, extents, size);
    if (!s.ok()) return s.WithContext(path);
    std::uint64_t stored = 0;
    for (const SparseExtent& x : extents) stored += x.bytes.size();
    summary_.files.push_back(SynthFile{path, size, stored, true});
    summary_.total_bytes += size;
    summary_.stored_bytes += stored;
    return Status::Ok();
  }
  Status EmitText(const std::string& path, const std::string& text) {
    return Emit(path, std::as_bytes(std::span<const char>(text.data(), text.size())));
  }
  Status CheckMaterialize(const std::string& path, std::uint64_t size) const {
    if (size > o_.max_materialized_file_bytes)
      return InvalidArgumentError("synth: " + path + " would be " + std::to_string(size) +
                                  " bytes, over max_materialized_file_bytes " +
                                  std::to_string(o_.max_materialized_file_bytes) + "; use index-only mode");
    return Status::Ok();
  }

  Status WriteConfig() {
    std::string s = "{\n";
    s += " \"hidden_size\": " + std::to_string(o_.hidden) + ",\n";
    s += " \"n_routed_experts\": " + std::to_string(o_.experts) + ",\n";
    s += " \"moe_intermediate_size\": " + std::to_string(inter_) + ",\n";
    s += " \"num_hidden_layers\": " + std::to_string(o_.num_hidden_layers) + ",\n";
    s += " \"first_k_dense_replace\": " + std::to_string(moe_layers_.front()) + "\n}";
    return EmitText("config.json", s);
  }

  // ---- experts ----
  ExpertTensors MakeExpertTensors(std::uint32_t experts, Rng& rng) const {
    ExpertTensors t;
    t.experts = experts;
    const std::uint64_t halves_total = std::uint64_t{experts} * 3 * o_.halves;
    t.index.resize(halves_total * 2 * 8);
    t.checksum.resize(halves_total * 8);
    for (int p = 0; p < 3; ++p) {
      t.vec[p] = RandomFloats(o_.vector_dtype, experts * inter_, kSmallSigned, rng);
      t.block[p] = RandomFloats(o_.block_vector_dtype, experts * blocks_, kUnitPositive, rng);
    }
    return t;
  }

  Status WriteExpertLayer(int layer) {
    // vectors first: the checksums of the width files cover them
    std::map<int, ExpertTensors> routed, shared;
    for (int k : widths_) {
      Rng rng = StreamRng(o_.seed, kTagExpertVectors, static_cast<std::uint64_t>(layer), static_cast<std::uint64_t>(k));
      routed.emplace(k, MakeExpertTensors(o_.experts, rng));
    }
    for (int k : shared_widths_) {
      Rng rng = StreamRng(o_.seed, kTagExpertVectors, static_cast<std::uint64_t>(layer), 100 + static_cast<std::uint64_t>(k));
      shared.emplace(k, MakeExpertTensors(1, rng));
    }
    for (int k : all_widths_) {
      ExpertTensors* r = routed.count(k) ? &routed.at(k) : nullptr;
      ExpertTensors* s = shared.count(k) ? &shared.at(k) : nullptr;
      EXLR8_RETURN_IF_ERROR(WriteWidthFile(layer, k, r, s));
    }

    // index file
    std::vector<TensorBytes> tensors;
    auto add_group = [&](const std::string& prefix, int k, ExpertTensors& t) {
      const std::uint64_t e = t.experts;
      const std::string kp = prefix + "k" + std::to_string(k) + ".";
      tensors.push_back({kp + "index", o_.index_dtype, {e, 3, o_.halves, 2}, std::move(t.index), true});
      tensors.push_back({kp + "checksum", o_.checksum_dtype, {e, 3, o_.halves}, std::move(t.checksum), true});
      for (int p = 0; p < 3; ++p) {
        tensors.push_back({kp + kVecNames[p], o_.vector_dtype, {e, inter_}, std::move(t.vec[p]), true});
        tensors.push_back({kp + kBlockNames[p], o_.block_vector_dtype, {e, blocks_}, std::move(t.block[p]), true});
      }
    };
    for (auto& [k, t] : routed) add_group("", k, t);
    for (auto& [k, t] : shared) add_group("shared.", k, t);
    Rng srng = StreamRng(o_.seed, kTagSigns, static_cast<std::uint64_t>(layer));
    tensors.push_back({"signs.in", o_.signs_dtype, {o_.hidden}, RandomFloats(o_.signs_dtype, o_.hidden, kSigns, srng), true});
    tensors.push_back({"signs.out", o_.signs_dtype, {o_.hidden}, RandomFloats(o_.signs_dtype, o_.hidden, kSigns, srng), true});

    SafetensorsWriteOptions wo;
    wo.metadata = {{"widths", JoinWidths(widths_)},
                   {"shared_widths", JoinWidths(shared_widths_)},
                   {"hidden", std::to_string(o_.hidden)},
                   {"experts", std::to_string(o_.experts)},
                   {"layer", std::to_string(layer)}};
    const std::string path = ExpertIndexPath(layer);
    auto bytes = SerializeSafetensors(tensors, wo);
    if (!bytes.ok()) return bytes.status().WithContext(path);
    return Emit(path, *bytes);
  }

  std::vector<HalfRef> HalfOrderFor(int layer, int k, bool with_routed, bool with_shared) const {
    std::vector<HalfRef> order;
    const std::uint32_t n_routed = with_routed ? o_.experts : 0;
    order.reserve((std::uint64_t{n_routed} + (with_shared ? 1 : 0)) * 3 * o_.halves);
    auto push_expert_proj = [&](bool shared, std::uint32_t e, int p) {
      for (std::uint32_t h = 0; h < o_.halves; ++h) order.push_back(HalfRef{shared, e, p, h});
    };
    if (o_.half_order == HalfOrder::kProjectionMajor) {
      for (int p = 0; p < 3; ++p) {
        for (std::uint32_t e = 0; e < n_routed; ++e) push_expert_proj(false, e, p);
        if (with_shared) push_expert_proj(true, 0, p);
      }
    } else {
      for (std::uint32_t e = 0; e < n_routed; ++e)
        for (int p = 0; p < 3; ++p) push_expert_proj(false, e, p);
      if (with_shared)
        for (int p = 0; p < 3; ++p) push_expert_proj(true, 0, p);
    }
    if (o_.half_order == HalfOrder::kShuffled) {
      Rng rng = StreamRng(o_.seed, kTagHalfOrder, static_cast<std::uint64_t>(layer), static_cast<std::uint64_t>(k));
      for (std::size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.Below(i)]);
    }
    return order;
  }

  // The halves of width file k in file order, and its layout.
  Result<std::pair<std::vector<HalfRef>, SafetensorsLayout>> WidthLayout(int layer, int k) const {
    const std::string path = ExpertWidthPath(layer, k);
    const bool with_routed = std::binary_search(widths_.begin(), widths_.end(), k);
    const bool with_shared = std::binary_search(shared_widths_.begin(), shared_widths_.end(), k);
    std::vector<HalfRef> order = HalfOrderFor(layer, k, with_routed, with_shared);
    const std::uint64_t half_bytes = 16ULL * static_cast<std::uint64_t>(k) * o_.hidden;
    SafetensorsWriteOptions wo;
    wo.alignment = o_.width_alignment;
    wo.leading_padding = o_.width_leading_padding;
    wo.metadata = {{"format", "exlr8"}, {"width", std::to_string(k)}};
    SafetensorsBuilder builder(wo);
    for (std::size_t i = 0; i < order.size(); ++i) {
      const HalfRef& r = order[i];
      std::string name = (r.shared ? std::string("eshared") : "e" + std::to_string(r.e)) + "." +
                         std::string(ProjName(static_cast<Proj>(r.p))) +
                         ".h" + std::to_string(r.h);
      const bool aligned = o_.align_pairs ? (i % 2 == 0) : true;
      Status s = builder.Add(std::move(name), o_.byte_dtype, {half_bytes}, aligned);
      if (!s.ok()) return s.WithContext(path);
    }
    auto layout = builder.Layout();
    if (!layout.ok()) return layout.status().WithContext(path);
    return std::make_pair(std::move(order), std::move(*layout));
  }

  Status WriteWidthFile(int layer, int k, ExpertTensors* routed, ExpertTensors* shared) {
    const std::string path = ExpertWidthPath(layer, k);
    const std::uint64_t half_bytes = 16ULL * static_cast<std::uint64_t>(k) * o_.hidden;
    EXLR8_ASSIGN_OR_RETURN(auto order_and_layout, WidthLayout(layer, k));
    const std::vector<HalfRef>& order = order_and_layout.first;
    const SafetensorsLayout& layout = order_and_layout.second;

    std::vector<std::byte> file;
    if (!o_.index_only) {
      EXLR8_RETURN_IF_ERROR(CheckMaterialize(path, layout.file_size));
      file.resize(layout.file_size);
      std::memcpy(file.data(), layout.head.data(), layout.head.size());
      Rng rng = StreamRng(o_.seed, kTagWidthFile, static_cast<std::uint64_t>(layer), static_cast<std::uint64_t>(k));
      for (const PlacedTensor& t : layout.tensors)
        FillRandomBytes(std::span<std::byte>(file.data() + t.absolute_offset, t.byte_size()), rng);
    }

    // index entries and checksums
    const std::uint64_t vec_es = DTypeSize(o_.vector_dtype);
    const std::uint64_t blk_es = DTypeSize(o_.block_vector_dtype);
    for (std::size_t i = 0; i < order.size(); ++i) {
      const HalfRef& r = order[i];
      ExpertTensors& t = r.shared ? *shared : *routed;
      const PlacedTensor& placed = layout.tensors[i];
      const std::uint64_t slot = (std::uint64_t{r.e} * 3 + static_cast<std::uint64_t>(r.p)) * o_.halves + r.h;
      StoreInt(o_.index_dtype, t.index.data() + slot * 16, placed.absolute_offset);
      StoreInt(o_.index_dtype, t.index.data() + slot * 16 + 8, half_bytes);

      Xxh64 h = o_.index_only ? zeros_.After(half_bytes) : Xxh64();
      if (!o_.index_only) h.Update(std::span<const std::byte>(file.data() + placed.absolute_offset, half_bytes));
      h.Update(Slice(t.vec[r.p], (std::uint64_t{r.e} * inter_ + 128ULL * r.h) * vec_es, 128 * vec_es));
      h.Update(Slice(t.block[r.p], std::uint64_t{r.e} * blocks_ * blk_es, blocks_ * blk_es));
      StoreLE64(t.checksum.data() + slot * 8, h.Digest());
    }

    if (o_.index_only) {
      const SparseExtent head{0, layout.head};
      return EmitSparse(path, std::span<const SparseExtent>(&head, 1), layout.file_size);
    }
    return Emit(path, file);
  }

  // ---- dense ----
  // A dense or vocab file under construction. Payload tensors may be
  // size-only (index-only mode): they read as zeros.
  struct DenseTensor {
    std::string name;
    DType dtype;
    std::vector<std::uint64_t> shape;
    std::vector<std::byte> bytes;
    bool zero = false;  // size-only payload
    std::uint64_t size = 0;
  };
  struct DenseFile {
    std::vector<DenseTensor> tensors;
  };

  // A payload tensor: random bytes, or zeros (size only) in index-only mode.
  DenseTensor Payload(std::string name, DType dtype, std::vector<std::uint64_t> shape, Rng& rng,
                      bool fp8 = false) const {
    DenseTensor t{std::move(name), dtype, std::move(shape), {}, o_.index_only, 0};
    t.size = DTypeSize(dtype);
    for (std::uint64_t d : t.shape) t.size *= d;
    if (!t.zero) {
      t.bytes.resize(t.size);
      FillRandomBytes(t.bytes, rng);
      if (fp8)
        for (std::byte& b : t.bytes)
          if ((b & std::byte{0x7F}) == std::byte{0x7F}) b ^= std::byte{1};  // never NaN
    }
    return t;
  }
  DenseTensor Plain(std::string name, DType dtype, std::vector<std::uint64_t> shape,
                    std::vector<std::byte> bytes) const {
    DenseTensor t{std::move(name), dtype, std::move(shape), std::move(bytes), false, 0};
    t.size = t.bytes.size();
    return t;
  }

  // Starts a checksum with bytes [off, off + len) of a payload tensor.
  Xxh64 StartHash(const DenseTensor& payload, std::uint64_t off, std::uint64_t len) {
    if (payload.zero) return zeros_.After(len);
    Xxh64 h;
    h.Update(Slice(payload.bytes, off, len));
    return h;
  }

  void AddRecord(DenseFile& f, const std::string& m, int code, std::uint64_t out, std::uint64_t inp, int k,
                 int side, const std::vector<std::uint64_t>& digests, std::vector<DenseTensor> data) {
    const std::uint64_t rs = DTypeSize(o_.record_dtype);
    std::vector<std::byte> rec(8 * rs);
    const std::array<std::uint64_t, 8> fields = {static_cast<std::uint64_t>(code), out, inp,
                                                 static_cast<std::uint64_t>(k), static_cast<std::uint64_t>(side),
                                                 0, 0, 0};
    for (int i = 0; i < 8; ++i) StoreInt(o_.record_dtype, rec.data() + i * rs, fields[i]);
    std::vector<std::byte> chk(digests.size() * 8);
    for (std::size_t i = 0; i < digests.size(); ++i) StoreLE64(chk.data() + i * 8, digests[i]);
    f.tensors.push_back(Plain(m + ".record", o_.record_dtype, {8}, std::move(rec)));
    f.tensors.push_back(Plain(m + ".checksum", o_.checksum_dtype, {digests.size()}, std::move(chk)));
    for (DenseTensor& t : data) f.tensors.push_back(std::move(t));
  }

  static std::uint64_t CeilDiv(std::uint64_t a, std::uint64_t b) { return (a + b - 1) / b; }

  // TRELLIS (code 1); side 0/1 entries are output blocks, side 2 input blocks.
  void AddTrellis(DenseFile& f, const std::string& m, std::uint64_t out, std::uint64_t inp, int k, int side,
                  Rng& rng) {
    const std::uint64_t groups = side == 2 ? inp / 128 : out / 128;
    const std::uint64_t entry = 16ULL * static_cast<std::uint64_t>(k) * (side == 2 ? out : inp);
    DenseTensor trellis = Payload(m + ".trellis", o_.byte_dtype, {groups, entry}, rng);
    DenseTensor suh = Plain(m + ".suh", o_.vector_dtype, {inp}, RandomFloats(o_.vector_dtype, inp, kSmallSigned, rng));
    DenseTensor svh = Plain(m + ".svh", o_.vector_dtype, {out}, RandomFloats(o_.vector_dtype, out, kSmallSigned, rng));
    const std::uint64_t es = DTypeSize(o_.vector_dtype);
    const DenseTensor& sliced = side == 2 ? suh : svh;
    const DenseTensor& whole = side == 2 ? svh : suh;
    std::vector<std::uint64_t> digests;
    for (std::uint64_t g = 0; g < groups; ++g) {
      Xxh64 h = StartHash(trellis, g * entry, entry);
      h.Update(Slice(sliced.bytes, g * 128 * es, 128 * es));
      h.Update(whole.bytes);
      digests.push_back(h.Digest());
    }
    AddRecord(f, m, 1, out, inp, k, side, digests, {std::move(trellis), std::move(suh), std::move(svh)});
  }

  // Row-blocked checksums: for block b, rows [128b, min(128b+128, rows)) of
  // each tensor (`row_bytes` bytes per first-dim index), in order.
  std::vector<std::uint64_t> RowBlockDigests(const DenseTensor& payload, std::uint64_t payload_row_bytes,
                                             const DenseTensor* second, std::uint64_t second_row_bytes,
                                             std::uint64_t rows) {
    std::vector<std::uint64_t> digests;
    for (std::uint64_t b = 0; b < CeilDiv(rows, 128); ++b) {
      const std::uint64_t r0 = b * 128, r1 = std::min(rows, r0 + 128);
      Xxh64 h = StartHash(payload, r0 * payload_row_bytes, (r1 - r0) * payload_row_bytes);
      if (second != nullptr) h.Update(Slice(second->bytes, r0 * second_row_bytes, (r1 - r0) * second_row_bytes));
      digests.push_back(h.Digest());
    }
    return digests;
  }

  // INT4 (code 2).
  void AddInt4(DenseFile& f, const std::string& m, std::uint64_t out, std::uint64_t inp, int side, Rng& rng) {
    const DType sd = o_.int4_scale_dtype;
    if (side == 2) {
      const std::uint64_t g = inp / 128;
      DenseTensor q4 = Payload(m + ".q4", o_.byte_dtype, {g, out, 64}, rng);
      DenseTensor s4 = Plain(m + ".s4", sd, {g, out, 4}, RandomFloats(sd, g * out * 4, kSmallSigned, rng));
      // one digest per 128-input block: q4[b] ‖ s4[b]
      std::vector<std::uint64_t> digests;
      for (std::uint64_t b = 0; b < g; ++b) {
        Xxh64 h = StartHash(q4, b * out * 64, out * 64);
        h.Update(Slice(s4.bytes, b * out * 4 * DTypeSize(sd), out * 4 * DTypeSize(sd)));
        digests.push_back(h.Digest());
      }
      AddRecord(f, m, 2, out, inp, 0, side, digests, {std::move(q4), std::move(s4)});
      return;
    }
    DenseTensor q4 = Payload(m + ".q4", o_.byte_dtype, {out, inp / 2}, rng);
    DenseTensor s4 = Plain(m + ".s4", sd, {out, inp / 32}, RandomFloats(sd, out * (inp / 32), kSmallSigned, rng));
    std::vector<std::uint64_t> digests = RowBlockDigests(q4, inp / 2, &s4, (inp / 32) * DTypeSize(sd), out);
    AddRecord(f, m, 2, out, inp, 0, side, digests, {std::move(q4), std::move(s4)});
  }

  // MXFP8 (code 3).
  void AddMxfp8(DenseFile& f, const std::string& m, std::uint64_t out, std::uint64_t inp, int side, Rng& rng) {
    DenseTensor fp8 = Payload(m + ".fp8", o_.byte_dtype, {out, inp}, rng, /*fp8=*/true);
    std::vector<std::byte> e(out * (inp / 32));
    for (std::byte& b : e) b = std::byte(117 + rng.Below(13));
    DenseTensor e8m0 = Plain(m + ".e8m0", o_.byte_dtype, {out, inp / 32}, std::move(e));
    std::vector<std::uint64_t> digests = RowBlockDigests(fp8, inp, &e8m0, inp / 32, out);
    AddRecord(f, m, 3, out, inp, 0, side, digests, {std::move(fp8), std::move(e8m0)});
  }

  // FP8_BLOCK (code 4).
  void AddFp8Block(DenseFile& f, const std::string& m, std::uint64_t out, std::uint64_t inp, int side, Rng& rng) {
    const DType sd = o_.fp8_scale_dtype;
    DenseTensor fp8 = Payload(m + ".fp8", o_.byte_dtype, {out, inp}, rng, /*fp8=*/true);
    const std::uint64_t gr = CeilDiv(out, 128), gc = CeilDiv(inp, 128);
    DenseTensor scale = Plain(m + ".scale", sd, {gr, gc}, RandomFloats(sd, gr * gc, kFp8Scale, rng));
    std::vector<std::uint64_t> digests;
    for (std::uint64_t b = 0; b < gr; ++b) {
      const std::uint64_t r0 = b * 128, r1 = std::min(out, r0 + 128);
      Xxh64 h = StartHash(fp8, r0 * inp, (r1 - r0) * inp);
      h.Update(Slice(scale.bytes, b * gc * DTypeSize(sd), gc * DTypeSize(sd)));
      digests.push_back(h.Digest());
    }
    AddRecord(f, m, 4, out, inp, 0, side, digests, {std::move(fp8), std::move(scale)});
  }

  // FP8_ROW (code 5).
  void AddFp8Row(DenseFile& f, const std::string& m, std::uint64_t out, std::uint64_t inp, int side, Rng& rng) {
    const DType sd = o_.fp8_scale_dtype;
    DenseTensor fp8 = Payload(m + ".fp8", o_.byte_dtype, {out, inp}, rng, /*fp8=*/true);
    DenseTensor scale = Plain(m + ".scale", sd, {out}, RandomFloats(sd, out, kFp8Scale, rng));
    std::vector<std::uint64_t> digests = RowBlockDigests(fp8, inp, &scale, DTypeSize(sd), out);
    AddRecord(f, m, 5, out, inp, 0, side, digests, {std::move(fp8), std::move(scale)});
  }

  // BF16 (code 6) / FP32 (code 7): payload of random finite values.
  void AddFloatMatrix(DenseFile& f, const std::string& m, DType dtype, std::uint64_t out, std::uint64_t inp, int side,
                      Rng& rng) {
    const bool bf16 = dtype == DType::kBF16;
    DenseTensor w{m + (bf16 ? ".bf16" : ".fp32"), dtype, {out, inp}, {}, o_.index_only, out * inp * DTypeSize(dtype)};
    if (!w.zero) w.bytes = RandomFloats(dtype, out * inp, kWeightSigned, rng);
    std::vector<std::uint64_t> digests = RowBlockDigests(w, inp * DTypeSize(dtype), nullptr, 0, out);
    AddRecord(f, m, bf16 ? 6 : 7, out, inp, 0, side, digests, {std::move(w)});
  }

  Status WriteDenseFile(const std::string& path, const DenseFile& f,
                        std::vector<std::pair<std::string, std::string>> metadata) {
    SafetensorsWriteOptions wo;
    wo.metadata = std::move(metadata);
    SafetensorsBuilder builder(wo);
    bool any_zero = false;
    for (const DenseTensor& t : f.tensors) {
      Status s = builder.Add(t.name, t.dtype, t.shape, true);
      if (!s.ok()) return s.WithContext(path);
      any_zero = any_zero || t.zero;
    }
    auto layout_or = builder.Layout();
    if (!layout_or.ok()) return layout_or.status().WithContext(path);
    const SafetensorsLayout& layout = *layout_or;
    if (any_zero) {
      std::vector<SparseExtent> extents;
      extents.push_back(SparseExtent{0, layout.head});
      for (std::size_t i = 0; i < f.tensors.size(); ++i)
        if (!f.tensors[i].zero && !f.tensors[i].bytes.empty())
          extents.push_back(SparseExtent{layout.tensors[i].absolute_offset, f.tensors[i].bytes});
      return EmitSparse(path, extents, layout.file_size);
    }
    EXLR8_RETURN_IF_ERROR(CheckMaterialize(path, layout.file_size));
    std::vector<std::byte> file(layout.file_size);
    std::memcpy(file.data(), layout.head.data(), layout.head.size());
    for (std::size_t i = 0; i < f.tensors.size(); ++i)
      if (!f.tensors[i].bytes.empty())
        std::memcpy(file.data() + layout.tensors[i].absolute_offset, f.tensors[i].bytes.data(),
                    f.tensors[i].bytes.size());
    return Emit(path, file);
  }

  Status WriteDenseLayer(int layer) {
    Rng rng = StreamRng(o_.seed, kTagDense, static_cast<std::uint64_t>(layer));
    const std::uint64_t hd = o_.hidden;
    DenseFile f;
    AddTrellis(f, "self_attn.q_proj", hd + 128, hd, 4, 1, rng);
    AddTrellis(f, "self_attn.o_proj", hd, hd + 128, 3, 2, rng);
    AddInt4(f, "self_attn.kv_proj", 128, hd, 2, rng);
    f.tensors.push_back(Plain("input_layernorm.weight", DType::kBF16, {hd},
                              RandomFloats(DType::kBF16, hd, kUnitPositive, rng)));
    const bool moe = std::binary_search(moe_layers_.begin(), moe_layers_.end(), layer);
    if (moe) {
      AddFloatMatrix(f, "mlp.gate", DType::kF32, o_.experts, hd, 0, rng);
      f.tensors.push_back(Plain("mlp.gate.e_score_correction_bias", DType::kF32, {o_.experts},
                                RandomFloats(DType::kF32, o_.experts, kBiasSigned, rng)));
    } else {
      AddFp8Block(f, "mlp.gate_proj", 2 * hd, hd, 1, rng);
      AddMxfp8(f, "mlp.up_proj", 2 * hd, hd, 1, rng);
      AddInt4(f, "mlp.down_proj", hd, 2 * hd, 1, rng);
      AddFp8Row(f, "mlp.extra_proj", hd, hd, 1, rng);
    }
    return WriteDenseFile(DensePath(layer), f, {{"layer", std::to_string(layer)}});
  }

  Status WriteVocab() {
    Rng rng = StreamRng(o_.seed, kTagVocab);
    DenseFile f;
    AddFloatMatrix(f, "embed_tokens", DType::kBF16, o_.vocab_size, o_.hidden, 1, rng);
    AddInt4(f, "lm_head", o_.vocab_size, o_.hidden, 1, rng);
    f.tensors.push_back(Plain("norm.weight", DType::kBF16, {o_.hidden},
                              RandomFloats(DType::kBF16, o_.hidden, kUnitPositive, rng)));
    return WriteDenseFile(VocabPath(), f, {});
  }

  // ---- manifests ----
  struct LayerWidths {
    std::vector<int> gate, up;  // [E * H]
    std::vector<int> down;      // [E]
  };

  LayerWidths HomeWidths(int layer) const {
    Rng rng = StreamRng(o_.seed, kTagManifest, static_cast<std::uint64_t>(layer));
    const std::uint64_t n = std::uint64_t{o_.experts} * o_.halves;
    LayerWidths w;
    if (o_.home_mix == ManifestMix::kRandomPerHalf) {
      auto pick = [&] { return widths_[rng.Below(widths_.size())]; };
      w.gate.resize(n);
      w.up.resize(n);
      w.down.resize(o_.experts);
      for (std::uint32_t e = 0; e < o_.experts; ++e) {
        for (std::uint32_t h = 0; h < o_.halves; ++h) w.gate[e * o_.halves + h] = pick();
        for (std::uint32_t h = 0; h < o_.halves; ++h) w.up[e * o_.halves + h] = pick();
        w.down[e] = pick();
      }
      return w;
    }
    // per expert: ⌈E/4⌉ random experts at the widest width, the rest one narrower
    std::vector<std::uint32_t> perm(o_.experts);
    std::iota(perm.begin(), perm.end(), 0u);
    for (std::size_t i = perm.size(); i > 1; --i) std::swap(perm[i - 1], perm[rng.Below(i)]);
    const int widest = widths_.back();
    const int next = widths_.size() > 1 ? widths_[widths_.size() - 2] : widest;
    std::vector<int> per_expert(o_.experts, next);
    for (std::uint32_t i = 0; i < (o_.experts + 3) / 4; ++i) per_expert[perm[i]] = widest;
    w.gate.resize(n);
    w.up.resize(n);
    for (std::uint32_t e = 0; e < o_.experts; ++e)
      for (std::uint32_t h = 0; h < o_.halves; ++h) w.gate[e * o_.halves + h] = w.up[e * o_.halves + h] = per_expert[e];
    w.down = per_expert;
    return w;
  }

  int Step(int k, int delta) const {
    auto it = std::find(widths_.begin(), widths_.end(), k);
    const auto i = static_cast<std::ptrdiff_t>(it - widths_.begin()) + delta;
    const auto last = static_cast<std::ptrdiff_t>(widths_.size()) - 1;
    return widths_[static_cast<std::size_t>(std::clamp<std::ptrdiff_t>(i, 0, last))];
  }

  static void AppendIntList(std::string& s, const int* v, std::size_t n) {
    s += '[';
    for (std::size_t i = 0; i < n; ++i) {
      if (i) s += ", ";
      s += static_cast<char>('0' + v[i]);  // widths are 1..8
    }
    s += ']';
  }

  Status WriteManifests() {
    std::vector<LayerWidths> home;
    for (int layer : moe_layers_) home.push_back(HomeWidths(layer));
    const int shared_k = shared_widths_.back();
    const std::vector<int> shared_list(o_.halves, shared_k);
    for (int delta : {0, -1, +1}) {
      std::string s = "{\"layers\": {";
      for (std::size_t li = 0; li < moe_layers_.size(); ++li) {
        LayerWidths w = home[li];
        if (delta != 0) {
          for (int& k : w.gate) k = Step(k, delta);
          for (int& k : w.up) k = Step(k, delta);
          for (int& k : w.down) k = Step(k, delta);
        }
        if (li) s += ", ";
        s += "\"" + std::to_string(moe_layers_[li]) + "\": {\"gate\": [";
        for (std::uint32_t e = 0; e < o_.experts; ++e) {
          if (e) s += ", ";
          AppendIntList(s, w.gate.data() + std::uint64_t{e} * o_.halves, o_.halves);
        }
        s += "], \"up\": [";
        for (std::uint32_t e = 0; e < o_.experts; ++e) {
          if (e) s += ", ";
          AppendIntList(s, w.up.data() + std::uint64_t{e} * o_.halves, o_.halves);
        }
        s += "], \"down\": ";
        AppendIntList(s, w.down.data(), w.down.size());
        s += ", \"shared\": {\"gate\": ";
        AppendIntList(s, shared_list.data(), shared_list.size());
        s += ", \"up\": ";
        AppendIntList(s, shared_list.data(), shared_list.size());
        s += ", \"down\": " + std::to_string(shared_k) + "}}";
      }
      s += "}}";
      const char* name = delta == 0 ? "home" : delta < 0 ? "down1" : "up1";
      EXLR8_RETURN_IF_ERROR(EmitText(ManifestPath(name), s));
    }
    return Status::Ok();
  }

  const SynthOptions& o_;
  ReleaseSink& sink_;
  std::vector<int> widths_, shared_widths_, all_widths_;
  std::vector<int> moe_layers_, dense_file_layers_;
  std::uint64_t blocks_ = 0;  // hidden / 128
  std::uint64_t inter_ = 0;   // 128 * halves
  ZeroHashCache zeros_;
  SynthSummary summary_;
};

}  // namespace

Result<SynthSummary> SynthesizeRelease(const SynthOptions& options, ReleaseSink& sink) {
  EXLR8_RETURN_IF_ERROR(ValidateSynthOptions(options));
  Synthesizer s(options, sink);
  return s.Run();
}

}  // namespace exlr8
