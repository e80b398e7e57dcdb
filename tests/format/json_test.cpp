#include "format/json.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>

namespace exlr8 {
namespace {

using ::testing::HasSubstr;

JsonValue MustParse(std::string_view text, const JsonLimits& limits = {}) {
  Result<JsonValue> r = ParseJson(text, limits);
  EXPECT_TRUE(r.ok()) << "input: " << text << "\n" << r.status().ToString();
  return r.ok() ? std::move(r).value() : JsonValue();
}

// ---- accepted input ----

TEST(JsonTest, Scalars) {
  EXPECT_TRUE(MustParse("null").is_null());
  EXPECT_TRUE(MustParse("true").as_bool());
  JsonValue f = MustParse("false");
  EXPECT_TRUE(f.is_bool());
  EXPECT_FALSE(f.as_bool());
  EXPECT_EQ(MustParse("\"hi\"").as_string(), "hi");
  EXPECT_EQ(MustParse("\"\"").as_string(), "");
  EXPECT_EQ(MustParse(" \t\r\n 7 \n").as_int64(), 7);
}

TEST(JsonTest, IntegersAreExact) {
  JsonValue u = MustParse("18446744073709551615");
  EXPECT_EQ(u.as_uint64(), std::numeric_limits<std::uint64_t>::max());
  EXPECT_EQ(u.as_int64(), std::nullopt);

  JsonValue imax = MustParse("9223372036854775807");
  EXPECT_EQ(imax.as_int64(), std::numeric_limits<std::int64_t>::max());
  EXPECT_EQ(imax.as_uint64(), 9223372036854775807ull);

  JsonValue imin = MustParse("-9223372036854775808");
  EXPECT_EQ(imin.as_int64(), std::numeric_limits<std::int64_t>::min());
  EXPECT_EQ(imin.as_uint64(), std::nullopt);

  // 2^53 + 1 is not representable as a double; the integer view keeps it.
  JsonValue big = MustParse("9007199254740993");
  EXPECT_EQ(big.as_int64(), 9007199254740993);
  EXPECT_EQ(big.as_double(), 9007199254740992.0);

  EXPECT_EQ(MustParse("-1").as_int64(), -1);
  EXPECT_EQ(MustParse("-1").as_uint64(), std::nullopt);
  EXPECT_EQ(MustParse("0").as_uint64(), 0u);
  EXPECT_EQ(MustParse("-0").as_uint64(), 0u);
  EXPECT_EQ(MustParse("-0").as_int64(), 0);
}

TEST(JsonTest, OutOfIntegerRangeBecomesDouble) {
  JsonValue over = MustParse("18446744073709551616");  // 2^64
  EXPECT_TRUE(over.is_number());
  EXPECT_EQ(over.as_uint64(), std::nullopt);
  EXPECT_EQ(over.as_int64(), std::nullopt);
  EXPECT_EQ(over.as_double(), 18446744073709551616.0);

  JsonValue under = MustParse("-9223372036854775809");
  EXPECT_EQ(under.as_int64(), std::nullopt);
  EXPECT_EQ(under.as_double(), -9223372036854775808.0);
}

TEST(JsonTest, FractionsAndExponentsAreNotIntegers) {
  for (const char* text : {"1.0", "1e2", "1E2", "-2.5E-3", "0.5", "10e+1"}) {
    JsonValue v = MustParse(text);
    EXPECT_TRUE(v.is_number()) << text;
    EXPECT_EQ(v.as_int64(), std::nullopt) << text;
    EXPECT_EQ(v.as_uint64(), std::nullopt) << text;
  }
  EXPECT_EQ(MustParse("1e2").as_double(), 100.0);
  EXPECT_EQ(MustParse("-2.5E-3").as_double(), -0.0025);
  EXPECT_EQ(MustParse("0.1").as_double(), 0.1);
  // Underflow is a tiny number, read as zero.
  EXPECT_EQ(MustParse("1e-400").as_double(), 0.0);
  EXPECT_EQ(MustParse("0.0000000000000000000000000000001e-380").as_double(), 0.0);
}

TEST(JsonTest, OffsetsPointAtValues) {
  // '{' at 0, '[' at 6, 1 at 7, "x" at 10, null at 20
  JsonValue v = MustParse(R"({"a": [1, "x"], "b":null})");
  ASSERT_TRUE(v.is_object());
  EXPECT_EQ(v.offset(), 0u);
  const JsonValue* a = v.Find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->offset(), 6u);
  ASSERT_EQ(a->as_array().size(), 2u);
  EXPECT_EQ(a->as_array()[0].offset(), 7u);
  EXPECT_EQ(a->as_array()[1].offset(), 10u);
  EXPECT_EQ(v.Find("b")->offset(), 20u);
  EXPECT_EQ(v.Find("c"), nullptr);
}

TEST(JsonTest, MembersKeepDocumentOrder) {
  JsonValue v = MustParse(R"({"z":1,"a":2,"m":3})");
  ASSERT_EQ(v.as_object().size(), 3u);
  EXPECT_EQ(v.as_object()[0].first, "z");
  EXPECT_EQ(v.as_object()[1].first, "a");
  EXPECT_EQ(v.as_object()[2].first, "m");
}

TEST(JsonTest, Escapes) {
  EXPECT_EQ(MustParse(R"("\"\\\/\b\f\n\r\t")").as_string(), "\"\\/\b\f\n\r\t");
  EXPECT_EQ(MustParse(R"("\u0041\u00e9\u20AC")").as_string(), "A\xC3\xA9\xE2\x82\xAC");
  // Surrogate pair -> U+1F600.
  EXPECT_EQ(MustParse(R"("\ud83d\ude00")").as_string(), "\xF0\x9F\x98\x80");
  EXPECT_EQ(MustParse(R"("\uDBFF\uDFFF")").as_string(), "\xF4\x8F\xBF\xBF");
  // \u0000 is legal JSON and yields a NUL byte.
  EXPECT_EQ(MustParse(R"("a\u0000b")").as_string(), std::string("a\0b", 3));
  // Raw UTF-8 passes through.
  EXPECT_EQ(MustParse("\"\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\"").as_string(),
            "\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80");
}

TEST(JsonTest, ParseJsonAtShiftsOffsets) {
  Result<JsonValue> v = ParseJsonAt("[1, 2]", 100);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->offset(), 100u);
  EXPECT_EQ(v->as_array()[1].offset(), 104u);
  Result<JsonValue> bad = ParseJsonAt("[1, x]", 100);
  ASSERT_EQ(bad.status().code(), StatusCode::kCorruption);
  EXPECT_THAT(bad.status().message(), HasSubstr("at byte 104:"));
}

// ---- rejected input: one case per failure class ----

struct BadCase {
  std::string text;
  std::size_t byte;      // offset the message must name
  std::string fragment;  // a distinctive part of the message
};

class JsonRejectTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(JsonRejectTest, RejectsWithOffset) {
  const BadCase& c = GetParam();
  Result<JsonValue> r = ParseJson(c.text);
  ASSERT_FALSE(r.ok()) << "accepted: " << c.text;
  EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
  EXPECT_THAT(r.status().message(), HasSubstr("at byte " + std::to_string(c.byte) + ": "));
  EXPECT_THAT(r.status().message(), HasSubstr(c.fragment));
}

INSTANTIATE_TEST_SUITE_P(
    Catalogue, JsonRejectTest,
    ::testing::Values(
        BadCase{"", 0, "unexpected end of input"},
        BadCase{"   ", 3, "unexpected end of input"},
        BadCase{"[1,]", 3, "expected a value"},
        BadCase{"[1 2]", 3, "expected ',' or ']'"},
        BadCase{"[", 1, "unexpected end of input"},
        BadCase{"{\"a\" 1}", 5, "expected ':'"},
        BadCase{"{1:2}", 1, "expected '\"'"},
        BadCase{"{\"a\":1,}", 7, "expected '\"'"},
        BadCase{"{\"a\":1 \"b\":2}", 7, "expected ',' or '}'"},
        BadCase{R"({"a":1,"a":2})", 7, "duplicate key \"a\""},
        BadCase{R"({"x":{"k":1,"j":2,"k":3}})", 18, "duplicate key \"k\""},
        BadCase{"01", 0, "leading zero"},
        BadCase{"-01", 0, "leading zero"},
        BadCase{"-", 0, "no digits after '-'"},
        BadCase{"1.", 0, "no digits after '.'"},
        BadCase{".5", 0, "unexpected '.'"},
        BadCase{"1e", 0, "no digits in exponent"},
        BadCase{"1e+", 0, "no digits in exponent"},
        BadCase{"+1", 0, "unexpected '+'"},
        BadCase{"1e400", 0, "out of range"},
        BadCase{"-1e400", 0, "out of range"},
        BadCase{"NaN", 0, "unexpected 'N'"},
        BadCase{"Infinity", 0, "unexpected 'I'"},
        BadCase{"-Infinity", 0, "no digits after '-'"},
        BadCase{"tru", 0, "expected 'true'"},
        BadCase{"nul", 0, "expected 'null'"},
        BadCase{"True", 0, "unexpected 'T'"},
        BadCase{"1 2", 2, "after the JSON value"},
        BadCase{"{}x", 2, "after the JSON value"},
        BadCase{"\"abc", 0, "unterminated string"},
        BadCase{"\"a\nb\"", 2, "control character byte 0x0A"},
        BadCase{"\"a\tb\"", 2, "control character byte 0x09"},
        BadCase{R"("\x")", 1, "invalid escape"},
        BadCase{R"("\)", 1, "unterminated escape"},
        BadCase{R"("\uD800")", 1, "not followed by a low surrogate"},
        BadCase{R"("\uD800\u0041")", 1, "not followed by a low surrogate"},
        BadCase{R"("\uDC00")", 1, "lone low surrogate"},
        BadCase{R"("\u12G4")", 1, "invalid hex digit"},
        BadCase{R"("\u12")", 1, "truncated \\u escape"},
        BadCase{"\"\xC3\x28\"", 1, "invalid UTF-8"},              // bad continuation
        BadCase{"\"ab\xC0\xAF\"", 3, "invalid UTF-8"},            // overlong '/'
        BadCase{"\"\xE0\x80\xAF\"", 1, "invalid UTF-8"},          // overlong, 3 bytes
        BadCase{"\"\xED\xA0\x80\"", 1, "invalid UTF-8"},          // encoded surrogate
        BadCase{"\"\xF4\x90\x80\x80\"", 1, "invalid UTF-8"},      // above U+10FFFF
        BadCase{"\"\xF8\x88\x80\x80\x80\"", 1, "invalid UTF-8"},  // 5-byte form
        BadCase{"\"\x80\"", 1, "invalid UTF-8"},                  // lone continuation
        BadCase{"\"\xE2\x82", 1, "invalid UTF-8"},                // truncated at the end
        BadCase{"{\"\xFF\":1}", 2, "invalid UTF-8"},              // in a key
        BadCase{"\xC3\xA9", 0, "unexpected byte 0xC3"},           // outside a string
        BadCase{"\xEF\xBB\xBF{}", 0, "unexpected byte 0xEF"},     // BOM
        BadCase{std::string("[1,\0]", 5), 3, "unexpected byte 0x00"}));

TEST(JsonTest, DuplicateKeysInLargeObjects) {
  // Above the small-object threshold the check sorts; the error must still
  // name the first repeated key in document order.
  std::string text = "{";
  for (int i = 0; i < 40; ++i) text += "\"k" + std::to_string(i) + "\":0,";
  const std::size_t first_dup = text.size();
  text += "\"k7\":1,\"k3\":2}";
  Result<JsonValue> r = ParseJson(text);
  ASSERT_EQ(r.status().code(), StatusCode::kCorruption);
  EXPECT_THAT(r.status().message(), HasSubstr("at byte " + std::to_string(first_dup) + ": "));
  EXPECT_THAT(r.status().message(), HasSubstr("duplicate key \"k7\""));

  // Same keys in different objects are fine.
  EXPECT_TRUE(ParseJson(R"({"a":{"k":1},"b":{"k":1}})").ok());
}

// ---- limits ----

std::string Nested(std::size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

TEST(JsonTest, DepthLimit) {
  EXPECT_TRUE(ParseJson(Nested(64)).ok());
  Result<JsonValue> r = ParseJson(Nested(65));
  ASSERT_EQ(r.status().code(), StatusCode::kCorruption);
  EXPECT_THAT(r.status().message(), HasSubstr("at byte 64: nesting deeper than 64 levels"));

  JsonLimits limits;
  limits.max_depth = 2;
  EXPECT_TRUE(ParseJson(R"({"a":[1]})", limits).ok());
  EXPECT_EQ(ParseJson(R"({"a":[[1]]})", limits).status().code(), StatusCode::kCorruption);
  limits.max_depth = 0;
  EXPECT_TRUE(ParseJson("1", limits).ok());
  EXPECT_EQ(ParseJson("[]", limits).status().code(), StatusCode::kCorruption);
}

TEST(JsonTest, DepthIsClampedSoHugeNestingCannotOverflowTheStack) {
  JsonLimits limits;
  limits.max_depth = std::numeric_limits<std::size_t>::max();
  const std::string deep(1 << 20, '[');
  Result<JsonValue> r = ParseJson(deep, limits);
  ASSERT_EQ(r.status().code(), StatusCode::kCorruption);
  EXPECT_THAT(r.status().message(),
              HasSubstr("nesting deeper than " + std::to_string(kJsonMaxDepthLimit)));
  EXPECT_TRUE(ParseJson(Nested(kJsonMaxDepthLimit), limits).ok());
}

TEST(JsonTest, ElementLimit) {
  JsonLimits limits;
  limits.max_elements = 4;  // the array itself and three numbers
  EXPECT_TRUE(ParseJson("[1,2,3]", limits).ok());
  Result<JsonValue> r = ParseJson("[1,2,3,4]", limits);
  ASSERT_EQ(r.status().code(), StatusCode::kCorruption);
  EXPECT_THAT(r.status().message(), HasSubstr("at byte 7: more than 4 values"));
  EXPECT_EQ(ParseJson(R"({"a":1,"b":[2,3],"c":4})", limits).status().code(), StatusCode::kCorruption);
}

TEST(JsonTest, ObjectMemberLimit) {
  JsonLimits limits;
  limits.max_object_members = 2;
  EXPECT_TRUE(ParseJson(R"({"a":1,"b":{"c":1,"d":2}})", limits).ok());
  Result<JsonValue> r = ParseJson(R"({"a":1,"b":2,"c":3})", limits);
  ASSERT_EQ(r.status().code(), StatusCode::kCorruption);
  EXPECT_THAT(r.status().message(), HasSubstr("at byte 13: object with more than 2 members"));
  EXPECT_TRUE(ParseJson("[1,2,3,4]", limits).ok());  // arrays are not affected
}

TEST(JsonTest, ArrayElementLimit) {
  JsonLimits limits;
  limits.max_array_elements = 3;
  EXPECT_TRUE(ParseJson("[[1,2,3],[4,5,6],{\"a\":[7]}]", limits).ok());  // per array, not in all
  Result<JsonValue> r = ParseJson("[1,2,3,4]", limits);
  ASSERT_EQ(r.status().code(), StatusCode::kCorruption);
  EXPECT_THAT(r.status().message(), HasSubstr("at byte 7: array of more than 3 values"));
  EXPECT_EQ(ParseJson("{\"shape\":[[],[],[],[]]}", limits).status().code(), StatusCode::kCorruption);
}

TEST(JsonTest, IsValidUtf8) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("experts/exlr8-layer-003.k2.safetensors"));
  EXPECT_TRUE(IsValidUtf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));
  EXPECT_FALSE(IsValidUtf8("bad\xff.txt"));
  EXPECT_FALSE(IsValidUtf8("\xc3"));                  // truncated
  EXPECT_FALSE(IsValidUtf8("\xc0\xaf"));              // overlong '/'
  EXPECT_FALSE(IsValidUtf8("\xed\xa0\x80"));          // a surrogate
  EXPECT_FALSE(IsValidUtf8("\xf4\x90\x80\x80"));      // above U+10FFFF
}

TEST(JsonTest, StringLimitCountsUnescapedBytes) {
  JsonLimits limits;
  limits.max_string_bytes = 4;
  EXPECT_TRUE(ParseJson(R"("abcd")", limits).ok());
  EXPECT_TRUE(ParseJson(R"("\u00e9\u00e9")", limits).ok());  // 12 bytes of text, 4 unescaped
  Result<JsonValue> r = ParseJson(R"(["abcde"])", limits);
  ASSERT_EQ(r.status().code(), StatusCode::kCorruption);
  EXPECT_THAT(r.status().message(), HasSubstr("at byte 1: string longer than 4 bytes"));
  EXPECT_EQ(ParseJson(R"("ab\u00e9\n")", limits).status().code(), StatusCode::kCorruption);
  EXPECT_EQ(ParseJson(R"({"abcde":1})", limits).status().code(), StatusCode::kCorruption);
}

// ---- Dump ----

TEST(JsonTest, DumpIsCompactAndExact) {
  const std::string text =
      R"({"a":[1,-2,18446744073709551615,-9223372036854775808,0.5,1e+300],"s":"q\"\\\n\u0001é","t":true,"f":false,"n":null,"o":{},"e":[]})";
  JsonValue v = MustParse(text);
  EXPECT_EQ(v.Dump(), text);
  EXPECT_EQ(MustParse(" { \"a\" : [ 1 , 2 ] } ").Dump(), R"({"a":[1,2]})");
  EXPECT_EQ(MustParse("-0").Dump(), "-0");
  EXPECT_EQ(MustParse("1e2").Dump(), "100");
  EXPECT_EQ(MustParse("0.1").Dump(), "0.1");
  EXPECT_EQ(MustParse(R"("\u00e9\/")").Dump(), "\"\xC3\xA9/\"");
}

// Strings built from a client's bytes (a query's name, a job id in a path)
// reach error bodies, so they may hold bytes no JSON string may hold. Every
// Dump is valid JSON; valid characters stay as they are.
TEST(JsonTest, DumpWritesBytesOfNoUtf8CharacterAsText) {
  const std::string raw = "a\xFF\xC3(\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\xED\xA0\x80z";
  const std::string dumped = JsonValue::String(raw).Dump();
  EXPECT_EQ(dumped, R"("a\\xFF\\xC3()" "\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80" R"(\\xED\\xA0\\x80z")");
  EXPECT_TRUE(IsValidUtf8(dumped));
  const JsonValue back = MustParse(dumped);
  EXPECT_EQ(back.as_string(), EscapeForMessage(raw)) << "the same text an error message shows";
  std::string appended;
  AppendJsonString(appended, raw);
  EXPECT_EQ(appended, dumped);
}

TEST(JsonTest, BuildersAndDump) {
  JsonValue o = JsonValue::Object();
  o.Add("i", JsonValue::Int(std::numeric_limits<std::int64_t>::min()));
  o.Add("u", JsonValue::UInt(std::numeric_limits<std::uint64_t>::max()));
  o.Add("d", JsonValue::Double(2.5));
  o.Add("inf", JsonValue::Double(INFINITY));
  o.Add("nan", JsonValue::Double(NAN));
  JsonValue a = JsonValue::Array();
  a.Push(JsonValue::String("x"));
  a.Push(JsonValue::Bool(true));
  a.Push(JsonValue::Null());
  o.Add("a", a);
  EXPECT_EQ(o.Dump(),
            R"({"i":-9223372036854775808,"u":18446744073709551615,"d":2.5,"inf":null,"nan":null,"a":["x",true,null]})");
  EXPECT_EQ(JsonValue::Int(-5).as_int64(), -5);
  EXPECT_EQ(JsonValue::Int(-5).as_double(), -5.0);
  EXPECT_EQ(JsonValue::UInt(7).as_uint64(), 7u);
  // Push on a non-array turns it into an array first.
  JsonValue n;
  n.Push(JsonValue::Int(1));
  EXPECT_EQ(n.Dump(), "[1]");
}

TEST(JsonTest, MismatchedAccessorsAreHarmless) {
  JsonValue i = JsonValue::Int(3);
  EXPECT_EQ(i.as_string(), "");
  EXPECT_TRUE(i.as_array().empty());
  EXPECT_TRUE(i.as_object().empty());
  EXPECT_FALSE(i.as_bool());
  EXPECT_EQ(i.Find("x"), nullptr);
  EXPECT_EQ(JsonValue::String("7").as_int64(), std::nullopt);
  EXPECT_EQ(JsonValue::String("7").as_double(), 0.0);
}

TEST(JsonTest, CopyAndMove) {
  JsonValue v = MustParse(R"({"a":[1,{"b":"c"}],"d":"e"})");
  JsonValue copy = v;
  EXPECT_EQ(copy.Dump(), v.Dump());
  JsonValue moved = std::move(copy);
  EXPECT_EQ(moved.Dump(), v.Dump());
  JsonValue assigned = JsonValue::Int(1);
  assigned = v;
  EXPECT_EQ(assigned.Dump(), v.Dump());
  JsonValue& alias = assigned;
  assigned = alias;  // self-assignment
  EXPECT_EQ(assigned.Dump(), v.Dump());
  // Assigning from one's own descendant.
  assigned = assigned.as_object()[0].second;
  EXPECT_EQ(assigned.Dump(), R"([1,{"b":"c"}])");
  assigned = assigned.as_array()[1].as_object()[0].second;
  EXPECT_EQ(assigned.Dump(), R"("c")");
  assigned = JsonValue::Int(4);
  EXPECT_EQ(assigned.Dump(), "4");
}

// Random documents: Dump(Parse(Dump(x))) == Dump(x), and the parse succeeds.
class RandomDoc {
 public:
  explicit RandomDoc(std::uint64_t seed) : rng_(seed) {}

  JsonValue Make(int depth) {
    switch (Pick(depth > 4 ? 5 : 7)) {
      case 0: return JsonValue::Null();
      case 1: return JsonValue::Bool(Pick(2) == 1);
      case 2: return JsonValue::Int(static_cast<std::int64_t>(rng_()));
      case 3: return JsonValue::Double(std::ldexp(static_cast<double>(rng_() >> 11), Pick(200) - 100));
      case 4: return JsonValue::String(Text());
      case 5: {
        JsonValue a = JsonValue::Array();
        for (int i = Pick(6); i > 0; --i) a.Push(Make(depth + 1));
        return a;
      }
      default: {
        JsonValue o = JsonValue::Object();
        for (int i = Pick(6); i > 0; --i) o.Add(Text() + std::to_string(i), Make(depth + 1));
        return o;
      }
    }
  }

 private:
  int Pick(int n) { return static_cast<int>(rng_() % static_cast<std::uint64_t>(n)); }
  std::string Text() {
    static const char* kPieces[] = {"a", "Z", "\"", "\\", "\n", "\x01", "\x1F", " ", "/",
                                    "\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\x98\x80", "\x7F"};
    std::string s;
    for (int i = Pick(8); i > 0; --i) s += kPieces[Pick(13)];
    return s;
  }
  std::mt19937_64 rng_;
};

TEST(JsonTest, RandomRoundTrips) {
  const std::uint64_t seed = 20260101;
  RandomDoc gen(seed);
  for (int i = 0; i < 500; ++i) {
    JsonValue doc = gen.Make(0);
    const std::string text = doc.Dump();
    Result<JsonValue> parsed = ParseJson(text);
    ASSERT_TRUE(parsed.ok()) << "seed " << seed << " doc " << i << ": " << parsed.status().ToString();
    EXPECT_EQ(parsed->Dump(), text) << "seed " << seed << " doc " << i;
  }
}

TEST(JsonTest, ManifestScaleDocument) {
  // GLM-scale manifest: 75 layers x (2 x 256 x 16 + 256) widths.
  std::string text = "{\"layers\":{";
  std::mt19937 rng(7);
  for (int layer = 3; layer < 78; ++layer) {
    if (layer > 3) text += ',';
    text += "\"" + std::to_string(layer) + "\":{";
    for (const char* proj : {"gate", "up"}) {
      text += "\"" + std::string(proj) + "\":[";
      for (int e = 0; e < 256; ++e) {
        text += e ? ",[" : "[";
        for (int h = 0; h < 16; ++h) {
          if (h) text += ',';
          text += static_cast<char>('2' + rng() % 3);
        }
        text += ']';
      }
      text += "],";
    }
    text += "\"down\":[";
    for (int e = 0; e < 256; ++e) {
      if (e) text += ',';
      text += static_cast<char>('2' + rng() % 3);
    }
    text += "]}";
  }
  text += "}}";
  const auto t0 = std::chrono::steady_clock::now();
  Result<JsonValue> r = ParseJson(text);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  std::printf("parsed %zu bytes of manifest in %.1f ms (%.0f MB/s)\n", text.size(), s * 1e3,
              static_cast<double>(text.size()) / s / 1e6);
  const JsonValue* layers = r->Find("layers");
  ASSERT_NE(layers, nullptr);
  ASSERT_EQ(layers->as_object().size(), 75u);
  const JsonValue* gate = layers->Find("40")->Find("gate");
  ASSERT_EQ(gate->as_array().size(), 256u);
  ASSERT_EQ(gate->as_array()[255].as_array().size(), 16u);
  EXPECT_EQ(r->Dump(), text);
}

TEST(JsonTest, EscapeForMessage) {
  EXPECT_EQ(EscapeForMessage("plain"), "plain");
  EXPECT_EQ(EscapeForMessage("a\nb\x7F'\"\\"), "a\\x0Ab\\x7F\\'\\\"\\\\");
  EXPECT_EQ(EscapeForMessage("abcdef", 3), "abc...");
  // Never cuts inside a UTF-8 sequence.
  EXPECT_EQ(EscapeForMessage("a\xE2\x82\xAC", 2), "a...");
  EXPECT_EQ(EscapeForMessage(std::string(1000, 'x')).size(), 83u);
  // Valid characters stay; stray bytes are shown, so the text is UTF-8.
  EXPECT_EQ(EscapeForMessage("caf\xC3\xA9 bad\xFF \xC3"), "caf\xC3\xA9 bad\\xFF \\xC3");
  EXPECT_TRUE(IsValidUtf8(EscapeForMessage("\xED\xA0\x80\xF4\x90\x80\x80")));
}

}  // namespace
}  // namespace exlr8
