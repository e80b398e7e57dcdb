// JSON text to JsonValue (format/json.h): the strict, bounded parser.
#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <string_view>
#include <unordered_set>

#include "format/json.h"
#include "format/utf8.h"

namespace exlr8 {

namespace {

// The magnitude of the most negative int64, the largest a negative integer
// literal keeps exactly.
constexpr std::uint64_t kMaxNegativeMagnitude = std::uint64_t{1} << 63;

// Byte classes for the string scanner: 0 = plain, 1 = '"', 2 = '\\',
// 3 = control (< 0x20), 4 = non-ASCII (starts a UTF-8 sequence).
constexpr std::array<std::uint8_t, 256> MakeStringClass() {
  std::array<std::uint8_t, 256> t{};
  for (int c = 0; c < 0x20; ++c) t[c] = 3;
  t['"'] = 1;
  t['\\'] = 2;
  for (int c = 0x80; c < 0x100; ++c) t[c] = 4;
  return t;
}
constexpr std::array<std::uint8_t, 256> kStringClass = MakeStringClass();

inline bool IsDigit(char c) { return c >= '0' && c <= '9'; }

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string ByteForMessage(unsigned char c) {
  if (c >= 0x21 && c < 0x7F) return std::string("'") + static_cast<char>(c) + "'";
  static constexpr char kHex[] = "0123456789ABCDEF";
  return std::string("byte 0x") + kHex[c >> 4] + kHex[c & 15];
}

}  // namespace

// ---- parser ----

// Recursive descent over [begin_, end_). Children of the arrays and objects
// being parsed wait on shared stacks and are moved into an exactly sized
// vector when their container closes, so no vector grows element by element.
// Functions return false after setting error_.
class JsonParser {
 public:
  JsonParser(std::string_view text, std::size_t base, const JsonLimits& limits)
      : begin_(text.data()),
        p_(text.data()),
        end_(text.data() + text.size()),
        base_(base),
        limits_(limits),
        max_depth_(std::min(limits.max_depth, kJsonMaxDepthLimit)) {}

  Result<JsonValue> Parse() {
    JsonValue root;
    SkipWhitespace();
    if (!ParseValue(root, 0)) return error_;
    SkipWhitespace();
    if (p_ != end_) {
      Fail(p_, "unexpected " + ByteForMessage(static_cast<unsigned char>(*p_)) +
                   " after the JSON value");
      return error_;
    }
    return root;
  }

 private:
  bool Fail(const char* at, std::string_view what) {
    std::string m = "at byte ";
    m += std::to_string(base_ + static_cast<std::size_t>(at - begin_));
    m += ": ";
    m += what;
    error_ = CorruptionError(std::move(m));
    return false;
  }

  bool FailEnd(std::string_view what_was_expected) {
    return Fail(end_, std::string("unexpected end of input, expected ") +
                          std::string(what_was_expected));
  }

  void SkipWhitespace() {
    while (p_ != end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  }

  bool CountElement(const char* at) {
    if (++elements_ > limits_.max_elements)
      return Fail(at, "more than " + std::to_string(limits_.max_elements) + " values");
    return true;
  }

  bool Expect(std::string_view word) {
    if (static_cast<std::size_t>(end_ - p_) < word.size() ||
        std::memcmp(p_, word.data(), word.size()) != 0)
      return Fail(p_, "invalid literal, expected '" + std::string(word) + "'");
    p_ += word.size();
    return true;
  }

  // REQUIRES: p_ < end_, at the first character of a value.
  bool ParseValue(JsonValue& out, std::size_t depth) {
    if (p_ == end_) return FailEnd("a value");
    out.offset_ = base_ + static_cast<std::size_t>(p_ - begin_);
    if (!CountElement(p_)) return false;
    switch (*p_) {
      case '{': return ParseObject(out, depth + 1);
      case '[': return ParseArray(out, depth + 1);
      case '"':
        out.Reset(JsonValue::Type::kString);
        return ParseString(out.payload_.string);
      case 't':
        out.type_ = JsonValue::Type::kBool;
        out.bool_ = true;
        return Expect("true");
      case 'f':
        out.type_ = JsonValue::Type::kBool;
        return Expect("false");
      case 'n':
        return Expect("null");
      default:
        if (*p_ == '-' || IsDigit(*p_)) return ParseNumber(out);
        return Fail(p_, "unexpected " + ByteForMessage(static_cast<unsigned char>(*p_)) +
                            ", expected a value");
    }
  }

  bool CheckDepth(std::size_t depth) {
    if (depth > max_depth_)
      return Fail(p_, "nesting deeper than " + std::to_string(max_depth_) + " levels");
    return true;
  }

  bool ParseArray(JsonValue& out, std::size_t depth) {
    if (!CheckDepth(depth)) return false;
    out.Reset(JsonValue::Type::kArray);
    ++p_;  // '['
    SkipWhitespace();
    if (p_ != end_ && *p_ == ']') {
      ++p_;
      return true;
    }
    const std::size_t base = values_.size();
    for (;;) {
      if (values_.size() - base >= limits_.max_array_elements)
        return Fail(p_, "array of more than " + std::to_string(limits_.max_array_elements) + " values");
      if (p_ != end_ && (*p_ == '[' || *p_ == '{')) {
        // A container pushes onto values_ while it is parsed: build it
        // aside, then move it in.
        JsonValue item;
        if (!ParseValue(item, depth)) return false;
        values_.push_back(std::move(item));
      } else if (!ParseValue(values_.emplace_back(), depth)) {
        return false;
      }
      SkipWhitespace();
      if (p_ == end_) return FailEnd("',' or ']'");
      if (*p_ == ',') {
        ++p_;
        SkipWhitespace();
        continue;
      }
      if (*p_ == ']') {
        ++p_;
        break;
      }
      return Fail(p_, "unexpected " + ByteForMessage(static_cast<unsigned char>(*p_)) +
                          " in array, expected ',' or ']'");
    }
    out.payload_.array.assign(std::make_move_iterator(values_.begin() + static_cast<std::ptrdiff_t>(base)),
                      std::make_move_iterator(values_.end()));
    values_.resize(base);
    return true;
  }

  bool ParseObject(JsonValue& out, std::size_t depth) {
    if (!CheckDepth(depth)) return false;
    out.Reset(JsonValue::Type::kObject);
    ++p_;  // '{'
    SkipWhitespace();
    if (p_ != end_ && *p_ == '}') {
      ++p_;
      return true;
    }
    const std::size_t base = members_.size();
    for (;;) {
      if (p_ == end_) return FailEnd("'\"' (an object key)");
      if (*p_ != '"')
        return Fail(p_, "unexpected " + ByteForMessage(static_cast<unsigned char>(*p_)) +
                            ", expected '\"' (an object key)");
      const std::size_t key_offset = static_cast<std::size_t>(p_ - begin_);
      std::string key;
      if (!ParseString(key)) return false;
      SkipWhitespace();
      if (p_ == end_) return FailEnd("':'");
      if (*p_ != ':')
        return Fail(p_, "unexpected " + ByteForMessage(static_cast<unsigned char>(*p_)) +
                            " after object key, expected ':'");
      ++p_;
      SkipWhitespace();
      JsonValue value;
      if (!ParseValue(value, depth)) return false;
      if (members_.size() - base >= limits_.max_object_members)
        return Fail(begin_ + key_offset, "object with more than " +
                                             std::to_string(limits_.max_object_members) + " members");
      members_.emplace_back(std::move(key), std::move(value));
      key_offsets_.push_back(key_offset);
      SkipWhitespace();
      if (p_ == end_) return FailEnd("',' or '}'");
      if (*p_ == ',') {
        ++p_;
        SkipWhitespace();
        continue;
      }
      if (*p_ == '}') {
        ++p_;
        break;
      }
      return Fail(p_, "unexpected " + ByteForMessage(static_cast<unsigned char>(*p_)) +
                          " in object, expected ',' or '}'");
    }
    if (!CheckDuplicateKeys(base)) return false;
    out.payload_.object.assign(std::make_move_iterator(members_.begin() + static_cast<std::ptrdiff_t>(base)),
                       std::make_move_iterator(members_.end()));
    members_.resize(base);
    key_offsets_.resize(base);
    return true;
  }

  // Members [base, end) of members_ are one object. Reports the duplicate
  // that comes first in the text.
  bool CheckDuplicateKeys(std::size_t base) {
    const std::size_t n = members_.size() - base;
    const std::size_t none = std::numeric_limits<std::size_t>::max();
    std::size_t dup = none;  // index (relative to base) of the first repeated key
    if (n <= 16) {
      for (std::size_t i = 1; i < n && dup == none; ++i)
        for (std::size_t j = 0; j < i; ++j)
          if (members_[base + i].first == members_[base + j].first) {
            dup = i;
            break;
          }
    } else {
      // Hashing, not sorting: safetensors headers have thousands of keys
      // with long common prefixes, where sorting was most of the parse.
      // In text order, the first key already seen is the first duplicate.
      seen_keys_.clear();
      seen_keys_.reserve(n);
      for (std::size_t i = 0; i < n; ++i) {
        if (!seen_keys_.insert(members_[base + i].first).second) {
          dup = i;
          break;
        }
      }
    }
    if (dup == none) return true;
    return Fail(begin_ + key_offsets_[base + dup],
                "duplicate key \"" + EscapeForMessage(members_[base + dup].first) + "\"");
  }

  // REQUIRES: *p_ == '"'. Validates UTF-8 and unescapes into `out`.
  bool ParseString(std::string& out) {
    const char* start = p_;
    ++p_;
    out.clear();
    const char* run = p_;  // start of the pending literal run
    const std::size_t max = limits_.max_string_bytes;
    for (;;) {
      // Literal run: plain ASCII and valid UTF-8 sequences.
      while (p_ != end_) {
        const auto c = static_cast<unsigned char>(*p_);
        const std::uint8_t cls = kStringClass[c];
        if (cls == 0) {
          ++p_;
        } else if (cls == 4) {
          const std::size_t n = Utf8SequenceLength(reinterpret_cast<const unsigned char*>(p_),
                                                   reinterpret_cast<const unsigned char*>(end_));
          if (n == 0) return Fail(p_, "invalid UTF-8 in string");
          p_ += n;
        } else {
          break;
        }
      }
      const std::size_t run_len = static_cast<std::size_t>(p_ - run);
      if (run_len > max || out.size() > max - run_len) return TooLong(start);
      out.append(run, run_len);
      if (p_ == end_) return Fail(start, "unterminated string");
      const auto c = static_cast<unsigned char>(*p_);
      if (c == '"') {
        ++p_;
        return true;
      }
      if (c < 0x20)
        return Fail(p_, "control character " + ByteForMessage(c) + " in string (must be escaped)");
      // c == '\\'
      if (!ParseEscape(out)) return false;
      if (out.size() > max) return TooLong(start);
      run = p_;
    }
  }

  bool TooLong(const char* start) {
    return Fail(start, "string longer than " + std::to_string(limits_.max_string_bytes) + " bytes");
  }

  // REQUIRES: *p_ == '\\'.
  bool ParseEscape(std::string& out) {
    const char* esc = p_;
    if (end_ - p_ < 2) return Fail(esc, "unterminated escape in string");
    const char e = p_[1];
    p_ += 2;
    switch (e) {
      case '"': out.push_back('"'); return true;
      case '\\': out.push_back('\\'); return true;
      case '/': out.push_back('/'); return true;
      case 'b': out.push_back('\b'); return true;
      case 'f': out.push_back('\f'); return true;
      case 'n': out.push_back('\n'); return true;
      case 'r': out.push_back('\r'); return true;
      case 't': out.push_back('\t'); return true;
      case 'u': break;
      default:
        return Fail(esc, "invalid escape \\" + ByteForMessage(static_cast<unsigned char>(e)) +
                             " in string");
    }
    std::uint32_t cp = 0;
    if (!ReadHex4(esc, cp)) return false;
    if (cp >= 0xDC00 && cp <= 0xDFFF) return Fail(esc, "lone low surrogate in \\u escape");
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      if (end_ - p_ < 2 || p_[0] != '\\' || p_[1] != 'u')
        return Fail(esc, "high surrogate in \\u escape not followed by a low surrogate");
      const char* esc2 = p_;
      p_ += 2;
      std::uint32_t lo = 0;
      if (!ReadHex4(esc2, lo)) return false;
      if (lo < 0xDC00 || lo > 0xDFFF)
        return Fail(esc, "high surrogate in \\u escape not followed by a low surrogate");
      cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    }
    AppendUtf8(out, cp);
    return true;
  }

  bool ReadHex4(const char* esc, std::uint32_t& cp) {
    if (end_ - p_ < 4) return Fail(esc, "truncated \\u escape");
    cp = 0;
    for (int i = 0; i < 4; ++i) {
      const int h = HexValue(p_[i]);
      if (h < 0) return Fail(esc, "invalid hex digit in \\u escape");
      cp = (cp << 4) | static_cast<std::uint32_t>(h);
    }
    p_ += 4;
    return true;
  }

  bool ParseNumber(JsonValue& out) {
    const char* start = p_;
    out.type_ = JsonValue::Type::kNumber;
    bool negative = false;
    if (*p_ == '-') {
      negative = true;
      ++p_;
    }
    if (p_ == end_ || !IsDigit(*p_)) return Fail(start, "invalid number: no digits after '-'");
    std::uint64_t mag = 0;
    bool overflow = false;
    if (*p_ == '0') {
      ++p_;
      if (p_ != end_ && IsDigit(*p_)) return Fail(start, "invalid number: leading zero");
    } else {
      while (p_ != end_ && IsDigit(*p_)) {
        const auto d = static_cast<std::uint64_t>(*p_ - '0');
        if (mag > (std::numeric_limits<std::uint64_t>::max() - d) / 10) overflow = true;
        mag = mag * 10 + d;
        ++p_;
      }
    }
    bool integer_literal = true;
    if (p_ != end_ && *p_ == '.') {
      integer_literal = false;
      ++p_;
      if (p_ == end_ || !IsDigit(*p_)) return Fail(start, "invalid number: no digits after '.'");
      while (p_ != end_ && IsDigit(*p_)) ++p_;
    }
    if (p_ != end_ && (*p_ == 'e' || *p_ == 'E')) {
      integer_literal = false;
      ++p_;
      if (p_ != end_ && (*p_ == '+' || *p_ == '-')) ++p_;
      if (p_ == end_ || !IsDigit(*p_)) return Fail(start, "invalid number: no digits in exponent");
      while (p_ != end_ && IsDigit(*p_)) ++p_;
    }
    if (integer_literal && !overflow && (!negative || mag <= kMaxNegativeMagnitude)) {
      out.integral_ = true;
      out.negative_ = negative;
      out.magnitude_ = mag;
      return true;
    }
    double d = 0;
    const auto r = std::from_chars(start, p_, d);
    if (r.ec == std::errc::result_out_of_range) {
      // Underflow reads as zero (a tiny fraction is still a fraction);
      // overflow has no double to stand for it.
      if (DecimalExponent(start, p_) > 0) return Fail(start, "number out of range for a double");
      d = negative ? -0.0 : 0.0;
    } else if (r.ec != std::errc() || r.ptr != p_) {
      return Fail(start, "invalid number");
    }
    out.number_ = d;
    return true;
  }

  // For a syntactically valid number in [first, last): roughly log10 of its
  // magnitude (saturating), enough to tell overflow from underflow.
  static long DecimalExponent(const char* first, const char* last) {
    const char* q = first;
    if (*q == '-') ++q;
    long e = 0;
    bool seen_nonzero = false;
    for (; q != last && IsDigit(*q); ++q) {
      if (*q != '0') seen_nonzero = true;
      if (seen_nonzero) ++e;
    }
    if (q != last && *q == '.') {
      for (++q; q != last && IsDigit(*q); ++q) {
        if (seen_nonzero) continue;
        if (*q != '0') seen_nonzero = true;
        else --e;
      }
    }
    if (q != last && (*q == 'e' || *q == 'E')) {
      ++q;
      bool neg = false;
      if (*q == '+' || *q == '-') neg = *q++ == '-';
      long x = 0;
      for (; q != last; ++q) x = std::min(x * 10 + (*q - '0'), 1'000'000L);
      e += neg ? -x : x;
    }
    return e;
  }

  const char* const begin_;
  const char* p_;
  const char* const end_;
  const std::size_t base_;
  const JsonLimits& limits_;
  const std::size_t max_depth_;
  std::size_t elements_ = 0;
  Status error_;
  std::vector<JsonValue> values_;
  std::vector<JsonValue::Member> members_;
  std::vector<std::size_t> key_offsets_;  // parallel to members_, relative to begin_
  std::unordered_set<std::string_view> seen_keys_;  // scratch for duplicate detection
};

Result<JsonValue> ParseJsonAt(std::string_view text, std::size_t base_offset,
                              const JsonLimits& limits) {
  JsonParser parser(text, base_offset, limits);
  return parser.Parse();
}

Result<JsonValue> ParseJson(std::string_view text, const JsonLimits& limits) {
  return ParseJsonAt(text, 0, limits);
}

}  // namespace exlr8
