// Fuzz target for the rank image's header and tables a lessee reads
// (client/lease/image_layout.h): every byte of the input is what a holder
// put in the image's first 4096 bytes or in the tables memfd. The input is
// parsed both as a header and as a tables file, the latter for an image of
// the size its own header field names (so that accepting is reachable).
//
// Invariants: no crash, hang or sanitizer report; errors are Corruption
// starting "image header" / "image tables"; accepted bytes keep the
// parsers' promises (sections and regions aligned, inside the allocation,
// disjoint; every segment inside a region; the offset table pointing at
// each half record and nowhere else) and write back byte for byte.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "client/lease/image_layout.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using namespace exlr8;

bool StartsWith(const Status& s, std::string_view prefix) { return s.message().rfind(prefix, 0) == 0; }

void CheckHeader(std::span<const std::byte> bytes) {
  auto h = ParseImageHeader(bytes);
  if (!h.ok()) {
    EXLR8_FUZZ_CHECK(h.status().code() == StatusCode::kCorruption);
    EXLR8_FUZZ_CHECK(StartsWith(h.status(), "image header"));
    return;
  }
  EXLR8_FUZZ_CHECK(h->allocation_bytes % kImageAlignment == 0 && h->rank < h->tp);
  std::uint64_t end = kImageHeaderBytes;
  for (const ImageSection* s : {&h->halves, &h->vectors, &h->dense, &h->offset_table}) {
    EXLR8_FUZZ_CHECK(s->offset % kImageAlignment == 0 && s->offset >= end);
    EXLR8_FUZZ_CHECK(s->bytes <= h->allocation_bytes - s->offset);
    end = s->offset + s->bytes;
  }
  EXLR8_FUZZ_CHECK(ImageOffsetTableBytes(h->layers, h->experts, h->halves_per_proj) == h->offset_table.bytes);
  const std::vector<std::byte> again = SerializeImageHeader(*h);
  EXLR8_FUZZ_CHECK(std::equal(again.begin(), again.end(), bytes.begin()));
}

void CheckTables(std::span<const std::byte> bytes) {
  const std::uint64_t allocation = bytes.size() >= 24 ? LoadLE64(bytes.data() + 16) : 0;
  auto t = ParseImageTables(bytes, allocation);
  if (!t.ok()) {
    EXLR8_FUZZ_CHECK(t.status().code() == StatusCode::kCorruption);
    EXLR8_FUZZ_CHECK(StartsWith(t.status(), "image tables"));
    return;
  }
  std::vector<std::pair<std::uint64_t, std::uint64_t>> spans;
  std::size_t halves = 0;
  for (const ImageTensor& e : t->tensors) {
    EXLR8_FUZZ_CHECK(e.offset % kImageAlignment == 0 && e.offset >= kImageHeaderBytes && e.length > 0);
    EXLR8_FUZZ_CHECK(e.length <= allocation - e.offset);
    spans.emplace_back(e.offset, e.length);
    if (e.kind == ImageRegionKind::kHalfRecord) {
      ++halves;
      const int expert = e.expert == kImageSharedExpert ? kSharedExpert : e.expert;
      const ImageTensor* found = t->FindHalf(e.layer, expert, static_cast<Proj>(e.proj), e.half);
      EXLR8_FUZZ_CHECK(found == &e);
      EXLR8_FUZZ_CHECK(t->offset_table[*t->OffsetIndex(e.layer, expert, static_cast<Proj>(e.proj), e.half)] ==
                       e.offset);
    } else if (!e.name.empty()) {
      EXLR8_FUZZ_CHECK(t->FindByName(e.name) == &e);
    }
  }
  EXLR8_FUZZ_CHECK(
      static_cast<std::size_t>(std::count_if(t->offset_table.begin(), t->offset_table.end(),
                                             [](std::uint64_t v) { return v != kImageAbsent; })) == halves);
  std::sort(spans.begin(), spans.end());
  for (std::size_t i = 1; i < spans.size(); ++i)
    EXLR8_FUZZ_CHECK(spans[i].first >= spans[i - 1].first + spans[i - 1].second);
  for (const ImageCheck& c : t->checks) {
    EXLR8_FUZZ_CHECK(!c.segments.empty() && c.segments.size() <= kImageMaxCheckSegments);
    for (const ImageSegment& s : c.segments) {
      auto it = std::upper_bound(spans.begin(), spans.end(), std::pair(s.offset, ~std::uint64_t{0}));
      EXLR8_FUZZ_CHECK(it != spans.begin());
      --it;
      EXLR8_FUZZ_CHECK(s.length > 0 && s.offset >= it->first &&
                       s.offset + s.length <= it->first + it->second);
    }
  }
  const std::vector<std::byte> again = SerializeImageTables(*t);
  EXLR8_FUZZ_CHECK(again.size() == bytes.size() && std::equal(again.begin(), again.end(), bytes.begin()));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  CheckHeader(bytes);
  CheckTables(bytes);
  return 0;
}
