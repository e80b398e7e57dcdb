// Tests of format/release_writer.h. Every release is written to a
// MemoryReleaseSink and read back with the project's readers
// (safetensors, expert index, dense, manifest) AND checked independently:
// half checksums are recomputed here from raw bytes (spec 5.3), index
// ranges are checked against the width files' data sections (spec 4.4), and
// the fixture geometry is compared with /work/shared/fixtures/exlr8-tiny.
#include "format/release_writer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "format/checksum.h"
#include "format/dense.h"
#include "format/expert_index.h"
#include "format/json.h"
#include "format/layout.h"
#include "format/manifest.h"
#include "format/safetensors.h"

namespace exlr8 {
namespace {

namespace fs = std::filesystem;

MemoryReleaseSink Synth(const SynthOptions& o) {
  MemoryReleaseSink sink;
  auto r = SynthesizeRelease(o, sink);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return sink;
}

SafetensorsHeader HeaderOf(const MemoryReleaseSink& sink, const std::string& path) {
  const MemoryReleaseSink::File* f = sink.Find(path);
  EXPECT_NE(f, nullptr) << path;
  if (f == nullptr) return {};
  std::vector<std::byte> first(8);
  EXPECT_TRUE(sink.ReadAt(path, 0, first).ok());
  auto n = SafetensorsHeaderSize(first, f->size, path);
  EXPECT_TRUE(n.ok()) << n.status().ToString();
  std::vector<std::byte> head(*n);
  EXPECT_TRUE(sink.ReadAt(path, 0, head).ok());
  auto h = ParseSafetensorsHeader(head, f->size, path);
  EXPECT_TRUE(h.ok()) << h.status().ToString();
  return h.ok() ? *h : SafetensorsHeader{};
}

std::vector<std::byte> TensorData(const MemoryReleaseSink& sink, const std::string& path, const SafetensorsHeader& h,
                                  const std::string& name) {
  const TensorInfo* t = h.Find(name);
  EXPECT_NE(t, nullptr) << path << ": " << name;
  if (t == nullptr) return {};
  std::vector<std::byte> out(t->byte_size());
  EXPECT_TRUE(sink.ReadAt(path, h.AbsoluteOffset(*t), out).ok());
  return out;
}

std::string Text(const MemoryReleaseSink& sink, const std::string& path) {
  auto bytes = sink.ReadAll(path);
  EXPECT_TRUE(bytes.ok()) << path;
  if (!bytes.ok()) return {};
  return std::string(reinterpret_cast<const char*>(bytes->data()), bytes->size());
}

std::vector<int> Sorted(std::vector<int> v) {
  std::sort(v.begin(), v.end());
  return v;
}

// ---------------------------------------------------------------------------
// Independent check of one MoE layer: every (offset, length) inside the width
// file's data section, no overlaps, length == 16 K hidden, pair/half
// alignment, and the checksum recomputed from raw bytes (spec 5.3).
// ---------------------------------------------------------------------------
void CheckExpertLayer(const MemoryReleaseSink& sink, const SynthOptions& o, int layer) {
  SCOPED_TRACE("layer " + std::to_string(layer));
  const std::string ipath = ExpertIndexPath(layer);
  const SafetensorsHeader ih = HeaderOf(sink, ipath);
  EXPECT_EQ(ih.metadata().at("widths"), [&] {
    std::string s;
    for (int k : Sorted(o.widths)) s += (s.empty() ? "" : ",") + std::to_string(k);
    return s;
  }());
  EXPECT_EQ(ih.metadata().at("hidden"), std::to_string(o.hidden));
  EXPECT_EQ(ih.metadata().at("experts"), std::to_string(o.experts));
  EXPECT_EQ(ih.metadata().at("layer"), std::to_string(layer));
  const std::uint64_t blocks = o.hidden / 128, inter = 128ull * o.halves;

  std::map<int, std::vector<std::pair<std::uint64_t, std::uint64_t>>> ranges_by_k;
  auto check_group = [&](const std::string& prefix, int k, std::uint32_t experts) {
    SCOPED_TRACE(prefix + "k" + std::to_string(k));
    const std::string kp = prefix + "k" + std::to_string(k) + ".";
    const TensorInfo* index_t = ih.Find(kp + "index");
    const TensorInfo* checksum_t = ih.Find(kp + "checksum");
    ASSERT_NE(index_t, nullptr);
    ASSERT_NE(checksum_t, nullptr);
    EXPECT_EQ(index_t->dtype, o.index_dtype);
    EXPECT_EQ(checksum_t->dtype, o.checksum_dtype);
    EXPECT_EQ(index_t->shape, (std::vector<std::uint64_t>{experts, 3, o.halves, 2}));
    EXPECT_EQ(checksum_t->shape, (std::vector<std::uint64_t>{experts, 3, o.halves}));
    const auto index = TensorData(sink, ipath, ih, kp + "index");
    const auto checksum = TensorData(sink, ipath, ih, kp + "checksum");
    std::array<std::vector<std::byte>, 3> vec, blk;
    const char* vec_names[] = {"gate.svh", "up.svh", "down.suh"};
    const char* blk_names[] = {"gate.su_block", "up.su_block", "down.sv_block"};
    for (int p = 0; p < 3; ++p) {
      const TensorInfo* vt = ih.Find(kp + vec_names[p]);
      const TensorInfo* bt = ih.Find(kp + blk_names[p]);
      ASSERT_NE(vt, nullptr);
      ASSERT_NE(bt, nullptr);
      EXPECT_EQ(vt->dtype, o.vector_dtype);
      EXPECT_EQ(bt->dtype, o.block_vector_dtype);
      EXPECT_EQ(vt->shape, (std::vector<std::uint64_t>{experts, inter}));
      EXPECT_EQ(bt->shape, (std::vector<std::uint64_t>{experts, blocks}));
      vec[p] = TensorData(sink, ipath, ih, kp + vec_names[p]);
      blk[p] = TensorData(sink, ipath, ih, kp + blk_names[p]);
    }
    const std::string wpath = ExpertWidthPath(layer, k);
    const SafetensorsHeader wh = HeaderOf(sink, wpath);
    const std::uint64_t wsize = sink.Find(wpath)->size;
    EXPECT_EQ(wh.metadata().at("width"), std::to_string(k));
    const std::uint64_t vs = DTypeSize(o.vector_dtype), bs = DTypeSize(o.block_vector_dtype);
    for (std::uint32_t e = 0; e < experts; ++e) {
      for (int p = 0; p < 3; ++p) {
        for (std::uint32_t h = 0; h < o.halves; ++h) {
          const std::uint64_t slot = (std::uint64_t{e} * 3 + p) * o.halves + h;
          const std::uint64_t off = LoadLE64(index.data() + slot * 16);
          const std::uint64_t len = LoadLE64(index.data() + slot * 16 + 8);
          ASSERT_EQ(len, 16ull * k * o.hidden);
          ASSERT_GE(off, wh.data_start());
          ASSERT_LE(off + len, wh.data_start() + wh.data_end());
          ASSERT_LE(off + len, wsize);
          ranges_by_k[k].push_back({off, len});
          // the width file names this range as the half's tensor
          const std::string tname = (prefix.empty() ? "e" + std::to_string(e) : std::string("eshared")) + "." +
                                    (p == 0 ? "gate" : p == 1 ? "up" : "down") + ".h" + std::to_string(h);
          const TensorInfo* tt = wh.Find(tname);
          ASSERT_NE(tt, nullptr) << tname;
          EXPECT_EQ(wh.AbsoluteOffset(*tt), off) << tname;
          // spec 5.3: trellis bytes ‖ 128-element slice ‖ block row
          std::vector<std::byte> trellis(len);
          ASSERT_TRUE(sink.ReadAt(wpath, off, trellis).ok());
          Xxh64 x;
          x.Update(trellis);
          x.Update(std::span<const std::byte>(vec[p].data() + (e * inter + 128ull * h) * vs, 128 * vs));
          x.Update(std::span<const std::byte>(blk[p].data() + e * blocks * bs, blocks * bs));
          ASSERT_EQ(x.Digest(), LoadLE64(checksum.data() + slot * 8)) << tname;
        }
      }
    }
  };
  for (int k : o.widths) check_group("", k, o.experts);
  for (int k : o.shared_widths) check_group("shared.", k, 1);

  // no overlaps; alignment of pairs (or of every half)
  for (auto& [k, ranges] : ranges_by_k) {
    std::sort(ranges.begin(), ranges.end());
    for (std::size_t i = 1; i < ranges.size(); ++i)
      ASSERT_LE(ranges[i - 1].first + ranges[i - 1].second, ranges[i].first) << "K" << k << " overlap";
    for (std::size_t i = 0; i < ranges.size(); ++i) {
      if (o.align_pairs && i % 2 == 1) continue;
      EXPECT_EQ(ranges[i].first % o.width_alignment, 0u) << "K" << k << " half #" << i;
    }
    const std::string wpath = ExpertWidthPath(layer, k);
    EXPECT_EQ(HeaderOf(sink, wpath).data_start() % std::max<std::uint64_t>(8, o.width_alignment), 0u);
  }

  // The project's reader agrees.
  auto src = sink.Open(ipath);
  ASSERT_TRUE(src.ok());
  auto idx = ExpertIndex::Read(**src, layer);
  ASSERT_TRUE(idx.ok()) << idx.status().ToString();
  EXPECT_EQ(idx->hidden(), o.hidden);
  EXPECT_EQ(idx->experts(), o.experts);
  EXPECT_EQ(idx->halves_per_expert(), o.halves);
  EXPECT_EQ(idx->widths(), Sorted(o.widths));
  EXPECT_EQ(idx->shared_widths(), Sorted(o.shared_widths));
  for (auto& [k, ranges] : ranges_by_k) {
    const std::string wpath = ExpertWidthPath(layer, k);
    Status s = idx->ValidateWidthFile(k, HeaderOf(sink, wpath), sink.Find(wpath)->size, wpath);
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  // signs are ±1
  for (const char* name : {"signs.in", "signs.out"}) {
    const TensorInfo* t = ih.Find(name);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->shape, (std::vector<std::uint64_t>{o.hidden}));
    auto bytes = TensorData(sink, ipath, ih, name);
    std::vector<float> v(o.hidden);
    ASSERT_TRUE(ConvertToFloat(t->dtype, bytes, v).ok());
    for (float x : v) ASSERT_TRUE(x == 1.0f || x == -1.0f) << name << " " << x;
  }
  // per-channel vectors are finite and in ±[2^-7, 2^-3)
  {
    const TensorInfo* t = ih.Find("k" + std::to_string(o.widths[0]) + ".gate.svh");
    ASSERT_NE(t, nullptr);
    auto bytes = TensorData(sink, ipath, ih, t->name);
    std::vector<float> v(t->num_elements());
    ASSERT_TRUE(ConvertToFloat(t->dtype, bytes, v).ok());
    bool saw_negative = false;
    for (float x : v) {
      ASSERT_TRUE(std::isfinite(x));
      ASSERT_GE(std::fabs(x), 0.0078125f);
      ASSERT_LT(std::fabs(x), 0.125f);
      saw_negative |= x < 0;
    }
    EXPECT_TRUE(saw_negative);
  }
}

// Dense and vocab files: the project's dense reader verifies every block;
// FP8 never NaN, E8M0 never 255. Returns the set of (format, side) seen.
std::set<std::pair<int, int>> CheckDenseFile(const MemoryReleaseSink& sink, const std::string& path) {
  SCOPED_TRACE(path);
  std::set<std::pair<int, int>> seen;
  const SafetensorsHeader h = HeaderOf(sink, path);
  auto src = sink.Open(path);
  EXPECT_TRUE(src.ok());
  if (!src.ok()) return seen;
  auto df = DenseFile::Parse(h, **src);
  EXPECT_TRUE(df.ok()) << df.status().ToString();
  if (!df.ok()) return seen;
  for (const DenseMatrix& m : df->matrices()) {
    Status s = VerifyDenseMatrix(*df, m, **src);
    EXPECT_TRUE(s.ok()) << m.name << ": " << s.ToString();
    seen.insert({static_cast<int>(m.record.format), static_cast<int>(m.record.side)});
    if (const DenseTensor* fp8 = m.Data("fp8")) {
      std::vector<std::byte> b(fp8->length);
      EXPECT_TRUE((*src)->ReadAt(fp8->offset, b).ok());
      EXPECT_EQ(std::count_if(b.begin(), b.end(), [](std::byte x) { return (x & std::byte{0x7F}) == std::byte{0x7F}; }),
                0)
          << m.name << " has FP8 NaNs";
    }
    if (const DenseTensor* e8 = m.Data("e8m0")) {
      std::vector<std::byte> b(e8->length);
      EXPECT_TRUE((*src)->ReadAt(e8->offset, b).ok());
      EXPECT_EQ(std::count(b.begin(), b.end(), std::byte{255}), 0) << m.name;
    }
  }
  return seen;
}

void CheckRelease(const MemoryReleaseSink& sink, const SynthOptions& o) {
  for (int layer : o.moe_layers) CheckExpertLayer(sink, o, layer);
  std::set<std::pair<int, int>> seen;
  std::vector<int> dense_layers = o.moe_layers;
  dense_layers.insert(dense_layers.end(), o.dense_layers.begin(), o.dense_layers.end());
  for (int layer : dense_layers) {
    auto s = CheckDenseFile(sink, DensePath(layer));
    seen.insert(s.begin(), s.end());
  }
  auto s = CheckDenseFile(sink, VocabPath());
  seen.insert(s.begin(), s.end());
  std::set<int> formats;
  for (auto [f, side] : seen) formats.insert(f);
  if (!o.dense_layers.empty()) {
    EXPECT_EQ(formats.size(), 7u) << "every dense format appears";
    EXPECT_TRUE(seen.count({1, 1}) && seen.count({1, 2})) << "TRELLIS side 1 and 2";
    EXPECT_TRUE(seen.count({2, 1}) && seen.count({2, 2})) << "INT4 side 1 and 2";
  }
}

// ---------------------------------------------------------------------------

TEST(ReleaseWriter, FixtureGeometryHasTheFixturesNamesAndShapes) {
  const fs::path root = fs::path(EXLR8_SHARED_DIR) / "fixtures" / "exlr8-tiny";
  ASSERT_TRUE(fs::exists(root)) << root;
  const MemoryReleaseSink sink = Synth(TinyFixtureGeometry());

  std::set<std::string> fixture_files, synth_files;
  for (const auto& entry : fs::recursive_directory_iterator(root))
    if (entry.is_regular_file()) fixture_files.insert(fs::relative(entry.path(), root).generic_string());
  for (const auto& [path, f] : sink.files()) synth_files.insert(path);
  EXPECT_EQ(synth_files, fixture_files);

  for (const std::string& path : fixture_files) {
    SCOPED_TRACE(path);
    std::ifstream in(root / path, std::ios::binary);
    std::vector<char> raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::span<const std::byte> fixture_bytes = std::as_bytes(std::span<const char>(raw));
    if (!path.ends_with(".safetensors")) {
      auto a = ParseJson(std::string_view(raw.data(), raw.size()));
      auto b = ParseJson(Text(sink, path));
      ASSERT_TRUE(a.ok() && b.ok());
      if (path == "config.json") {
        EXPECT_EQ(a->Dump(), b->Dump());  // same keys, same values
      } else {  // manifests: same layers, same list lengths
        const JsonValue* la = a->Find("layers");
        const JsonValue* lb = b->Find("layers");
        ASSERT_TRUE(la && lb);
        ASSERT_EQ(la->as_object().size(), lb->as_object().size());
        for (std::size_t i = 0; i < la->as_object().size(); ++i) {
          const auto& [ka, va] = la->as_object()[i];
          const auto& [kb, vb] = lb->as_object()[i];
          EXPECT_EQ(ka, kb);
          for (const char* key : {"gate", "up", "down"})
            EXPECT_EQ(va.Find(key)->as_array().size(), vb.Find(key)->as_array().size()) << key;
          EXPECT_EQ(va.Find("shared")->Dump(), vb.Find("shared")->Dump());
        }
      }
      continue;
    }
    auto fh = ParseSafetensorsHeader(fixture_bytes, fixture_bytes.size(), path);
    ASSERT_TRUE(fh.ok()) << fh.status().ToString();
    const SafetensorsHeader sh = HeaderOf(sink, path);
    ASSERT_EQ(fh->tensors().size(), sh.tensors().size());
    for (std::size_t i = 0; i < fh->tensors().size(); ++i) {
      const TensorInfo& a = fh->tensors()[i];
      const TensorInfo& b = sh.tensors()[i];  // both in offset order
      EXPECT_EQ(a.name, b.name);
      EXPECT_EQ(a.dtype, b.dtype) << a.name;
      EXPECT_EQ(a.shape, b.shape) << a.name;
      EXPECT_EQ(a.begin, b.begin) << a.name;  // same data layout
    }
    EXPECT_EQ(fh->padding_entries(), sh.padding_entries());
    EXPECT_EQ(fh->data_end(), sh.data_end());
    std::set<std::string> mk_a, mk_b;
    for (const auto& [k, v] : fh->metadata()) mk_a.insert(k);
    for (const auto& [k, v] : sh.metadata()) mk_b.insert(k);
    EXPECT_EQ(mk_a, mk_b);
    if (path.find(".index.") != std::string::npos) {
      EXPECT_EQ(fh->metadata(), sh.metadata());
    }
  }
}

struct Geometry {
  const char* name;
  SynthOptions options;
};

std::vector<Geometry> Geometries() {
  std::vector<Geometry> g;
  {
    SynthOptions o;  // smallest: one expert, one half, packed
    o.hidden = 128;
    o.halves = 1;
    o.experts = 1;
    o.moe_layers = {1};
    o.dense_layers = {0};
    o.num_hidden_layers = 2;
    o.width_alignment = 1;
    o.vocab_size = 130;  // a partial last block
    o.seed = 11;
    g.push_back({"h128_E1_H1_packed", o});
  }
  {
    SynthOptions o;
    o.hidden = 256;
    o.halves = 2;
    o.experts = 3;
    o.moe_layers = {2, 5};
    o.dense_layers = {0, 1};
    o.num_hidden_layers = 6;
    o.widths = {4, 2};
    o.shared_widths = {4};
    o.index_dtype = DType::kU64;
    o.checksum_dtype = DType::kI64;
    o.vector_dtype = DType::kBF16;
    o.block_vector_dtype = DType::kF16;
    o.signs_dtype = DType::kF32;
    o.record_dtype = DType::kI32;
    o.int4_scale_dtype = DType::kBF16;
    o.fp8_scale_dtype = DType::kF16;
    o.byte_dtype = DType::kI8;
    o.width_alignment = 4096;
    o.align_pairs = false;
    o.half_order = HalfOrder::kProjectionMajor;
    o.seed = 22;
    g.push_back({"h256_E3_H2_projection_major", o});
  }
  {
    SynthOptions o;
    o.hidden = 384;
    o.halves = 16;
    o.experts = 5;
    o.moe_layers = {3};
    o.dense_layers = {};
    o.num_hidden_layers = 4;
    o.widths = {1, 3, 8};
    o.shared_widths = {2, 3};  // K2: a width file with only shared halves
    o.vector_dtype = DType::kF32;
    o.block_vector_dtype = DType::kBF16;
    o.record_dtype = DType::kU64;
    o.width_alignment = 65536;
    o.half_order = HalfOrder::kShuffled;
    o.home_mix = ManifestMix::kPerExpert;
    o.seed = 33;
    g.push_back({"h384_E5_H16_shuffled", o});
  }
  return g;
}

TEST(ReleaseWriter, SeveralGeometriesAreValidAndChecksumsMatch) {
  for (const Geometry& g : Geometries()) {
    SCOPED_TRACE(g.name);
    const MemoryReleaseSink sink = Synth(g.options);
    CheckRelease(sink, g.options);
  }
}

TEST(ReleaseWriter, FixtureGeometryIsValid) {
  const SynthOptions o = TinyFixtureGeometry();
  CheckRelease(Synth(o), o);
}

TEST(ReleaseWriter, HalfOrders) {
  SynthOptions o = TinyFixtureGeometry();
  o.experts = 3;
  o.moe_layers = {3};
  auto offset_of = [&](const MemoryReleaseSink& sink, std::uint32_t e, int p, std::uint32_t h) {
    const SafetensorsHeader ih = HeaderOf(sink, ExpertIndexPath(3));
    auto index = TensorData(sink, ExpertIndexPath(3), ih, "k2.index");
    return LoadLE64(index.data() + ((e * 3ull + p) * o.halves + h) * 16);
  };
  o.half_order = HalfOrder::kExpertMajor;
  {
    MemoryReleaseSink s = Synth(o);
    EXPECT_LT(offset_of(s, 0, 2, 15), offset_of(s, 1, 0, 0));
    EXPECT_LT(offset_of(s, 1, 0, 3), offset_of(s, 1, 0, 4));
  }
  o.half_order = HalfOrder::kProjectionMajor;
  {
    MemoryReleaseSink s = Synth(o);
    EXPECT_LT(offset_of(s, 2, 0, 15), offset_of(s, 0, 1, 0));
    EXPECT_GT(offset_of(s, 0, 2, 15), offset_of(s, 1, 0, 0));
  }
  o.half_order = HalfOrder::kShuffled;
  {
    MemoryReleaseSink s = Synth(o);
    int inversions = 0;
    for (std::uint32_t h = 1; h < o.halves; ++h) inversions += offset_of(s, 0, 0, h - 1) > offset_of(s, 0, 0, h);
    EXPECT_GT(inversions, 0) << "a shuffled order is not sorted";
    CheckExpertLayer(s, o, 3);
  }
}

// Manifests: shapes, only stored widths, down1/up1 one step from home.
TEST(ReleaseWriter, ManifestsHaveTheRightShapesAndWidths) {
  for (ManifestMix mix : {ManifestMix::kPerExpert, ManifestMix::kRandomPerHalf}) {
    SynthOptions o = TinyFixtureGeometry();
    o.experts = 8;
    o.home_mix = mix;
    const MemoryReleaseSink sink = Synth(o);
    std::map<int, LayerGeometry> geometry;
    for (int layer : o.moe_layers) {
      auto src = sink.Open(ExpertIndexPath(layer));
      ASSERT_TRUE(src.ok());
      auto idx = ExpertIndex::Read(**src, layer);
      ASSERT_TRUE(idx.ok()) << idx.status().ToString();
      geometry[layer] = LayerGeometry::Of(*idx);
    }
    std::map<std::string, Manifest> m;
    for (const char* name : {"home", "down1", "up1"}) {
      auto parsed = ParseManifest(Text(sink, ManifestPath(name)), name, geometry);
      ASSERT_TRUE(parsed.ok()) << name << ": " << parsed.status().ToString();
      EXPECT_TRUE(parsed->warnings().empty()) << name;
      m.emplace(name, *parsed);
    }
    auto step = [](int k, int d) { return std::clamp(k + d, 2, 4); };  // widths {2,3,4}
    for (int layer : o.moe_layers) {
      const LayerWidths& home = m.at("home").layers().at(layer);
      const LayerWidths& down1 = m.at("down1").layers().at(layer);
      const LayerWidths& up1 = m.at("up1").layers().at(layer);
      ASSERT_EQ(home.gate.size(), 8u * 16);
      ASSERT_EQ(home.down.size(), 8u);
      for (std::size_t i = 0; i < home.gate.size(); ++i) {
        EXPECT_EQ(down1.gate[i], step(home.gate[i], -1));
        EXPECT_EQ(up1.up[i], step(home.up[i], +1));
      }
      for (std::size_t e = 0; e < home.down.size(); ++e) {
        EXPECT_EQ(down1.down[e], step(home.down[e], -1));
        EXPECT_EQ(up1.down[e], step(home.down[e], +1));
      }
      for (const LayerWidths* lw : {&home, &down1, &up1}) {
        ASSERT_TRUE(lw->has_shared);
        EXPECT_EQ(lw->shared_down, 4);
        for (auto k : lw->shared_gate) EXPECT_EQ(k, 4);
      }
      if (mix == ManifestMix::kPerExpert) {
        int at_max = 0;
        for (std::uint32_t e = 0; e < 8; ++e) {
          const int k = home.down[e];
          EXPECT_TRUE(k == 3 || k == 4);
          at_max += k == 4;
          for (std::uint32_t h = 0; h < 16; ++h) {
            EXPECT_EQ(home.gate[e * 16 + h], k);
            EXPECT_EQ(home.up[e * 16 + h], k);
          }
        }
        EXPECT_EQ(at_max, 2);  // ⌈8/4⌉
      } else {
        std::set<int> used(home.gate.begin(), home.gate.end());
        EXPECT_EQ(used, (std::set<int>{2, 3, 4}));
      }
    }
    if (mix == ManifestMix::kPerExpert) {
      EXPECT_DOUBLE_EQ(m.at("home").BitsPerWeight(), 3.25);
      EXPECT_DOUBLE_EQ(m.at("down1").BitsPerWeight(), 2.25);
      EXPECT_DOUBLE_EQ(m.at("up1").BitsPerWeight(), 4.0);
    }
  }
}

TEST(ReleaseWriter, IndexOnlyWritesSparseFilesOfTheSameSize) {
  SynthOptions o = TinyFixtureGeometry();
  const MemoryReleaseSink full = Synth(o);
  o.index_only = true;
  MemoryReleaseSink sparse;
  auto summary = SynthesizeRelease(o, sparse);
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  ASSERT_EQ(full.files().size(), sparse.files().size());
  for (const auto& [path, f] : full.files()) {
    SCOPED_TRACE(path);
    const MemoryReleaseSink::File* s = sparse.Find(path);
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(s->size, f.size);
    const bool should_be_sparse = path.starts_with("dense/") || path.find(".k") != std::string::npos;
    EXPECT_EQ(s->sparse, should_be_sparse);
    if (path.find(".k") != std::string::npos) {
      // header only: one extent, the same header as the full file
      ASSERT_EQ(s->extents.size(), 1u);
      const auto& head = s->extents.begin()->second;
      EXPECT_EQ(head.size(), HeaderOf(sparse, path).data_start());
      EXPECT_TRUE(std::equal(head.begin(), head.end(), f.extents.begin()->second.begin()));
    }
  }
  std::uint64_t stored = 0, total = 0;
  for (const SynthFile& f : summary->files) {
    stored += f.stored;
    total += f.size;
  }
  EXPECT_EQ(stored, summary->stored_bytes);
  EXPECT_EQ(total, summary->total_bytes);
  EXPECT_LT(summary->stored_bytes * 4, summary->total_bytes);
  // still valid: checksums cover the zeros
  CheckRelease(sparse, o);
}

// GLM-5.3 geometry, index-only, two MoE layers: full-scale sizes (spec 12).
TEST(ReleaseWriter, Glm53IndexOnlyHasFullScaleSizes) {
  SynthOptions o = Glm53Geometry();
  ASSERT_TRUE(o.index_only);
  o.moe_layers = {3, 40};
  o.dense_layers = {0};
  MemoryReleaseSink sink;
  const auto t0 = std::chrono::steady_clock::now();
  auto summary = SynthesizeRelease(o, sink);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  std::printf("GLM-5.3 geometry, 2 MoE layers, index-only, in memory: %.2f s\n", secs);

  for (int layer : o.moe_layers) {
    const std::string ipath = ExpertIndexPath(layer);
    const std::uint64_t isize = sink.Find(ipath)->size;
    EXPECT_GT(isize, 10'000'000u);  // "about 10.6 MB with F16 vectors"
    EXPECT_LT(isize, 11'000'000u);
    for (int k : {2, 3, 4}) {
      const std::string wpath = ExpertWidthPath(layer, k);
      const MemoryReleaseSink::File* f = sink.Find(wpath);
      ASSERT_NE(f, nullptr);
      EXPECT_TRUE(f->sparse);
      const std::uint64_t halves = 256ull * 48 + (k >= 3 ? 48 : 0);
      const SafetensorsHeader wh = HeaderOf(sink, wpath);
      EXPECT_EQ(wh.data_start() % 65536, 0u);
      // pairs of halves are 6/9/12 x 64 KiB: no padding needed
      EXPECT_EQ(f->size, wh.data_start() + halves * 98304ull * k) << wpath;
      EXPECT_EQ(wh.padding_entries(), 0u);
    }
    auto src = sink.Open(ipath);
    ASSERT_TRUE(src.ok());
    auto idx = ExpertIndex::Read(**src, layer);
    ASSERT_TRUE(idx.ok()) << idx.status().ToString();
    EXPECT_EQ(idx->experts(), 256u);
    EXPECT_EQ(idx->hidden(), 6144u);
    auto half = idx->Half(255, Proj::kDown, 15, 4);
    ASSERT_TRUE(half.ok());
    EXPECT_EQ(half->length, 393216u);
  }
  // home = 64 x K4 + 192 x K3 per layer (spec 11.3)
  std::map<int, LayerGeometry> geometry;
  for (int layer : o.moe_layers) {
    auto src = sink.Open(ExpertIndexPath(layer));
    auto idx = ExpertIndex::Read(**src, layer);
    ASSERT_TRUE(idx.ok());
    geometry[layer] = LayerGeometry::Of(*idx);
  }
  auto home = ParseManifest(Text(sink, ManifestPath("home")), "home", geometry);
  ASSERT_TRUE(home.ok()) << home.status().ToString();
  EXPECT_DOUBLE_EQ(home->BitsPerWeight(), 3.25);
  // one half verified end to end against the zeros of the sparse file
  {
    auto src = sink.Open(ExpertIndexPath(40));
    auto idx = ExpertIndex::Read(**src, 40);
    ASSERT_TRUE(idx.ok());
    auto half = idx->Half(17, Proj::kUp, 5, 3);
    ASSERT_TRUE(half.ok());
    std::vector<std::byte> bytes(half->length);
    ASSERT_TRUE(sink.ReadAt(ExpertWidthPath(40, 3), half->offset, bytes).ok());
    Xxh64 x;
    x.Update(bytes);
    for (const ByteRun& run : idx->ChecksumTail(17, Proj::kUp, 5, 3)) {
      std::vector<std::byte> tail(run.length);
      ASSERT_TRUE((*src)->ReadAt(run.offset, tail).ok());
      x.Update(tail);
    }
    EXPECT_EQ(x.Digest(), half->checksum);
  }
}

TEST(ReleaseWriter, DeterministicInTheSeed) {
  SynthOptions o = Geometries()[1].options;
  const MemoryReleaseSink a = Synth(o);
  const MemoryReleaseSink b = Synth(o);
  ASSERT_EQ(a.files().size(), b.files().size());
  for (const auto& [path, f] : a.files()) {
    EXPECT_EQ(f.extents, b.Find(path)->extents) << path;
  }
  o.seed += 1;
  const MemoryReleaseSink c = Synth(o);
  EXPECT_NE(a.Find(ExpertIndexPath(2))->extents, c.Find(ExpertIndexPath(2))->extents);
  EXPECT_NE(a.Find(ExpertWidthPath(2, 4))->extents, c.Find(ExpertWidthPath(2, 4))->extents);
}

// Spec 3.2 allows the byte payloads as any 1-byte integer: with I8 instead
// of U8 only the headers' dtype strings differ, and every dense matrix
// decodes to the same values.
TEST(ReleaseWriter, ByteDtypeI8ChangesOnlyTheDtypeInTheHeaders) {
  SynthOptions o = TinyFixtureGeometry();
  const MemoryReleaseSink u8 = Synth(o);
  o.byte_dtype = DType::kI8;
  const MemoryReleaseSink i8 = Synth(o);
  const std::string width = ExpertWidthPath(o.moe_layers[0], o.widths[0]);
  const SafetensorsHeader width_header = HeaderOf(i8, width);
  for (const TensorInfo& t : width_header.tensors()) EXPECT_EQ(t.dtype, DType::kI8) << t.name;
  std::size_t matrices = 0;
  for (const std::string& path : {DensePath(o.dense_layers[0]), DensePath(o.moe_layers[0]), VocabPath()}) {
    SCOPED_TRACE(path);
    auto a_src = u8.Open(path);
    auto b_src = i8.Open(path);
    ASSERT_TRUE(a_src.ok() && b_src.ok());
    auto a = DenseFile::Parse(HeaderOf(u8, path), **a_src);
    auto b = DenseFile::Parse(HeaderOf(i8, path), **b_src);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    ASSERT_EQ(a->matrices().size(), b->matrices().size());
    for (std::size_t m = 0; m < a->matrices().size(); ++m) {
      auto wa = DecodeDenseMatrix(*a, a->matrices()[m], **a_src);
      auto wb = DecodeDenseMatrix(*b, b->matrices()[m], **b_src);
      ASSERT_TRUE(wa.ok() && wb.ok()) << a->matrices()[m].name;
      EXPECT_EQ(*wa, *wb) << a->matrices()[m].name;
      ++matrices;
    }
  }
  EXPECT_GT(matrices, 8u);
}

TEST(ReleaseWriter, RejectsBadOptions) {
  auto code = [](auto mutate) {
    SynthOptions o = TinyFixtureGeometry();
    mutate(o);
    MemoryReleaseSink sink;
    auto r = SynthesizeRelease(o, sink);
    if (!r.ok()) {
      EXPECT_TRUE(sink.files().empty()) << "options are checked before anything is written";
    }
    return r.ok() ? StatusCode::kOk : r.status().code();
  };
  using O = SynthOptions;
  EXPECT_EQ(code([](O& o) { o.hidden = 100; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(code([](O& o) { o.hidden = 0; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(code([](O& o) { o.halves = 0; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(code([](O& o) { o.experts = 0; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(code([](O& o) { o.widths = {}; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(code([](O& o) { o.widths = {2, 9}; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(code([](O& o) { o.widths = {3, 3}; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(code([](O& o) { o.shared_widths = {}; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(code([](O& o) { o.moe_layers = {}; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(code([](O& o) { o.moe_layers = {3, 5}; }), StatusCode::kInvalidArgument);  // >= num_hidden_layers
  EXPECT_EQ(code([](O& o) { o.dense_layers = {3}; }), StatusCode::kInvalidArgument);   // also MoE
  EXPECT_EQ(code([](O& o) { o.index_dtype = DType::kF16; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(code([](O& o) { o.vector_dtype = DType::kI64; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(code([](O& o) { o.byte_dtype = DType::kF8E4M3; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(code([](O& o) { o.byte_dtype = DType::kI16; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(code([](O& o) { o.width_alignment = 3000; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(code([](O& o) { o.vocab_size = 0; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(code([](O& o) { o.max_materialized_file_bytes = 1000; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(code([](O&) {}), StatusCode::kOk);
}

// A sink that fails its Nth call.
class FailingSink final : public ReleaseSink {
 public:
  explicit FailingSink(int fail_at) : fail_at_(fail_at) {}
  Status WriteFile(std::string_view path, std::span<const std::byte>) override { return Call(path); }
  Status WriteSparseFile(std::string_view path, std::span<const SparseExtent>, std::uint64_t) override {
    return Call(path);
  }
  int calls() const { return calls_; }

 private:
  Status Call(std::string_view path) {
    if (++calls_ == fail_at_) return IOError("disk on fire writing " + std::string(path));
    return Status::Ok();
  }
  int fail_at_;
  int calls_ = 0;
};

TEST(ReleaseWriter, SinkErrorsStopTheWriteAndNameTheFile) {
  for (int n : {1, 2, 5, 12}) {
    FailingSink sink(n);
    auto r = SynthesizeRelease(TinyFixtureGeometry(), sink);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kIOError);
    EXPECT_NE(r.status().message().find("disk on fire"), std::string::npos);
    EXPECT_EQ(sink.calls(), n);
  }
}

TEST(MemoryReleaseSink, SparseFilesReadAsZerosInHoles) {
  MemoryReleaseSink sink;
  const std::vector<std::byte> a = {std::byte{1}, std::byte{2}}, b = {std::byte{3}};
  const SparseExtent xs[] = {{2, a}, {10, b}};
  ASSERT_TRUE(sink.WriteSparseFile("d/f", xs, 12).ok());
  std::vector<std::byte> all(12);
  ASSERT_TRUE(sink.ReadAt("d/f", 0, all).ok());
  EXPECT_EQ(all, (std::vector<std::byte>{std::byte{0}, std::byte{0}, std::byte{1}, std::byte{2}, std::byte{0},
                                         std::byte{0}, std::byte{0}, std::byte{0}, std::byte{0}, std::byte{0},
                                         std::byte{3}, std::byte{0}}));
  std::vector<std::byte> mid(2);
  ASSERT_TRUE(sink.ReadAt("d/f", 3, mid).ok());
  EXPECT_EQ(mid, (std::vector<std::byte>{std::byte{2}, std::byte{0}}));
  EXPECT_EQ(sink.ReadAt("d/f", 11, mid).code(), StatusCode::kCorruption);
  EXPECT_EQ(sink.ReadAt("nope", 0, mid).code(), StatusCode::kNotFound);
  EXPECT_EQ(sink.ReadAll("d/f", 11).status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(sink.Open("nope").status().code(), StatusCode::kNotFound);
}

TEST(MemoryReleaseSink, RejectsBadExtents) {
  MemoryReleaseSink sink;
  const std::vector<std::byte> a(4);
  const SparseExtent overlap[] = {{0, a}, {2, a}};
  EXPECT_EQ(sink.WriteSparseFile("f", overlap, 100).code(), StatusCode::kInvalidArgument);
  const SparseExtent unsorted[] = {{10, a}, {0, a}};
  EXPECT_EQ(sink.WriteSparseFile("f", unsorted, 100).code(), StatusCode::kInvalidArgument);
  const SparseExtent past[] = {{98, a}};
  EXPECT_EQ(sink.WriteSparseFile("f", past, 100).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(sink.files().empty());
}

}  // namespace
}  // namespace exlr8
