#include "format/json.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <string_view>

#include "format/utf8.h"

namespace exlr8 {

namespace {

// The magnitude of the most negative int64.
constexpr std::uint64_t kTwoTo63 = std::uint64_t{1} << 63;

}  // namespace

// ---- JsonValue ----

void JsonValue::DestroyPayload() {
  switch (type_) {
    case Type::kString: payload_.string.~basic_string(); break;
    case Type::kArray: payload_.array.~vector(); break;
    case Type::kObject: payload_.object.~vector(); break;
    default: break;
  }
}

void JsonValue::Reset(Type t) {
  DestroyPayload();
  type_ = t;
  switch (t) {
    case Type::kString: new (&payload_.string) std::string(); break;
    case Type::kArray: new (&payload_.array) std::vector<JsonValue>(); break;
    case Type::kObject: new (&payload_.object) std::vector<Member>(); break;
    default: break;
  }
}

// REQUIRES (both): the payload of *this is not constructed; type_ and the
// scalars are copied by the caller.
void JsonValue::CopyPayloadFrom(const JsonValue& other) {
  switch (other.type_) {
    case Type::kString: new (&payload_.string) std::string(other.payload_.string); break;
    case Type::kArray: new (&payload_.array) std::vector<JsonValue>(other.payload_.array); break;
    case Type::kObject: new (&payload_.object) std::vector<Member>(other.payload_.object); break;
    default: break;
  }
}

void JsonValue::MovePayloadFrom(JsonValue& other) noexcept {
  switch (other.type_) {
    case Type::kString: new (&payload_.string) std::string(std::move(other.payload_.string)); break;
    case Type::kArray:
      new (&payload_.array) std::vector<JsonValue>(std::move(other.payload_.array));
      break;
    case Type::kObject:
      new (&payload_.object) std::vector<Member>(std::move(other.payload_.object));
      break;
    default: break;
  }
}

JsonValue::JsonValue(const JsonValue& other)
    : type_(other.type_),
      bool_(other.bool_),
      integral_(other.integral_),
      negative_(other.negative_),
      offset_(other.offset_),
      magnitude_(other.magnitude_) {
  CopyPayloadFrom(other);
}

JsonValue& JsonValue::operator=(const JsonValue& other) {
  if (this == &other) return *this;
  JsonValue copy(other);  // other may be our own descendant
  return *this = std::move(copy);
}

JsonValue& JsonValue::operator=(JsonValue&& other) noexcept {
  if (this == &other) return *this;
  // `other` may be our own descendant: move it out before destroying ours.
  JsonValue tmp(std::move(other));
  DestroyPayload();
  type_ = tmp.type_;
  bool_ = tmp.bool_;
  integral_ = tmp.integral_;
  negative_ = tmp.negative_;
  offset_ = tmp.offset_;
  magnitude_ = tmp.magnitude_;
  MovePayloadFrom(tmp);
  return *this;
}

double JsonValue::as_double() const {
  if (type_ != Type::kNumber) return 0;
  if (!integral_) return number_;
  const auto d = static_cast<double>(magnitude_);
  return negative_ ? -d : d;
}

std::optional<std::int64_t> JsonValue::as_int64() const {
  if (type_ != Type::kNumber || !integral_) return std::nullopt;
  if (negative_) {
    if (magnitude_ > kTwoTo63) return std::nullopt;
    return static_cast<std::int64_t>(~magnitude_ + 1);  // two's complement of the magnitude
  }
  if (magnitude_ >= kTwoTo63) return std::nullopt;
  return static_cast<std::int64_t>(magnitude_);
}

std::optional<std::uint64_t> JsonValue::as_uint64() const {
  if (type_ != Type::kNumber || !integral_) return std::nullopt;
  if (negative_ && magnitude_ != 0) return std::nullopt;  // "-0" is 0
  return magnitude_;
}

const std::string& JsonValue::as_string() const {
  static const std::string kEmpty;
  return type_ == Type::kString ? payload_.string : kEmpty;
}

const std::vector<JsonValue>& JsonValue::as_array() const {
  static const std::vector<JsonValue> kEmpty;
  return type_ == Type::kArray ? payload_.array : kEmpty;
}

const std::vector<JsonValue::Member>& JsonValue::as_object() const {
  static const std::vector<Member> kEmpty;
  return type_ == Type::kObject ? payload_.object : kEmpty;
}

const JsonValue* JsonValue::Find(std::string_view key) const {
  if (type_ != Type::kObject) return nullptr;
  for (const Member& m : payload_.object)
    if (m.first == key) return &m.second;
  return nullptr;
}

void JsonValue::Push(JsonValue v) {
  if (type_ != Type::kArray) Reset(Type::kArray);
  payload_.array.push_back(std::move(v));
}

void JsonValue::Add(std::string key, JsonValue v) {
  if (type_ != Type::kObject) Reset(Type::kObject);
  payload_.object.emplace_back(std::move(key), std::move(v));
}

JsonValue JsonValue::Bool(bool b) {
  JsonValue v;
  v.type_ = Type::kBool;
  v.bool_ = b;
  return v;
}

JsonValue JsonValue::Int(std::int64_t i) {
  JsonValue v;
  v.type_ = Type::kNumber;
  v.integral_ = true;
  v.negative_ = i < 0;
  const auto u = static_cast<std::uint64_t>(i);
  v.magnitude_ = i < 0 ? ~u + 1 : u;
  return v;
}

JsonValue JsonValue::UInt(std::uint64_t u) {
  JsonValue v;
  v.type_ = Type::kNumber;
  v.integral_ = true;
  v.magnitude_ = u;
  return v;
}

JsonValue JsonValue::Double(double d) {
  JsonValue v;
  v.type_ = Type::kNumber;
  v.number_ = d;
  return v;
}

JsonValue JsonValue::String(std::string s) {
  JsonValue v;
  v.Reset(Type::kString);
  v.payload_.string = std::move(s);
  return v;
}

JsonValue JsonValue::Array(std::vector<JsonValue> items) {
  JsonValue v;
  v.Reset(Type::kArray);
  v.payload_.array = std::move(items);
  return v;
}

JsonValue JsonValue::Object(std::vector<Member> members) {
  JsonValue v;
  v.Reset(Type::kObject);
  v.payload_.object = std::move(members);
  return v;
}

// ---- Dump ----

namespace {

void DumpString(std::string_view s, std::string& out) {
  static constexpr char kHex[] = "0123456789abcdef";
  out.push_back('"');
  const auto* bytes = reinterpret_cast<const unsigned char*>(s.data());
  std::size_t run = 0;  // start of the pending unescaped run
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') continue;
    std::size_t utf8 = 0;
    if (c >= 0x80 && (utf8 = Utf8SequenceLength(bytes + i, bytes + s.size())) > 0) {
      i += utf8 - 1;  // a whole character, as it is
      continue;
    }
    out.append(s.data() + run, i - run);
    run = i + 1;
    if (c >= 0x80) {  // a byte of no UTF-8 character: no JSON string holds it, so its text \xNN
      static constexpr char kUpperHex[] = "0123456789ABCDEF";  // as EscapeForMessage writes it
      out += "\\\\x";
      out.push_back(kUpperHex[c >> 4]);
      out.push_back(kUpperHex[c & 15]);
      continue;
    }
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        out += "\\u00";
        out.push_back(kHex[c >> 4]);
        out.push_back(kHex[c & 15]);
    }
  }
  out.append(s.data() + run, s.size() - run);
  out.push_back('"');
}

}  // namespace

class JsonDumper {
 public:
  static void Dump(const JsonValue& v, std::string& out) {
    switch (v.type_) {
      case JsonValue::Type::kNull: out += "null"; return;
      case JsonValue::Type::kBool: out += v.bool_ ? "true" : "false"; return;
      case JsonValue::Type::kNumber: DumpNumber(v, out); return;
      case JsonValue::Type::kString: DumpString(v.payload_.string, out); return;
      case JsonValue::Type::kArray:
        out.push_back('[');
        for (std::size_t i = 0; i < v.payload_.array.size(); ++i) {
          if (i) out.push_back(',');
          Dump(v.payload_.array[i], out);
        }
        out.push_back(']');
        return;
      case JsonValue::Type::kObject:
        out.push_back('{');
        for (std::size_t i = 0; i < v.payload_.object.size(); ++i) {
          if (i) out.push_back(',');
          DumpString(v.payload_.object[i].first, out);
          out.push_back(':');
          Dump(v.payload_.object[i].second, out);
        }
        out.push_back('}');
        return;
    }
  }

 private:
  static void DumpNumber(const JsonValue& v, std::string& out) {
    char buf[32];
    if (v.integral_) {
      if (v.negative_) out.push_back('-');
      auto r = std::to_chars(buf, buf + sizeof buf, v.magnitude_);
      out.append(buf, r.ptr);
      return;
    }
    if (!std::isfinite(v.number_)) {
      out += "null";
      return;
    }
    auto r = std::to_chars(buf, buf + sizeof buf, v.number_);  // shortest round-trip form
    out.append(buf, r.ptr);
  }
};

std::string JsonValue::Dump() const {
  std::string out;
  JsonDumper::Dump(*this, out);
  return out;
}

std::string EscapeForMessage(std::string_view s, std::size_t max_bytes) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::size_t n = s.size();
  bool cut = false;
  if (n > max_bytes) {
    n = max_bytes;
    while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;  // char boundary
    cut = true;
  }
  std::string out;
  out.reserve(n + 8);
  const auto* bytes = reinterpret_cast<const unsigned char*>(s.data());
  for (std::size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {  // whole valid characters as they are; a stray byte as \xNN, so the text is UTF-8
      const std::size_t len = Utf8SequenceLength(bytes + i, bytes + n);
      if (len == 0) {
        out += "\\x";
        out.push_back(kHex[c >> 4]);
        out.push_back(kHex[c & 15]);
      } else {
        out.append(s.substr(i, len));
        i += len - 1;
      }
    } else if (c < 0x20 || c == 0x7F || c == '"' || c == '\\' || c == '\'') {
      if (c == '"' || c == '\\' || c == '\'') {
        out.push_back('\\');
        out.push_back(static_cast<char>(c));
      } else {
        out += "\\x";
        out.push_back(kHex[c >> 4]);
        out.push_back(kHex[c & 15]);
      }
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  if (cut) out += "...";
  return out;
}

void AppendJsonString(std::string& out, std::string_view s) { DumpString(s, out); }

}  // namespace exlr8
