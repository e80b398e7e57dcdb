// Dense and vocab files as the commands use them: verify every block of every
// matrix, decode one matrix by name. Thin glue over format/dense.h.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "format/byte_source.h"
#include "format/status.h"

namespace exlr8 {

struct DenseVerifyReport {
  std::uint64_t matrices = 0;
  std::uint64_t blocks_ok = 0;
  std::vector<std::string> mismatches;  // one line each: file, matrix, block, offset, digests
};

// Parses the file's header and records and checks every block checksum of
// every matrix. Errors (Corruption) only for a file that cannot be parsed;
// checksum mismatches are listed in the report.
Result<DenseVerifyReport> VerifyDenseFile(const ByteSource& file);

// Decodes matrix `name` (e.g. "self_attn.q_proj") of a dense or vocab file to
// fp32 (out, in) row-major, after verifying its block checksums.
Result<std::vector<float>> DecodeDenseMatrixByName(const ByteSource& file, std::string_view name);

}  // namespace exlr8
