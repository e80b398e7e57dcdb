// Fuzz target for the REST client's HTTP answer reader
// (client/exlr8client/http_response.h): byte 0 picks how the answer is cut
// into reads and whether it answers a HEAD request, the rest is what the
// server sent. Small limits (256 bytes of header, 1 KiB of body) so that
// the bounds are reached.
//
// Invariants: no crash, hang or sanitizer report; the body and each field
// stay within the limits; the reader consumes no more bytes than it was
// given; every error is Corruption or ResourceExhausted and starts with
// "HTTP answer" or "the server closed"; once complete, the status is
// 200..599 and a HEAD answer, a 204 and a 304 have no body; after an error
// or completion, Feed and Finish return the same.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "client/exlr8client/http_response.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using namespace exlr8;

bool Acceptable(const Status& s) {
  if (s.code() != StatusCode::kCorruption && s.code() != StatusCode::kResourceExhausted) return false;
  return s.message().rfind("HTTP answer", 0) == 0 || s.message().rfind("the server closed", 0) == 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::size_t cut = 1 + (data[0] & 0x3f);
  const bool head = (data[0] & 0x40) != 0;
  const std::string_view stream(reinterpret_cast<const char*>(data) + 1, size - 1);
  rest::HttpLimits limits;
  limits.max_header_bytes = 256;
  limits.max_body_bytes = 1024;
  rest::HttpResponseParser p(limits, head);
  Status s = NeedMoreError("");
  for (std::size_t at = 0; at < stream.size() && s.code() == StatusCode::kNeedMore; at += cut)
    s = p.Feed(stream.substr(at, cut));
  if (s.code() == StatusCode::kNeedMore) s = p.Finish();
  EXLR8_FUZZ_CHECK(p.offset() <= stream.size());
  EXLR8_FUZZ_CHECK(p.response().body.size() <= limits.max_body_bytes);
  for (const auto& [name, value] : p.response().headers)
    EXLR8_FUZZ_CHECK(name.size() + value.size() <= limits.max_header_bytes);
  if (s.ok()) {
    EXLR8_FUZZ_CHECK(p.done());
    const int status = p.response().status;
    EXLR8_FUZZ_CHECK(status >= 200 && status <= 599);
    if (head || status == 204 || status == 304) EXLR8_FUZZ_CHECK(p.response().body.empty());
    EXLR8_FUZZ_CHECK(p.Feed("more").ok() && p.Finish().ok());
  } else {
    EXLR8_FUZZ_CHECK(Acceptable(s));
    EXLR8_FUZZ_CHECK(p.Feed("more").message() == s.message());
    EXLR8_FUZZ_CHECK(p.Finish().message() == s.message());
  }
  return 0;
}
