// exlr8 decode ROOT --layer L --expert E|shared --proj gate|up|down --half H --width K [--tiles] --out FILE
// exlr8 decode ROOT --dense FILE --matrix NAME --out FILE
#include <cstdio>
#include <fstream>
#include <iostream>

#include "client/cli/args.h"
#include "client/cli/cli.h"
#include "client/commands.h"
#include "client/dense_verify.h"
#include "client/file_source.h"
#include "format/expert_decode.h"
#include "format/layout.h"

namespace exlr8 {

namespace {

constexpr const char* kUsage = R"(usage:
  exlr8 decode ROOT --layer L --expert E|shared --proj gate|up|down --half H --width K [--tiles] [--no-verify] --out FILE
  exlr8 decode ROOT --dense FILE --matrix NAME --out FILE

Expert half: writes little-endian float32 in (input, output) row-major order:
a gate/up half is hidden x 128, a down half 128 x hidden. --tiles writes the
decoded tile values (exact E4M3 values) before rotation and scaling. The
half's checksum is verified first unless --no-verify.

Dense matrix: FILE is a release path such as dense/exlr8-dense-000.safetensors
or dense/exlr8-vocab.safetensors; NAME a matrix such as self_attn.q_proj.
Writes the decoded HF weight, float32 (out, in) row-major. Every block
checksum of the matrix is verified first.
)";

Status WriteFloats(const std::string& path, const std::vector<float>& v) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return IOError(path + ": cannot open for writing");
  out.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
  if (!out) return IOError(path + ": write failed");
  return Status::Ok();
}

Status DecodeHalf(const Args& args, const std::filesystem::path& root, const std::string& out_path) {
  EXLR8_ASSIGN_OR_RETURN(std::int64_t layer, args.GetInt("layer", -1, 0, 99999));
  if (layer < 0) return InvalidArgumentError("missing --layer");
  EXLR8_ASSIGN_OR_RETURN(std::string expert_arg, args.Require("expert"));
  int expert = kSharedExpert;
  if (expert_arg != "shared") {
    try {
      size_t used = 0;
      long v = std::stol(expert_arg, &used);
      if (used != expert_arg.size() || v < 0 || v > (1 << 24)) throw std::invalid_argument("");
      expert = static_cast<int>(v);
    } catch (const std::exception&) {
      return InvalidArgumentError("--expert: '" + expert_arg + "' is not an expert number or 'shared'");
    }
  }
  EXLR8_ASSIGN_OR_RETURN(std::string proj_arg, args.Require("proj"));
  auto proj = ProjFromName(proj_arg);
  if (!proj) return InvalidArgumentError("--proj must be gate, up or down, not '" + proj_arg + "'");
  EXLR8_ASSIGN_OR_RETURN(std::int64_t half, args.GetInt("half", -1, 0, 1 << 16));
  if (half < 0) return InvalidArgumentError("missing --half");
  EXLR8_ASSIGN_OR_RETURN(std::int64_t k, args.GetInt("width", -1, 1, 8));
  if (k < 0) return InvalidArgumentError("missing --width");

  const std::string index_path = ExpertIndexPath(static_cast<int>(layer));
  EXLR8_ASSIGN_OR_RETURN(auto index_src, FileByteSource::Open(root / index_path, index_path));
  EXLR8_ASSIGN_OR_RETURN(ExpertIndex ix, ExpertIndex::Read(*index_src, static_cast<int>(layer)));
  EXLR8_ASSIGN_OR_RETURN(HalfEntry he,
                         ix.Half(expert, *proj, static_cast<std::uint32_t>(half), static_cast<int>(k)));
  const std::string width_path = ExpertWidthPath(static_cast<int>(layer), static_cast<int>(k));
  EXLR8_ASSIGN_OR_RETURN(auto width_src, FileByteSource::Open(root / width_path, width_path));
  std::vector<std::byte> bytes(he.length);
  EXLR8_RETURN_IF_ERROR(width_src->ReadAt(he.offset, bytes));
  std::vector<float> out;
  EXLR8_RETURN_IF_ERROR(DecodeExpertHalf(
      ix, *index_src, bytes, expert, *proj, static_cast<std::uint32_t>(half), static_cast<int>(k),
      args.Flag("tiles") ? DecodeStage::kTiles : DecodeStage::kWeights, !args.Flag("no-verify"), &out));
  return WriteFloats(out_path, out);
}

Status DecodeDense(const Args& args, const std::filesystem::path& root, const std::string& out_path) {
  EXLR8_ASSIGN_OR_RETURN(std::string file, args.Require("dense"));
  EXLR8_ASSIGN_OR_RETURN(std::string matrix, args.Require("matrix"));
  EXLR8_ASSIGN_OR_RETURN(auto src, FileByteSource::Open(root / file, file));
  EXLR8_ASSIGN_OR_RETURN(std::vector<float> w, DecodeDenseMatrixByName(*src, matrix));
  return WriteFloats(out_path, w);
}

}  // namespace

int RunDecode(const std::vector<std::string>& argv) {
  Args parsed;
  if (auto exit = ParseCommandLine("exlr8 decode", kUsage, argv,
                                   {"layer", "expert", "proj", "half", "width", "out", "dense", "matrix"},
                                   {"tiles", "no-verify"}, 1, &parsed))
    return *exit;
  const Args* args = &parsed;
  auto out = args->Require("out");
  if (!out.ok()) return ReportError("exlr8 decode", out.status());
  const std::filesystem::path root = args->positional()[0];
  Status s = args->Has("dense") ? DecodeDense(*args, root, *out) : DecodeHalf(*args, root, *out);
  return s.ok() ? 0 : ReportError("exlr8 decode", s);
}

}  // namespace exlr8
