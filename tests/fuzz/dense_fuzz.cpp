// Fuzz target for the dense and vocabulary file reader (format/dense.h). The
// input is a whole dense file: `exlr8 verify` and `exlr8 decode --dense` run
// exactly these calls on files from a hub.
//
// Invariants: no crash, hang, sanitizer report or unbounded allocation;
// every error is Corruption (InvalidArgument only for a plain tensor that is
// not a float dtype) and names the file; an accepted matrix has as many
// block checksums as its side's 128-blocks, each block's hashed runs lie
// inside the file, and a decoded matrix has out x inp values, all finite
// unless the format stores raw BF16/FP32.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "format/dense.h"
#include "format/safetensors.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

constexpr char kName[] = "fuzz.dense.safetensors";
// Blocks hashed per matrix: the checks are the same for every block, and a
// large matrix would spend the fuzzer's time hashing.
constexpr std::uint64_t kMaxBlocksChecked = 8;

bool NamesTheFile(const exlr8::Status& s) { return s.message().find(kName) != std::string::npos; }

void CheckFailure(const exlr8::Status& s) {
  EXLR8_FUZZ_CHECK(s.code() == exlr8::StatusCode::kCorruption);
  EXLR8_FUZZ_CHECK(NamesTheFile(s));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  auto header = exlr8::ParseSafetensorsHeader(bytes, size, kName);
  if (!header.ok()) return 0;  // the header reader has a target of its own
  exlr8::SpanByteSource src(bytes, kName);
  auto file = exlr8::DenseFile::Parse(*header, src);
  if (!file.ok()) {
    CheckFailure(file.status());
    return 0;
  }
  for (const exlr8::DenseMatrix& m : file->matrices()) {
    EXLR8_FUZZ_CHECK(file->FindMatrix(m.name) == &m);
    const exlr8::DenseRecord& r = m.record;
    EXLR8_FUZZ_CHECK(r.out > 0 && r.inp > 0 && r.out <= exlr8::kMaxDenseDim && r.inp <= exlr8::kMaxDenseDim);
    const std::uint64_t dim = r.side == exlr8::DenseSide::kInput ? r.inp : r.out;
    EXLR8_FUZZ_CHECK(m.num_blocks() == (dim + 127) / 128);
    for (std::uint64_t b = 0; b < m.num_blocks() && b < kMaxBlocksChecked; ++b) {
      auto runs = exlr8::DenseBlockRuns(m, b);
      EXLR8_FUZZ_CHECK(runs.ok());
      for (const exlr8::ByteRun& run : *runs) EXLR8_FUZZ_CHECK(run.end() <= size);
      exlr8::Status v = exlr8::VerifyDenseBlock(*file, m, b, src);
      if (!v.ok()) CheckFailure(v);
    }
    EXLR8_FUZZ_CHECK(exlr8::DenseBlockRuns(m, m.num_blocks()).status().code() ==
                     exlr8::StatusCode::kInvalidArgument);
    auto w = exlr8::DecodeDenseMatrix(*file, m, src);
    if (!w.ok()) {
      CheckFailure(w.status());
      continue;
    }
    EXLR8_FUZZ_CHECK(w->size() == r.out * r.inp);
    // Scaled formats refuse what would not be finite; BF16 and FP32 are
    // returned as stored.
    if (r.format != exlr8::DenseFormat::kBf16 && r.format != exlr8::DenseFormat::kFp32)
      for (float x : *w) EXLR8_FUZZ_CHECK(std::isfinite(x));
  }
  for (const exlr8::DenseTensor& t : file->plain()) {
    EXLR8_FUZZ_CHECK(file->FindPlain(t.name) == &t);
    EXLR8_FUZZ_CHECK(t.offset + t.length <= size);
    auto v = exlr8::ReadPlainTensorAsFloat(t, src);
    if (!v.ok()) {
      EXLR8_FUZZ_CHECK(v.status().code() == exlr8::StatusCode::kInvalidArgument ||
                       v.status().code() == exlr8::StatusCode::kCorruption);
      continue;
    }
    std::uint64_t elements = 1;
    for (std::uint64_t d : t.shape) elements *= d;
    EXLR8_FUZZ_CHECK(v->size() == elements);
  }
  return 0;
}
