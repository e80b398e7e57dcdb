// Helpers shared by the pull tests: a hub simulator per test, pull options
// tuned for fast retries, and the check that a cache holds exactly a plan.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "daemon/cache/cache.h"
#include "daemon/pull/pull_job.h"
#include "format/plan.h"
#include "format/release_writer.h"
#include "tests/format/dense_damage.h"
#include "tests/hubsim/hubsim.h"
#include "tests/support/files.h"

namespace exlr8 {

namespace fs = std::filesystem;

inline fs::path TinyRelease() { return fs::path(EXLR8_SHARED_DIR) / "fixtures" / "exlr8-tiny"; }

// A writable copy of the tiny fixture in `to`, whose dense or vocab file
// `path` is damaged as `damage` says (tests/format/dense_damage.h). A hub
// serving it lists the SHA-256 of the damaged bytes.
inline void CopyTinyWithDamagedDense(const fs::path& to, const std::string& path,
                                     testing::DenseDamage damage) {
  fs::copy(TinyRelease(), to, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  for (const auto& e : fs::recursive_directory_iterator(to))
    fs::permissions(e.path(), fs::perms::owner_write, fs::perm_options::add);
  std::ifstream in(to / path, std::ios::binary);
  std::vector<char> c((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> good(c.size());
  std::memcpy(good.data(), c.data(), c.size());
  auto bad = testing::DamageDenseFile(std::move(good), damage);
  ASSERT_TRUE(bad.ok()) << bad.status().ToString();
  std::ofstream out(to / path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bad->data()), static_cast<std::streamsize>(bad->size()));
  ASSERT_TRUE(out.good()) << to / path;
}

inline std::vector<char> ReadAll(const fs::path& p) {
  const std::string text = testing::ReadFileText(p);
  return std::vector<char>(text.begin(), text.end());
}

// A release that makes the choices section 14 of the spec leaves open
// otherwise than the shared fixture: U64 index, I64 checksums, I32 records,
// BF16/F16 vectors, widths 1/3/5 with the shared expert at 5 only, packed
// and shuffled halves, an odd geometry.
inline SynthOptions OtherChoicesRelease(std::uint64_t seed) {
  SynthOptions so;
  so.hidden = 384;
  so.halves = 4;
  so.experts = 5;
  so.moe_layers = {1, 2, 5};
  so.dense_layers = {0};
  so.num_hidden_layers = 6;
  so.widths = {1, 3, 5};
  so.shared_widths = {5};
  so.index_dtype = DType::kU64;
  so.checksum_dtype = DType::kI64;
  so.vector_dtype = DType::kBF16;
  so.block_vector_dtype = DType::kF16;
  so.record_dtype = DType::kI32;
  so.width_alignment = 1;
  so.width_leading_padding = 1000;  // the first half does not start the data
  so.half_order = HalfOrder::kShuffled;
  so.seed = seed;
  return so;
}

inline std::unique_ptr<hubsim::HubSim> StartSim(const fs::path& dir, const std::string& token = "",
                                         hubsim::FaultConfig faults = {},
                                         const std::vector<std::string>& repos = {"exlr8/test"}) {
  hubsim::HubSimOptions o;
  for (const std::string& repo : repos) o.repos.push_back({repo, dir.string()});
  o.token = token;
  o.faults = faults;
  o.tree_page_size = 7;  // exercise paging
  auto sim = hubsim::HubSim::Start(o);
  EXPECT_TRUE(sim.ok()) << sim.status().ToString();
  return std::move(*sim);
}

inline PullOptions Options(const hubsim::HubSim& sim, const std::string& manifest, int tp, int rank) {
  PullOptions o;
  o.repo = "exlr8/test";
  o.manifest = manifest;
  o.tp = tp;
  o.rank = rank;
  o.hub.endpoint = sim.hub_url();
  o.hub.token_from_environment = false;
  o.hub.use_env_proxy = false;
  o.hub.retry_base = std::chrono::milliseconds(5);
  o.fetch.max_parallel = 8;
  o.fetch.retry_base = std::chrono::milliseconds(5);
  o.fetch.retry_cap = std::chrono::milliseconds(100);
  o.fetch.max_attempts = 12;
  o.fetch.max_refetches = 6;
  o.commit_interval = std::chrono::milliseconds(50);
  return o;
}

inline Result<PullSummary> Pull(const fs::path& cache_dir, const PullOptions& o, CacheOptions co = {}) {
  EXLR8_ASSIGN_OR_RETURN(auto cache, Cache::Open(cache_dir, co));
  PullJob job(*cache, o);
  return job.Run();
}

// Runs the pull `o` into `cache_dir` on a thread of its own (this process
// owning the cache), calls `seen` every 100 ms until it returns true or 30 s
// pass, then cancels the pull and releases the cache. Returns whether `seen`
// returned true; `*result` gets the pull's result.
inline bool WhilePullRuns(const fs::path& cache_dir, const PullOptions& o, const std::function<bool()>& seen,
                          Result<PullSummary>* result) {
  auto owner = Cache::Open(cache_dir);
  EXPECT_TRUE(owner.ok()) << owner.status().ToString();
  if (!owner.ok()) return false;
  PullJob job(**owner, o);
  std::thread t([&] { *result = job.Run(); });
  bool ok = false;
  for (int i = 0; i < 300 && !ok; ++i) {
    ok = seen();
    if (!ok) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  job.Cancel();
  t.join();
  return ok;
}

// The cache holds exactly the plan's bytes: each recorded extent set equals
// the union of the plan's ranges (whole files: the file), every recorded
// byte equals the source, and nothing else was written (zeros elsewhere).
// `repo`: the fileset of that repo, in a cache that may hold others; empty:
// the cache's only fileset.
// A completed pull wrote every byte of its plan that was not already in
// the cache, once, and claimed space for exactly those bytes: what other
// pulls running at once and the budget counted as taken.
// The files of the cache's only fileset (an error when it holds another
// number of filesets).
inline Result<std::vector<FileInfo>> FilesOfOnlyFileset(Cache& cache) {
  EXLR8_ASSIGN_OR_RETURN(std::vector<FilesetInfo> sets, cache.ListFilesets());
  if (sets.size() != 1) return InternalError("expected one fileset, found " + std::to_string(sets.size()));
  return cache.ListFiles(sets[0].id);
}

inline void ExpectSpaceAccountingExact(const PullSummary& s) {
  EXPECT_TRUE(s.complete);
  EXPECT_EQ(s.bytes_claimed, s.bytes_written) << "claimed space differs from the bytes written";
  EXPECT_EQ(s.bytes_written + s.bytes_reused + s.bytes_resumed, s.bytes_planned)
      << "written " << s.bytes_written << ", reused " << s.bytes_reused << ", resumed " << s.bytes_resumed;
}

inline void ExpectCacheHoldsExactlyThePlan(const fs::path& cache_dir, const fs::path& source, const PullSummary& s,
                                           const std::string& repo = "") {
  auto cache = Cache::Open(cache_dir);
  ASSERT_TRUE(cache.ok()) << cache.status().ToString();
  auto filesets = (*cache)->ListFilesets();
  ASSERT_TRUE(filesets.ok());
  if (repo.empty()) {
    ASSERT_EQ(filesets->size(), 1u);
  }
  FilesetId fs_id = repo.empty() ? (*filesets)[0].id : 0;
  for (const FilesetInfo& set : *filesets)
    if (set.repo == repo) fs_id = set.id;
  ASSERT_NE(fs_id, 0) << repo << " is not in the cache";
  std::map<std::string, const PlanFile*> planned;
  for (const auto& pf : s.plan.files) planned[pf.path] = &pf;
  auto files = (*cache)->ListFiles(fs_id);
  ASSERT_TRUE(files.ok());
  for (const FileInfo& f : *files) {
    auto extents = (*cache)->VerifiedExtents(f.id);
    ASSERT_TRUE(extents.ok());
    auto it = planned.find(f.path);
    if (it == planned.end()) {
      EXPECT_TRUE(extents->empty()) << f.path << " is not in the plan but has verified bytes";
      continue;
    }
    const PlanFile& pf = *it->second;
    std::vector<ByteRun> want;
    if (pf.whole) {
      if (f.size) want.push_back({0, f.size});
      EXPECT_TRUE(f.whole_verified) << f.path;
    } else {
      std::vector<ByteRun> runs;
      for (const auto& r : pf.ranges) runs.push_back({r.offset, r.length});
      want = CoalesceRuns(runs, 0);
    }
    std::vector<ByteRun> got;
    for (const auto& e : *extents) got.push_back({e.offset, e.length});
    EXPECT_EQ(got, want) << f.path;
    if (f.size == 0) continue;
    auto path = (*cache)->DataPath(f.id);
    ASSERT_TRUE(path.ok());
    const auto cached = ReadAll(*path);
    const auto src = ReadAll(source / f.path);
    ASSERT_EQ(cached.size(), src.size()) << f.path;
    std::vector<bool> in_plan(cached.size(), false);
    for (const auto& r : want)
      for (std::uint64_t i = r.offset; i < r.end(); ++i) in_plan[i] = true;
    std::uint64_t wrong = 0, stray = 0;
    for (std::size_t i = 0; i < cached.size(); ++i) {
      if (in_plan[i]) wrong += cached[i] != src[i];
      else stray += cached[i] != 0;
    }
    EXPECT_EQ(wrong, 0u) << f.path << ": recorded bytes differ from the source";
    EXPECT_EQ(stray, 0u) << f.path << ": bytes outside the plan were written";
  }
}


}  // namespace exlr8
