// Fuzz target for the REST API's query strings (daemon/api/query_string.h):
// every byte of the input is the request target.
//
// Invariants: no crash, hang or sanitizer report; errors are InvalidArgument;
// an accepted query stays within its bounds, has no empty name and no
// control character, and parses to the same pairs again once every byte is
// percent-encoded.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "daemon/api/query_string.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

std::string EncodeAll(std::string_view s) {
  std::string out;
  char hex[4];
  for (unsigned char c : s) {
    std::snprintf(hex, sizeof hex, "%%%02X", c);
    out += hex;
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view target(reinterpret_cast<const char*>(data), size);
  auto q = exlr8::ParseQuery(target);
  if (!q.ok()) {
    EXLR8_FUZZ_CHECK(q.status().code() == exlr8::StatusCode::kInvalidArgument);
    return 0;
  }
  EXLR8_FUZZ_CHECK(q->size() <= exlr8::kMaxQueryPairs);
  std::string again = "/x?";
  for (const auto& [name, value] : *q) {
    EXLR8_FUZZ_CHECK(!name.empty());
    EXLR8_FUZZ_CHECK(name.size() <= exlr8::kMaxQueryItemBytes && value.size() <= exlr8::kMaxQueryItemBytes);
    for (unsigned char c : name + value) EXLR8_FUZZ_CHECK(c >= 0x20 && c != 0x7f);
    again += EncodeAll(name) + "=" + EncodeAll(value) + "&";
  }
  auto round_trip = exlr8::ParseQuery(again);
  EXLR8_FUZZ_CHECK(round_trip.ok() && *round_trip == *q);
  return 0;
}
