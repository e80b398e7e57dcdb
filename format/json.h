// A strict, bounded JSON parser (RFC 8259) for safetensors headers and
// manifests.
//
// Why our own: safetensors headers must be rejected on duplicate keys and
// invalid UTF-8, and every error must carry the byte offset where it
// happened; the parser must also be safe on hostile input (depth, size and
// element caps, no recursion beyond max_depth). Boost.JSON keeps duplicates
// and reports no offsets, so it is not a fit for untrusted format headers.
//
// Numbers keep their exact integer value when they are integers in
// [-2^63, 2^64); others are stored as double.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "format/status.h"
#include "format/utf8.h"  // IsValidUtf8, which every JSON string is

namespace exlr8 {

// One JSON value. Owns its children. Copyable and movable; a moved-from
// value is valid but unspecified. Not synchronized: share only as const.
class JsonValue {
 public:
  enum class Type : std::uint8_t { kNull, kBool, kNumber, kString, kArray, kObject };
  using Member = std::pair<std::string, JsonValue>;

  JsonValue() {}
  JsonValue(const JsonValue& other);
  JsonValue(JsonValue&& other) noexcept
      : type_(other.type_),
        bool_(other.bool_),
        integral_(other.integral_),
        negative_(other.negative_),
        offset_(other.offset_),
        magnitude_(other.magnitude_) {
    if (has_payload()) MovePayloadFrom(other);
  }
  JsonValue& operator=(const JsonValue& other);
  JsonValue& operator=(JsonValue&& other) noexcept;
  ~JsonValue() {
    if (has_payload()) DestroyPayload();
  }

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::kNull; }
  bool is_bool() const { return type_ == Type::kBool; }
  bool is_number() const { return type_ == Type::kNumber; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_array() const { return type_ == Type::kArray; }
  bool is_object() const { return type_ == Type::kObject; }

  // Byte offset of the value's first character in the parsed text.
  std::size_t offset() const { return offset_; }

  // The accessors below REQUIRE the matching type; on a mismatch they return
  // false / 0 / an empty string, array or object instead of misbehaving, so
  // a forgotten type check on hostile input is a wrong answer, not a crash.
  // REQUIRES: is_bool().
  bool as_bool() const { return type_ == Type::kBool && bool_; }
  // REQUIRES: is_number(). Integers convert with rounding to nearest.
  double as_double() const;
  // The exact integer value, if the number is an integer literal (no
  // fraction or exponent) that fits. Else nullopt.
  std::optional<std::int64_t> as_int64() const;
  std::optional<std::uint64_t> as_uint64() const;
  // REQUIRES: is_string().
  const std::string& as_string() const;
  // REQUIRES: is_array().
  const std::vector<JsonValue>& as_array() const;
  // REQUIRES: is_object(). Members in document order; keys are unique.
  const std::vector<Member>& as_object() const;
  // Object member lookup (linear); nullptr if absent or not an object.
  const JsonValue* Find(std::string_view key) const;

  // Serializes compactly (used by tests and the writer): no whitespace,
  // members in stored order, integers exactly, doubles in the shortest form
  // that reads back to the same value, non-finite doubles as null.
  // Strings are written as they are apart from escapes; a byte that is not
  // part of valid UTF-8 (never in parsed values, but possible in strings
  // built from a client's bytes) is written as the text \xNN, so the
  // result is always valid JSON. Parse(Dump(v)) reproduces v when every
  // string and key is valid UTF-8.
  std::string Dump() const;

  // Builders (used by the writer and tests).
  static JsonValue Null() { return JsonValue(); }
  static JsonValue Bool(bool b);
  static JsonValue Int(std::int64_t v);
  static JsonValue UInt(std::uint64_t v);
  static JsonValue Double(double v);
  static JsonValue String(std::string s);
  static JsonValue Array(std::vector<JsonValue> items = {});
  static JsonValue Object(std::vector<Member> members = {});
  // REQUIRES: is_array() / is_object(); a value of another type is first
  // replaced by an empty array / object. Add does not check for duplicates.
  void Push(JsonValue v);
  void Add(std::string key, JsonValue v);

 private:
  friend class JsonParser;
  friend class JsonDumper;

  // The active member follows type_ (kString, kArray, kObject; none for
  // the others). A union keeps sizeof(JsonValue) at 56 bytes, which matters
  // for manifests of ~600k numbers.
  union Payload {
    Payload() {}
    ~Payload() {}
    std::string string;
    std::vector<JsonValue> array;
    std::vector<Member> object;
  };

  // kString, kArray and kObject, the last three types, own a payload.
  bool has_payload() const { return type_ >= Type::kString; }
  // Destroys the payload and makes `t` the type with an empty payload.
  void Reset(Type t);
  void DestroyPayload();
  void CopyPayloadFrom(const JsonValue& other);
  void MovePayloadFrom(JsonValue& other) noexcept;

  Type type_ = Type::kNull;
  bool bool_ = false;
  bool integral_ = false;   // integer literal that fits int64 or uint64
  bool negative_ = false;   // sign of an integral value (also "-0")
  std::size_t offset_ = 0;
  union {
    std::uint64_t magnitude_ = 0;  // integral_
    double number_;                // !integral_
  };
  Payload payload_;
};

// Each value costs sizeof(JsonValue) (56 bytes) plus its string or vector
// storage, so max_elements bounds memory at roughly max_elements * 64 bytes
// beyond the text itself.
struct JsonLimits {
  std::size_t max_depth = 64;             // nesting of arrays/objects
  std::size_t max_elements = 50'000'000;  // values in total (bounds memory)
  std::size_t max_string_bytes = 1 << 20; // one string (or key) after unescaping
  // Members of one object; lets a caller with a count cap (safetensors
  // entries) stop early instead of building a huge object first.
  std::size_t max_object_members = static_cast<std::size_t>(-1);
  // Values of one array, likewise (the shape of a safetensors entry).
  std::size_t max_array_elements = static_cast<std::size_t>(-1);
};

// The parser recurses once per nesting level; max_depth above this is
// clamped so that no input can exhaust the stack.
inline constexpr std::size_t kJsonMaxDepthLimit = 1000;

// Parses exactly one JSON value surrounded by optional whitespace (space,
// tab, CR, LF). Rejects: invalid UTF-8 (also inside strings), duplicate keys
// in one object, lone surrogates in \u escapes, control characters in
// strings, leading zeros, NaN/Infinity, trailing garbage, and anything over
// the limits. Errors are Corruption with "at byte N: ..." in the message.
Result<JsonValue> ParseJson(std::string_view text, const JsonLimits& limits = {});

// Appends `s` as a JSON string literal (quotes, escapes; bytes of no UTF-8
// character as the text \xNN, as Dump does) to `out`, for code that writes
// JSON without building a JsonValue (the plan, summaries).
void AppendJsonString(std::string& out, std::string_view s);

// Same, for text that sits at `base_offset` inside a larger buffer (a
// safetensors header at file offset 8): every offset, in error messages and
// in JsonValue::offset(), is base_offset + the offset within `text`.
Result<JsonValue> ParseJsonAt(std::string_view text, std::size_t base_offset,
                              const JsonLimits& limits = {});

// `s` made safe to quote in an error message: control bytes, DEL and bytes
// that are not part of valid UTF-8 become \xNN (so the result is always
// valid UTF-8, fit for a JSON error body), quotes and backslashes get a
// backslash, and it is cut (at a UTF-8 character
// boundary, with "...") after about `max_bytes` bytes. Untrusted names go
// through this before they reach logs or HTTP error bodies.
std::string EscapeForMessage(std::string_view s, std::size_t max_bytes = 80);

}  // namespace exlr8
