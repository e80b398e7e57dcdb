#include "format/plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <tuple>

#include "format/json.h"
#include "format/layout.h"
#include "format/plan_json.h"
#include "format/safetensors.h"
#include "tests/format/test_util.h"

namespace exlr8 {
namespace {

using ::exlr8::testing::ReadBytes;
using ::exlr8::testing::ReadText;
using ::exlr8::testing::TinyRelease;
using ::testing::HasSubstr;

// The fixture release read the way a client would, with the test doing the I/O.
struct Loaded {
  ReleaseInputs inputs;
  std::map<int, LayerGeometry> geometry;
};

Loaded LoadTiny() {
  Loaded l;
  for (auto& e : std::filesystem::recursive_directory_iterator(TinyRelease())) {
    if (!e.is_regular_file()) continue;
    ReleaseFile f{std::filesystem::relative(e.path(), TinyRelease()).generic_string(), e.file_size()};
    const ReleasePath rp = ClassifyReleasePath(f.path);
    auto bytes = ReadBytes(e.path());
    if (rp.kind == ReleaseFileKind::kExpertIndex) {
      SpanByteSource src(bytes, f.path);
      auto ix = ExpertIndex::Read(src, rp.layer);
      EXPECT_TRUE(ix.ok()) << ix.status().ToString();
      l.geometry[rp.layer] = LayerGeometry::Of(*ix);
      l.inputs.indexes.emplace(rp.layer, std::move(*ix));
    } else if (rp.kind == ReleaseFileKind::kExpertWidth) {
      auto n = SafetensorsHeaderSize(bytes, bytes.size(), f.path);
      EXPECT_TRUE(n.ok());
      l.inputs.width_header_bytes[f.path] = *n;
    }
    l.inputs.files.push_back(std::move(f));
  }
  return l;
}

Manifest LoadManifest(const Loaded& l, const std::string& name) {
  auto m = ParseManifest(ReadText(TinyRelease() / ManifestPath(name)), name, l.geometry);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return *m;
}

TEST(ShardingTest, SpecTableCountsAtGlmGeometry) {
  // Spec 13.1: per layer, per projection, halves per rank for N = 3..7 (E = 256, H = 16).
  for (int layer : {3, 40, 77}) {
    for (int n = 1; n <= 8; ++n) {
      std::vector<int> count(n);
      for (std::uint32_t e = 0; e < 256; ++e)
        for (std::uint32_t h = 0; h < 16; ++h) ++count[RankOfHalf(16, e, h, layer, n)];
      int total = 0;
      for (int r = 0; r < n; ++r) {
        total += count[r];
        EXPECT_GE(count[r], 4096 / n) << "N=" << n;
        EXPECT_LE(count[r], 4096 / n + 1) << "N=" << n;
      }
      EXPECT_EQ(total, 4096);
      if (n == 4) { EXPECT_EQ(count[0], 1024); }
      if (n == 3) { EXPECT_EQ(count[layer % 3], 1366); }
      if (n == 5) { EXPECT_EQ(count[layer % 5], 820); }
      if (n == 7) { EXPECT_EQ(count[layer % 7], 586); }
      if (n == 6) { EXPECT_EQ(count[layer % 6], 683); }
    }
  }
}

TEST(PlanTest, EveryTpDegreeCoversEveryHalfExactlyOnce) {
  Loaded l = LoadTiny();
  for (const char* name : {"home", "down1", "up1"}) {
    Manifest m = LoadManifest(l, name);
    for (int n = 1; n <= 8; ++n) {
      std::map<std::tuple<int, int, int, int>, int> owner;  // (L, e, p, h) -> rank
      std::uint64_t shared_seen = 0;
      for (int r = 0; r < n; ++r) {
        auto plan = MakePlan(l.inputs, m, {n, r});
        ASSERT_TRUE(plan.ok()) << plan.status().ToString();
        for (const auto& f : plan->files)
          for (const auto& rg : f.ranges) {
            if (rg.kind != PlanRange::Kind::kHalf) continue;
            const HalfTag& t = rg.tag;
            EXPECT_EQ(t.k, m.layers().at(t.layer).Width(t.expert, t.proj, t.half)) << rg.What();
            EXPECT_EQ(f.path, ExpertWidthPath(t.layer, t.k));
            if (t.expert == kSharedExpert) {
              ++shared_seen;
              continue;
            }
            EXPECT_EQ(RankOfHalf(16, t.expert, t.half, t.layer, n), r) << rg.What();
            auto key = std::make_tuple(t.layer, t.expert, static_cast<int>(t.proj), static_cast<int>(t.half));
            EXPECT_FALSE(owner.contains(key)) << rg.What() << " planned twice at N=" << n;
            owner[key] = r;
          }
      }
      EXPECT_EQ(owner.size(), 2u * 4 * 3 * 16) << name << " N=" << n;  // every routed half once
      EXPECT_EQ(shared_seen, 2u * 3 * 16 * n);                         // shared replicated on every rank
    }
  }
}

TEST(PlanTest, RangesMatchTheIndexAndHeadersComeFirst) {
  Loaded l = LoadTiny();
  Manifest m = LoadManifest(l, "home");
  auto plan = MakePlan(l.inputs, m, {4, 1});
  ASSERT_TRUE(plan.ok());
  std::set<std::string> whole;
  for (const auto& f : plan->files) {
    if (f.whole) {
      whole.insert(f.path);
      EXPECT_TRUE(f.ranges.empty());
      ASSERT_EQ(f.requests.size(), 1u);
      EXPECT_EQ(f.requests[0].length, f.size);
      continue;
    }
    ASSERT_FALSE(f.ranges.empty());
    EXPECT_EQ(f.ranges[0].kind, PlanRange::Kind::kHeader);
    EXPECT_EQ(f.ranges[0].offset, 0u);
    EXPECT_EQ(f.ranges[0].length, l.inputs.width_header_bytes.at(f.path));
    for (size_t i = 1; i < f.ranges.size(); ++i) {
      const PlanRange& r = f.ranges[i];
      EXPECT_GT(r.offset, f.ranges[i - 1].offset);
      const ExpertIndex& ix = l.inputs.indexes.at(r.tag.layer);
      auto he = ix.Half(r.tag.expert, r.tag.proj, r.tag.half, r.tag.k);
      ASSERT_TRUE(he.ok());
      EXPECT_EQ(r.offset, he->offset);
      EXPECT_EQ(r.length, he->length);
      EXPECT_EQ(r.xxh64, he->checksum);
      EXPECT_EQ(r.checksum_tail, ix.ChecksumTail(r.tag.expert, r.tag.proj, r.tag.half, r.tag.k));
    }
    // Requests cover exactly the ranges (gap 0 merges only adjacent ones).
    std::uint64_t ranged = 0, requested = 0;
    for (const auto& r : f.ranges) ranged += r.length;
    for (const auto& q : f.requests) requested += q.length;
    EXPECT_EQ(ranged, requested) << f.path;
  }
  for (const char* p : {"config.json", "manifests/exlr8-manifest-home.json", "manifests/exlr8-manifest-up1.json",
                        "experts/exlr8-layer-003.index.safetensors", "dense/exlr8-dense-000.safetensors",
                        "dense/exlr8-vocab.safetensors"})
    EXPECT_TRUE(whole.contains(p)) << p;
  EXPECT_EQ(plan->totals.routed_halves, 2u * 4 * 3 * 4);  // TP 4: 4 halves per expert per projection
  EXPECT_EQ(plan->totals.shared_halves, 2u * 3 * 16);
  EXPECT_LT(plan->totals.bytes, plan->totals.release_bytes);
}

TEST(PlanTest, BitsPerWeightAccounting) {
  Loaded l = LoadTiny();
  Manifest m = LoadManifest(l, "home");
  double sum = 0, count = 0;
  for (const auto& [layer, lw] : m.layers())
    for (std::uint32_t e = 0; e < lw.experts; ++e)
      for (std::uint32_t h = 0; h < lw.halves; ++h)
        for (Proj p : {Proj::kGate, Proj::kUp, Proj::kDown}) {
          sum += lw.Width(static_cast<int>(e), p, h);
          count += 1;
        }
  auto plan = MakePlan(l.inputs, m, {1, 0});
  ASSERT_TRUE(plan.ok());
  EXPECT_DOUBLE_EQ(plan->totals.manifest_bits_per_weight, sum / count);
  EXPECT_DOUBLE_EQ(plan->totals.rank_bits_per_weight, sum / count);  // TP 1: the rank holds everything
}

TEST(PlanTest, RejectsBadRankAndMissingFiles) {
  Loaded l = LoadTiny();
  Manifest m = LoadManifest(l, "home");
  EXPECT_EQ(MakePlan(l.inputs, m, {0, 0}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(MakePlan(l.inputs, m, {4, 4}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(MakePlan(l.inputs, m, {4, -1}).status().code(), StatusCode::kInvalidArgument);
  ReleaseInputs missing = l.inputs;
  std::erase_if(missing.files, [](const ReleaseFile& f) { return f.path == "experts/exlr8-layer-004.k3.safetensors"; });
  auto r = MakePlan(missing, m, {1, 0});
  EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
  EXPECT_THAT(r.status().message(), HasSubstr("release has no file experts/exlr8-layer-004.k3.safetensors"));
  ReleaseInputs big_header = l.inputs;
  big_header.width_header_bytes["experts/exlr8-layer-003.k2.safetensors"] = 1u << 24;
  r = MakePlan(big_header, m, {1, 0});
  EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
  EXPECT_THAT(r.status().message(), HasSubstr("exceeds the file size"));
}

TEST(PlanTest, DeferredHeadersCompleteToTheSamePlan) {
  Loaded l = LoadTiny();
  for (const char* name : {"home", "up1"}) {
    Manifest m = LoadManifest(l, name);
    for (std::uint64_t gap : {0ull, 1ull << 20}) {
      auto full = MakePlan(l.inputs, m, {3, 1, gap});
      ASSERT_TRUE(full.ok()) << full.status().ToString();
      EXPECT_FALSE(full->headers_pending);
      ReleaseInputs no_headers = l.inputs;
      no_headers.width_header_bytes.clear();  // not read when deferred
      auto deferred = MakePlan(no_headers, m, {3, 1, gap, /*defer_headers=*/true});
      ASSERT_TRUE(deferred.ok()) << deferred.status().ToString();
      EXPECT_TRUE(deferred->headers_pending);
      EXPECT_EQ(deferred->totals.header_bytes, 0u);
      EXPECT_EQ(deferred->totals.half_bytes, full->totals.half_bytes);
      if (gap == 0) {  // (with a gap, a header's request may also cover the gap to the first half)
        EXPECT_EQ(deferred->totals.bytes, full->totals.bytes - full->totals.header_bytes);
      }
      for (const PlanFile& f : deferred->files)
        for (const PlanRange& r : f.ranges) EXPECT_EQ(r.kind, PlanRange::Kind::kHalf) << f.path;

      ASSERT_TRUE(AddWidthHeaders(*deferred, l.inputs.width_header_bytes).ok());
      EXPECT_FALSE(deferred->headers_pending);
      EXPECT_EQ(PlanToJson(*deferred), PlanToJson(*full)) << name << " gap " << gap;
      EXPECT_EQ(AddWidthHeaders(*deferred, l.inputs.width_header_bytes).code(), StatusCode::kInternal);
    }
  }
}

TEST(PlanTest, DeferredHeadersAreCheckedWhenAdded) {
  Loaded l = LoadTiny();
  Manifest m = LoadManifest(l, "home");
  const std::string k2 = "experts/exlr8-layer-003.k2.safetensors";
  auto plan_with = [&](std::map<std::string, std::uint64_t> headers) {
    auto plan = MakePlan(l.inputs, m, {1, 0, 0, true});
    EXPECT_TRUE(plan.ok());
    Status s = AddWidthHeaders(*plan, headers);
    EXPECT_TRUE(plan->headers_pending) << "a failed completion leaves the plan pending";
    return s;
  };
  auto headers = l.inputs.width_header_bytes;
  headers.erase(k2);
  Status s = plan_with(headers);
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_THAT(s.message(), HasSubstr(k2 + ": header length not known"));
  headers = l.inputs.width_header_bytes;
  headers[k2] = 1u << 24;
  s = plan_with(headers);
  EXPECT_THAT(s.message(), HasSubstr(k2 + ": header length 16777216 exceeds the file size"));
  // A header reaching into the file's first half: the half is named, with its range.
  auto full = MakePlan(l.inputs, m, {1, 0});
  ASSERT_TRUE(full.ok());
  auto f = std::find_if(full->files.begin(), full->files.end(), [&](const PlanFile& pf) { return pf.path == k2; });
  ASSERT_NE(f, full->files.end());
  ASSERT_GE(f->ranges.size(), 2u);
  const std::uint64_t first_half = f->ranges[1].offset;
  headers = l.inputs.width_header_bytes;
  headers[k2] = first_half + 1;
  s = plan_with(headers);
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_THAT(s.message(), HasSubstr(f->ranges[1].What() + " at [" + std::to_string(first_half) + ", "));
  EXPECT_THAT(s.message(), HasSubstr("lies outside the data section [" + std::to_string(first_half + 1) + ", "));
}

TEST(PlanTest, CoalesceMergesOnlyWithinGap) {
  std::vector<ByteRun> runs = {{100, 50}, {0, 100}, {160, 40}, {300, 10}};
  EXPECT_EQ(CoalesceRuns(runs, 0), (std::vector<ByteRun>{{0, 150}, {160, 40}, {300, 10}}));
  EXPECT_EQ(CoalesceRuns(runs, 10), (std::vector<ByteRun>{{0, 200}, {300, 10}}));
  EXPECT_EQ(CoalesceRuns(runs, 100), (std::vector<ByteRun>{{0, 310}}));
  EXPECT_TRUE(CoalesceRuns({}, 5).empty());
}

TEST(PlanTest, JsonHasEveryRange) {
  Loaded l = LoadTiny();
  Manifest m = LoadManifest(l, "up1");
  auto plan = MakePlan(l.inputs, m, {3, 2});
  ASSERT_TRUE(plan.ok());
  auto json = ParseJson(PlanToJson(*plan));
  ASSERT_TRUE(json.ok()) << json.status().ToString();
  const JsonValue* files = json->Find("files");
  ASSERT_NE(files, nullptr);
  ASSERT_EQ(files->as_array().size(), plan->files.size());
  std::uint64_t halves = 0;
  for (const auto& f : files->as_array()) {
    const JsonValue* ranges = f.Find("ranges");
    if (!ranges) {
      EXPECT_TRUE(f.Find("whole")->as_bool());
      continue;
    }
    for (const auto& r : ranges->as_array()) {
      if (!r.Find("xxh64")) continue;
      ++halves;
      EXPECT_EQ(r.Find("xxh64")->as_string().size(), 16u);
      EXPECT_THAT(r.Find("what")->as_string(), ::testing::MatchesRegex("L[34] (e[0-3]|shared) (gate|up|down) h[0-9]+ K[234]"));
    }
  }
  EXPECT_EQ(halves, plan->totals.routed_halves + plan->totals.shared_halves);
  EXPECT_EQ(*json->Find("bytes")->as_uint64(), plan->totals.bytes);
}

}  // namespace
}  // namespace exlr8
