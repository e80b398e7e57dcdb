// examples/moe_layer against the reference, end to end: every rank of the
// shared fixture pulled from the hub simulator into a real cache, each
// staged in host memory by the real `exlr8d-stage --memory host --hold
// SOCK`, the C++ example (linked with libexlr8client alone) run over the
// sockets, and tests/examples/moe_reference (format/'s decoder on the
// release files, checked against the golden weights) comparing its outputs.
// With EXLR8_MOE_PYTHON set (the python-labelled ctest moe_layer_python,
// scripts/moe_layer_python_test.sh) the Python example runs against the
// same holders.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tests/daemon/cache_test_util.h"
#include "tests/daemon/child_process.h"
#include "tests/daemon/pull_test_util.h"

namespace exlr8 {
namespace {

using ::exlr8::testing::TempDir;

// Every rank of TP `tp` of the fixture's "home" manifest, pulled and held.
struct HeldFileset {
  std::unique_ptr<TempDir> cache, run;
  std::vector<std::string> sockets;  // by rank
  std::vector<std::unique_ptr<ChildProcess>> holders;
  std::string error;  // empty when every rank is held

  HeldFileset(const hubsim::HubSim& sim, int tp)
      : cache(std::make_unique<TempDir>()), run(std::make_unique<TempDir>()) {
    for (int r = 0; r < tp; ++r) {
      auto pulled = Pull(cache->path(), Options(sim, "home", tp, r));
      if (!pulled.ok()) {
        error = "pull of rank " + std::to_string(r) + ": " + pulled.status().ToString();
        return;
      }
      sockets.push_back((run->path() / ("rank" + std::to_string(r) + ".sock")).string());
      holders.push_back(std::make_unique<ChildProcess>(
          "exlr8d-stage",
          std::vector<std::string>{"--cache", cache->path().string(), "--repo", "exlr8/test", "--manifest",
                                   "home", "--tp", std::to_string(tp), "--rank", std::to_string(r),
                                   "--memory", "host", "--hold", sockets.back(), "--release-wait", "20"},
          (run->path() / "stage.err").string()));
      if (!holders.back()->ReadUntil("holding:")) {
        error = "rank " + std::to_string(r) + " not held: " + holders.back()->printed();
        return;
      }
    }
  }
  ~HeldFileset() {
    holders.clear();  // SIGTERM, reaped
  }
  // The sockets in `order` (rank numbers), space separated.
  std::string Sockets(const std::vector<int>& order) const {
    std::string s;
    for (int r : order) s += " " + sockets[static_cast<std::size_t>(r)];
    return s;
  }
  fs::path Path(const std::string& name) const { return run->path() / name; }
};

std::string Reference(int layer, const std::string& x, const fs::path& compare) {
  return std::string(EXLR8_MOE_REFERENCE) + " --release " + TinyRelease().string() +
         " --manifest home --layer " + std::to_string(layer) + " " + x + " --golden " + EXLR8_SHARED_DIR +
         "/fixtures/golden --compare " + compare.string();
}

class MoeLayerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    sim_ = StartSim(TinyRelease());
    held_ = std::make_unique<HeldFileset>(*sim_, 3);
  }
  static void TearDownTestSuite() {
    held_.reset();
    sim_.reset();
  }
  void SetUp() override { ASSERT_TRUE(held_->error.empty()) << held_->error; }

  static inline std::unique_ptr<hubsim::HubSim> sim_;
  static inline std::unique_ptr<HeldFileset> held_;
};

TEST_F(MoeLayerTest, TheCppExampleMatchesTheReferenceOnEveryMoeLayer) {
  // Layer 3 from a seed, sockets out of rank order; layer 4 from a file.
  const fs::path out3 = held_->Path("out3.f32");
  auto [code, printed] = RunShell(std::string(EXLR8_MOE_LAYER) + " --layer 3 --seed 7 --out " +
                                  out3.string() + held_->Sockets({2, 0, 1}));
  ASSERT_EQ(code, 0) << printed;
  EXPECT_NE(printed.find("4 experts + shared, hidden 256, 240 halves from 3 ranks"), std::string::npos)
      << printed;
  auto [rcode, rprinted] = RunShell(Reference(3, "--seed 7", out3));
  EXPECT_EQ(rcode, 0) << rprinted;
  std::printf("%s", rprinted.c_str());  // the per-expert agreement, for the log
  EXPECT_NE(rprinted.find("all checks passed"), std::string::npos) << rprinted;
  EXPECT_NE(rprinted.find("checked against the golden weights, 0 outside tolerance"), std::string::npos)
      << rprinted;

  const fs::path x = held_->Path("x.f32");
  {
    std::vector<float> v(256);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(((i * 37) % 101) - 50) / 25.0f;
    std::ofstream f(x, std::ios::binary);
    f.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
  }
  const fs::path out4 = held_->Path("out4.f32");
  auto [code4, printed4] = RunShell(std::string(EXLR8_MOE_LAYER) + " --layer 4 --input " + x.string() +
                                    " --out " + out4.string() + held_->Sockets({0, 1, 2}));
  ASSERT_EQ(code4, 0) << printed4;
  auto [rcode4, rprinted4] = RunShell(Reference(4, "--input " + x.string(), out4));
  EXPECT_EQ(rcode4, 0) << rprinted4;
}

TEST_F(MoeLayerTest, TheComparisonRefusesASmallChangeOfOneExpert) {
  const fs::path out = held_->Path("changed.f32");
  auto [code, printed] = RunShell(std::string(EXLR8_MOE_LAYER) + " --layer 3 --seed 11 --out " +
                                  out.string() + held_->Sockets({0, 1, 2}));
  ASSERT_EQ(code, 0) << printed;
  auto [ok, okp] = RunShell(Reference(3, "--seed 11", out));
  ASSERT_EQ(ok, 0) << okp;
  // Expert 2's outputs times (1 + 1e-3): ten times the tolerance.
  std::vector<float> y(5 * 256);
  {
    std::ifstream in(out, std::ios::binary);
    in.read(reinterpret_cast<char*>(y.data()), static_cast<std::streamsize>(y.size() * 4));
    ASSERT_TRUE(in);
  }
  for (std::size_t o = 0; o < 256; ++o) y[2 * 256 + o] *= 1.001f;
  {
    std::ofstream f(out, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(y.data()), static_cast<std::streamsize>(y.size() * 4));
  }
  auto [bad, badp] = RunShell(Reference(3, "--seed 11", out));
  EXPECT_EQ(bad, 1) << badp;
  EXPECT_NE(badp.find("expert 2: "), std::string::npos) << badp;
  // Only expert 2 fails.
  const auto fails = badp.find("FAILS");
  ASSERT_NE(fails, std::string::npos) << badp;
  EXPECT_EQ(badp.find("FAILS", fails + 1), std::string::npos) << badp;
  EXPECT_LT(badp.rfind("expert 2: ", fails), fails) << badp;
  EXPECT_EQ(badp.rfind("expert 2: ", fails), badp.rfind("expert ", fails)) << badp;
}

TEST_F(MoeLayerTest, TheExampleNamesWhatIsMissing) {
  auto [code, printed] =
      RunShell(std::string(EXLR8_MOE_LAYER) + " --layer 3 --seed 1 --out /dev/null" + held_->Sockets({0, 1}));
  EXPECT_EQ(code, 1) << printed;
  EXPECT_NE(printed.find("holds a rank of TP 3, 2 sockets given: give every rank's"), std::string::npos)
      << printed;
  auto [code2, printed2] = RunShell(std::string(EXLR8_MOE_LAYER) + " --layer 3 --seed 1 --out /dev/null" +
                                    held_->Sockets({0, 1, 1}));
  EXPECT_EQ(code2, 1) << printed2;
  EXPECT_NE(printed2.find("twice"), std::string::npos) << printed2;
  auto [code3, printed3] =
      RunShell(std::string(EXLR8_MOE_LAYER) + " --layer 3 --out /dev/null" + held_->Sockets({0, 1, 2}));
  EXPECT_EQ(code3, 1) << printed3;
  EXPECT_NE(printed3.find("give one of --input FILE and --seed S"), std::string::npos) << printed3;
}

TEST_F(MoeLayerTest, ThePythonExampleMatchesTheReference) {
  const char* python = std::getenv("EXLR8_MOE_PYTHON");
  if (python == nullptr || *python == '\0')
    GTEST_SKIP() << "EXLR8_MOE_PYTHON not set (the ctest moe_layer_python sets it)";
  const fs::path out = held_->Path("py3.f32");
  auto [code, printed] = RunShell(std::string(python) + " " + EXLR8_SOURCE_DIR +
                                  "/examples/moe_layer/moe_layer.py --layer 3 --seed 7 --out " +
                                  out.string() + held_->Sockets({1, 2, 0}));
  ASSERT_EQ(code, 0) << printed;
  auto [rcode, rprinted] = RunShell(Reference(3, "--seed 7", out));
  EXPECT_EQ(rcode, 0) << rprinted;
}

// Another TP degree: the owner rule (16e + h + L) mod N at N = 2.
TEST(MoeLayerTp2Test, TheCppExampleMatchesTheReference) {
  auto sim = StartSim(TinyRelease());
  HeldFileset held(*sim, 2);
  ASSERT_TRUE(held.error.empty()) << held.error;
  const fs::path out = held.Path("out.f32");
  auto [code, printed] = RunShell(std::string(EXLR8_MOE_LAYER) + " --layer 4 --seed 3 --out " + out.string() +
                                  held.Sockets({1, 0}));
  ASSERT_EQ(code, 0) << printed;
  auto [rcode, rprinted] = RunShell(Reference(4, "--seed 3", out));
  EXPECT_EQ(rcode, 0) << rprinted;
}

}  // namespace
}  // namespace exlr8
