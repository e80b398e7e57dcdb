#include "client/dense_verify.h"

#include <string>

namespace exlr8 {

Result<std::vector<float>> DecodeDenseMatrixByName(const ByteSource& file, std::string_view name) {
  EXLR8_ASSIGN_OR_RETURN(DenseFile dense, DenseFile::Read(file));
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
