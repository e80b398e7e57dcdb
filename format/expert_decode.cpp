#include "format/expert_decode.h"

#include "format/checksum.h"
#include "format/plan.h"
#include "format/reconstruct.h"
#include "format/trellis.h"

namespace exlr8 {

Status DecodeExpertHalf(const ExpertIndex& index, const ByteSource& index_file, std::span<const std::byte> half_bytes,
                        int expert, Proj p, std::uint32_t h, int k, DecodeStage stage, bool verify,
                        std::vector<float>* out) {
  EXLR8_ASSIGN_OR_RETURN(HalfEntry he, index.Half(expert, p, h, k));
  const HalfTag tag{index.layer(), expert, p, h, k};
  if (half_bytes.size() != he.length)
    return InvalidArgumentError(tag.What() + ": got " + std::to_string(half_bytes.size()) + " bytes, the index says " +
                                std::to_string(he.length));
  if (verify) {
    Xxh64 hash;
    hash.Update(half_bytes);
    std::vector<std::byte> buf;
    for (const ByteRun& run : index.ChecksumTail(expert, p, h, k)) {
      buf.resize(run.length);
      EXLR8_RETURN_IF_ERROR(index_file.ReadAt(run.offset, buf));
      hash.Update(buf);
    }
    if (hash.Digest() != he.checksum)
      return CorruptionError(tag.What() + " at offset " + std::to_string(he.offset) + ": xxh64 " + Hex64(hash.Digest()) +
                             ", expected " + Hex64(he.checksum));
  }
  const HalfLayout layout = p == Proj::kDown ? HalfLayout::kDown : HalfLayout::kGateUp;
  out->resize(128 * index.hidden());
  EXLR8_RETURN_IF_ERROR(DecodeHalfTiles(half_bytes, k, layout, index.hidden(), *out));
  if (stage == DecodeStage::kTiles) return Status::Ok();
  std::vector<float> u, v;
  EXLR8_RETURN_IF_ERROR(index.LoadHalfVectors(index_file, expert, p, h, k, &u, &v));
  EXLR8_RETURN_IF_ERROR(ReconstructHalf(layout, index.hidden(), *out, u, v));
  if (const auto bad = FirstNonFinite(*out)) {
    const std::uint64_t cols = layout == HalfLayout::kDown ? index.hidden() : 128;
    return CorruptionError(index_file.name() + ": " + tag.What() + ": reconstructed weight [" +
                           std::to_string(*bad / cols) + ", " + std::to_string(*bad % cols) +
                           "] overflows fp32: the half's vectors hold absurd scales");
  }
  return Status::Ok();
}

}  // namespace exlr8
