// The REST API's query strings (daemon/api/query_string.h).
#include "daemon/api/query_string.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace exlr8 {
namespace {

using ::testing::HasSubstr;

TEST(QueryStringTest, DecodesPairs) {
  auto q = ParseQuery("/v1/ranks?repo=org%2Fname&manifest=home&tp=4&rank=1&note=a+b%20c&flag&&");
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_EQ(q->size(), 6u);
  EXPECT_EQ(q->at("repo"), "org/name");
  EXPECT_EQ(q->at("tp"), "4");
  EXPECT_EQ(q->at("note"), "a b c");
  EXPECT_EQ(q->at("flag"), "");
  EXPECT_TRUE(ParseQuery("/v1/ranks")->empty());
  EXPECT_TRUE(ParseQuery("/v1/ranks?")->empty());
  EXPECT_EQ(ParseQuery("/x?a=%e2%9c%93")->at("a"), "\xe2\x9c\x93");  // UTF-8 passes
  EXPECT_EQ(ParseQuery("/x?a=1?b=2")->at("a"), "1?b=2");              // only the first '?' starts it
}

TEST(QueryStringTest, RefusesWhatIsMalformedNamingIt) {
  auto bad = [](std::string_view target, const std::string& what) {
    auto q = ParseQuery(target);
    EXPECT_EQ(q.status().code(), StatusCode::kInvalidArgument) << target;
    EXPECT_THAT(q.status().message(), HasSubstr(what)) << target;
  };
  bad("/x?a=%4", "'a=%4': '%' not followed by two hex digits");
  bad("/x?a=%zz", "not followed by two hex digits");
  bad("/x?a=%00", "a control character");
  bad("/x?a=%0a", "a control character");
  bad("/x?=1", "an empty name");
  bad("/x?a=1&a=2", "'a' given twice");
  std::string many = "/x?";
  for (int i = 0; i <= 32; ++i) many += "k" + std::to_string(i) + "=1&";
  bad(many, "more than 32");
  bad("/x?a=" + std::string(1025, 'v'), "longer than 1024 bytes");
  EXPECT_TRUE(ParseQuery("/x?a=" + std::string(1024, 'v')).ok());
}

}  // namespace
}  // namespace exlr8
