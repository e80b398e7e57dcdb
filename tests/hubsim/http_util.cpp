#include "tests/hubsim/http_util.h"

#include <limits>

namespace exlr8::hubsim {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

std::optional<std::uint64_t> ParseU64(std::string_view s) {
  if (s.empty() || s.size() > 20) return std::nullopt;
  std::uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    const std::uint64_t d = static_cast<std::uint64_t>(c - '0');
    if (v > (std::numeric_limits<std::uint64_t>::max() - d) / 10) return std::nullopt;
    v = v * 10 + d;
  }
  return v;
}

ByteRange ParseRangeHeader(std::string_view header, std::uint64_t size) {
  ByteRange r;
  header = Trim(header);
  constexpr std::string_view kUnit = "bytes=";
  if (header.substr(0, kUnit.size()) != kUnit) return r;  // other unit: ignore
  std::string_view spec = Trim(header.substr(kUnit.size()));
  if (spec.find(',') != std::string_view::npos) {
    r.kind = ByteRange::Kind::kMulti;
    return r;
  }
  const std::size_t dash = spec.find('-');
  if (dash == std::string_view::npos) return r;
  const std::string_view a = Trim(spec.substr(0, dash));
  const std::string_view b = Trim(spec.substr(dash + 1));
  if (a.empty()) {  // suffix range: the last N bytes
    const auto n = ParseU64(b);
    if (!n) return r;
    if (*n == 0 || size == 0) {
      r.kind = ByteRange::Kind::kUnsatisfiable;
      return r;
    }
    r.kind = ByteRange::Kind::kSingle;
    r.first = *n >= size ? 0 : size - *n;
    r.last = size - 1;
    return r;
  }
  const auto first = ParseU64(a);
  if (!first) return r;
  std::uint64_t last = std::numeric_limits<std::uint64_t>::max();
  if (!b.empty()) {
    const auto l = ParseU64(b);
    if (!l || *l < *first) return r;  // invalid: ignored per RFC 9110
    last = *l;
  }
  if (*first >= size) {
    r.kind = ByteRange::Kind::kUnsatisfiable;
    return r;
  }
  r.kind = ByteRange::Kind::kSingle;
  r.first = *first;
  r.last = last >= size ? size - 1 : last;
  return r;
}

std::optional<std::string> PercentDecode(std::string_view in) {
  std::string out;
  out.reserve(in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out.push_back(in[i]);
      continue;
    }
    if (i + 2 >= in.size()) return std::nullopt;
    const int hi = HexValue(in[i + 1]);
    const int lo = HexValue(in[i + 2]);
    if (hi < 0 || lo < 0) return std::nullopt;
    const char c = static_cast<char>(hi * 16 + lo);
    if (c == '\0') return std::nullopt;
    out.push_back(c);
    i += 2;
  }
  return out;
}

std::string PercentEncode(std::string_view in, bool keep_slash) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(in.size());
  for (unsigned char c : in) {
    const bool unreserved = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                            (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' || c == '~';
    if (unreserved || (keep_slash && c == '/')) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

std::vector<std::string_view> SplitPath(std::string_view path) {
  std::vector<std::string_view> parts;
  if (path.empty()) return parts;
  std::size_t start = 0;
  while (true) {
    const std::size_t slash = path.find('/', start);
    if (slash == std::string_view::npos) {
      parts.push_back(path.substr(start));
      break;
    }
    parts.push_back(path.substr(start, slash - start));
    start = slash + 1;
  }
  return parts;
}

std::map<std::string, std::string> ParseQuery(std::string_view query) {
  std::map<std::string, std::string> out;
  std::size_t start = 0;
  while (start <= query.size()) {
    std::size_t amp = query.find('&', start);
    if (amp == std::string_view::npos) amp = query.size();
    const std::string_view pair = query.substr(start, amp - start);
    if (!pair.empty()) {
      const std::size_t eq = pair.find('=');
      const std::string_view k = pair.substr(0, eq);
      const std::string_view v = eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1);
      auto dk = PercentDecode(k);
      auto dv = PercentDecode(v);
      out[dk ? *dk : std::string(k)] = dv ? *dv : std::string(v);
    }
    start = amp + 1;
  }
  return out;
}

std::string HexEncode(const unsigned char* bytes, std::size_t n) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(n * 2, '0');
  for (std::size_t i = 0; i < n; ++i) {
    out[2 * i] = kHex[bytes[i] >> 4];
    out[2 * i + 1] = kHex[bytes[i] & 15];
  }
  return out;
}

bool IsTruthy(std::string_view s) { return s == "true" || s == "True" || s == "1" || s == "yes"; }

}  // namespace exlr8::hubsim
