// A cache filled by a real pull from the hub simulator, and the ways the
// scrub's tests damage it: shared by scrub_test (the library) and
// verify_command_test (`exlr8d verify`).
#pragma once

#include <cstdint>
#include <fstream>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "daemon/cache/cache.h"
#include "format/plan.h"
#include "tests/daemon/cache_test_util.h"
#include "tests/daemon/pull_test_util.h"

namespace exlr8::testing {

// A pulled cache: of the tiny fixture, TP 3 rank 2 under home, unless told otherwise.
struct Pulled {
  fs::path release;
  std::unique_ptr<hubsim::HubSim> sim;
  TempDir dir;
  PullSummary summary;

  explicit Pulled(fs::path from = TinyRelease(), int tp = 3, int rank = 2)
      : release(std::move(from)), sim(StartSim(release)) {
    auto s = Pull(dir.path(), Options(*sim, "home", tp, rank));
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    if (s.ok()) summary = *std::move(s);
  }
  fs::path DataPath(const std::string& repo_path) const { return summary.root / repo_path; }
  // The first width file of the plan and its first half.
  const PlanFile& WidthFile(std::size_t nth = 0) const {
    for (const PlanFile& f : summary.plan.files)
      if (!f.whole && nth-- == 0) return f;
    ADD_FAILURE() << "no width file";
    return summary.plan.files.front();
  }
  static const PlanRange& FirstHalf(const PlanFile& f) {
    for (const PlanRange& r : f.ranges)
      if (r.kind == PlanRange::Kind::kHalf) return r;
    ADD_FAILURE() << f.path << " has no half";
    return f.ranges.front();
  }
};

inline void FlipByte(const fs::path& path, std::uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f) << path;
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x5a);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
  ASSERT_TRUE(f) << path;
}

inline std::uint64_t RecordedBytes(const fs::path& dir) {
  auto cache = Cache::OpenReadOnly(dir);
  EXPECT_TRUE(cache.ok()) << cache.status().ToString();
  if (!cache.ok()) return 0;
  auto bytes = (*cache)->RecordedBytes();
  EXPECT_TRUE(bytes.ok()) << bytes.status().ToString();
  return bytes.ok() ? *bytes : 0;
}

}  // namespace exlr8::testing
