#include "client/cmd_synth.h"

#include <charconv>
#include <chrono>
#include <cstdio>
#include <set>

#include "client/cli/args.h"
#include "client/cli/cli.h"
#include "client/file_sink.h"

namespace exlr8 {

namespace {

const std::set<std::string> kValueOptions = {
    "preset", "hidden", "halves", "experts", "moe-layers", "dense-layers", "num-layers", "widths",
    "shared-widths", "vocab", "seed", "index-dtype", "checksum-dtype", "vector-dtype", "block-vector-dtype",
    "signs-dtype", "record-dtype", "int4-scale-dtype", "fp8-scale-dtype", "byte-dtype", "alignment", "half-order",
    "home-mix", "max-file-bytes", "leading-pad",
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
      return InvalidArgumentError("--" + std::string(name) + ": '" + std::string(part) + "' is not an integer");
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
    if (*v == "expert") o.half_order = HalfOrder::kExpertMajor;
    else if (*v == "projection") o.half_order = HalfOrder::kProjectionMajor;
    else if (*v == "shuffled") o.half_order = HalfOrder::kShuffled;
    else return InvalidArgumentError("--half-order: '" + *v + "' is not expert, projection or shuffled");
  }
  if (auto v = a.Get("home-mix")) {
    if (*v == "expert") o.home_mix = ManifestMix::kPerExpert;
    else if (*v == "half") o.home_mix = ManifestMix::kRandomPerHalf;
    else return InvalidArgumentError("--home-mix: '" + *v + "' is not expert or half");
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

int RunSynth(const std::vector<std::string>& args) {
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
                HumanBytes(summary->stored_bytes).c_str(), parsed->options.index_only ? ", index-only" : "", secs);
  return kExitOk;
}

}  // namespace exlr8
