// The shared command-line parser's habits: -h, and the nearest known name
// offered for a misspelt option or command.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "client/cli/args.h"
#include "client/cli/suggest.h"

namespace exlr8 {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(ClosestName, OffersTheNearestNameWithinATypo) {
  const std::vector<std::string> commands = {"pull", "gc", "status", "verify", "serve", "list"};
  EXPECT_EQ(ClosestName("pul", commands), "pull");
  EXPECT_EQ(ClosestName("plul", commands), "pull");  // one swap of neighbours
  EXPECT_EQ(ClosestName("stauts", commands), "status");
  EXPECT_EQ(ClosestName("verfy", commands), "verify");
  EXPECT_EQ(ClosestName("serve", commands), "serve");
  EXPECT_EQ(ClosestName("download", commands), std::nullopt);
  EXPECT_EQ(ClosestName("x", commands), std::nullopt);  // "gc" is 2 edits from 1 letter
  EXPECT_EQ(ClosestName("", commands), std::nullopt);
  EXPECT_EQ(ClosestName("pull", {}), std::nullopt);
}

TEST(ClosestName, ALongArgumentIsAnsweredWithoutWorkOnEveryPair) {
  const std::string huge(1 << 20, 'a');
  EXPECT_EQ(ClosestName(huge, {"repo", "manifest"}), std::nullopt);
}

TEST(Args, AMisspeltOptionNamesTheNearestOne) {
  const std::set<std::string> values = {"repo", "manifest", "tp", "rank", "cache"};
  const std::set<std::string> flags = {"json", "no-progress", "help"};
  auto a = Args::Parse({"--repoo", "x"}, values, flags);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(a.status().message(), HasSubstr("unknown option '--repoo' (did you mean '--repo'?)"));
  a = Args::Parse({"--no-progess"}, values, flags);
  EXPECT_THAT(a.status().message(), HasSubstr("did you mean '--no-progress'?"));
  a = Args::Parse({"--mainfest=home"}, values, flags);
  EXPECT_THAT(a.status().message(), HasSubstr("unknown option '--mainfest' (did you mean '--manifest'?)"));
  a = Args::Parse({"-rank", "1"}, values, flags);
  EXPECT_THAT(a.status().message(), HasSubstr("unknown option '-rank' (did you mean '--rank'?)"));
  a = Args::Parse({"--frobnicate"}, values, flags);
  EXPECT_THAT(a.status().message(), HasSubstr("unknown option '--frobnicate'"));
  EXPECT_THAT(a.status().message(), Not(HasSubstr("did you mean")));
}

TEST(Args, DashHIsHelpOnlyWhereHelpIsAFlag) {
  auto a = Args::Parse({"-h"}, {}, {"help"});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_TRUE(a->Flag("help"));
  EXPECT_TRUE(a->positional().empty());
  EXPECT_FALSE(Args::Parse({"-h"}, {}, {"json"}).ok());
  a = Args::Parse({"--", "-h"}, {}, {"help"});  // after "--" it is a word
  ASSERT_TRUE(a.ok());
  EXPECT_FALSE(a->Flag("help"));
  EXPECT_EQ(a->positional(), std::vector<std::string>{"-h"});
}

TEST(Args, TheRepositoryIsTheArgumentOrRepo) {
  const std::set<std::string> values = {"repo", "manifest"};
  auto a = Args::Parse({"org/name", "--manifest", "home"}, values, {"help"});
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(a->TakeRepositoryArgument().ok());
  EXPECT_EQ(a->Get("repo"), "org/name");
  EXPECT_TRUE(a->positional().empty());
  a = Args::Parse({"--repo", "org/name"}, values, {"help"});  // --repo alone: unchanged
  ASSERT_TRUE(a->TakeRepositoryArgument().ok());
  EXPECT_EQ(a->Get("repo"), "org/name");
  a = Args::Parse({"org/name", "--repo=org/name"}, values, {"help"});  // the same twice: fine
  EXPECT_TRUE(a->TakeRepositoryArgument().ok());
  a = Args::Parse({"org/one", "--repo", "org/two"}, values, {"help"});
  const Status both = a->TakeRepositoryArgument();
  EXPECT_EQ(both.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(both.message(), HasSubstr("'org/one'"));
  EXPECT_THAT(both.message(), HasSubstr("--repo 'org/two'"));
  a = Args::Parse({"--manifest", "home"}, values, {"help"});
  ASSERT_TRUE(a->TakeRepositoryArgument().ok());
  EXPECT_THAT(a->Require("repo").status().message(), HasSubstr("give ORG/NAME (or --repo ORG/NAME)"));
}

}  // namespace
}  // namespace exlr8
