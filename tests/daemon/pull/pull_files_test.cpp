#include "daemon/pull/pull_files.h"

#include <gtest/gtest.h>

#include <string>

#include "tests/daemon/cache_test_util.h"

namespace exlr8 {
namespace {

using testing::kCommitA;
using testing::Pattern;
using testing::TempDir;

// SHA-256 of no bytes.
constexpr const char* kEmptySha256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
constexpr const char* kSomeSha256 = "0000000000000000000000000000000000000000000000000000000000000001";

struct Fixture {
  TempDir tmp;
  std::unique_ptr<Cache> cache;
  FilesetId fileset = 0;
  JobCounters counters;
  std::unique_ptr<PullFiles> files;

  explicit Fixture(const std::vector<NewFile>& listing) {
    Result<std::unique_ptr<Cache>> opened = Cache::Open(tmp.path());
    EXPECT_TRUE(opened.ok()) << opened.status().ToString();
    cache = std::move(opened).value();
    fileset = *cache->PutFileset("org/model", "main", kCommitA);
    EXPECT_TRUE(cache->PutFiles(fileset, listing).ok());
    files = std::make_unique<PullFiles>(*cache, counters);
    files->SetFileset(fileset, std::string("org/model@") + kCommitA);
    EXPECT_TRUE(files->Refresh().ok());
  }
  FileId Id(const std::string& path) const { return (*files->File(path))->id; }
  // Writes and records [offset, offset + length) of `path` as verified.
  void Verify(const std::string& path, std::uint64_t offset, std::uint64_t length) {
    const FileId f = Id(path);
    ASSERT_TRUE(cache->WriteAt(f, offset, Pattern(f, offset, length)).ok());
    const VerifiedExtent e{f, offset, length};
    ASSERT_TRUE(cache->CommitVerified({&e, 1}).ok());
  }
};

TEST(PullFilesTest, AFileNotListedIsNotFoundNamingTheFileset) {
  Fixture fx({{"config.json", 10, std::nullopt, std::string(40, 'a')}});
  Result<const FileInfo*> f = fx.files->File("nope.json");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(f.status().message(), std::string("org/model@") + kCommitA + " has no file nope.json");
  EXPECT_TRUE(fx.files->File("config.json").ok());
}

TEST(PullFilesTest, MissingWholeFilesSkipsVerifiedOnesAndMarksEmptyOnes) {
  Fixture fx({{"a.bin", 1000, std::string(kSomeSha256), std::nullopt},
              {"b.bin", 500, std::string(kSomeSha256), std::nullopt},
              {"empty.txt", 0, std::string(kEmptySha256), std::nullopt}});
  ASSERT_TRUE(fx.cache->WriteAt(fx.Id("b.bin"), 0, Pattern(fx.Id("b.bin"), 0, 500)).ok());
  ASSERT_TRUE(fx.cache->MarkWholeFileVerified(fx.Id("b.bin")).ok());
  ASSERT_TRUE(fx.files->Refresh().ok());
  std::uint64_t reused = 0;
  Result<std::vector<WholeFileTarget>> missing =
      fx.files->MissingWholeFiles({"a.bin", "b.bin", "empty.txt"}, /*offline=*/false, &reused);
  ASSERT_TRUE(missing.ok()) << missing.status().ToString();
  ASSERT_EQ(missing->size(), 1u);
  EXPECT_EQ((*missing)[0].path, "a.bin");
  EXPECT_EQ((*missing)[0].size, 1000u);
  EXPECT_EQ((*missing)[0].resume_from, 0u);
  EXPECT_EQ(reused, 500u);
  ASSERT_TRUE(fx.files->Refresh().ok());
  EXPECT_TRUE((*fx.files->File("empty.txt"))->whole_verified);  // checked against its hash and marked
}

TEST(PullFilesTest, MissingWholeFilesRefusesWhatCannotBeVerified) {
  Fixture fx({{"nohash.bin", 10, std::nullopt, std::nullopt},
              {"empty.txt", 0, std::string(kSomeSha256), std::nullopt}});
  std::uint64_t reused = 0;
  Result<std::vector<WholeFileTarget>> r = fx.files->MissingWholeFiles({"nohash.bin"}, false, &reused);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
  EXPECT_NE(r.status().message().find("nohash.bin: the hub lists no sha256"), std::string::npos);
  r = fx.files->MissingWholeFiles({"empty.txt"}, false, &reused);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("empty file whose listed hash is not the empty content's"),
            std::string::npos);
}

TEST(PullFilesTest, CountMissingCountsBytesAndRequestsNotVerified) {
  Fixture fx({{"whole.bin", 300, std::string(kSomeSha256), std::nullopt},
              {"width.safetensors", 1000, std::string(kSomeSha256), std::nullopt}});
  Plan plan;
  PlanFile whole;
  whole.path = "whole.bin";
  whole.size = 300;
  whole.whole = true;
  PlanFile width;
  width.path = "width.safetensors";
  width.size = 1000;
  for (std::uint64_t offset : {100u, 400u, 700u}) {
    PlanRange r;
    r.offset = offset;
    r.length = 200;
    width.ranges.push_back(r);
  }
  plan.files = {whole, width};
  fx.Verify("width.safetensors", 100, 200);  // the first range, whole
  fx.Verify("width.safetensors", 400, 50);   // a part of the second
  PullSummary sum;
  ASSERT_TRUE(fx.files->CountMissing(plan, &sum).ok());
  EXPECT_EQ(sum.bytes_missing, 300u + 150u + 200u);
  EXPECT_EQ(sum.ranges_missing, 3u);  // the whole file, the second and third ranges
  EXPECT_FALSE(sum.complete);

  fx.Verify("width.safetensors", 400, 500);
  ASSERT_TRUE(fx.cache->WriteAt(fx.Id("whole.bin"), 0, Pattern(fx.Id("whole.bin"), 0, 300)).ok());
  ASSERT_TRUE(fx.cache->MarkWholeFileVerified(fx.Id("whole.bin")).ok());
  ASSERT_TRUE(fx.files->CountMissing(plan, &sum).ok());  // reads the listing again
  EXPECT_EQ(sum.bytes_missing, 0u);
  EXPECT_EQ(sum.ranges_missing, 0u);
  EXPECT_TRUE(sum.complete);
}

}  // namespace
}  // namespace exlr8
