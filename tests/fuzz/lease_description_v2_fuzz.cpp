// Fuzz target for the v2 lease description a serving process reads
// (client/lease/description_v2.h): every byte of the input is the text a
// holder sent.
//
// Invariants: no crash, hang or sanitizer report; errors are Corruption
// starting "lease description from fuzz: "; an accepted description keeps
// the header's cross-field rules, and what the holder would write for it
// parses back and is written the same.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "client/lease/description_v2.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using namespace exlr8;

void CheckRules(const LeaseDescriptionV2& d) {
  EXLR8_FUZZ_CHECK(d.tp >= 1 && d.rank >= 0 && d.rank < d.tp);
  EXLR8_FUZZ_CHECK(!d.allocations.empty() && d.allocations.size() <= kMaxLeaseAllocations);
  EXLR8_FUZZ_CHECK(d.memory_kind == LeaseMemoryKind::kHost || d.device.has_value());
  for (const LeaseAllocation& a : d.allocations) {
    EXLR8_FUZZ_CHECK(a.bytes >= 1);
    EXLR8_FUZZ_CHECK(a.is_fd() || d.memory_kind == LeaseMemoryKind::kDevice);
  }
  const LeaseImageRef& im = d.image;
  EXLR8_FUZZ_CHECK(im.allocation < d.allocations.size());
  const std::uint64_t alloc = d.allocations[im.allocation].bytes;
  EXLR8_FUZZ_CHECK(im.header_offset % kImageAlignment == 0 && im.header_offset <= alloc &&
                   im.bytes <= alloc - im.header_offset && im.bytes >= kImageHeaderBytes);
  EXLR8_FUZZ_CHECK(ImageOffsetTableBytes(im.layers, im.experts, im.halves) == im.offset_table_bytes);
  EXLR8_FUZZ_CHECK(im.offset_table >= kImageHeaderBytes && im.offset_table <= im.bytes &&
                   im.offset_table_bytes <= im.bytes - im.offset_table);
  EXLR8_FUZZ_CHECK(ImageTablesFileBytes(d.tables.tensors, d.tables.checks, d.tables.strings,
                                        im.offset_table_bytes) == d.tables.bytes);
  EXLR8_FUZZ_CHECK(d.proof.commit == d.commit);
  EXLR8_FUZZ_CHECK(d.proof.decoded_halves <= d.proof.decoded_of);
  const bool clean =
      d.proof.hashed_mismatches == 0 && d.proof.dense_decoded_mismatches == 0 && d.proof.tiles_bit_exact;
  EXLR8_FUZZ_CHECK(clean != d.proof.mismatch.has_value());
  if (d.proof.mismatch) EXLR8_FUZZ_CHECK(d.proof.mismatch->tensor < d.tables.tensors);
  EXLR8_FUZZ_CHECK(d.release_deadline_s >= 1 && d.release_deadline_s <= kMaxLeaseReleaseDeadlineS);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto d = ParseLeaseDescriptionV2(text, "fuzz");
  if (!d.ok()) {
    EXLR8_FUZZ_CHECK(d.status().code() == StatusCode::kCorruption);
    EXLR8_FUZZ_CHECK(d.status().message().rfind("lease description from fuzz: ", 0) == 0);
    return 0;
  }
  CheckRules(*d);
  const std::string written = WriteLeaseDescriptionV2(*d);
  auto again = ParseLeaseDescriptionV2(written);
  EXLR8_FUZZ_CHECK(again.ok());
  EXLR8_FUZZ_CHECK(WriteLeaseDescriptionV2(*again) == written);
  return 0;
}
