// moe_layer: one MoE layer's expert outputs computed from leases only: the
// example of a serving process that runs a rank from libexlr8client.
//
//   moe_layer --layer L (--input FILE | --seed S) --out FILE [--memory host|device] SOCK...
//
// SOCK...: the lease sockets of ALL TP ranks of one staged fileset (each an
// `exlr8d-stage --hold SOCK`), in any order. For every routed expert e and
// the shared expert it computes
//   y_e = down(silu(gate(x)) * up(x)) = sum over halves h of a_h . W_down_h,
//   a_h = silu(x . W_gate_h) (.) (x . W_up_h)
// where W_*_h come from exlr8_lease_half_weights of the rank that owns half h
// (spec 13: r = (16e + h + L) mod N; the shared expert, spec U-11: every
// rank holds it; we take it from rank h mod N). W is (input, output):
// gate/up hidden x 128, down 128 x hidden (HF weight = W transposed, spec
// 8.4), so g_h[j] = sum_i x[i] W_gate_h[i][j] and y[o] += sum_j a_h[j]
// W_down_h[j][o].
//
// Host leases: the math on the CPU, products accumulated in double. Device
// leases (a build with the CUDA runtime only): the weights into device
// memory of the lease's GPU, the partial output of each half by the small
// kernels of moe_layer_cuda.cu (double accumulation), summed over halves on
// the host.
//
// x: --input FILE holds `hidden` little-endian f32; --seed S generates it
// (SeededInput below; moe_layer.py makes the same values). The output file
// is [experts + 1][hidden] little-endian f32: routed experts 0..E-1, then
// the shared expert (zeros when the layer has none). Exit status 0 on
// success, 1 on any error (printed with what failed).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "exlr8/exlr8client.hpp"

#ifdef EXLR8_EXAMPLE_CUDA
#include <cuda_runtime_api.h>

#include "moe_layer_cuda.h"
#endif

namespace {

constexpr std::uint32_t kHalfWidth = 128;  // intermediate channels per half

// splitmix64; x[i] = (next() >> 40) / 2^23 - 1: 24-bit values in [-1, 1),
// exact in f32 (moe_layer.py computes the same).
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

std::vector<float> ReadInput(const std::string& path, std::uint64_t hidden) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw std::runtime_error("--input: cannot open " + path);
  const auto size = static_cast<std::uint64_t>(in.tellg());
  if (size != hidden * 4)
    throw std::runtime_error("--input " + path + ": " + std::to_string(size) +
                             " bytes, the layer's hidden size " + std::to_string(hidden) + " needs " +
                             std::to_string(hidden * 4));
  std::vector<float> x(hidden);
  in.seekg(0);
  in.read(reinterpret_cast<char*>(x.data()), static_cast<std::streamsize>(size));
  for (std::uint64_t i = 0; i < hidden; ++i)
    if (!std::isfinite(x[i]))
      throw std::runtime_error("--input " + path + ": element " + std::to_string(i) + " is not finite");
  return x;
}

struct Args {
  std::uint32_t layer = 0;
  bool have_layer = false;
  std::string input, out;
  std::optional<std::uint64_t> seed;
  bool device = false;
  std::vector<std::string> sockets;
};

std::uint64_t ParseU64(const std::string& flag, const std::string& v) {
  std::size_t used = 0;
  unsigned long long n = 0;
  try {
    n = std::stoull(v, &used, 0);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v.size() || v.empty() || v[0] == '-')
    throw std::runtime_error(flag + ": '" + v + "' is not a number");
  return n;
}

Args ParseArgs(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(s + " needs a value");
      return argv[++i];
    };
    if (s == "--layer") {
      const std::uint64_t l = ParseU64(s, value());
      if (l > 0xFFFF) throw std::runtime_error("--layer: out of range");
      a.layer = static_cast<std::uint32_t>(l);
      a.have_layer = true;
    } else if (s == "--input") {
      a.input = value();
    } else if (s == "--seed") {
      a.seed = ParseU64(s, value());
    } else if (s == "--out") {
      a.out = value();
    } else if (s == "--memory") {
      const std::string m = value();
      if (m != "host" && m != "device")
        throw std::runtime_error("--memory must be host or device, not '" + m + "'");
      a.device = m == "device";
    } else if (!s.empty() && s[0] == '-') {
      throw std::runtime_error("unknown option " + s);
    } else {
      a.sockets.push_back(s);
    }
  }
  if (!a.have_layer) throw std::runtime_error("missing --layer");
  if (a.out.empty()) throw std::runtime_error("missing --out");
  if (a.input.empty() == !a.seed.has_value())
    throw std::runtime_error("give one of --input FILE and --seed S");
  if (a.sockets.empty()) throw std::runtime_error("no lease sockets given");
  return a;
}

// The ranks' leases, indexed by rank.
struct Ranks {
  std::vector<exlr8client::Lease> by_rank;
  std::vector<std::string> socket_of;
  exlr8client::Info first{};
};

Ranks OpenAll(const Args& a) {
  Ranks r;
  const exlr8client::OpenOptions opts{a.device ? exlr8client::MemoryKind::kDevice
                                               : exlr8client::MemoryKind::kHost};
  std::vector<exlr8client::Lease> opened;
  std::vector<exlr8client::Info> infos;
  for (const auto& sock : a.sockets) {
    opened.push_back(exlr8client::Lease::Open(sock, opts));
    infos.push_back(opened.back().info());
  }
  const auto tp = static_cast<std::size_t>(infos[0].tp);
  if (tp != a.sockets.size())
    throw std::runtime_error(a.sockets[0] + " holds a rank of TP " + std::to_string(tp) + ", " +
                             std::to_string(a.sockets.size()) + " sockets given: give every rank's");
  r.by_rank.resize(tp);
  r.socket_of.resize(tp);
  for (std::size_t i = 0; i < opened.size(); ++i) {
    const auto& in = infos[i];
    if (in.tp != infos[0].tp || std::strcmp(in.repo, infos[0].repo) != 0 ||
        std::strcmp(in.commit, infos[0].commit) != 0 || std::strcmp(in.manifest, infos[0].manifest) != 0)
      throw std::runtime_error(a.sockets[i] + " holds another fileset (" + in.repo + " " + in.manifest +
                               " TP " + std::to_string(in.tp) + ") than " + a.sockets[0]);
    const auto rank = static_cast<std::size_t>(in.rank);
    if (in.rank < 0 || rank >= tp || r.by_rank[rank])
      throw std::runtime_error(a.sockets[i] + ": rank " + std::to_string(in.rank) + " twice or out of range");
    r.by_rank[rank] = std::move(opened[i]);
    r.socket_of[rank] = a.sockets[i];
  }
  r.first = infos[0];
  return r;
}

// The half record (layer, expert, proj, h) from the rank that owns it.
std::pair<std::size_t, exlr8client::Tensor> OwnerOf(const Ranks& r, std::uint32_t layer, std::uint32_t expert,
                                                    std::uint32_t proj, std::uint32_t h) {
  const std::size_t n = r.by_rank.size();
  const std::size_t rank =
      expert == EXLR8_SHARED_EXPERT ? h % n : (16ull * expert + h + layer) % n;  // spec 13 / U-11
  if (auto t = r.by_rank[rank].FindHalf(layer, expert, proj, h)) return {rank, *t};
  throw std::runtime_error("rank " + std::to_string(rank) + " (" + r.socket_of[rank] +
                           ") does not hold layer " + std::to_string(layer) + " expert " +
                           (expert == EXLR8_SHARED_EXPERT ? std::string("shared") : std::to_string(expert)) +
                           " proj " + std::to_string(proj) + " half " + std::to_string(h));
}

// hidden = trellis bytes / (16 K) (spec 9.4).
std::uint64_t HiddenOf(const exlr8client::Tensor& t) { return t.shape[0] / (16ull * t.k); }

double Silu(double g) { return g / (1.0 + std::exp(-g)); }

// Host leases: y += a_h . W_down_h for one half, on the CPU in double.
void HostHalf(const std::vector<float>& x, const std::vector<float>& wg, const std::vector<float>& wu,
              const std::vector<float>& wd, std::vector<double>& y) {
  const std::size_t hidden = x.size();
  double a[kHalfWidth];
  for (std::uint32_t j = 0; j < kHalfWidth; ++j) {
    double g = 0, u = 0;
    for (std::size_t i = 0; i < hidden; ++i) {
      g += static_cast<double>(x[i]) * wg[i * kHalfWidth + j];
      u += static_cast<double>(x[i]) * wu[i * kHalfWidth + j];
    }
    a[j] = Silu(g) * u;
  }
  for (std::uint32_t j = 0; j < kHalfWidth; ++j)
    for (std::size_t o = 0; o < hidden; ++o) y[o] += a[j] * wd[j * hidden + o];
}

#ifdef EXLR8_EXAMPLE_CUDA
void CudaCheck(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// Per rank: its GPU, x and three weight buffers there.
struct DeviceRank {
  int device = -1;
  float* x = nullptr;
  float* w[3] = {nullptr, nullptr, nullptr};
  double* y = nullptr;
};

template <typename T>
void DeviceAlloc(T** p, std::size_t bytes) {
  void* v = nullptr;
  CudaCheck(cudaMalloc(&v, bytes), "cudaMalloc");
  *p = static_cast<T*>(v);
}
#endif

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args args = ParseArgs(argc, argv);
#ifndef EXLR8_EXAMPLE_CUDA
    if (args.device)
      throw std::runtime_error(
          "--memory device: this moe_layer was not built with CUDA (build it where the CUDA "
          "Toolkit is)");
#endif
    Ranks ranks = OpenAll(args);
    const std::uint32_t layer = args.layer;
    const std::uint32_t experts = ranks.first.experts, halves = ranks.first.halves;
    if (layer >= ranks.first.layers)
      throw std::runtime_error("--layer " + std::to_string(layer) + ": the fileset has " +
                               std::to_string(ranks.first.layers) + " layers");
    const std::uint64_t hidden = HiddenOf(OwnerOf(ranks, layer, 0, EXLR8_PROJ_GATE, 0).second);
    const std::vector<float> x = args.seed ? SeededInput(*args.seed, hidden) : ReadInput(args.input, hidden);
    const bool has_shared =
        ranks.by_rank[0].FindHalf(layer, EXLR8_SHARED_EXPERT, EXLR8_PROJ_GATE, 0).has_value();

#ifdef EXLR8_EXAMPLE_CUDA
    std::vector<DeviceRank> dev(ranks.by_rank.size());
    if (args.device) {
      for (std::size_t r = 0; r < dev.size(); ++r) {
        dev[r].device = ranks.by_rank[r].info().cuda_device;
        CudaCheck(cudaSetDevice(dev[r].device), "cudaSetDevice");
        DeviceAlloc(&dev[r].x, hidden * 4);
        for (auto& w : dev[r].w) DeviceAlloc(&w, hidden * kHalfWidth * 4);
        DeviceAlloc(&dev[r].y, hidden * 8);
        CudaCheck(cudaMemcpy(dev[r].x, x.data(), hidden * 4, cudaMemcpyHostToDevice), "cudaMemcpy x");
      }
    }
    std::vector<double> part(hidden);
#endif

    std::vector<float> out((experts + 1ull) * hidden, 0.0f);
    std::vector<float> w[3];
    for (auto& v : w) v.resize(hidden * kHalfWidth);
    std::uint64_t halves_used = 0;
    for (std::uint32_t e = 0; e <= experts; ++e) {
      const bool shared = e == experts;
      if (shared && !has_shared) break;
      const std::uint32_t expert = shared ? EXLR8_SHARED_EXPERT : e;
      std::vector<double> y(hidden, 0.0);
      for (std::uint32_t h = 0; h < halves; ++h) {
        // gate, up and down half h live on one rank (spec 13: the rule
        // does not depend on the projection).
        std::size_t rank = 0;
        exlr8client::Tensor t[3];
        for (std::uint32_t p = 0; p < 3; ++p) {
          auto [r, tensor] = OwnerOf(ranks, layer, expert, p, h);
          if (p > 0 && r != rank) throw std::runtime_error("the projections of one half on two ranks");
          rank = r;
          t[p] = tensor;
          if (HiddenOf(tensor) != hidden)
            throw std::runtime_error("half record " + std::to_string(tensor.index) + ": another hidden size");
        }
        exlr8client::Lease& lease = ranks.by_rank[rank];
        if (!args.device) {
          for (std::uint32_t p = 0; p < 3; ++p) lease.HalfWeights(t[p].index, w[p].data(), w[p].size());
          HostHalf(x, w[0], w[1], w[2], y);
        }
#ifdef EXLR8_EXAMPLE_CUDA
        else {
          DeviceRank& d = dev[rank];
          CudaCheck(cudaSetDevice(d.device), "cudaSetDevice");
          for (std::uint32_t p = 0; p < 3; ++p)
            lease.HalfWeights(t[p].index, d.w[p], hidden * kHalfWidth, nullptr);
          CudaCheck(LaunchHalfPartial(d.x, d.w[0], d.w[1], d.w[2], hidden, d.y, nullptr), "the half kernels");
          CudaCheck(cudaMemcpy(part.data(), d.y, hidden * 8, cudaMemcpyDeviceToHost), "cudaMemcpy y");
          for (std::uint64_t o = 0; o < hidden; ++o) y[o] += part[o];
        }
#endif
        ++halves_used;
      }
      double absmax = 0, sumsq = 0;
      for (std::uint64_t o = 0; o < hidden; ++o) {
        out[e * hidden + o] = static_cast<float>(y[o]);
        absmax = std::max(absmax, std::fabs(y[o]));
        sumsq += y[o] * y[o];
      }
      std::printf("expert %-6s |y|max %.6g  rms %.6g\n", shared ? "shared" : std::to_string(e).c_str(),
                  absmax, std::sqrt(sumsq / static_cast<double>(hidden)));
    }

#ifdef EXLR8_EXAMPLE_CUDA
    for (auto& d : dev) {
      if (d.device < 0) continue;
      cudaSetDevice(d.device);
      cudaFree(d.x);
      for (auto* p : d.w) cudaFree(p);
      cudaFree(d.y);
    }
#endif

    std::ofstream f(args.out, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(out.data()), static_cast<std::streamsize>(out.size() * 4));
    f.close();
    if (!f) throw std::runtime_error("--out " + args.out + ": cannot write");
    std::printf(
        "moe_layer: %s %s TP %d layer %u, %s memory: %u experts%s, hidden %llu, %llu halves from %zu "
        "ranks -> %s\n",
        ranks.first.repo, ranks.first.manifest, ranks.first.tp, layer, args.device ? "device" : "host",
        experts, has_shared ? " + shared" : " (no shared expert)", static_cast<unsigned long long>(hidden),
        static_cast<unsigned long long>(halves_used * 3), ranks.by_rank.size(), args.out.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moe_layer: %s\n", e.what());
    return 1;
  }
}
