#include "client/dense_verify.h"

#include "format/dense.h"
#include "format/safetensors.h"

namespace exlr8 {

namespace {

Result<SafetensorsHeader> ReadHeader(const ByteSource& file) {
  std::array<std::byte, 8> first{};
  if (file.size() < 8) return CorruptionError(file.name() + ": " + std::to_string(file.size()) + " bytes, too short");
  EXLR8_RETURN_IF_ERROR(file.ReadAt(0, first));
  EXLR8_ASSIGN_OR_RETURN(std::uint64_t n, SafetensorsHeaderSize(first, file.size(), file.name()));
  std::vector<std::byte> bytes(n);
  EXLR8_RETURN_IF_ERROR(file.ReadAt(0, bytes));
  return ParseSafetensorsHeader(bytes, file.size(), file.name());
}

}  // namespace

Result<DenseVerifyReport> VerifyDenseFile(const ByteSource& file) {
  EXLR8_ASSIGN_OR_RETURN(SafetensorsHeader header, ReadHeader(file));
  EXLR8_ASSIGN_OR_RETURN(DenseFile dense, DenseFile::Parse(header, file));
  DenseVerifyReport report;
  for (const DenseMatrix& m : dense.matrices()) {
    ++report.matrices;
    for (std::uint64_t b = 0; b < m.num_blocks(); ++b) {
      Status s = VerifyDenseBlock(dense, m, b, file);
      if (s.ok()) ++report.blocks_ok;
      else if (s.code() == StatusCode::kCorruption) report.mismatches.push_back(s.message());
      else return s;
    }
  }
  return report;
}

Result<std::vector<float>> DecodeDenseMatrixByName(const ByteSource& file, std::string_view name) {
  EXLR8_ASSIGN_OR_RETURN(SafetensorsHeader header, ReadHeader(file));
  EXLR8_ASSIGN_OR_RETURN(DenseFile dense, DenseFile::Parse(header, file));
  const DenseMatrix* m = dense.FindMatrix(name);
  if (!m) {
    std::string names;
    for (const auto& x : dense.matrices()) names += (names.empty() ? "" : ", ") + x.name;
    return NotFoundError(file.name() + ": no matrix '" + std::string(name) + "' (matrices: " + names + ")");
  }
  EXLR8_RETURN_IF_ERROR(VerifyDenseMatrix(dense, *m, file));
  return DecodeDenseMatrix(dense, *m, file);
}

}  // namespace exlr8
