#include "daemon/api/query_string.h"

#include <optional>

namespace exlr8 {

namespace {

std::optional<int> HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return std::nullopt;
}

// `pair` is quoted in errors as the client sent it, cut to a bounded length.
std::string Quoted(std::string_view pair) {
  std::string out = "'";
  for (char c : pair.substr(0, 64)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  return out + (pair.size() > 64 ? "...'" : "'");
}

Result<std::string> Decode(std::string_view text, std::string_view pair) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '+') {
      c = ' ';
    } else if (c == '%') {
      const auto hi = i + 1 < text.size() ? HexValue(text[i + 1]) : std::nullopt;
      const auto lo = i + 2 < text.size() ? HexValue(text[i + 2]) : std::nullopt;
      if (!hi || !lo) return InvalidArgumentError("query " + Quoted(pair) + ": '%' not followed by two hex digits");
      c = static_cast<char>(*hi * 16 + *lo);
      i += 2;
    }
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f) return InvalidArgumentError("query " + Quoted(pair) + ": a control character");
    if (out.size() == kMaxQueryItemBytes)
      return InvalidArgumentError("query " + Quoted(pair) + ": longer than " + std::to_string(kMaxQueryItemBytes) +
                                  " bytes");
    out += c;
  }
  return out;
}

}  // namespace

Result<std::map<std::string, std::string>> ParseQuery(std::string_view target) {
  std::map<std::string, std::string> out;
  const auto question = target.find('?');
  if (question == std::string_view::npos) return out;
  std::string_view rest = target.substr(question + 1);
  std::size_t pairs = 0;
  while (!rest.empty()) {
    const auto amp = rest.find('&');
    const std::string_view pair = rest.substr(0, amp);
    rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
    if (pair.empty()) continue;
    if (++pairs > kMaxQueryPairs)
      return InvalidArgumentError("query: more than " + std::to_string(kMaxQueryPairs) + " name=value pairs");
    const auto eq = pair.find('=');
    EXLR8_ASSIGN_OR_RETURN(std::string name, Decode(pair.substr(0, eq), pair));
    std::string value;
    if (eq != std::string_view::npos) {
      EXLR8_ASSIGN_OR_RETURN(value, Decode(pair.substr(eq + 1), pair));
    }
    if (name.empty()) return InvalidArgumentError("query " + Quoted(pair) + ": an empty name");
    if (!out.emplace(name, std::move(value)).second)
      return InvalidArgumentError("query: '" + name.substr(0, 64) + "' given twice");
  }
  return out;
}

}  // namespace exlr8
