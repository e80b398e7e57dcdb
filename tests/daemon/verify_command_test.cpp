// `exlr8d verify` as an operator runs it, against caches filled by real
// pulls from the hub simulator: exit statuses, the cache lock, the JSON
// report, and dense files that only the structural checks can refuse.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "client/file_sink.h"
#include "format/json.h"
#include "format/layout.h"
#include "format/release_writer.h"
#include "tests/daemon/scrub_test_util.h"
#include "tests/daemon/shell_util.h"

namespace exlr8 {
namespace {

using ::exlr8::testing::FlipByte;
using ::exlr8::testing::Pulled;
using ::exlr8::testing::RecordedBytes;
using ::exlr8::testing::TempDir;
using ::testing::HasSubstr;

// `exlr8d verify` as an operator runs it: exit statuses, the lock, JSON.
TEST(VerifyCommandTest, ExitStatusesTheLockAndTheJsonReport) {
  Pulled p;
  const std::string c = " --no-progress --cache " + Quote(p.dir.path().string());
  // When each fileset was last checked, as `exlr8d list --json` shows it.
  auto verified = [&] {
    auto list = ParseJson(Shell(Exlr8d() + " list --json --cache " + Quote(p.dir.path().string())).out);
    return list.ok() ? *list->Find("filesets")->as_array().at(0).Find("verified") : JsonValue();
  };
  EXPECT_TRUE(verified().is_null());  // never
  ShellRun r = Shell(Exlr8d() + " verify" + c);
  EXPECT_EQ(r.status, 0) << r.out;
  ASSERT_TRUE(verified().is_object());
  const std::string clean_at = verified().Find("at")->as_string();
  EXPECT_EQ(*verified().Find("failures")->as_uint64(), 0u);
  EXPECT_THAT(r.out, HasSubstr("exlr8/test@"));
  EXPECT_THAT(r.out, HasSubstr("halves"));

  const PlanFile& width = p.WidthFile();
  const PlanRange& half = Pulled::FirstHalf(width);
  FlipByte(p.DataPath(width.path), half.offset + 1);
  const std::uint64_t before = RecordedBytes(p.dir.path());

  {
    // Another process owns the cache: repairing is refused (7); checking works beside it.
    auto owner = Cache::Open(p.dir.path());
    ASSERT_TRUE(owner.ok());
    r = Shell(Exlr8d() + " verify" + c);
    EXPECT_EQ(r.status, 7) << r.out;
    EXPECT_THAT(r.out, HasSubstr("--check-only"));
    r = Shell(Exlr8d() + " verify --check-only --json --repo exlr8/test" + c);
    EXPECT_EQ(r.status, 1) << r.out;
    auto json = ParseJson(r.out);
    ASSERT_TRUE(json.ok()) << r.out;
    EXPECT_FALSE(json->Find("clean")->as_bool());
    const JsonValue& set = json->Find("filesets")->as_array().at(0);
    ASSERT_EQ(set.Find("failures")->as_array().size(), 1u);
    EXPECT_EQ(set.Find("failures")->as_array()[0].Find("what")->as_string(), half.What());
    EXPECT_FALSE(set.Find("repaired")->as_bool());
  }
  EXPECT_EQ(RecordedBytes(p.dir.path()), before);

  // A check-only scrub records nothing: the one above found a failure.
  EXPECT_EQ(*verified().Find("failures")->as_uint64(), 0u);
  r = Shell(Exlr8d() + " verify --repo exlr8/test" + c);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_THAT(r.out, HasSubstr("FAILED " + half.What()));
  EXPECT_THAT(r.out, HasSubstr("forgot"));
  EXPECT_EQ(RecordedBytes(p.dir.path()), before - half.length);
  JsonValue v = verified();
  ASSERT_TRUE(v.is_object());
  EXPECT_EQ(*v.Find("failures")->as_uint64(), 1u);
  const std::string first_at = v.Find("at")->as_string();
  EXPECT_GE(first_at, clean_at);
  EXPECT_THAT(Shell(Exlr8d() + " list" + c.substr(std::string(" --no-progress").size())).out,
              HasSubstr(first_at + " 1 failed"));
  r = Shell(Exlr8d() + " verify" + c);
  EXPECT_EQ(r.status, 0) << r.out;  // what is left is sound
  v = verified();
  ASSERT_TRUE(v.is_object());
  EXPECT_EQ(*v.Find("failures")->as_uint64(), 0u);
  EXPECT_GE(v.Find("at")->as_string(), first_at);
  EXPECT_THAT(Shell(Exlr8d() + " list" + c.substr(std::string(" --no-progress").size())).out,
              HasSubstr(v.Find("at")->as_string() + " clean"));

  r = Shell(Exlr8d() + " verify --repo nobody/nothing" + c);
  EXPECT_EQ(r.status, 3) << r.out;
  r = Shell(Exlr8d() + " verify --revision main" + c);
  EXPECT_EQ(r.status, 2) << r.out;
  // No cache there: said, and none is made.
  const fs::path none = p.dir.path() / "not-a-cache";
  r = Shell(Exlr8d() + " verify --no-progress --cache " + Quote(none.string()));
  EXPECT_EQ(r.status, 3) << r.out;
  EXPECT_THAT(r.out, HasSubstr("no exlr8d cache"));
  EXPECT_FALSE(fs::exists(none));
}

// A dense file recorded whole although the format forbids it (its SHA-256
// matches the hub's listing, so only the structural checks can tell):
// verify fails on it and forgets it, status says incomplete, and the next
// pull fetches it again and fails naming it.
class ScrubMalformedDenseTest : public ::testing::TestWithParam<testing::DenseDamage> {};

TEST_P(ScrubMalformedDenseTest, VerifyFailsForgetsItAndTheRankIsIncomplete) {
  const std::string path = "dense/exlr8-dense-003.safetensors";
  TempDir release, cache;
  CopyTinyWithDamagedDense(release.path(), path, GetParam());
  if (HasFatalFailure()) return;
  auto sim = StartSim(release.path());
  const std::string rank = " --repo exlr8/test --manifest home --tp 4 --rank 0";
  const std::string c = " --no-progress --cache " + Quote(cache.path().string());
  auto pull = [&] { return Shell(Exlr8d() + " pull --endpoint " + sim->hub_url() + rank + c); };
  ShellRun r = pull();  // records everything else; that file is recorded by hand below
  ASSERT_TRUE(r.status == 0 || r.status == 3) << r.out;
  {
    auto cache_now = Cache::Open(cache.path());
    ASSERT_TRUE(cache_now.ok()) << cache_now.status().ToString();
    auto files = FilesOfOnlyFileset(**cache_now);
    ASSERT_TRUE(files.ok()) << files.status().ToString();
    const std::vector<char> bytes = ReadAll(release.path() / path);
    bool found = false;
    for (const FileInfo& f : *files) {
      if (f.path != path) continue;
      found = true;
      ASSERT_EQ(f.size, bytes.size());
      ASSERT_TRUE((*cache_now)->WriteAt(f.id, 0, std::as_bytes(std::span(bytes))).ok());
      ASSERT_TRUE((*cache_now)->CommitVerified(std::vector<VerifiedExtent>{{f.id, 0, f.size, true}}).ok());
    }
    ASSERT_TRUE(found) << path;
  }
  r = Shell(Exlr8d() + " status" + rank + c.substr(std::string(" --no-progress").size()));
  ASSERT_EQ(r.status, 0) << "the cache is not as an exlr8d that checked only the hash left it: " << r.out;

  r = Shell(Exlr8d() + " verify --check-only" + c);
  EXPECT_EQ(r.status, 1) << r.out;
  r = Shell(Exlr8d() + " verify --json" + c);
  EXPECT_EQ(r.status, 1) << r.out;
  auto json = ParseJson(r.out);
  ASSERT_TRUE(json.ok()) << r.out;
  const JsonValue& set = json->Find("filesets")->as_array().at(0);
  ASSERT_EQ(set.Find("failures")->as_array().size(), 1u) << r.out;
  const JsonValue& failure = set.Find("failures")->as_array()[0];
  EXPECT_EQ(failure.Find("file")->as_string(), path);
  EXPECT_EQ(failure.Find("what")->as_string(), "whole file");
  EXPECT_THAT(failure.Find("error")->as_string(), HasSubstr(testing::DenseDamageMessage(GetParam())));
  EXPECT_EQ(*set.Find("bytes_forgotten")->as_uint64(), fs::file_size(release.path() / path));

  r = Shell(Exlr8d() + " status" + rank + c.substr(std::string(" --no-progress").size()));
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_THAT(r.out, HasSubstr("NOT complete"));
  EXPECT_THAT(r.out, HasSubstr(path));
  r = pull();  // fetches it again, and fails saying why
  EXPECT_EQ(r.status, 3) << r.out;
  EXPECT_THAT(r.out, HasSubstr("the release itself is malformed"));
  r = Shell(Exlr8d() + " verify" + c);
  EXPECT_EQ(r.status, 0) << r.out;  // what is recorded now is sound
}

INSTANTIATE_TEST_SUITE_P(All, ScrubMalformedDenseTest,
                         ::testing::Values(testing::DenseDamage::kPastEnd, testing::DenseDamage::kOverlap,
                                           testing::DenseDamage::kBlockChecksum),
                         [](const auto& param_info) {
                           return std::string(testing::DenseDamageName(param_info.param));
                         });

}  // namespace
}  // namespace exlr8
