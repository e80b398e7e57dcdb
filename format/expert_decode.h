// One expert half from bytes to weights (spec 9.4): the CPU reference the
// GPU decode is checked against.
#pragma once

#include <span>
#include <vector>

#include "format/byte_source.h"
#include "format/expert_index.h"
#include "format/status.h"

namespace exlr8 {

enum class DecodeStage { kTiles, kWeights };

// Decodes half (expert, p, h) at width k whose trellis bytes are `half_bytes`
// (already read from the width file; their length must equal the index's),
// into `out`, (input, output) row-major: gate/up hidden x 128, down 128 x
// hidden. kTiles stops before rotation and scaling; kWeights reconstructs
// with the vectors read from `index_file` (spec 9.2).
// If `verify` is set, the half's XXH64 (spec 5.3) is checked first and a
// mismatch is Corruption naming the half and both digests.
Status DecodeExpertHalf(const ExpertIndex& index, const ByteSource& index_file, std::span<const std::byte> half_bytes,
                        int expert, Proj p, std::uint32_t h, int k, DecodeStage stage, bool verify,
                        std::vector<float>* out);

}  // namespace exlr8
