#include "client/cmd_synth.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <limits>
#include <set>

#include "client/cli/args.h"
#include "client/cli/cli.h"
#include "client/file_sink.h"
#include "client/lvq5_cli.h"
#include "format/lvq5/writer.h"

namespace exlr8 {

namespace {

const std::set<std::string> kValueOptions = {
    "preset",       "hidden",       "halves",           "experts",         "moe-layers",
    "dense-layers", "num-layers",   "widths",           "shared-widths",   "vocab",
    "seed",         "index-dtype",  "checksum-dtype",   "vector-dtype",    "block-vector-dtype",
    "signs-dtype",  "record-dtype", "int4-scale-dtype", "fp8-scale-dtype", "byte-dtype",
    "alignment",    "half-order",   "home-mix",         "max-file-bytes",  "leading-pad",
};
const std::set<std::string> kFlags = {"index-only", "no-pair-align", "sync", "quiet", "help"};

Result<std::vector<int>> ParseIntList(std::string_view name, std::string_view text) {
  std::vector<int> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t comma = text.find(',', start);
    if (comma == std::string_view::npos) comma = text.size();
    std::string_view part = text.substr(start, comma - start);
    int v = 0;
    auto [p, ec] = std::from_chars(part.data(), part.data() + part.size(), v);
    if (part.empty() || ec != std::errc() || p != part.data() + part.size())
      return InvalidArgumentError("--" + std::string(name) + ": '" + std::string(part) +
                                  "' is not an integer");
    out.push_back(v);
    start = comma + 1;
  }
  return out;
}

Result<DType> ParseDType(const Args& a, std::string_view name, DType fallback) {
  auto v = a.Get(name);
  if (!v) return fallback;
  auto d = DTypeFromName(*v);
  if (!d) return InvalidArgumentError("--" + std::string(name) + ": unknown dtype '" + *v + "'");
  return *d;
}

struct SynthCommand {
  SynthOptions options;
  std::string out;
  bool help = false;
  bool quiet = false;
  bool sync = false;
};

Result<SynthCommand> ParseCommand(const std::vector<std::string>& argv, bool need_out) {
  EXLR8_ASSIGN_OR_RETURN(Args a, Args::Parse(argv, kValueOptions, kFlags));
  SynthCommand c;
  if (a.Flag("help")) {
    c.help = true;
    return c;
  }
  if (need_out) {
    if (a.positional().size() != 1)
      return InvalidArgumentError("expected exactly one output directory, got " +
                                  std::to_string(a.positional().size()) + " positional arguments");
    c.out = a.positional()[0];
  } else if (!a.positional().empty()) {
    return InvalidArgumentError("unexpected argument '" + a.positional()[0] + "'");
  }
  c.quiet = a.Flag("quiet");
  c.sync = a.Flag("sync");

  const std::string preset = a.GetOr("preset", "tiny");
  SynthOptions& o = c.options;
  if (preset == "tiny") {
    o = TinyFixtureGeometry();
  } else if (preset == "glm53") {
    o = Glm53Geometry();
    o.index_only = false;  // explicit below
  } else {
    return InvalidArgumentError("--preset: unknown preset '" + preset + "' (tiny, glm53)");
  }

  EXLR8_ASSIGN_OR_RETURN(auto seed_text, a.Require("seed"));
  {
    auto [p, ec] = std::from_chars(seed_text.data(), seed_text.data() + seed_text.size(), o.seed);
    if (ec != std::errc() || p != seed_text.data() + seed_text.size())
      return InvalidArgumentError("--seed: '" + seed_text + "' is not an unsigned integer");
  }
  EXLR8_ASSIGN_OR_RETURN(auto hidden, a.GetInt("hidden", static_cast<std::int64_t>(o.hidden), 128, 65536));
  o.hidden = static_cast<std::uint64_t>(hidden);
  EXLR8_ASSIGN_OR_RETURN(auto halves, a.GetInt("halves", o.halves, 1, 256));
  o.halves = static_cast<std::uint32_t>(halves);
  EXLR8_ASSIGN_OR_RETURN(auto experts, a.GetInt("experts", o.experts, 1, 4096));
  o.experts = static_cast<std::uint32_t>(experts);
  EXLR8_ASSIGN_OR_RETURN(auto vocab, a.GetInt("vocab", static_cast<std::int64_t>(o.vocab_size), 1, 1 << 24));
  o.vocab_size = static_cast<std::uint64_t>(vocab);
  if (auto v = a.Get("moe-layers")) {
    auto r = ParseLayerList(*v);
    if (!r.ok()) return r.status().WithContext("--moe-layers");
    o.moe_layers = *r;
  }
  if (auto v = a.Get("dense-layers")) {
    auto r = ParseLayerList(*v);
    if (!r.ok()) return r.status().WithContext("--dense-layers");
    o.dense_layers = *r;
  }
  // default layer count: enough for every listed layer
  int needed = o.num_hidden_layers;
  for (int l : o.moe_layers) needed = std::max(needed, l + 1);
  for (int l : o.dense_layers) needed = std::max(needed, l + 1);
  EXLR8_ASSIGN_OR_RETURN(auto num_layers, a.GetInt("num-layers", needed, 1, 1000));
  o.num_hidden_layers = static_cast<int>(num_layers);
  if (auto v = a.Get("widths")) {
    EXLR8_ASSIGN_OR_RETURN(o.widths, ParseIntList("widths", *v));
  }
  if (auto v = a.Get("shared-widths")) {
    EXLR8_ASSIGN_OR_RETURN(o.shared_widths, ParseIntList("shared-widths", *v));
  }
  EXLR8_ASSIGN_OR_RETURN(o.index_dtype, ParseDType(a, "index-dtype", o.index_dtype));
  EXLR8_ASSIGN_OR_RETURN(o.checksum_dtype, ParseDType(a, "checksum-dtype", o.checksum_dtype));
  EXLR8_ASSIGN_OR_RETURN(o.vector_dtype, ParseDType(a, "vector-dtype", o.vector_dtype));
  EXLR8_ASSIGN_OR_RETURN(o.block_vector_dtype, ParseDType(a, "block-vector-dtype", o.block_vector_dtype));
  EXLR8_ASSIGN_OR_RETURN(o.signs_dtype, ParseDType(a, "signs-dtype", o.signs_dtype));
  EXLR8_ASSIGN_OR_RETURN(o.record_dtype, ParseDType(a, "record-dtype", o.record_dtype));
  EXLR8_ASSIGN_OR_RETURN(o.int4_scale_dtype, ParseDType(a, "int4-scale-dtype", o.int4_scale_dtype));
  EXLR8_ASSIGN_OR_RETURN(o.fp8_scale_dtype, ParseDType(a, "fp8-scale-dtype", o.fp8_scale_dtype));
  EXLR8_ASSIGN_OR_RETURN(o.byte_dtype, ParseDType(a, "byte-dtype", o.byte_dtype));
  if (auto v = a.Get("alignment")) {
    auto r = ParseByteCount(*v);
    if (!r.ok()) return r.status().WithContext("--alignment");
    o.width_alignment = *r;
  }
  if (auto v = a.Get("leading-pad")) {
    auto r = ParseByteCount(*v);
    if (!r.ok()) return r.status().WithContext("--leading-pad");
    o.width_leading_padding = *r;
  }
  if (auto v = a.Get("max-file-bytes")) {
    auto r = ParseByteCount(*v);
    if (!r.ok()) return r.status().WithContext("--max-file-bytes");
    o.max_materialized_file_bytes = *r;
  }
  if (auto v = a.Get("half-order")) {
    if (*v == "expert")
      o.half_order = HalfOrder::kExpertMajor;
    else if (*v == "projection")
      o.half_order = HalfOrder::kProjectionMajor;
    else if (*v == "shuffled")
      o.half_order = HalfOrder::kShuffled;
    else
      return InvalidArgumentError("--half-order: '" + *v + "' is not expert, projection or shuffled");
  }
  if (auto v = a.Get("home-mix")) {
    if (*v == "expert")
      o.home_mix = ManifestMix::kPerExpert;
    else if (*v == "half")
      o.home_mix = ManifestMix::kRandomPerHalf;
    else
      return InvalidArgumentError("--home-mix: '" + *v + "' is not expert or half");
  }
  if (a.Flag("no-pair-align")) o.align_pairs = false;
  o.index_only = a.Flag("index-only");
  EXLR8_RETURN_IF_ERROR(ValidateSynthOptions(o));
  return c;
}

}  // namespace

Result<std::vector<int>> ParseLayerList(std::string_view text) {
  std::vector<int> out;
  if (text == "none" || text.empty()) return out;
  std::size_t start = 0;
  auto parse = [&](std::string_view s) -> Result<int> {
    int v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || ec != std::errc() || p != s.data() + s.size() || v < 0 || v > 999)
      return InvalidArgumentError("'" + std::string(s) + "' is not a layer number 0..999");
    return v;
  };
  while (start <= text.size()) {
    std::size_t comma = text.find(',', start);
    if (comma == std::string_view::npos) comma = text.size();
    const std::string_view part = text.substr(start, comma - start);
    const std::size_t dash = part.find('-');
    if (dash == std::string_view::npos) {
      EXLR8_ASSIGN_OR_RETURN(int v, parse(part));
      out.push_back(v);
    } else {
      EXLR8_ASSIGN_OR_RETURN(int lo, parse(part.substr(0, dash)));
      EXLR8_ASSIGN_OR_RETURN(int hi, parse(part.substr(dash + 1)));
      if (hi < lo) return InvalidArgumentError("range '" + std::string(part) + "' is empty");
      for (int l = lo; l <= hi; ++l) out.push_back(l);
    }
    start = comma + 1;
  }
  return out;
}

std::string SynthUsage() {
  return R"(usage: exlr8 synth OUT --seed S [options]

Writes a synthetic, valid EXLR8 v2 release (random contents, exact checksums)
into directory OUT: config.json, experts/, dense/, manifests/ (home, down1, up1).
(exlr8 synth --lvq5 --help: a synthetic LVQ5 sealed file instead.)

  --seed S                 random seed (required); same options + seed = same bytes
  --preset NAME            tiny (default: the exlr8-tiny fixture geometry) or
                           glm53 (hidden 6144, 16 halves, 256 experts, MoE layers
                           3-77, dense layers 0-2, vocab 154880, 64 KiB alignment)
  --index-only             width files and large dense payloads are sparse (header
                           + size, payload reads as zeros; checksums match the
                           zeros): full-scale planning without the bytes
geometry (override the preset):
  --hidden N               hidden size, multiple of 128
  --halves H               halves per expert projection (intermediate = 128*H)
  --experts E              routed experts per MoE layer
  --moe-layers LIST        e.g. 3-77 or 3,4
  --dense-layers LIST      layers with a dense MLP, e.g. 0-2; 'none' for none
  --num-layers N           config num_hidden_layers (default: enough for LISTs)
  --widths LIST            routed stored widths, e.g. 2,3,4
  --shared-widths LIST     shared expert widths, e.g. 3,4
  --vocab N                vocabulary rows of embed_tokens / lm_head
dtypes:
  --index-dtype I64|U64            k{K}.index (default I64)
  --checksum-dtype U64|I64         expert and dense checksums (default U64)
  --vector-dtype F16|BF16|F32      svh / suh vectors (default F16)
  --block-vector-dtype F16|BF16|F32  su_block / sv_block (default F32)
  --signs-dtype F16|BF16|F32       signs.in / signs.out (default F16)
  --record-dtype I64|U64|I32       dense {m}.record (default I64)
  --int4-scale-dtype F16|BF16|F32  INT4 s4 (default F16)
  --fp8-scale-dtype F16|BF16|F32   FP8_BLOCK / FP8_ROW scale (default F32)
  --byte-dtype U8|I8               halves and dense byte payloads (default U8)
width-file layout:
  --alignment BYTES        alignment of halves, power of two (default 4096;
                           accepts 64Ki etc.; 1 = packed)
  --no-pair-align          align every half instead of every pair of halves
  --half-order ORDER       expert (default), projection or shuffled
  --leading-pad BYTES      __pad. filler before a width file's first half
                           (default 0)
manifests:
  --home-mix MIX           expert: 1/4 of experts at the widest width, rest one
                           narrower (glm53 default); half: random per half (tiny)
other:
  --max-file-bytes BYTES   refuse to build a larger file in memory (default 2Gi)
  --sync                   fsync every file before renaming it into place
  --quiet                  no summary line
  --help                   this text
)";
}

Result<SynthOptions> ParseSynthOptions(const std::vector<std::string>& args) {
  EXLR8_ASSIGN_OR_RETURN(SynthCommand c, ParseCommand(args, /*need_out=*/false));
  return c.options;
}

namespace {

constexpr const char* kLvq5Usage = R"(usage: exlr8 synth --lvq5 OUT.bin --seed S [options]

Writes a synthetic LVQ5 sealed file (docs/LVQ5.md) to OUT.bin: random Tetra
words (every 48-bit value is legal), Int4G128 records, raw tensors and one
config.json blob; same options + seed = same bytes. Without any of the
part options it writes lvq5-tiny's geometry (3 Tetra, 2 Int4G128, 2 f16 and
one q4 g64 raw tensor). Tetra records are written row by row, so files of
any size can be made.

  --tetra LIST       Tetra records, e.g. 256x264,384x256 (d_out x d_in)
  --int4g128 LIST    Int4G128 records, d_in a multiple of 128
  --raw-f16 LIST     f16 raw tensors by dims, e.g. 256,2x3x4
  --raw-q4 LIST      4-bit group-affine raw tensors, DIMS/GROUP, e.g. 100x200/64
  --raw-q8 LIST      8-bit group-affine raw tensors, DIMS/GROUP
  --quiet            no summary line
Names: tetra.N.weight, int4g128.N.weight, raw_f16.N, raw_q4.N, raw_q8.N.
)";

Result<std::vector<std::uint64_t>> ParseDims(std::string_view option, std::string_view text) {
  std::vector<std::uint64_t> dims;
  std::size_t start = 0;
  while (true) {
    const std::size_t x = std::min(text.find('x', start), text.size());
    const std::string_view part = text.substr(start, x - start);
    std::uint64_t v = 0;
    auto [p, ec] = std::from_chars(part.data(), part.data() + part.size(), v);
    if (part.empty() || ec != std::errc() || p != part.data() + part.size() || v > (1ULL << 32))
      return InvalidArgumentError("--" + std::string(option) + ": '" + std::string(text) +
                                  "' is not a list of dimensions like 256x264");
    dims.push_back(v);
    if (x == text.size()) return dims;
    start = x + 1;
  }
}

// "A,B,C" -> each item.
std::vector<std::string> SplitList(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t comma = std::min(text.find(',', start), text.size());
    out.push_back(text.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

struct Lvq5Parts {
  std::vector<std::pair<std::uint32_t, std::uint32_t>> tetra, int4;
  std::vector<std::vector<std::uint64_t>> f16;
  std::vector<std::pair<std::vector<std::uint64_t>, std::uint32_t>> q4, q8;
};

Result<std::pair<std::uint32_t, std::uint32_t>> ParseMatrix(std::string_view option,
                                                            const std::string& item) {
  EXLR8_ASSIGN_OR_RETURN(auto dims, ParseDims(option, item));
  if (dims.size() != 2 || dims[0] == 0 || dims[1] == 0 || dims[0] > 0xFFFFFFFFu || dims[1] > 0xFFFFFFFFu)
    return InvalidArgumentError("--" + std::string(option) + ": '" + item +
                                "' is not D_OUTxD_IN (both >= 1)");
  if (option == "int4g128" && dims[1] % 128 != 0)
    return InvalidArgumentError("--int4g128: '" + item + "': d_in must be a multiple of 128");
  return std::pair{static_cast<std::uint32_t>(dims[0]), static_cast<std::uint32_t>(dims[1])};
}

Result<std::pair<std::vector<std::uint64_t>, std::uint32_t>> ParseQuant(std::string_view option,
                                                                        const std::string& item) {
  const std::size_t slash = item.find('/');
  if (slash == std::string::npos)
    return InvalidArgumentError("--" + std::string(option) + ": '" + item +
                                "' needs /GROUP, e.g. 100x200/64");
  EXLR8_ASSIGN_OR_RETURN(auto dims, ParseDims(option, item.substr(0, slash)));
  EXLR8_ASSIGN_OR_RETURN(auto g, ParseDims(option, item.substr(slash + 1)));
  if (g.size() != 1 || g[0] == 0 || g[0] > 0xFFFFFFFFu)
    return InvalidArgumentError("--" + std::string(option) + ": '" + item + "': bad group");
  return std::pair{dims, static_cast<std::uint32_t>(g[0])};
}

Status WriteLvq5Synth(const Args& a, const std::string& out_path, std::uint64_t seed, std::uint64_t* bytes) {
  Lvq5Parts parts;
  const bool any =
      a.Has("tetra") || a.Has("int4g128") || a.Has("raw-f16") || a.Has("raw-q4") || a.Has("raw-q8");
  if (!any) {
    parts.tetra = {{256, 264}, {64, 264}, {384, 256}};
    parts.int4 = {{64, 256}, {256, 384}};
    parts.f16 = {{256}, {256}};
    parts.q4 = {{{100, 200}, 64}};
  }
  for (const auto& item : SplitList(a.GetOr("tetra", ""))) {
    if (!a.Has("tetra")) break;
    EXLR8_ASSIGN_OR_RETURN(auto m, ParseMatrix("tetra", item));
    parts.tetra.push_back(m);
  }
  for (const auto& item : SplitList(a.GetOr("int4g128", ""))) {
    if (!a.Has("int4g128")) break;
    EXLR8_ASSIGN_OR_RETURN(auto m, ParseMatrix("int4g128", item));
    parts.int4.push_back(m);
  }
  for (const auto& item : SplitList(a.GetOr("raw-f16", ""))) {
    if (!a.Has("raw-f16")) break;
    EXLR8_ASSIGN_OR_RETURN(auto d, ParseDims("raw-f16", item));
    parts.f16.push_back(d);
  }
  for (const char* opt : {"raw-q4", "raw-q8"})
    for (const auto& item : SplitList(a.GetOr(opt, ""))) {
      if (!a.Has(opt)) break;
      EXLR8_ASSIGN_OR_RETURN(auto q, ParseQuant(opt, item));
      (std::string_view(opt) == "raw-q4" ? parts.q4 : parts.q8).push_back(q);
    }

  const std::string tmp = out_path + ".tmp." + std::to_string(::getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) return IOError(tmp + ": cannot open for writing");
  lvq5::Writer w([&](std::span<const std::byte> b) {
    return std::fwrite(b.data(), 1, b.size(), f) == b.size() ? Status::Ok() : IOError(tmp + ": write failed");
  });
  auto run = [&]() -> Status {
    lvq5::Header h;
    h.matrices = static_cast<std::uint32_t>(parts.tetra.size() + parts.int4.size());
    h.ball_fingerprint = lvq5::kBallFingerprint;
    EXLR8_ASSIGN_OR_RETURN(h.tetra_fingerprint, lvq5::ExpectedTetraFingerprint());
    h.default_kind = static_cast<std::uint32_t>(
        parts.tetra.empty() && !parts.int4.empty() ? lvq5::Kind::kInt4G128 : lvq5::Kind::kTetra);
    h.kinds_mask = 6;
    EXLR8_RETURN_IF_ERROR(w.WriteHeader(h));
    std::uint64_t n = 0;
    auto part_seed = [&]() { return seed * 0x9E3779B97F4A7C15ULL + (++n); };
    for (std::size_t i = 0; i < parts.tetra.size(); ++i)
      EXLR8_RETURN_IF_ERROR(w.WriteRandomTetraRecord("tetra." + std::to_string(i) + ".weight",
                                                     parts.tetra[i].first, parts.tetra[i].second,
                                                     part_seed()));
    for (std::size_t i = 0; i < parts.int4.size(); ++i)
      EXLR8_RETURN_IF_ERROR(w.WriteInt4G128Record(
          lvq5::RandomInt4G128("int4g128." + std::to_string(i) + ".weight", parts.int4[i].first,
                               parts.int4[i].second, part_seed())));
    EXLR8_RETURN_IF_ERROR(
        w.BeginRaw(static_cast<std::uint32_t>(parts.f16.size() + parts.q4.size() + parts.q8.size())));
    for (std::size_t i = 0; i < parts.f16.size(); ++i)
      EXLR8_RETURN_IF_ERROR(
          w.WriteRaw(lvq5::RandomRawF16("raw_f16." + std::to_string(i), parts.f16[i], part_seed())));
    for (std::size_t i = 0; i < parts.q4.size(); ++i)
      EXLR8_RETURN_IF_ERROR(w.WriteRaw(lvq5::RandomRawQuant("raw_q4." + std::to_string(i), parts.q4[i].first,
                                                            4, parts.q4[i].second, part_seed())));
    for (std::size_t i = 0; i < parts.q8.size(); ++i)
      EXLR8_RETURN_IF_ERROR(w.WriteRaw(lvq5::RandomRawQuant("raw_q8." + std::to_string(i), parts.q8[i].first,
                                                            8, parts.q8[i].second, part_seed())));
    EXLR8_RETURN_IF_ERROR(w.BeginBlobs(1));
    const std::string config = "{\"exlr8_synth_seed\": " + std::to_string(seed) + "}\n";
    EXLR8_RETURN_IF_ERROR(
        w.WriteBlob("config.json", std::as_bytes(std::span<const char>(config.data(), config.size()))));
    return w.Finish();
  };
  Status s = run();
  if (std::fclose(f) != 0 && s.ok()) s = IOError(tmp + ": close failed");
  if (s.ok() && std::rename(tmp.c_str(), out_path.c_str()) != 0) s = IOError(out_path + ": rename failed");
  if (!s.ok()) std::remove(tmp.c_str());
  *bytes = w.bytes_written();
  return s;
}

}  // namespace

int RunLvq5Synth(const std::vector<std::string>& argv) {
  auto parsed = Args::Parse(argv, {"seed", "tetra", "int4g128", "raw-f16", "raw-q4", "raw-q8"},
                            {"lvq5", "quiet", "help"});
  if (!parsed.ok()) return ReportError("exlr8 synth", parsed.status());
  const Args& a = *parsed;
  if (a.Flag("help")) {
    std::fputs(kLvq5Usage, stdout);
    return kExitOk;
  }
  if (a.positional().size() != 1)
    return ReportError("exlr8 synth", InvalidArgumentError("--lvq5: expected exactly one output file"));
  auto seed = a.GetInt("seed", -1, 0, std::numeric_limits<std::int64_t>::max());
  if (!seed.ok()) return ReportError("exlr8 synth", seed.status());
  if (*seed < 0) return ReportError("exlr8 synth", InvalidArgumentError("missing --seed"));
  std::uint64_t bytes = 0;
  const auto t0 = std::chrono::steady_clock::now();
  Status s = WriteLvq5Synth(a, a.positional()[0], static_cast<std::uint64_t>(*seed), &bytes);
  if (!s.ok()) return ReportError("exlr8 synth", s);
  if (!a.Flag("quiet"))
    std::printf("exlr8 synth: wrote LVQ5 %s: %s in %.2f s\n", a.positional()[0].c_str(),
                HumanBytes(bytes).c_str(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return kExitOk;
}

int RunSynth(const std::vector<std::string>& args) {
  if (std::find(args.begin(), args.end(), "--lvq5") != args.end()) return RunLvq5Synth(args);
  auto parsed = ParseCommand(args, /*need_out=*/true);
  if (!parsed.ok()) {
    const int rc = ReportError("exlr8 synth", parsed.status());
    std::fputs("(see exlr8 synth --help)\n", stderr);
    return rc;
  }
  if (parsed->help) {
    std::fputs(SynthUsage().c_str(), stdout);
    return kExitOk;
  }
  DirectoryReleaseSink sink(parsed->out, parsed->sync);
  const auto t0 = std::chrono::steady_clock::now();
  auto summary = SynthesizeRelease(parsed->options, sink);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!summary.ok()) return ReportError("exlr8 synth", summary.status());
  if (!parsed->quiet)
    std::printf("exlr8 synth: wrote %zu files to %s: %s (%s stored%s) in %.2f s\n", summary->files.size(),
                parsed->out.c_str(), HumanBytes(summary->total_bytes).c_str(),
                HumanBytes(summary->stored_bytes).c_str(), parsed->options.index_only ? ", index-only" : "",
                secs);
  return kExitOk;
}

}  // namespace exlr8
