// Fuzz target for what a v2 lessee reads from the holder's socket
// (client/lease/lease_v2_framing.h): byte 0 is the number of descriptors
// that came with the first byte (mod 20), byte 1 picks how the stream is
// cut into reads, the rest is the stream: the description line, then the
// holder's lines. The reader is driven as host_lease.cpp drives it.
//
// Invariants: no crash, hang or sanitizer report; no line longer than its
// bound or holding a "\n"; every byte appended comes back as a line, its
// "\n" or pending; the opening's errors are Corruption or (a v1 holder)
// FailedPrecondition starting "lease description from fuzz"; an accepted
// opening came with exactly the descriptors it names; a holder line's
// errors are Corruption starting "lease socket"; an accepted release line
// is written back byte for byte.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "client/lease/lease_v2_framing.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using namespace exlr8;

bool StartsWith(const Status& s, std::string_view prefix) { return s.message().rfind(prefix, 0) == 0; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const std::size_t fds = data[0] % 20;
  const std::size_t cut = 1 + data[1] % 64;
  const std::string_view stream(reinterpret_cast<const char*>(data) + 2, size - 2);

  LeaseLineReader reader(kMaxLeaseDescriptionV2Bytes);
  bool opened = false;
  std::size_t accounted = 0, appended = 0;
  for (std::size_t at = 0; at < stream.size();) {
    // Reads of varying length: cut, 2·cut, ... bytes.
    const std::size_t n = std::min(stream.size() - at, cut * (1 + at % 3));
    const Status s = reader.Append(stream.substr(at, n));
    if (!s.ok()) {
      EXLR8_FUZZ_CHECK(s.code() == StatusCode::kCorruption && StartsWith(s, "lease socket"));
      return 0;
    }
    appended += n;
    at += n;
    while (std::optional<std::string> line = reader.NextLine()) {
      EXLR8_FUZZ_CHECK(line->find('\n') == std::string::npos);
      accounted += line->size() + 1;
      if (!opened) {
        EXLR8_FUZZ_CHECK(line->size() <= kMaxLeaseDescriptionV2Bytes);
        auto d = ParseLeaseV2Opening(*line, fds, "fuzz");
        if (!d.ok()) {
          EXLR8_FUZZ_CHECK(d.status().code() == StatusCode::kCorruption ||
                           d.status().code() == StatusCode::kFailedPrecondition);
          EXLR8_FUZZ_CHECK(StartsWith(d.status(), "lease description from fuzz"));
          return 0;
        }
        EXLR8_FUZZ_CHECK(LeaseV2FdCount(*d) == fds && fds <= kMaxLeaseV2Fds);
        opened = true;
        reader.set_max_line(kMaxLeaseHolderLineBytes);
        continue;
      }
      EXLR8_FUZZ_CHECK(line->size() <= kMaxLeaseDescriptionV2Bytes);
      auto r = ParseLeaseHolderLine(*line);
      if (!r.ok()) {
        EXLR8_FUZZ_CHECK(r.status().code() == StatusCode::kCorruption &&
                         StartsWith(r.status(), "lease socket"));
        continue;
      }
      EXLR8_FUZZ_CHECK(r->deadline_s <= kMaxLeaseReleaseDeadlineS);
      EXLR8_FUZZ_CHECK(WriteLeaseReleaseLine(r->deadline_s) == *line);
    }
    EXLR8_FUZZ_CHECK(accounted + reader.pending() == appended);
  }
  return 0;
}
