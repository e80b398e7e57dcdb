// Dense and vocab files as the commands use them: decode one matrix by name.
// Thin glue over format/dense.h (which also holds VerifyDenseFile, the
// whole-file check `exlr8 verify` shares with exlr8d).
#pragma once

#include <string_view>
#include <vector>

#include "format/byte_source.h"
#include "format/dense.h"
#include "format/status.h"

namespace exlr8 {

// Decodes matrix `name` (e.g. "self_attn.q_proj") of a dense or vocab file to
// fp32 (out, in) row-major, after verifying its block checksums.
Result<std::vector<float>> DecodeDenseMatrixByName(const ByteSource& file, std::string_view name);

}  // namespace exlr8
