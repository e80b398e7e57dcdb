// The query string of a request target ("/v1/ranks?repo=org%2Fname&tp=4"):
// the REST API's only way to take arguments on a GET. Pure (text in, a map
// out), so it is fuzzed alone (tests/fuzz/query_fuzz.cpp).
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <string_view>

#include "format/status.h"

namespace exlr8 {

inline constexpr std::size_t kMaxQueryPairs = 32;
inline constexpr std::size_t kMaxQueryItemBytes = 1024;  // a name or a value, decoded

// name=value pairs after the first '?', '&'-separated, percent-decoded ('+'
// is a space, as HTML forms send it); "name" alone is an empty value; an
// empty pair ("a=1&&b=2") is skipped. No '?' is an empty map.
// InvalidArgument, naming the pair, for a '%' not followed by two hex
// digits, a control character once decoded, an empty name, a name given
// twice, more than kMaxQueryPairs pairs, or a name or value longer than
// kMaxQueryItemBytes.
Result<std::map<std::string, std::string>> ParseQuery(std::string_view target);

}  // namespace exlr8
