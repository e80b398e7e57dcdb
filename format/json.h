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

namespace exlr8 {

class JsonValue {
 public:
  enum class Type : std::uint8_t { kNull, kBool, kNumber, kString, kArray, kObject };
  using Member = std::pair<std::string, JsonValue>;

  JsonValue() = default;

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::kNull; }
  bool is_bool() const { return type_ == Type::kBool; }
  bool is_number() const { return type_ == Type::kNumber; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_array() const { return type_ == Type::kArray; }
  bool is_object() const { return type_ == Type::kObject; }

  // Byte offset of the value's first character in the parsed text.
  std::size_t offset() const { return offset_; }

  // REQUIRES: is_bool().
  bool as_bool() const { return bool_; }
  // REQUIRES: is_number().
  double as_double() const { return number_; }
  // The exact integer value, if the number is an integer literal (no
  // fraction or exponent) that fits. Else nullopt.
  std::optional<std::int64_t> as_int64() const;
  std::optional<std::uint64_t> as_uint64() const;
  // REQUIRES: is_string().
  const std::string& as_string() const { return string_; }
  // REQUIRES: is_array().
  const std::vector<JsonValue>& as_array() const { return array_; }
  // REQUIRES: is_object(). Members in document order; keys are unique.
  const std::vector<Member>& as_object() const { return object_; }
  // Object member lookup (linear); nullptr if absent or not an object.
  const JsonValue* Find(std::string_view key) const;

  // Serializes compactly (used by tests and the writer).
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
  // REQUIRES: is_array() / is_object(). Add does not check for duplicates.
  void Push(JsonValue v) { array_.push_back(std::move(v)); }
  void Add(std::string key, JsonValue v) { object_.emplace_back(std::move(key), std::move(v)); }

 private:
  friend class JsonParser;
  Type type_ = Type::kNull;
  bool bool_ = false;
  bool integral_ = false;   // integer literal that fits int64 or uint64
  bool negative_ = false;   // sign of an integral value
  std::uint64_t magnitude_ = 0;
  double number_ = 0;
  std::size_t offset_ = 0;
  std::string string_;
  std::vector<JsonValue> array_;
  std::vector<Member> object_;
};

struct JsonLimits {
  std::size_t max_depth = 64;             // nesting of arrays/objects
  std::size_t max_elements = 50'000'000;  // values in total (bounds memory)
  std::size_t max_string_bytes = 1 << 20; // one string after unescaping
};

// Parses exactly one JSON value surrounded by optional whitespace (space,
// tab, CR, LF). Rejects: invalid UTF-8 (also inside strings), duplicate keys
// in one object, lone surrogates in \u escapes, control characters in
// strings, leading zeros, NaN/Infinity, trailing garbage, and anything over
// the limits. Errors are Corruption with "at byte N: ..." in the message.
Result<JsonValue> ParseJson(std::string_view text, const JsonLimits& limits = {});

}  // namespace exlr8
