// Small pure HTTP helpers of the hub simulator: Range parsing, percent
// coding, query strings. No sockets; unit-tested in http_util_test.cpp.
//
// Thread rules: every function is pure and may be called from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace exlr8::hubsim {

// What a `Range` request header asks of a resource of `size` bytes.
//   kNone:          no header, another unit, or bad syntax. RFC 9110 says a
//                   server ignores such a header, so the answer is 200 whole.
//   kSingle:        one satisfiable range [first, last] (inclusive), already
//                   clamped to the resource (bytes=0-100000 on a 10-byte file
//                   gives [0, 9]).
//   kUnsatisfiable: one range that starts at or past the end, a zero-length
//                   suffix, or any range of an empty resource: 416.
//   kMulti:         more than one range ("bytes=0-1,5-6"). The simulator
//                   does not do multipart/byteranges; it answers 416.
struct ByteRange {
  enum class Kind { kNone, kSingle, kUnsatisfiable, kMulti };
  Kind kind = Kind::kNone;
  std::uint64_t first = 0;
  std::uint64_t last = 0;  // inclusive; meaningful for kSingle only
  std::uint64_t length() const { return last - first + 1; }
};

ByteRange ParseRangeHeader(std::string_view header, std::uint64_t size);

// Percent-decodes `in` ('+' stays '+'; this is a path, not a form). Returns
// nullopt on a malformed escape ("%4", "%zz") or an encoded NUL.
std::optional<std::string> PercentDecode(std::string_view in);

// Percent-encodes everything but RFC 3986 unreserved characters; with
// `keep_slash`, '/' also stays (for file paths inside URLs).
std::string PercentEncode(std::string_view in, bool keep_slash);

// Splits "a/b//c" into {"a","b","","c"}; "" gives {}.
std::vector<std::string_view> SplitPath(std::string_view path);

// "a=1&b=x%20y" -> {a:"1", b:"x y"}. Later keys win; malformed escapes
// leave the raw text.
std::map<std::string, std::string> ParseQuery(std::string_view query);

// Lower-case hex of `bytes`.
std::string HexEncode(const unsigned char* bytes, std::size_t n);

// Parses a decimal uint64; nullopt on empty, non-digit or overflow.
std::optional<std::uint64_t> ParseU64(std::string_view s);

// True for "true", "True", "1", "yes".
bool IsTruthy(std::string_view s);

}  // namespace exlr8::hubsim
