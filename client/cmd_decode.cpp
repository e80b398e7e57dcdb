// exlr8 decode ROOT --layer L --expert E|shared --proj gate|up|down --half H --width K [--tiles] --out FILE
// exlr8 decode ROOT --dense FILE --matrix NAME --out FILE
// exlr8 decode FILE.bin --record NAME [--coords] --out FILE   (LVQ5)
// exlr8 decode FILE.bin --blob NAME --out FILE                (LVQ5)
#include <bit>
#include <cstdio>
#include <fstream>
#include <iostream>

#include "client/cli/args.h"
#include "client/cli/cli.h"
#include "client/commands.h"
#include "client/dense_verify.h"
#include "client/file_source.h"
#include "client/lvq5_cli.h"
#include "format/expert_decode.h"
#include "format/layout.h"
#include "format/lvq5/decode.h"
#include "format/lvq5/index.h"

namespace exlr8 {

namespace {

constexpr const char* kUsage = R"(usage:
  exlr8 decode ROOT --layer L --expert E|shared --proj gate|up|down --half H --width K [--tiles] [--no-verify] --out FILE
  exlr8 decode ROOT --dense FILE --matrix NAME --out FILE
  exlr8 decode FILE.bin --record NAME [--coords] --out FILE
  exlr8 decode FILE.bin --blob NAME --out FILE

Expert half: writes little-endian float32 in (input, output) row-major order:
a gate/up half is hidden x 128, a down half 128 x hidden. --tiles writes the
decoded tile values (exact E4M3 values) before rotation and scaling. The
half's checksum is verified first unless --no-verify.

Dense matrix: FILE is a release path such as dense/exlr8-dense-000.safetensors
or dense/exlr8-vocab.safetensors; NAME a matrix such as self_attn.q_proj.
Writes the decoded HF weight, float32 (out, in) row-major. Every block
checksum of the matrix is verified first.

LVQ5 sealed file (docs/LVQ5.md), whose structure and map fingerprints are
checked first. --record NAME names a matrix record or a raw tensor; writes
little-endian float32: a Tetra record's rows in the rotated basis (per row
24*nblocks reconstructed values, then the d_in mod 24 tail values), an
Int4G128 record [d_out][d_in], a raw tensor's values in row-major order.
--coords (Tetra records only) writes the lattice coordinates instead, int8
[d_out][nblocks][24] in natural order. --blob NAME writes a blob's bytes.
)";

static_assert(std::endian::native == std::endian::little, "float32 output is written in host order");

// Streams the decoder's chunks into `path`; removes it on failure.
class OutFile {
 public:
  explicit OutFile(std::string path) : path_(std::move(path)) {}
  // Creates (truncates) the file: only once the request is known to be good.
  Status Open() {
    out_.open(path_, std::ios::binary | std::ios::trunc);
    return out_ ? Status::Ok() : IOError(path_ + ": cannot open for writing");
  }
  Status Write(const void* p, std::size_t n) {
    out_.write(static_cast<const char*>(p), static_cast<std::streamsize>(n));
    return out_ ? Status::Ok() : IOError(path_ + ": write failed");
  }
  Status Close(Status s) {
    out_.close();
    if (s.ok() && !out_) s = IOError(path_ + ": write failed");
    if (!s.ok()) std::remove(path_.c_str());
    return s;
  }

 private:
  std::string path_;
  std::ofstream out_;
};

Status DecodeLvq5(const Args& args, const std::string& path, const std::string& out_path) {
  EXLR8_ASSIGN_OR_RETURN(auto src, FileByteSource::Open(path));
  EXLR8_ASSIGN_OR_RETURN(lvq5::FileIndex ix, lvq5::ReadIndex(*src));
  const bool coords = args.Flag("coords");
  if (args.Has("blob") == args.Has("record"))
    return InvalidArgumentError("give one of --record NAME or --blob NAME");
  OutFile out(out_path);
  if (args.Has("blob")) {
    if (coords) return InvalidArgumentError("--coords applies to Tetra records, not blobs");
    const std::string name = *args.Get("blob");
    const lvq5::Blob* b = ix.FindBlob(name);
    if (!b) return NotFoundError(path + ": no blob named '" + name + "'");
    EXLR8_RETURN_IF_ERROR(out.Open());
    return out.Close(lvq5::ReadBlobBytes(
        *src, *b, [&](std::span<const std::byte> v) { return out.Write(v.data(), v.size()); }));
  }
  const std::string name = *args.Get("record");
  auto floats = [&](std::span<const float> v) { return out.Write(v.data(), v.size_bytes()); };
  if (const lvq5::MatrixRecord* m = ix.FindMatrix(name)) {
    if (coords && m->kind != lvq5::Kind::kTetra)
      return InvalidArgumentError("--coords: record '" + name + "' is " +
                                  lvq5::KindName(static_cast<std::uint32_t>(m->kind)) + ", not Tetra");
    EXLR8_RETURN_IF_ERROR(out.Open());
    if (coords)
      return out.Close(lvq5::DecodeTetraCoords(
          *src, *m, [&](std::span<const std::int8_t> v) { return out.Write(v.data(), v.size()); }));
    return out.Close(lvq5::DecodeMatrix(*src, *m, floats));
  }
  if (const lvq5::RawTensor* t = ix.FindRaw(name)) {
    if (coords) return InvalidArgumentError("--coords: '" + name + "' is a raw tensor, not a Tetra record");
    EXLR8_RETURN_IF_ERROR(out.Open());
    return out.Close(lvq5::DecodeRaw(*src, *t, floats));
  }
  return NotFoundError(path + ": no matrix record or raw tensor named '" + name + "'");
}

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

int RunLvq5Decode(const std::vector<std::string>& argv) {
  Args args;
  if (auto exit =
          ParseCommandLine("exlr8 decode", kUsage, argv, {"record", "blob", "out"}, {"coords"}, 1, &args))
    return *exit;
  auto out = args.Require("out");
  if (!out.ok()) return ReportError("exlr8 decode", out.status());
  Status s = DecodeLvq5(args, args.positional()[0], *out);
  return s.ok() ? 0 : ReportError("exlr8 decode", s);
}

int RunDecode(const std::vector<std::string>& argv) {
  if (ArgsNameLvqFile(
          argv, {"layer", "expert", "proj", "half", "width", "out", "dense", "matrix", "record", "blob"}))
    return RunLvq5Decode(argv);
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
