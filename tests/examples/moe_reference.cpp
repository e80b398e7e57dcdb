// moe_reference: the reference for examples/moe_layer, from the release files
// alone (format/'s CPU decoder and reconstruction, no lease, no library).
//
//   moe_reference --release DIR --manifest NAME --layer L (--seed S | --input FILE)
//                 [--golden DIR] [--out FILE] [--compare FILE]... [--tol T]
//
// For every routed expert e and the shared expert of layer L it decodes
// every half (gate, up, down; h < halves) at the manifest's width, checksum
// verified (spec 9.4), and computes y_e = sum_h a_h . W_down_h with
// a_h = silu(x . W_gate_h) (.) (x . W_up_h), in double: the same outputs
// moe_layer writes ([experts + 1][hidden] f32, the shared expert last,
// zeros without one). x as moe_layer makes it (--seed: the same splitmix64
// values; --input: hidden f32).
//
// --golden DIR: format/'s weights of every half that DIR/exlr8-tiny.safetensors
// holds as "L/e/proj/h/K/weights" must be within spec 9.3's tolerance (per
// 128 x 128 block max|a - b| <= 1e-5 * max|b|); at least one must be.
// --compare FILE: per expert max|a - b| <= tol * max|b| (see kDefaultTol).
// Exit status: 0 all checks passed, 1 a check failed, 2 bad arguments or
// unreadable files.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "format/byte_source.h"
#include "format/expert_decode.h"
#include "format/expert_index.h"
#include "format/layout.h"
#include "format/manifest.h"
#include "format/safetensors.h"
#include "tests/format/block_tolerance.h"

namespace exlr8 {
namespace {

namespace fs = std::filesystem;

// Why 1e-4: moe_layer's weights come from exlr8_lease_half_weights, which
// spec 9.3 and its contract allow to differ from this reference only by
// summation order, bounded per 128 x 128 block by 1e-5 * max|W|. Those
// differences are fp32 roundings of independent sign (the spec measured
// 1.1e-6 absolute on a block of max 4.8, i.e. 2.3e-7 of the maximum), and
// both sides then accumulate in double, so the outputs agree to about 1e-6
// of max|y|. Even if every weight sat at the 1e-5 bound, the differences
// would add up over the 128 channels of a half like a random walk
// (sqrt(128) * 1e-5 ~ 1e-4 of a half's partial output). A wrong orientation,
// a wrong or missing half, or a wrong vector changes the outputs by percents
// (the test checks that a 1e-3 change of one expert is refused).
constexpr double kDefaultTol = 1e-4;
constexpr std::uint32_t kHalfWidth = 128;

std::vector<std::byte> ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + p.string());
  std::vector<char> c((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(c.size());
  if (!c.empty()) std::memcpy(out.data(), c.data(), c.size());
  return out;
}

std::vector<float> ReadF32(const fs::path& p) {
  const auto b = ReadFile(p);
  if (b.size() % 4 != 0) throw std::runtime_error(p.string() + ": not a whole number of f32");
  std::vector<float> v(b.size() / 4);
  if (!v.empty()) std::memcpy(v.data(), b.data(), b.size());
  return v;
}

template <typename T>
T Value(Result<T> r) {
  if (!r.ok()) throw std::runtime_error(r.status().ToString());
  return std::move(r).value();
}
void Ok(const Status& s) {
  if (!s.ok()) throw std::runtime_error(s.ToString());
}

// The same values as examples/moe_layer's SeededInput.
std::vector<float> SeededInput(std::uint64_t seed, std::uint64_t hidden) {
  std::vector<float> x(hidden);
  std::uint64_t state = seed;
  for (auto& v : x) {
    state += 0x9E3779B97F4A7C15ull;
    std::uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    v = static_cast<float>(static_cast<double>(z >> 40) / 8388608.0 - 1.0);
  }
  return x;
}

using ::exlr8::testing::BlocksOutsideTolerance;

struct Args {
  fs::path release, golden, input, out;
  std::string manifest;
  int layer = -1;
  std::optional<std::uint64_t> seed;
  std::vector<fs::path> compare;
  double tol = kDefaultTol;
};

Args ParseArgs(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    if (i + 1 >= argc) throw std::invalid_argument(s + " needs a value");
    const std::string v = argv[++i];
    if (s == "--release")
      a.release = v;
    else if (s == "--manifest")
      a.manifest = v;
    else if (s == "--layer")
      a.layer = std::stoi(v);
    else if (s == "--seed")
      a.seed = std::stoull(v, nullptr, 0);
    else if (s == "--input")
      a.input = v;
    else if (s == "--golden")
      a.golden = v;
    else if (s == "--out")
      a.out = v;
    else if (s == "--compare")
      a.compare.push_back(v);
    else if (s == "--tol")
      a.tol = std::stod(v);
    else
      throw std::invalid_argument("unknown option " + s);
  }
  if (a.release.empty() || a.manifest.empty() || a.layer < 0)
    throw std::invalid_argument("--release, --manifest and --layer are required");
  if (a.input.empty() == !a.seed.has_value()) throw std::invalid_argument("give one of --input and --seed");
  return a;
}

std::string HalfName(int layer, int expert, Proj p, std::uint32_t h, int k) {
  return std::to_string(layer) + "/" +
         (expert == kSharedExpert ? std::string("shared") : std::to_string(expert)) + "/" +
         std::string(ProjName(p)) + "/" + std::to_string(h) + "/" + std::to_string(k);
}

int Run(const Args& a) {
  // Every layer's index (the manifest is parsed against all of them).
  std::map<int, LayerGeometry> geometry;
  std::map<int, std::vector<std::byte>> index_bytes;
  for (const auto& entry : fs::directory_iterator(a.release / "experts")) {
    const std::string n = entry.path().filename().string();
    int l = -1;
    if (std::sscanf(n.c_str(), "exlr8-layer-%d.index.safetensors", &l) != 1 ||
        ExpertIndexPath(l) != "experts/" + n)
      continue;
    index_bytes[l] = ReadFile(entry.path());
    SpanByteSource src(index_bytes[l], entry.path().string());
    geometry[l] = LayerGeometry::Of(Value(ExpertIndex::Read(src, l)));
  }
  if (!index_bytes.count(a.layer))
    throw std::runtime_error("layer " + std::to_string(a.layer) + " has no expert index in " +
                             a.release.string());
  const auto mbytes = ReadFile(a.release / ManifestPath(a.manifest));
  const Manifest manifest = Value(ParseManifest(
      std::string_view(reinterpret_cast<const char*>(mbytes.data()), mbytes.size()), a.manifest, geometry));
  const LayerWidths& widths = manifest.layers().at(a.layer);

  SpanByteSource index_src(index_bytes[a.layer], ExpertIndexPath(a.layer));
  const ExpertIndex index = Value(ExpertIndex::Read(index_src, a.layer));
  const std::uint64_t hidden = index.hidden();
  const std::uint32_t experts = index.experts(), halves = index.halves_per_expert();
  const std::vector<float> x = a.seed ? SeededInput(*a.seed, hidden) : ReadF32(a.input);
  if (x.size() != hidden)
    throw std::runtime_error("--input: " + std::to_string(x.size()) + " floats, hidden is " +
                             std::to_string(hidden));

  std::optional<SafetensorsHeader> golden_header;
  std::vector<std::byte> golden;
  if (!a.golden.empty()) {
    golden = ReadFile(a.golden / "exlr8-tiny.safetensors");
    golden_header = Value(ParseSafetensorsHeader(golden, golden.size(), "golden"));
  }

  std::map<int, std::vector<std::byte>> width_files;
  std::vector<float> ref((experts + 1ull) * hidden, 0.0f);
  int golden_checked = 0, golden_bad = 0;
  for (std::uint32_t e = 0; e <= experts; ++e) {
    const bool shared = e == experts;
    if (shared && !index.has_shared()) break;
    const int expert = shared ? kSharedExpert : static_cast<int>(e);
    std::vector<double> y(hidden, 0.0);
    for (std::uint32_t h = 0; h < halves; ++h) {
      std::vector<float> w[3];
      for (int pi = 0; pi < 3; ++pi) {
        const Proj p = static_cast<Proj>(pi);
        const int k = widths.Width(expert, p, h);
        auto& wf = width_files[k];
        if (wf.empty()) wf = ReadFile(a.release / ExpertWidthPath(a.layer, k));
        const HalfEntry he = Value(index.Half(expert, p, h, k));
        if (he.offset + he.length > wf.size())
          throw std::runtime_error(HalfName(a.layer, expert, p, h, k) + " runs past its width file");
        Ok(DecodeExpertHalf(index, index_src, std::span<const std::byte>(wf).subspan(he.offset, he.length),
                            expert, p, h, k, DecodeStage::kWeights, /*verify=*/true, &w[pi]));
        if (golden_header) {
          const std::string name = HalfName(a.layer, expert, p, h, k) + "/weights";
          if (const TensorInfo* t = golden_header->Find(name)) {
            std::vector<float> g(t->byte_size() / 4);
            std::memcpy(g.data(), golden.data() + golden_header->AbsoluteOffset(*t), g.size() * 4);
            const std::size_t rows = p == Proj::kDown ? kHalfWidth : hidden;
            const std::size_t cols = p == Proj::kDown ? hidden : kHalfWidth;
            const bool bad = g.size() != w[pi].size() || BlocksOutsideTolerance(rows, cols, w[pi], g) != 0;
            if (bad) std::printf("golden: %s differs beyond spec 9.3's tolerance\n", name.c_str());
            golden_bad += bad;
            ++golden_checked;
          }
        }
      }
      // (input, output) orientation (spec 8.4): gate/up W[i][j], down W[j][o].
      double act[kHalfWidth];
      for (std::uint32_t j = 0; j < kHalfWidth; ++j) {
        double g = 0, u = 0;
        for (std::uint64_t i = 0; i < hidden; ++i) {
          g += double(x[i]) * w[0][i * kHalfWidth + j];
          u += double(x[i]) * w[1][i * kHalfWidth + j];
        }
        act[j] = g / (1.0 + std::exp(-g)) * u;
      }
      for (std::uint32_t j = 0; j < kHalfWidth; ++j)
        for (std::uint64_t o = 0; o < hidden; ++o) y[o] += act[j] * w[2][j * hidden + o];
    }
    for (std::uint64_t o = 0; o < hidden; ++o) ref[e * hidden + o] = static_cast<float>(y[o]);
  }

  int failed = 0;
  if (golden_header) {
    std::printf("golden: %d halves of layer %d checked against the golden weights, %d outside tolerance\n",
                golden_checked, a.layer, golden_bad);
    if (golden_checked == 0 || golden_bad != 0) failed = 1;
  }
  if (!a.out.empty()) {
    std::ofstream f(a.out, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(ref.data()), static_cast<std::streamsize>(ref.size() * 4));
    if (!f) throw std::runtime_error("cannot write " + a.out.string());
  }
  for (const fs::path& c : a.compare) {
    const std::vector<float> got = ReadF32(c);
    if (got.size() != ref.size()) {
      std::printf("compare %s: %zu floats, the reference has %zu ([%u + 1][%llu])\n", c.c_str(), got.size(),
                  ref.size(), experts, static_cast<unsigned long long>(hidden));
      failed = 1;
      continue;
    }
    for (std::uint32_t e = 0; e <= experts; ++e) {
      double diff = 0, scale = 0;
      for (std::uint64_t o = 0; o < hidden; ++o) {
        diff = std::max(diff, std::fabs(double(got[e * hidden + o]) - ref[e * hidden + o]));
        scale = std::max(scale, std::fabs(double(ref[e * hidden + o])));
      }
      // Non-finite output: diff is NaN and the check below fails.
      const bool ok = diff <= a.tol * scale;
      std::printf("compare %s expert %s: max|a-b| %.3g, max|b| %.6g, ratio %.3g %s\n", c.c_str(),
                  e == experts ? "shared" : std::to_string(e).c_str(), diff, scale,
                  scale > 0 ? diff / scale : 0.0, ok ? "ok" : "FAILS");
      if (!ok) failed = 1;
    }
  }
  std::printf("moe_reference: layer %d, %u experts%s, hidden %llu: %s\n", a.layer, experts,
              index.has_shared() ? " + shared" : "", static_cast<unsigned long long>(hidden),
              failed ? "CHECKS FAILED" : "all checks passed");
  return failed;
}

}  // namespace
}  // namespace exlr8

int main(int argc, char** argv) {
  exlr8::Args args;
  try {
    args = exlr8::ParseArgs(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moe_reference: %s\n", e.what());
    return 2;
  }
  try {
    return exlr8::Run(args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moe_reference: %s\n", e.what());
    return 2;
  }
}
