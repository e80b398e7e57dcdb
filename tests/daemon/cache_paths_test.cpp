// Name checks of daemon/cache/cache_paths.h and the pure extent arithmetic of
// daemon/cache/extent_set.h: catalogues of must-accept / must-reject inputs.
#include "daemon/cache/cache_paths.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "daemon/cache/extent_set.h"

namespace exlr8 {
namespace {

struct PathCase {
  std::string path;
  bool accept;
  const char* why;
};

TEST(CachePathsTest, RepoPathCatalogue) {
  const std::string c255(255, 'a'), c256(256, 'a');
  std::string long_total;
  while (long_total.size() <= kMaxRepoPath) long_total += "abcdefgh/";
  long_total += "x";
  const PathCase cases[] = {
      {"model.safetensors", true, "plain"},
      {"experts/exlr8-layer-003.k3.safetensors", true, "nested"},
      {"a/b/c/d/e/f.json", true, "deep"},
      {".gitattributes", true, "dot file"},
      {"dir/..hidden", true, "dots inside a name"},
      {"a..b", true, "dots inside a name"},
      {"caf\xc3\xa9.txt", true, "UTF-8"},
      {c255, true, "255-byte component"},
      {"", false, "empty"},
      {"/etc/passwd", false, "absolute"},
      {"..", false, "dot-dot"},
      {"../x", false, "leading dot-dot"},
      {"a/../../x", false, "inner dot-dot"},
      {"a/..", false, "trailing dot-dot"},
      {".", false, "dot"},
      {"./a", false, "dot component"},
      {"a/./b", false, "inner dot component"},
      {"a//b", false, "empty component"},
      {"a/", false, "trailing slash"},
      {"a\\b", false, "backslash"},
      {"..\\..\\x", false, "windows traversal"},
      {std::string("a\0b", 3), false, "NUL"},
      {"a\nb", false, "newline"},
      {"a\x7f", false, "DEL"},
      {"a\x1b[2J", false, "escape sequence"},
      {c256, false, "256-byte component"},
      {"dir/" + c256, false, "256-byte inner component"},
      {long_total, false, "over 4096 bytes"},
  };
  for (const PathCase& c : cases) {
    const Status s = ValidateRepoPath(c.path);
    if (c.accept) {
      EXPECT_TRUE(s.ok()) << c.why << ": " << s.ToString();
    } else {
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.why << ": must reject '" << EscapeForMessage(c.path) << "'";
      EXPECT_NE(s.message().find("invalid repo path"), std::string::npos) << s.message();
    }
  }
  // The message names the path, escaped.
  EXPECT_NE(ValidateRepoPath("x/../y").message().find("'x/../y'"), std::string::npos);
  EXPECT_NE(ValidateRepoPath("a\nb").message().find("a\\x0Ab"), std::string::npos);
}

TEST(CachePathsTest, RepoIdCatalogue) {
  for (const char* ok : {"org/name", "Org-1/Model_2.5-7B", "a/b", "exlr8/tiny", "x.y/z"})
    EXPECT_TRUE(ValidateRepoId(ok).ok()) << ok << ": " << ValidateRepoId(ok).ToString();
  for (const char* bad : {"", "org", "org/", "/name", "org/name/extra", "../name", "org/..", "org/.hidden", "-org/x",
                          "org/na me", "org/na\\me", "org/n..m", "exlr8d.db/x", "o\x01/n", "org/n\xc3\xa9"}) {
    const Status s = ValidateRepoId(bad);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << "must reject '" << EscapeForMessage(bad) << "'";
  }
  EXPECT_EQ(ValidateRepoId(std::string(97, 'a') + "/x").code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(ValidateRepoId(std::string(96, 'a') + "/x").ok());
}

TEST(CachePathsTest, CommitCatalogue) {
  EXPECT_TRUE(ValidateCommit(std::string(40, 'a')).ok());
  EXPECT_TRUE(ValidateCommit(std::string(64, '0')).ok());
  for (const std::string& bad : {std::string(), std::string(39, 'a'), std::string(41, 'a'), std::string(40, 'A'),
                                 std::string(39, 'a') + "g", std::string(39, 'a') + "/", std::string("main")}) {
    EXPECT_EQ(ValidateCommit(bad).code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_TRUE(ValidateRevision("main").ok());
  EXPECT_TRUE(ValidateRevision("refs/pr/1").ok());
  EXPECT_EQ(ValidateRevision("").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateRevision("a\nb").code(), StatusCode::kInvalidArgument);
}

TEST(CachePathsTest, ParentDirs) {
  EXPECT_EQ(ParentDirs("f"), (std::vector<std::string>{""}));
  EXPECT_EQ(ParentDirs("a/b/f"), (std::vector<std::string>{"", "a", "a/b"}));
}

TEST(ExtentSetTest, NormalizeMergesOverlappingAndAdjacent) {
  EXPECT_EQ(NormalizeExtents({{20, 10}, {0, 10}, {10, 10}}), (std::vector<Extent>{{0, 30}}));
  EXPECT_EQ(NormalizeExtents({{0, 10}, {5, 2}}), (std::vector<Extent>{{0, 10}}));
  EXPECT_EQ(NormalizeExtents({{0, 10}, {11, 1}, {5, 0}}), (std::vector<Extent>{{0, 10}, {11, 1}}));
  EXPECT_EQ(NormalizeExtents({{8, 4}, {0, 9}}), (std::vector<Extent>{{0, 12}}));
  EXPECT_TRUE(NormalizeExtents({{3, 0}}).empty());
}

TEST(ExtentSetTest, CoverAndMissing) {
  const std::vector<Extent> have = {{10, 10}, {30, 5}};
  EXPECT_TRUE(ExtentsCover(have, {10, 10}));
  EXPECT_TRUE(ExtentsCover(have, {12, 3}));
  EXPECT_TRUE(ExtentsCover(have, {0, 0}));
  EXPECT_FALSE(ExtentsCover(have, {9, 2}));
  EXPECT_FALSE(ExtentsCover(have, {19, 2}));
  EXPECT_FALSE(ExtentsCover(have, {15, 20}));
  EXPECT_FALSE(ExtentsCover({}, {0, 1}));
  EXPECT_EQ(MissingExtents(have, {0, 40}), (std::vector<Extent>{{0, 10}, {20, 10}, {35, 5}}));
  EXPECT_EQ(MissingExtents(have, {12, 4}), (std::vector<Extent>{}));
  EXPECT_EQ(MissingExtents(have, {15, 17}), (std::vector<Extent>{{20, 10}}));
  EXPECT_EQ(MissingExtents({}, {5, 5}), (std::vector<Extent>{{5, 5}}));
  EXPECT_EQ(TotalLength(have), 15u);
}

TEST(ExtentSetTest, SubtractCutsEveryRemovedByte) {
  const std::vector<Extent> have = {{10, 10}, {30, 10}};
  EXPECT_EQ(SubtractExtents(have, {}), have);
  EXPECT_EQ(SubtractExtents(have, {{0, 100}}), (std::vector<Extent>{}));
  EXPECT_EQ(SubtractExtents(have, {{12, 2}}), (std::vector<Extent>{{10, 2}, {14, 6}, {30, 10}}));
  // One removal spanning the gap cuts the end of one and the start of the next.
  EXPECT_EQ(SubtractExtents(have, {{15, 20}}), (std::vector<Extent>{{10, 5}, {35, 5}}));
  // Unsorted, overlapping removals; a removal inside a hole changes nothing.
  EXPECT_EQ(SubtractExtents(have, {{38, 5}, {22, 3}, {10, 1}, {36, 3}}),
            (std::vector<Extent>{{11, 9}, {30, 6}}));
  EXPECT_EQ(SubtractExtents({}, {{1, 2}}), (std::vector<Extent>{}));
}

// Against a byte map: random extents and removals over 64 bytes.
TEST(ExtentSetTest, SubtractAgreesWithAByteMap) {
  std::uint64_t seed = 12345;
  auto next = [&seed](std::uint64_t n) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    return (seed >> 33) % n;
  };
  for (int round = 0; round < 2000; ++round) {
    std::vector<Extent> have_raw, remove;
    for (std::uint64_t i = next(5); i > 0; --i) have_raw.push_back({next(64), next(12)});
    for (std::uint64_t i = next(5); i > 0; --i) remove.push_back({next(64), next(12)});
    const std::vector<Extent> have = NormalizeExtents(have_raw);
    std::vector<bool> bytes(80, false);
    for (const Extent& e : have)
      for (std::uint64_t b = e.offset; b < e.end(); ++b) bytes[b] = true;
    for (const Extent& e : remove)
      for (std::uint64_t b = e.offset; b < e.end(); ++b) bytes[b] = false;
    std::vector<Extent> want;
    for (std::uint64_t b = 0; b < bytes.size(); ++b)
      if (bytes[b]) want.push_back({b, 1});
    ASSERT_EQ(SubtractExtents(have, remove), NormalizeExtents(want)) << "round " << round;
  }
}

}  // namespace
}  // namespace exlr8

namespace exlr8 {
namespace {

// Without --cache, EXLR8_CACHE, XDG_CACHE_HOME or HOME the answer is a clear
// error, never a cache relative to the working directory (another one in
// every directory); a relative XDG_CACHE_HOME is ignored, as the spec says.
TEST(CachePathsTest, CacheDirOrTheEnvironmentOrAClearError) {
  const auto saved = [](const char* name) -> std::optional<std::string> {
    const char* v = std::getenv(name);
    return v ? std::optional<std::string>(v) : std::nullopt;
  };
  const auto cache = saved("EXLR8_CACHE"), xdg = saved("XDG_CACHE_HOME"), home = saved("HOME");
  ::unsetenv("EXLR8_CACHE");
  ::unsetenv("XDG_CACHE_HOME");
  ::unsetenv("HOME");
  EXPECT_EQ(*CacheDirOr(std::string("given")), "given");
  const Result<std::string> none = CacheDirOr(std::nullopt);
  EXPECT_EQ(none.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(none.status().message().find("--cache"), std::string::npos) << none.status().message();
  ::setenv("HOME", "/home/u", 1);
  EXPECT_EQ(*CacheDirOr(std::nullopt), "/home/u/.cache/exlr8");
  ::setenv("XDG_CACHE_HOME", "relative", 1);
  EXPECT_EQ(*CacheDirOr(std::nullopt), "/home/u/.cache/exlr8");
  ::setenv("XDG_CACHE_HOME", "/xdg", 1);
  EXPECT_EQ(*CacheDirOr(std::nullopt), "/xdg/exlr8");
  ::setenv("EXLR8_CACHE", "/srv/exlr8", 1);
  EXPECT_EQ(*CacheDirOr(std::nullopt), "/srv/exlr8");
  for (const auto& [name, value] : {std::pair{"EXLR8_CACHE", cache}, {"XDG_CACHE_HOME", xdg}, {"HOME", home}}) {
    if (value) ::setenv(name, value->c_str(), 1);
    else ::unsetenv(name);
  }
}

}  // namespace
}  // namespace exlr8
