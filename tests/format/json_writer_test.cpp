// Tests of JsonWriter (format/json_writer.h): its text is what
// JsonValue::Dump writes for the same document, and what ParseJson reads
// back.
#include "format/json_writer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>
#include <random>
#include <string>

#include "format/json.h"

namespace exlr8 {
namespace {

TEST(JsonWriterTest, PlacesCommasAndColonsInNestedDocuments) {
  JsonWriter w;
  w.BeginObject().Field("a", 1).Key("b").BeginArray();
  w.BeginArray().EndArray().BeginObject().EndObject().Int(-2).String("x");
  w.EndArray().Field("c", true).Key("d").Null().EndObject();
  EXPECT_EQ(std::move(w).Take(), R"({"a":1,"b":[[],{},-2,"x"],"c":true,"d":null})");
}

TEST(JsonWriterTest, EscapesKeysAndStringsAsDumpDoes) {
  const std::string nasty = std::string("q\"b\\n\n\t\x01\xff") + "\xc3\xa9";
  JsonWriter w;
  w.BeginObject().Field(nasty, nasty).EndObject();
  const std::string text = std::move(w).Take();
  EXPECT_EQ(text, JsonValue::Object({{nasty, JsonValue::String(nasty)}}).Dump());
  auto back = ParseJson(text);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  // The byte of no UTF-8 character comes back as its text \xFF.
  EXPECT_EQ(back->Find("q\"b\\n\n\t\x01\\xFF\xc3\xa9")->as_string(), "q\"b\\n\n\t\x01\\xFF\xc3\xa9");
}

TEST(JsonWriterTest, IntegersAreExactAtTheirLimits) {
  JsonWriter w;
  w.BeginArray()
      .Value(std::numeric_limits<std::uint64_t>::max())
      .Value(std::numeric_limits<std::int64_t>::min())
      .Value(std::uint8_t{255})
      .Value(-1)
      .EndArray();
  EXPECT_EQ(std::move(w).Take(), "[18446744073709551615,-9223372036854775808,255,-1]");
}

TEST(JsonWriterTest, NumbersThatAreNotFiniteAreNull) {
  JsonWriter w;
  w.BeginArray()
      .Double(std::nan(""))
      .Double(std::numeric_limits<double>::infinity())
      .Fixed(-std::numeric_limits<double>::infinity(), 3)
      .Double(0.1)
      .Fixed(2.0 / 3.0, 3)
      .Fixed(1e300, 0)
      .EndArray();
  const std::string text = std::move(w).Take();
  EXPECT_EQ(text.substr(0, 21), "[null,null,null,0.1,0");
  EXPECT_NE(text.find(",0.667,1"), std::string::npos) << text;
  EXPECT_TRUE(ParseJson(text).ok()) << text;
}

TEST(JsonWriterTest, OptionalsAreTheirValueOrNull) {
  JsonWriter w;
  w.BeginObject()
      .Field("set", std::optional<std::uint64_t>(5))
      .Field("unset", std::optional<std::string>())
      .Field("text", std::optional<std::string>("t"))
      .EndObject();
  EXPECT_EQ(std::move(w).Take(), R"({"set":5,"unset":null,"text":"t"})");
}

TEST(JsonWriterTest, RawValuesSitWhereAValueGoes) {
  JsonWriter w;
  w.BeginArray().Raw(R"({"x":[1]})").Raw("2").EndArray();
  EXPECT_EQ(std::move(w).Take(), R"([{"x":[1]},2])");
}

TEST(JsonWriterTest, AScalarIsAWholeDocument) {
  JsonWriter w;
  w.String("alone");
  EXPECT_EQ(std::move(w).Take(), "\"alone\"");
}

// Writes `v` through the writer the way a hand-written producer would.
void Write(const JsonValue& v, JsonWriter& w) {
  switch (v.type()) {
    case JsonValue::Type::kNull: w.Null(); return;
    case JsonValue::Type::kBool: w.Bool(v.as_bool()); return;
    case JsonValue::Type::kNumber:
      if (auto u = v.as_uint64()) {
        w.Uint(*u);
      } else if (auto i = v.as_int64()) {
        w.Int(*i);
      } else {
        w.Double(v.as_double());
      }
      return;
    case JsonValue::Type::kString: w.String(v.as_string()); return;
    case JsonValue::Type::kArray:
      w.BeginArray();
      for (const JsonValue& e : v.as_array()) Write(e, w);
      w.EndArray();
      return;
    case JsonValue::Type::kObject:
      w.BeginObject();
      for (const auto& [k, e] : v.as_object()) {
        w.Key(k);
        Write(e, w);
      }
      w.EndObject();
      return;
  }
}

JsonValue RandomValue(std::mt19937_64& rng, int depth) {
  const int kind = static_cast<int>(rng() % (depth > 3 ? 5 : 7));
  auto text = [&] {
    std::string s;
    for (std::uint64_t n = rng() % 6; n > 0; --n) s.push_back(static_cast<char>(rng() % 256));
    return s;
  };
  switch (kind) {
    case 0: return JsonValue();
    case 1: return JsonValue::Bool(rng() % 2 == 0);
    case 2: return JsonValue::UInt(rng() >> (rng() % 64));
    case 3: return rng() % 2 ? JsonValue::Int(-static_cast<std::int64_t>(rng() >> 2)) : JsonValue::Double(
                                   static_cast<double>(rng() % 100000) / 7.0);
    case 4: return JsonValue::String(text());
    case 5: {
      std::vector<JsonValue> items;
      for (std::uint64_t n = rng() % 4; n > 0; --n) items.push_back(RandomValue(rng, depth + 1));
      return JsonValue::Array(std::move(items));
    }
    default: {
      std::vector<JsonValue::Member> members;
      for (std::uint64_t n = rng() % 4; n > 0; --n) members.emplace_back(text() + std::to_string(n),
                                                                         RandomValue(rng, depth + 1));
      return JsonValue::Object(std::move(members));
    }
  }
}

TEST(JsonWriterTest, WritesWhatDumpWritesForRandomDocuments) {
  std::mt19937_64 rng(20261203);
  for (int i = 0; i < 2000; ++i) {
    const JsonValue v = RandomValue(rng, 0);
    JsonWriter w;
    Write(v, w);
    const std::string text = std::move(w).Take();
    ASSERT_EQ(text, v.Dump()) << "document " << i;
    ASSERT_TRUE(ParseJson(text).ok()) << text;
  }
}

}  // namespace
}  // namespace exlr8
