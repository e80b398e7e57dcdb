// A rank's status from the cache alone (daemon/cache/cached_rank.h), on a
// real cache pulled from the hub simulator, and `exlr8d status` over it.
#include "daemon/cache/cached_rank.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include "format/json.h"
#include "format/layout.h"
#include "tests/daemon/cache_test_util.h"
#include "tests/daemon/pull_test_util.h"
#include "tests/daemon/shell_util.h"

namespace exlr8 {
namespace {

using ::exlr8::testing::TempDir;
using ::testing::HasSubstr;

Result<RankStatus> StatusOf(const fs::path& cache, const std::string& manifest, int tp, int rank,
                            const std::string& repo = "exlr8/test") {
  EXLR8_ASSIGN_OR_RETURN(auto view, Cache::OpenReadOnly(cache));
  return CheckRankStatus(*view, repo, "main", manifest, tp, rank);
}

// A pulled rank is complete and counts exactly what its pull planned; a
// rank never pulled is not, and names a half it lacks.
TEST(CachedRankTest, APulledRankIsCompleteAndAnotherIsNot) {
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  auto pulled = Pull(cache.path(), Options(*sim, "down1", 3, 2));
  ASSERT_TRUE(pulled.ok()) << pulled.status().ToString();
  auto st = StatusOf(cache.path(), "down1", 3, 2);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_TRUE(st->complete());
  EXPECT_EQ(st->commit, pulled->commit);
  EXPECT_EQ(st->bytes_planned, pulled->bytes_planned);
  EXPECT_EQ(st->bytes_verified, pulled->bytes_planned);
  EXPECT_EQ(st->halves, pulled->plan.totals.routed_halves + pulled->plan.totals.shared_halves);
  EXPECT_GT(st->files, 0u);
  EXPECT_GT(st->headers, 0u);
  EXPECT_EQ(st->first_missing, "");

  auto other = StatusOf(cache.path(), "down1", 3, 0);
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  EXPECT_FALSE(other->complete());
  EXPECT_EQ(other->files_verified, other->files);  // every rank fetches every whole file
  EXPECT_LT(other->halves_verified, other->halves);
  EXPECT_THAT(other->first_missing, HasSubstr("is not verified in the cache"));

  EXPECT_EQ(StatusOf(cache.path(), "down1", 3, 2, "exlr8/never").status().code(), StatusCode::kNotFound);
  EXPECT_THAT(StatusOf(cache.path(), "nosuch", 3, 2).status().message(), HasSubstr("manifest 'nosuch'"));
  EXPECT_EQ(StatusOf(cache.path(), "down1", 3, 3).status().code(), StatusCode::kInvalidArgument);
}

// What a scrub forgets (a header, a whole file) makes the rank incomplete
// again, each counted where it belongs.
TEST(CachedRankTest, ForgottenBytesMakeTheRankIncomplete) {
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  auto pulled = Pull(cache.path(), Options(*sim, "home", 2, 1));
  ASSERT_TRUE(pulled.ok()) << pulled.status().ToString();
  {
    auto c = Cache::Open(cache.path());
    ASSERT_TRUE(c.ok());
    const FilesetId set = *(*c)->PutFileset("exlr8/test", "main", pulled->commit);
    std::vector<VerifiedExtent> forget;
    const std::vector<FileInfo> files = *(*c)->ListFiles(set);
    for (const FileInfo& f : files) {
      if (ClassifyReleasePath(f.path).kind == ReleaseFileKind::kExpertWidth && forget.empty() && f.bytes_cached > 0)
        forget.push_back({f.id, 0, 8});  // the header's first bytes: its size is no longer known
    }
    ASSERT_EQ(forget.size(), 1u);
    ASSERT_TRUE((*c)->ForgetExtents(forget).ok());
  }
  auto st = StatusOf(cache.path(), "home", 2, 1);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_FALSE(st->complete());
  EXPECT_EQ(st->headers_verified + 1, st->headers);
  EXPECT_EQ(st->halves_verified, st->halves);
  EXPECT_THAT(st->first_missing, HasSubstr("the header of "));
  // The next pull fetches it again, and the rank is complete.
  ASSERT_TRUE(Pull(cache.path(), Options(*sim, "home", 2, 1)).ok());
  EXPECT_TRUE(StatusOf(cache.path(), "home", 2, 1)->complete());
}

// A pull just begun has no verified index files yet: the rank is not
// complete, not an error (GET /v1/ranks would say 404 "never pulled").
TEST(CachedRankTest, ARankWhoseIndexIsNotThereYetIsIncomplete) {
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  auto pulled = Pull(cache.path(), Options(*sim, "home", 2, 1));
  ASSERT_TRUE(pulled.ok()) << pulled.status().ToString();
  std::string index;
  {
    auto c = Cache::Open(cache.path());
    ASSERT_TRUE(c.ok());
    const FilesetId set = *(*c)->PutFileset("exlr8/test", "main", pulled->commit);
    const std::vector<FileInfo> files = *(*c)->ListFiles(set);
    for (const FileInfo& f : files)
      if (index.empty() && ClassifyReleasePath(f.path).kind == ReleaseFileKind::kExpertIndex) {
        index = f.path;
        ASSERT_TRUE((*c)->ForgetExtents(std::vector<VerifiedExtent>{{f.id, 0, f.size}}).ok());
      }
  }
  auto st = StatusOf(cache.path(), "home", 2, 1);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_FALSE(st->planned);
  EXPECT_FALSE(st->complete());
  EXPECT_THAT(st->first_missing, HasSubstr(index + " (which the plan is made from) is not verified"));
  const ShellRun r = Shell(Exlr8d() + " status --repo exlr8/test --manifest home --tp 2 --rank 1 --cache " +
                           Quote(cache.path().string()));
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_THAT(r.out, HasSubstr("NOT complete"));
  // A manifest the release does not have is still an error.
  EXPECT_EQ(StatusOf(cache.path(), "nosuch", 2, 1).status().code(), StatusCode::kNotFound);

  // Pulled again, then its manifest changed in the cache: not there (its
  // hash is checked), rather than an error.
  ASSERT_TRUE(Pull(cache.path(), Options(*sim, "home", 2, 1)).ok());
  ASSERT_TRUE(StatusOf(cache.path(), "home", 2, 1)->complete());
  const fs::path manifests = cache.path() / "exlr8/test" / pulled->commit / "manifests";
  fs::copy_file(manifests / "exlr8-manifest-up1.json", manifests / "exlr8-manifest-home.json",
                fs::copy_options::overwrite_existing);
  auto swapped = StatusOf(cache.path(), "home", 2, 1);
  ASSERT_TRUE(swapped.ok()) << swapped.status().ToString();
  EXPECT_FALSE(swapped->complete());
  EXPECT_THAT(swapped->first_missing, HasSubstr("exlr8-manifest-home.json in the cache: git SHA-1"));
}

// `exlr8d status`: 0 complete, 1 not, 3 never pulled; --json as the API's.
TEST(CachedRankTest, TheStatusCommandSaysWhetherARankIsThere) {
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  auto pulled = Pull(cache.path(), Options(*sim, "home", 4, 1));
  ASSERT_TRUE(pulled.ok()) << pulled.status().ToString();
  const std::string status = Exlr8d() + " status --cache " + Quote(cache.path().string()) +
                             " --repo exlr8/test --manifest home --tp 4";
  ShellRun done = Shell(status + " --rank 1");
  EXPECT_EQ(done.status, 0) << done.out;
  EXPECT_THAT(done.out, HasSubstr("TP 4 rank 1: complete"));
  ShellRun missing = Shell(status + " --rank 2");
  EXPECT_EQ(missing.status, 1) << missing.out;
  EXPECT_THAT(missing.out, HasSubstr("NOT complete"));
  EXPECT_THAT(missing.out, HasSubstr("first missing"));
  ShellRun json = Shell(status + " --rank 1 --json");
  ASSERT_EQ(json.status, 0) << json.out;
  auto v = ParseJson(json.out);
  ASSERT_TRUE(v.ok()) << json.out;
  EXPECT_TRUE(v->Find("complete")->as_bool());
  EXPECT_EQ(*v->Find("bytes_verified")->as_uint64(), pulled->bytes_planned);
  EXPECT_TRUE(v->Find("first_missing")->is_null());
  EXPECT_EQ(Shell(Exlr8d() + " status --cache " + Quote(cache.path().string()) +
                  " --repo exlr8/other --manifest home --tp 4 --rank 1")
                .status,
            3);
  EXPECT_EQ(Shell(status + " --rank 4").status, 2);  // not a rank of TP 4
}

// The first file of the fileset of `kind` with recorded bytes, as the
// rank's pull left it.
FileInfo FirstCachedFile(const fs::path& cache, ReleaseFileKind kind) {
  auto view = Cache::OpenReadOnly(cache);
  EXPECT_TRUE(view.ok()) << view.status().ToString();
  if (!view.ok()) return {};
  auto set = FindPulledFileset(**view, "exlr8/test", "main");
  EXPECT_TRUE(set.ok()) << set.status().ToString();
  if (!set.ok()) return {};
  auto files = (*view)->ListFiles(set->id);
  EXPECT_TRUE(files.ok()) << files.status().ToString();
  if (!files.ok()) return {};
  for (const FileInfo& f : *files)
    if (ClassifyReleasePath(f.path).kind == kind && f.bytes_cached > 0) return f;
  ADD_FAILURE() << "no cached file of that kind";
  return {};
}

// `exlr8d status` agrees with verify, the next pull and the stage about a
// cached width file cut short (`truncate -s 1000`): it is not "complete".
// The status looks at each file's size now: a file truncated,
// grown or deleted since the pull makes the rank incomplete, named with
// what changed, and the next pull mends it.
TEST(CachedRankTest, AFileTruncatedGrownOrDeletedSinceThePullMakesTheRankIncomplete) {
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  auto pulled = Pull(cache.path(), Options(*sim, "home", 2, 1));
  ASSERT_TRUE(pulled.ok()) << pulled.status().ToString();
  const FileInfo width = FirstCachedFile(cache.path(), ReleaseFileKind::kExpertWidth);
  ASSERT_GT(width.size, 1000u);
  const fs::path width_path = pulled->root / width.path;
  ASSERT_EQ(::truncate(width_path.c_str(), 1000), 0);

  const std::string status = Exlr8d() + " status --cache " + Quote(cache.path().string()) +
                             " --repo exlr8/test --manifest home --tp 2 --rank 1";
  const ShellRun truncated = Shell(status);
  EXPECT_EQ(truncated.status, 1) << truncated.out;
  EXPECT_THAT(truncated.out, HasSubstr("NOT complete"));
  EXPECT_THAT(truncated.out, HasSubstr("changed        1 file not as pulled"));
  EXPECT_THAT(truncated.out,
              HasSubstr("first missing  " + width.path + " is 1000 bytes in the cache directory, " +
                        "listed " + std::to_string(width.size) + " (truncated since it was pulled)"));
  auto st = StatusOf(cache.path(), "home", 2, 1);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_FALSE(st->complete());
  EXPECT_EQ(st->files_changed, 1u);
  EXPECT_LT(st->bytes_verified, pulled->bytes_planned);  // what lay past byte 1000 is gone
  EXPECT_LT(st->halves_verified, st->halves);
  const ShellRun json = Shell(status + " --json");
  EXPECT_EQ(json.status, 1) << json.out;
  auto v = ParseJson(json.out);
  ASSERT_TRUE(v.ok()) << json.out;
  EXPECT_FALSE(v->Find("complete")->as_bool());
  EXPECT_EQ(*v->Find("files_changed")->as_uint64(), 1u);
  EXPECT_THAT(v->Find("first_missing")->as_string(), HasSubstr(width.path + " is 1000 bytes"));

  // A whole file deleted besides.
  const FileInfo dense = FirstCachedFile(cache.path(), ReleaseFileKind::kDense);
  ASSERT_TRUE(fs::remove(pulled->root / dense.path));
  st = StatusOf(cache.path(), "home", 2, 1);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_FALSE(st->complete());
  EXPECT_EQ(st->files_changed, 2u);
  EXPECT_EQ(st->files_verified + 1, st->files);

  // The next pull forgets what was lost and fetches it again.
  auto again = Pull(cache.path(), Options(*sim, "home", 2, 1));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_GT(again->bytes_fetched, 0u);
  const ShellRun mended = Shell(status);
  EXPECT_EQ(mended.status, 0) << mended.out;
  EXPECT_THAT(mended.out, HasSubstr("TP 2 rank 1: complete"));

  // Grown past its listed size: every recorded byte is still there, but
  // the stage refuses a file of another size. The next pull cuts it back.
  ASSERT_EQ(::truncate(width_path.c_str(), static_cast<off_t>(width.size + 1)), 0);
  st = StatusOf(cache.path(), "home", 2, 1);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_FALSE(st->complete());
  EXPECT_EQ(st->files_changed, 1u);
  EXPECT_EQ(st->bytes_verified, pulled->bytes_planned);
  EXPECT_THAT(st->first_missing, HasSubstr(width.path + " is " + std::to_string(width.size + 1) +
                                           " bytes in the cache directory, listed " +
                                           std::to_string(width.size) + " (grown since it was pulled)"));
  ASSERT_TRUE(Pull(cache.path(), Options(*sim, "home", 2, 1)).ok());
  EXPECT_EQ(fs::file_size(width_path), width.size);
  EXPECT_EQ(Shell(status).status, 0);
}

}  // namespace
}  // namespace exlr8
