#include "format/planner_input.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

#include "format/layout.h"
#include "format/safetensors.h"
#include "tests/format/test_util.h"

namespace exlr8 {
namespace {

using ::exlr8::testing::ReadBytes;
using ::exlr8::testing::TinyRelease;
using ::testing::HasSubstr;

// The tiny fixture release in memory: the test is the I/O.
struct MemoryRelease {
  std::vector<ReleaseFile> files;  // sorted by path
  std::map<std::string, std::vector<std::byte>> bytes;
};

MemoryRelease LoadTinyRelease() {
  MemoryRelease r;
  for (auto& e : std::filesystem::recursive_directory_iterator(TinyRelease())) {
    if (!e.is_regular_file()) continue;
    ReleaseFile f{std::filesystem::relative(e.path(), TinyRelease()).generic_string(), e.file_size()};
    r.bytes[f.path] = ReadBytes(e.path());
    r.files.push_back(std::move(f));
  }
  std::sort(r.files.begin(), r.files.end(),
            [](const ReleaseFile& a, const ReleaseFile& b) { return a.path < b.path; });
  return r;
}

std::function<Result<std::unique_ptr<ByteSource>>(const ReleaseFile&)> OpenFrom(
    const MemoryRelease& r, std::vector<std::string>* opened) {
  return [&r, opened](const ReleaseFile& f) -> Result<std::unique_ptr<ByteSource>> {
    if (opened) opened->push_back(f.path);
    auto it = r.bytes.find(f.path);
    if (it == r.bytes.end()) return NotFoundError(f.path);
    return std::unique_ptr<ByteSource>(std::make_unique<SpanByteSource>(it->second, f.path));
  };
}

std::string Text(const std::vector<std::byte>& b) {
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

TEST(PlannerInputTest, ReadsEveryIndexAndHeaderAndTheManifestInFileOrder) {
  const MemoryRelease r = LoadTinyRelease();
  std::vector<std::string> opened;
  bool indexes_read_before_manifest = false;
  PlannerSources sources;
  sources.open_index = OpenFrom(r, &opened);
  sources.open_width = OpenFrom(r, &opened);
  sources.manifest_name = "home";
  sources.manifest_text = [&]() -> Result<std::string> {
    indexes_read_before_manifest = !opened.empty();
    return Text(r.bytes.at(ManifestPath("home")));
  };
  Result<PlannerInput> in = AssemblePlannerInput(r.files, sources);
  ASSERT_TRUE(in.ok()) << in.status().ToString();
  EXPECT_TRUE(indexes_read_before_manifest);
  EXPECT_TRUE(std::is_sorted(opened.begin(), opened.end()));

  std::size_t indexes = 0, widths = 0;
  for (const ReleaseFile& f : r.files) {
    const ReleasePath rp = ClassifyReleasePath(f.path);
    if (rp.kind == ReleaseFileKind::kExpertIndex) {
      ++indexes;
      ASSERT_TRUE(in->release.indexes.contains(rp.layer)) << f.path;
      ASSERT_TRUE(in->geometry.contains(rp.layer)) << f.path;
      ASSERT_TRUE(in->index_sources.contains(f.path)) << f.path;
      EXPECT_EQ(in->index_sources.at(f.path)->size(), f.size);
    } else if (rp.kind == ReleaseFileKind::kExpertWidth) {
      ++widths;
      auto n = SafetensorsHeaderSize(r.bytes.at(f.path), f.size, f.path);
      ASSERT_TRUE(n.ok());
      EXPECT_EQ(in->release.width_header_bytes.at(f.path), *n) << f.path;
    }
  }
  ASSERT_GT(indexes, 0u);
  ASSERT_GT(widths, 0u);
  EXPECT_EQ(in->release.indexes.size(), indexes);
  EXPECT_EQ(in->release.width_header_bytes.size(), widths);
  EXPECT_EQ(in->release.files.size(), r.files.size());
  EXPECT_EQ(opened.size(), indexes + widths);
  ASSERT_TRUE(in->manifest.has_value());

  // What it assembled plans a rank.
  PlanOptions po;
  po.tp = 2;
  po.rank = 1;
  Result<Plan> plan = MakePlan(in->release, *in->manifest, po);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_GT(plan->totals.half_bytes, 0u);
}

TEST(PlannerInputTest, LeavesHeadersAndManifestToTheCallerWhenNotAsked) {
  const MemoryRelease r = LoadTinyRelease();
  std::vector<std::string> opened;
  PlannerSources sources;
  sources.open_index = OpenFrom(r, &opened);
  Result<PlannerInput> in = AssemblePlannerInput(r.files, sources);
  ASSERT_TRUE(in.ok()) << in.status().ToString();
  EXPECT_TRUE(in->release.width_header_bytes.empty());
  EXPECT_FALSE(in->manifest.has_value());
  EXPECT_FALSE(in->release.indexes.empty());
  for (const std::string& path : opened)
    EXPECT_EQ(ClassifyReleasePath(path).kind, ReleaseFileKind::kExpertIndex) << path;
}

TEST(PlannerInputTest, NamesTheDamagedIndexFile) {
  MemoryRelease r = LoadTinyRelease();
  std::string index_path;
  for (const ReleaseFile& f : r.files)
    if (ClassifyReleasePath(f.path).kind == ReleaseFileKind::kExpertIndex) index_path = f.path;
  ASSERT_FALSE(index_path.empty());
  r.bytes[index_path].resize(4);  // cut short
  PlannerSources sources;
  sources.open_index = OpenFrom(r, nullptr);
  bool manifest_asked = false;
  sources.manifest_text = [&]() -> Result<std::string> {
    manifest_asked = true;
    return std::string("{}");
  };
  Result<PlannerInput> in = AssemblePlannerInput(r.files, sources);
  ASSERT_FALSE(in.ok());
  EXPECT_THAT(in.status().ToString(), HasSubstr(index_path));
  EXPECT_FALSE(manifest_asked);
}

TEST(PlannerInputTest, PassesTheCallersErrorsOn) {
  const MemoryRelease r = LoadTinyRelease();
  PlannerSources sources;
  sources.open_index = [](const ReleaseFile& f) -> Result<std::unique_ptr<ByteSource>> {
    return IOError(f.path + ": disk on fire");
  };
  Result<PlannerInput> in = AssemblePlannerInput(r.files, sources);
  ASSERT_FALSE(in.ok());
  EXPECT_EQ(in.status().code(), StatusCode::kIOError);
  EXPECT_THAT(in.status().message(), HasSubstr("disk on fire"));

  sources.open_index = OpenFrom(r, nullptr);
  sources.manifest_name = "home";
  sources.manifest_text = []() -> Result<std::string> {
    return NotFoundError("manifest 'home' is not there");
  };
  in = AssemblePlannerInput(r.files, sources);
  ASSERT_FALSE(in.ok());
  EXPECT_EQ(in.status().code(), StatusCode::kNotFound);

  sources.manifest_text = []() -> Result<std::string> { return std::string("not json"); };
  in = AssemblePlannerInput(r.files, sources);
  ASSERT_FALSE(in.ok());
  EXPECT_THAT(in.status().ToString(), HasSubstr("home"));
}

TEST(PlannerInputTest, ATooShortWidthFileIsCorruptionNamingIt) {
  MemoryRelease r = LoadTinyRelease();
  std::string width_path;
  for (const ReleaseFile& f : r.files)
    if (ClassifyReleasePath(f.path).kind == ReleaseFileKind::kExpertWidth) width_path = f.path;
  ASSERT_FALSE(width_path.empty());
  r.bytes[width_path].resize(5);
  PlannerSources sources;
  sources.open_index = OpenFrom(r, nullptr);
  sources.open_width = OpenFrom(r, nullptr);
  Result<PlannerInput> in = AssemblePlannerInput(r.files, sources);
  ASSERT_FALSE(in.ok());
  EXPECT_EQ(in.status().code(), StatusCode::kCorruption);
  EXPECT_THAT(in.status().message(), HasSubstr(width_path + ": 5 bytes, too short"));
}

TEST(PlannerInputTest, RequiresAnIndexOpener) {
  Result<PlannerInput> in = AssemblePlannerInput({}, PlannerSources{});
  ASSERT_FALSE(in.ok());
  EXPECT_EQ(in.status().code(), StatusCode::kInternal);
}

}  // namespace
}  // namespace exlr8
