// The lease description (client/lease/description.h): what the holder
// writes reads back the same, and a description a lessee cannot trust is
// refused with the field and where it is.
#include "client/lease/description.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "tests/client/lease/lease_test_util.h"

namespace exlr8 {
namespace {

using ::exlr8::testing::ValidLeaseDescription;
using ::testing::HasSubstr;

void ExpectSame(const LeaseDescription& a, const LeaseDescription& b) {
  EXPECT_EQ(a.repo, b.repo);
  EXPECT_EQ(a.commit, b.commit);
  EXPECT_EQ(a.manifest, b.manifest);
  EXPECT_EQ(a.tp, b.tp);
  EXPECT_EQ(a.rank, b.rank);
  EXPECT_EQ(a.device, b.device);
  EXPECT_EQ(a.bytes, b.bytes);
  EXPECT_EQ(a.data_handle, b.data_handle);
  EXPECT_EQ(a.offsets_handle, b.offsets_handle);
  ASSERT_EQ(a.halves.size(), b.halves.size());
  for (std::size_t i = 0; i < a.halves.size(); ++i) {
    EXPECT_EQ(a.halves[i].tag.What(), b.halves[i].tag.What()) << i;
    EXPECT_EQ(a.halves[i].hidden, b.halves[i].hidden) << i;
    EXPECT_EQ(a.halves[i].offset, b.halves[i].offset) << i;
    EXPECT_EQ(a.halves[i].length, b.halves[i].length) << i;
  }
}

TEST(LeaseDescription, WhatTheHolderWritesReadsBackTheSame) {
  const LeaseDescription d = ValidLeaseDescription();
  const std::string text = WriteLeaseDescription(d);
  auto back = ParseLeaseDescription(text);
  ASSERT_TRUE(back.ok()) << back.status().ToString() << "\n" << text;
  ExpectSame(*back, d);
}

TEST(LeaseDescription, TheWrittenLayoutIsTheProtocols) {
  LeaseDescription d = ValidLeaseDescription();
  d.halves.resize(1);
  d.bytes = 8000;
  d.data_bytes = 8000;
  EXPECT_EQ(WriteLeaseDescription(d),
            R"({"version":1,"repo":"org/glm","commit":"0123456789abcdef0123456789abcdef01234567",)"
            R"("manifest":"home","tp":4,"rank":1,"device":0,"bytes":8000,"data_bytes":8000,"halves_count":1,)"
            R"("data_handle":")" +
                std::string(128, 'a') + R"(","offsets_handle":")" + d.offsets_handle +
                R"(","halves":[{"layer":3,"expert":7,"proj":"gate","half":0,"k":2,"hidden":256,)"
                R"("offset":0,"length":8000}]})");
}

TEST(LeaseDescription, SyntaxErrorsNameTheSourceAndTheByte) {
  auto r = ParseLeaseDescription("{not json", "/run/lease.sock");
  EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
  EXPECT_THAT(r.status().message(), HasSubstr("lease description from /run/lease.sock"));
  EXPECT_THAT(r.status().message(), HasSubstr("at byte 1"));
}

// ---- what the parser refuses ----
//
// Each case edits the valid description's text (Edit: the first `from`
// becomes `to`) and expects Corruption naming the field and the byte
// offset of its value (or the half's index) in the text.

std::string Valid() { return WriteLeaseDescription(ValidLeaseDescription()); }

std::string Edit(std::string text, std::string_view from, std::string_view to) {
  const std::size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

// The byte offset of the value after the first `"key":` at or after
// `from` in `text`.
std::string ByteOf(const std::string& text, std::string_view key, std::size_t from = 0) {
  const std::string k = "\"" + std::string(key) + "\":";
  const std::size_t at = text.find(k, from);
  EXPECT_NE(at, std::string::npos) << key;
  return "at byte " + std::to_string(at + k.size());
}

// Where the second half's object starts.
std::size_t SecondHalf(const std::string& text) { return text.find("},{\"layer\"") + 2; }

void ExpectRefused(const std::string& text, const std::vector<std::string>& what) {
  auto r = ParseLeaseDescription(text, "lease.sock");
  ASSERT_FALSE(r.ok()) << text;
  EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << r.status().ToString();
  EXPECT_THAT(r.status().message(), HasSubstr("lease description from lease.sock: "));
  for (const std::string& w : what) EXPECT_THAT(r.status().message(), HasSubstr(w)) << text;
}

TEST(LeaseDescriptionStrict, UnknownProjectionIsRefusedNotReadAsGate) {
  const std::string text = Edit(Valid(), R"("proj":"gate")", R"("proj":"gated")");
  ExpectRefused(text, {"halves[0] 'proj' " + ByteOf(text, "proj"), "unknown projection \"gated\""});
}

TEST(LeaseDescriptionStrict, ProjectionThatIsNotAStringIsRefused) {
  const std::string text = Edit(Valid(), R"("proj":"down")", R"("proj":2)");
  ExpectRefused(text, {"halves[1] 'proj' " + ByteOf(text, "proj", SecondHalf(text))});
}

TEST(LeaseDescriptionStrict, TpOfZeroIsRefused) {
  const std::string text = Edit(Edit(Valid(), R"("tp":4)", R"("tp":0)"), R"("rank":1)", R"("rank":0)");
  ExpectRefused(text, {"'tp' " + ByteOf(text, "tp"), "[1, 2147483647]"});
}

TEST(LeaseDescriptionStrict, TpThatDoesNotFitAnIntIsRefusedNotNarrowed) {
  const std::string text = Edit(Valid(), R"("tp":4)", R"("tp":4294967300)");
  ExpectRefused(text, {"'tp' " + ByteOf(text, "tp"), "4294967300"});
}

TEST(LeaseDescriptionStrict, RankNotBelowTpIsRefused) {
  const std::string text = Edit(Valid(), R"("rank":1)", R"("rank":4)");
  ExpectRefused(text, {"'rank' " + ByteOf(text, "rank"), "[0, 3]"});
}

TEST(LeaseDescriptionStrict, DeviceThatDoesNotFitAnIntIsRefusedNotNarrowed) {
  // 2^32 read as a count and narrowed to int was device 0.
  const std::string text = Edit(Valid(), R"("device":0)", R"("device":4294967296)");
  ExpectRefused(text, {"'device' " + ByteOf(text, "device")});
}

TEST(LeaseDescriptionStrict, NegativeDeviceIsRefusedWithItsByte) {
  const std::string text = Edit(Valid(), R"("device":0)", R"("device":-1)");
  ExpectRefused(text, {"'device' " + ByteOf(text, "device"), "-1"});
}

TEST(LeaseDescriptionStrict, LayerThatDoesNotFitAnIntIsRefusedNotNarrowed) {
  const std::string text = Edit(Valid(), R"("layer":3)", R"("layer":2147483648)");
  ExpectRefused(text, {"halves[0] 'layer' " + ByteOf(text, "layer")});
}

TEST(LeaseDescriptionStrict, HalfThatDoesNotFitUint32IsRefusedNotNarrowed) {
  const std::string text = Edit(Valid(), R"("half":0)", R"("half":4294967296)");
  ExpectRefused(text, {"halves[0] 'half' " + ByteOf(text, "half")});
}

TEST(LeaseDescriptionStrict, ExpertBelowTheSharedExpertIsRefused) {
  const std::string text = Edit(Valid(), R"("expert":-1)", R"("expert":-2)");
  ExpectRefused(text, {"halves[1] 'expert' " + ByteOf(text, "expert", SecondHalf(text))});
}

TEST(LeaseDescriptionStrict, WidthOfZeroIsRefused) {
  const std::string text = Edit(Valid(), R"("k":2)", R"("k":0)");
  ExpectRefused(text, {"halves[0] 'k' " + ByteOf(text, "k")});
}

TEST(LeaseDescriptionStrict, EmptyHalfIsRefused) {
  const std::string text =
      Edit(Edit(Valid(), R"("length":100)", R"("length":0)"), R"("bytes":8100)", R"("bytes":8000)");
  ExpectRefused(text, {"halves[1] 'length' " + ByteOf(text, "length", SecondHalf(text))});
}

TEST(LeaseDescriptionStrict, HalfOutsideTheAllocationIsRefused) {
  const std::string text = Edit(Valid(), R"("offset":8192)", R"("offset":8193)");
  ExpectRefused(text, {"halves[1] 'length' " + ByteOf(text, "length", SecondHalf(text)), "8293",
                       "allocation of 8292 bytes"});
}

TEST(LeaseDescriptionStrict, OffsetPlusLengthThatOverflowsIsRefused) {
  const std::string text = Edit(Valid(), R"("offset":8192)", R"("offset":18446744073709551516)");
  ExpectRefused(text, {"halves[1] 'length' " + ByteOf(text, "length", SecondHalf(text)), "overflows"});
}

TEST(LeaseDescriptionStrict, OverlappingHalvesAreRefused) {
  const std::string text = Edit(Valid(), R"("offset":8192)", R"("offset":7999)");
  ExpectRefused(text,
                {"halves[1] 'offset' " + ByteOf(text, "offset", SecondHalf(text)), "overlaps halves[0]"});
}

TEST(LeaseDescriptionStrict, TheSameHalfTwiceIsRefused) {
  std::string text =
      Edit(Valid(), R"("expert":-1,"proj":"down","half":5)", R"("expert":7,"proj":"gate","half":0)");
  ExpectRefused(text,
                {"halves[1] ", "at byte " + std::to_string(SecondHalf(text)), "the same half as halves[0]"});
}

TEST(LeaseDescriptionStrict, DuplicateKeyIsRefusedWithItsByte) {
  const std::string text = Edit(Valid(), R"("tp":4,)", R"("tp":4,"tp":4,)");
  ExpectRefused(text, {"duplicate", "at byte"});
}

TEST(LeaseDescriptionStrict, UnknownFieldIsRefused) {
  const std::string text = Edit(Valid(), R"("tp":4,)", R"("tp":4,"tq":4,)");
  ExpectRefused(text, {"'tq' " + ByteOf(text, "tq"), "unknown field"});
}

TEST(LeaseDescriptionStrict, UnknownFieldOfAHalfIsRefused) {
  const std::string text = Edit(Valid(), R"("k":2,)", R"("k":2,"kk":2,)");
  ExpectRefused(text, {"halves[0] 'kk' " + ByteOf(text, "kk"), "unknown field"});
}

TEST(LeaseDescriptionStrict, HalvesCountThatDisagreesIsRefused) {
  const std::string text = Edit(Valid(), R"("halves_count":2)", R"("halves_count":3)");
  ExpectRefused(text, {"'halves_count' " + ByteOf(text, "halves_count"), "2 halves"});
}

TEST(LeaseDescriptionStrict, BytesThatAreNotTheSumOfTheLengthsAreRefused) {
  const std::string text = Edit(Valid(), R"("bytes":8100)", R"("bytes":8101)");
  ExpectRefused(text, {"'bytes' " + ByteOf(text, "bytes"), "8100"});
}

// A holder from before data_bytes sends none; it allocated exactly to the
// end of the last half, and a half beyond its allocation cannot be told.
TEST(LeaseDescriptionStrict, WithoutAnAllocationSizeTheAllocationEndsWithTheLastHalf) {
  auto d = ParseLeaseDescription(Edit(Valid(), R"("data_bytes":8292,)", ""));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->data_bytes, 8292u);
  const std::string overflow = Edit(Edit(Valid(), R"("data_bytes":8292,)", ""), R"("offset":8192)",
                                    R"("offset":18446744073709551516)");
  ExpectRefused(overflow,
                {"halves[1] 'length' " + ByteOf(overflow, "length", SecondHalf(overflow)), "overflows"});
}

TEST(LeaseDescriptionStrict, AnAllocationSizeThatIsNotACountIsRefused) {
  const std::string text = Edit(Valid(), R"("data_bytes":8292)", R"("data_bytes":"8292")");
  ExpectRefused(text, {"'data_bytes' " + ByteOf(text, "data_bytes")});
}

TEST(LeaseDescriptionStrict, MalformedHandleIsRefusedBeforeMapping) {
  const std::string text = Edit(Valid(), std::string(128, 'a'), std::string(127, 'a') + "g");
  ExpectRefused(text, {"'data_handle' " + ByteOf(text, "data_handle"), "128 hex digits"});
  const std::string shorter = Edit(Valid(), std::string(128, 'a'), std::string(126, 'a'));
  ExpectRefused(shorter, {"'data_handle' " + ByteOf(shorter, "data_handle")});
}

TEST(LeaseDescriptionStrict, EmptyOrOverlongTextFieldsAreRefused) {
  const std::string empty = Edit(Valid(), R"("repo":"org/glm")", R"("repo":"")");
  ExpectRefused(empty, {"'repo' " + ByteOf(empty, "repo")});
  const std::string longer =
      Edit(Valid(), R"("manifest":"home")", "\"manifest\":\"" + std::string(5000, 'm') + "\"");
  ExpectRefused(longer, {"'manifest' " + ByteOf(longer, "manifest"), "1 to 4096 bytes"});
}

TEST(LeaseDescriptionStrict, NonIntegerNumbersAreRefusedNotRounded) {
  const std::string text = Edit(Valid(), R"("offset":0)", R"("offset":0.5)");
  ExpectRefused(text, {"halves[0] 'offset' " + ByteOf(text, "offset")});
}

TEST(LeaseDescriptionStrict, TooManyHalvesAreRefusedBeforeTheyAreBuilt) {
  std::string many = "[";
  for (std::size_t i = 0; i <= kMaxLeaseHalves; ++i) many += i ? ",0" : "0";
  many += "]";
  const std::string text = Edit(Valid(), R"("halves":[)", R"("halves":)" + many + R"(,"more":[)");
  ExpectRefused(text, {"at byte", std::to_string(kMaxLeaseHalves)});
}

TEST(LeaseDescriptionStrict, DeepNestingIsRefused) {
  const std::string text = Edit(Valid(), R"("hidden":256)", R"("hidden":[[[[1]]]])");
  ExpectRefused(text, {"at byte"});
}

TEST(LeaseDescriptionStrict, ADescriptionThatIsNotAnObjectIsRefused) {
  ExpectRefused("[1]", {"not an object", "at byte 0"});
}

// The fuzz target's seeds (tests/fuzz/corpus/lease_description) are what
// their names say, so the fuzzer starts from both sides of the parser.
TEST(LeaseDescriptionStrict, TheFuzzSeedsAreWhatTheirNamesSay) {
  const std::filesystem::path dir =
      std::filesystem::path(EXLR8_SOURCE_DIR) / "tests/fuzz/corpus/lease_description";
  int seen = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path(), std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string name = entry.path().filename().string();
    EXPECT_EQ(ParseLeaseDescription(text).ok(), name.rfind("valid_", 0) == 0) << name;
    ++seen;
  }
  EXPECT_GE(seen, 4);
}

}  // namespace
}  // namespace exlr8
