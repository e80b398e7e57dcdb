// Fuzz target for the lease description a serving process reads
// (client/lease/description.h): every byte of the input is the text a
// holder sent.
//
// Invariants: no crash, hang or sanitizer report; errors are Corruption
// starting "lease description"; an accepted description keeps every rule
// of the header (ranges, each half inside the allocation, lengths adding
// up to `bytes`, no overlap, no half twice), and what the holder would
// write for it parses back to the same description, written the same.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "client/lease/description.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using exlr8::LeaseDescription;
using exlr8::LeasedHalf;

bool SameHalf(const LeasedHalf& a, const LeasedHalf& b) {
  return a.tag.layer == b.tag.layer && a.tag.expert == b.tag.expert && a.tag.proj == b.tag.proj &&
         a.tag.half == b.tag.half && a.tag.k == b.tag.k && a.hidden == b.hidden && a.offset == b.offset &&
         a.length == b.length;
}

bool Same(const LeaseDescription& a, const LeaseDescription& b) {
  if (a.repo != b.repo || a.commit != b.commit || a.manifest != b.manifest || a.tp != b.tp ||
      a.rank != b.rank || a.device != b.device || a.bytes != b.bytes || a.data_bytes != b.data_bytes ||
      a.data_handle != b.data_handle || a.offsets_handle != b.offsets_handle ||
      a.halves.size() != b.halves.size())
    return false;
  for (std::size_t i = 0; i < a.halves.size(); ++i)
    if (!SameHalf(a.halves[i], b.halves[i])) return false;
  return true;
}

void CheckRules(const LeaseDescription& d) {
  EXLR8_FUZZ_CHECK(!d.repo.empty() && !d.commit.empty() && !d.manifest.empty());
  EXLR8_FUZZ_CHECK(d.tp >= 1 && d.rank >= 0 && d.rank < d.tp && d.device >= 0);
  EXLR8_FUZZ_CHECK(d.halves.size() <= exlr8::kMaxLeaseHalves);
  EXLR8_FUZZ_CHECK(d.data_handle.size() == exlr8::kLeaseHandleHexDigits);
  EXLR8_FUZZ_CHECK(d.offsets_handle.size() == exlr8::kLeaseHandleHexDigits);
  std::uint64_t payload = 0;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> spans;
  for (const LeasedHalf& h : d.halves) {
    EXLR8_FUZZ_CHECK(h.tag.layer >= 0 && h.tag.expert >= exlr8::kSharedExpert && h.tag.k >= 1);
    EXLR8_FUZZ_CHECK(static_cast<int>(h.tag.proj) < exlr8::kProjCount);
    EXLR8_FUZZ_CHECK(h.length >= 1 && h.hidden >= 1);
    EXLR8_FUZZ_CHECK(h.offset <= d.data_bytes && h.length <= d.data_bytes - h.offset);
    payload += h.length;
    spans.emplace_back(h.offset, h.length);
  }
  EXLR8_FUZZ_CHECK(payload == d.bytes);
  std::sort(spans.begin(), spans.end());
  for (std::size_t i = 1; i < spans.size(); ++i)
    EXLR8_FUZZ_CHECK(spans[i].first >= spans[i - 1].first + spans[i - 1].second);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto d = exlr8::ParseLeaseDescription(text, "fuzz");
  if (!d.ok()) {
    EXLR8_FUZZ_CHECK(d.status().code() == exlr8::StatusCode::kCorruption);
    EXLR8_FUZZ_CHECK(d.status().message().rfind("lease description from fuzz: ", 0) == 0);
    return 0;
  }
  CheckRules(*d);
  const std::string written = exlr8::WriteLeaseDescription(*d);
  auto again = exlr8::ParseLeaseDescription(written);
  EXLR8_FUZZ_CHECK(again.ok() && Same(*again, *d));
  EXLR8_FUZZ_CHECK(exlr8::WriteLeaseDescription(*again) == written);
  return 0;
}
