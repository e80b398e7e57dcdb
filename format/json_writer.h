// JsonWriter: writes one JSON text front to back without building a
// JsonValue, for the documents the node produces (REST answers, the plan,
// lease descriptions, reports). It places the commas and colons; strings go
// through AppendJsonString (format/json.h), so every writer escapes alike.
//
//   JsonWriter w;
//   w.BeginObject().Field("id", 7).Field("repo", repo).Key("pins").BeginArray();
//   for (const auto& p : pins) w.String(p);
//   w.EndArray().EndObject();
//   return std::move(w).Take();
//
// Numbers: integers exactly; Double in the shortest form that reads back
// the same value; Fixed with a set number of decimals (what a rate or a
// duration shows). A number that is not finite is written as null: JSON
// has no NaN or infinity.
//
// Misuse (a value where a key is due, an End that closes nothing, Take
// before the text is whole) is a programming error, checked by assert.
// Not synchronized: one writer per thread.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace exlr8 {

class JsonWriter {
 public:
  // `reserve`: the bytes the text is expected to take (saves reallocation
  // when a large document's size is known roughly).
  explicit JsonWriter(std::size_t reserve = 0) { out_.reserve(reserve); }

  JsonWriter& BeginObject();
  JsonWriter& EndObject();
  JsonWriter& BeginArray();
  JsonWriter& EndArray();
  // The key of the next member (inside an object only).
  JsonWriter& Key(std::string_view key);

  JsonWriter& String(std::string_view s);
  JsonWriter& Int(std::int64_t v);
  JsonWriter& Uint(std::uint64_t v);
  JsonWriter& Double(double v);
  JsonWriter& Fixed(double v, int decimals);
  JsonWriter& Bool(bool v);
  JsonWriter& Null();
  // A value that is already JSON text (a nested document written
  // elsewhere). REQUIRES: `json` is one whole JSON value.
  JsonWriter& Raw(std::string_view json);

  // Value(v) picks the writer for v's type; an empty optional is null.
  JsonWriter& Value(std::string_view s) { return String(s); }
  JsonWriter& Value(const std::string& s) { return String(s); }
  JsonWriter& Value(const char* s) { return String(s); }
  JsonWriter& Value(bool v) { return Bool(v); }
  JsonWriter& Value(double v) { return Double(v); }
  template <std::integral T>
    requires(!std::same_as<T, bool>)
  JsonWriter& Value(T v) {
    if constexpr (std::signed_integral<T>) return Int(v);
    return Uint(v);
  }
  template <typename T>
  JsonWriter& Value(const std::optional<T>& v) {
    return v ? Value(*v) : Null();
  }

  // Key(key) then Value(v).
  template <typename T>
  JsonWriter& Field(std::string_view key, const T& v) {
    Key(key);
    return Value(v);
  }

  // The text so far.
  const std::string& str() const { return out_; }
  // The whole text. REQUIRES: every Begin has its End.
  std::string Take() &&;

 private:
  void BeforeValue();

  std::string out_;
  // One entry per open object or array: whether it has no element yet.
  std::vector<bool> first_;
  std::vector<char> open_;  // '{' or '[' per level
  bool key_pending_ = false;
};

}  // namespace exlr8
