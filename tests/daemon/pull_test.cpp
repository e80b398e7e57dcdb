// Integration tests of the pull engine: a real hub simulator on loopback
// (tests/hubsim), real HTTP through libcurl, a real SQLite cache on disk.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include <cstring>
#include <fstream>
#include <map>
#include <thread>

#include "client/file_sink.h"
#include "client/local_release.h"
#include "daemon/pull/pull_job.h"
#include "format/json.h"
#include "format/layout.h"
#include "format/release_writer.h"
#include "format/units.h"
#include "tests/daemon/cache_test_util.h"
#include "tests/daemon/dead_hub_util.h"
#include "tests/daemon/hub_test_server.h"
#include "tests/daemon/pull_test_util.h"
#include "tests/daemon/shell_util.h"
#include "tests/hubsim/hubsim.h"

namespace exlr8 {
namespace {

namespace fs = std::filesystem;
using ::exlr8::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(PullTest, FixtureEveryRankOfTp3To7HoldsExactlyItsPlan) {
  auto sim = StartSim(TinyRelease());
  for (int n = 3; n <= 7; ++n) {
    for (int r = 0; r < n; ++r) {
      TempDir cache;
      auto s = Pull(cache.path(), Options(*sim, "home", n, r));
      ASSERT_TRUE(s.ok()) << "TP " << n << " rank " << r << ": " << s.status().ToString();
      EXPECT_TRUE(s->complete);
      EXPECT_EQ(s->plan.totals.routed_halves, 0u + [&] {
        std::uint64_t c = 0;
        for (int layer : {3, 4})
          for (int e = 0; e < 4; ++e)
            for (int h = 0; h < 16; ++h) c += RankOfHalf(16, e, h, layer, n) == r ? 3 : 0;
        return c;
      }());
      EXPECT_EQ(s->bytes_reused, 0u);
      // about one /resolve/ per file fetched from
      EXPECT_LE(s->resolves, s->plan.files.size() + 3);
      ExpectSpaceAccountingExact(*s);
      ExpectCacheHoldsExactlyThePlan(cache.path(), TinyRelease(), *s);
    }
  }
}

// The Hub rate-limits /resolve/: a fresh pull makes exactly one per file
// (a HEAD for LFS files, which then come from the CDN; a GET for regular
// files, which the hub serves itself), and the summary counts the same.
TEST(PullTest, FreshPullMakesOneResolvePerFile) {
  auto sim = StartSim(TinyRelease());
  std::uint64_t files = 0;
  for (const auto& e : fs::recursive_directory_iterator(TinyRelease())) files += e.is_regular_file() ? 1 : 0;
  TempDir cache;
  auto s = Pull(cache.path(), Options(*sim, "home", 4, 1));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(s->complete);
  auto stats = ParseJson(sim->StatsJson());
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->Find("resolve")->as_uint64(), files);
  EXPECT_EQ(s->resolves, files);
}

TEST(PullTest, SynthesizedReleaseWithOtherChoices) {
  TempDir release;
  const SynthOptions so = OtherChoicesRelease(7);
  DirectoryReleaseSink sink(release.path().string());
  ASSERT_TRUE(SynthesizeRelease(so, sink).ok());
  auto sim = StartSim(release.path());
  for (int n = 3; n <= 7; ++n) {
    for (int r = 0; r < n; ++r) {
      TempDir cache;
      auto s = Pull(cache.path(), Options(*sim, "up1", n, r));
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      EXPECT_TRUE(s->complete);
      ExpectSpaceAccountingExact(*s);
      ExpectCacheHoldsExactlyThePlan(cache.path(), release.path(), *s);
    }
  }
}

TEST(PullTest, SecondRankAndRerunReuseVerifiedBytes) {
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  auto first = Pull(cache.path(), Options(*sim, "home", 4, 0));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto again = Pull(cache.path(), Options(*sim, "home", 4, 0));
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->complete);
  EXPECT_EQ(again->bytes_fetched, 0u);
  EXPECT_EQ(again->bytes_reused, again->bytes_planned);
  auto second = Pull(cache.path(), Options(*sim, "home", 4, 1));
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(second->complete);
  // Whole files and the shared expert's halves were already there.
  EXPECT_GE(second->bytes_reused, second->plan.totals.whole_file_bytes);
  EXPECT_LT(second->bytes_fetched, second->bytes_planned);
  ExpectSpaceAccountingExact(*second);
}

// Empty files have nothing to fetch and are marked verified in batches; a
// release with more of them than one batch holds gets every one, on disk.
TEST(PullTest, ManyEmptyFilesAreAllMarkedVerified) {
  TempDir release;
  fs::copy(TinyRelease(), release.path(), fs::copy_options::recursive);
  constexpr int kEmpty = 150;  // more than two batches
  for (int i = 0; i < kEmpty; ++i) {
    fs::create_directories(release.path() / "extra" / std::to_string(i % 7));
    std::ofstream(release.path() / "extra" / std::to_string(i % 7) / ("e" + std::to_string(i)));
  }
  auto sim = StartSim(release.path());
  TempDir cache;
  auto s = Pull(cache.path(), Options(*sim, "home", 4, 2));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(s->complete);
  auto c = Cache::OpenReadOnly(cache.path());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto files = FilesOfOnlyFileset(**c);
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  int empty_verified = 0;
  for (const FileInfo& f : *files) {
    if (!f.path.starts_with("extra/")) continue;
    EXPECT_TRUE(f.whole_verified) << f.path;
    auto path = (*c)->DataPath(f.id);
    ASSERT_TRUE(path.ok());
    std::error_code ec;
    EXPECT_EQ(fs::file_size(*path, ec), 0u) << f.path << ": " << ec.message();
    empty_verified += f.whole_verified ? 1 : 0;
  }
  EXPECT_EQ(empty_verified, kEmpty);
}

// Every recorded byte of the cache's only fileset equals the source.
void ExpectRecordedBytesMatchSource(const fs::path& cache_dir, const fs::path& source) {
  auto cache = Cache::OpenReadOnly(cache_dir);
  ASSERT_TRUE(cache.ok()) << cache.status().ToString();
  auto files = FilesOfOnlyFileset(**cache);
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  for (const FileInfo& f : *files) {
    auto extents = (*cache)->VerifiedExtents(f.id);
    ASSERT_TRUE(extents.ok());
    if (extents->empty()) continue;
    auto path = (*cache)->DataPath(f.id);
    ASSERT_TRUE(path.ok());
    const auto cached = ReadAll(*path);
    const auto src = ReadAll(source / f.path);
    ASSERT_EQ(cached.size(), src.size()) << f.path;
    std::uint64_t wrong = 0;
    for (const auto& e : *extents)
      for (std::uint64_t i = e.offset; i < e.offset + e.length; ++i) wrong += cached[i] != src[i];
    EXPECT_EQ(wrong, 0u) << f.path << ": recorded bytes differ from the source";
  }
}

// A coalesced request spans the halves of other ranks lying between its
// own: only its halves are written. Writing the gaps would let rank 1's
// unverified (here: corrupted) responses replace rank 0's verified halves
// while the cache reports them present.
TEST(PullTest, CoalescedGapsAreNeverWritten) {
  {
    auto sim = StartSim(TinyRelease());
    TempDir cache;
    PullOptions o = Options(*sim, "home", 4, 1);
    o.coalesce_gap = 1ull << 30;  // one request per width file
    auto s = Pull(cache.path(), o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_LT(s->plan.totals.requests, s->plan.totals.routed_halves);  // coalesced across the gaps
    ExpectCacheHoldsExactlyThePlan(cache.path(), TinyRelease(), *s);  // zeros between the halves
    // The summary's plan is what the rank keeps, not what its requests span
    // (here 16.85 MB of requests for 4.32 MB kept in the cache).
    EXPECT_GT(s->plan.totals.bytes, s->plan.totals.needed_bytes);
    EXPECT_EQ(s->bytes_planned, s->plan.totals.needed_bytes);
    auto c = Cache::Open(cache.path());
    ASSERT_TRUE(c.ok());
    EXPECT_EQ(*(*c)->RecordedBytes(), s->bytes_planned);
  }
  TempDir cache;
  {
    auto sim = StartSim(TinyRelease());
    auto first = Pull(cache.path(), Options(*sim, "home", 4, 0));
    ASSERT_TRUE(first.ok()) << first.status().ToString();
  }
  hubsim::FaultConfig f;
  f.seed = 32;
  f.corrupt = 1.0;  // every answer (up to 30) has a flipped byte, most of them in a gap
  f.max_faults = 30;
  f.on_hub = false;
  auto sim = StartSim(TinyRelease(), "", f);
  PullOptions o = Options(*sim, "home", 4, 1);
  o.coalesce_gap = 1ull << 30;
  o.fetch.max_refetches = 40;
  auto s = Pull(cache.path(), o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  auto stats = ParseJson(sim->StatsJson());
  ASSERT_TRUE(stats.ok());
  EXPECT_GE(stats->Find("faults")->Find("corrupt")->as_uint64(), 6u);  // every first answer (one per width file)
  ExpectRecordedBytesMatchSource(cache.path(), TinyRelease());
}

// Bytes of a whole file recorded without its whole_verified flag (a cache
// an older exlr8d left when killed between the two) are un-recorded before
// the file is fetched again, so a failed fetch leaves nothing recorded over
// unchecked bytes.
TEST(PullTest, AWholeFileRecordedWithoutItsFlagIsUnrecordedBeforeItIsWrittenAgain) {
  const std::string path = "dense/exlr8-dense-003.safetensors";
  TempDir cache;
  {
    auto sim = StartSim(TinyRelease());
    ASSERT_TRUE(Pull(cache.path(), Options(*sim, "home", 4, 0)).ok());
  }
  auto file_state = [&](bool demote) {
    auto c = Cache::Open(cache.path());
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    auto sets = (*c)->ListFilesets();
    EXPECT_TRUE(sets.ok() && sets->size() == 1u);
    auto files = (*c)->ListFiles((*sets)[0].id);
    EXPECT_TRUE(files.ok());
    const std::vector<FileInfo> listed = files.ok() ? *files : std::vector<FileInfo>{};
    for (const FileInfo& f : listed)
      if (f.path == path) {
        if (demote) {  // keeps [1, size) recorded, the flag cleared
          EXPECT_TRUE((*c)->ForgetExtents(std::vector<VerifiedExtent>{{f.id, 0, 1}}).ok());
          return std::make_pair(*(*c)->VerifiedExtents(f.id), (*c)->GetFile(f.id)->whole_verified);
        }
        return std::make_pair(*(*c)->VerifiedExtents(f.id), f.whole_verified);
      }
    ADD_FAILURE() << path << " not in the cache";
    return std::make_pair(std::vector<Extent>{}, false);
  };
  auto demoted = file_state(true);
  ASSERT_EQ(demoted.first, (std::vector<Extent>{{1, 113591}}));
  ASSERT_FALSE(demoted.second);
  {
    hubsim::FaultConfig f;
    f.corrupt = 1.0;
    f.match = "exlr8-dense-003";
    f.on_hub = false;
    auto sim = StartSim(TinyRelease(), "", f);
    PullOptions o = Options(*sim, "home", 4, 0);
    o.fetch.max_refetches = 2;
    auto s = Pull(cache.path(), o);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), StatusCode::kCorruption) << s.status().ToString();
  }
  auto after = file_state(false);
  EXPECT_TRUE(after.first.empty()) << "bytes stayed recorded over a file written again";
  EXPECT_FALSE(after.second);
  auto sim = StartSim(TinyRelease());
  auto s = Pull(cache.path(), Options(*sim, "home", 4, 0));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ExpectCacheHoldsExactlyThePlan(cache.path(), TinyRelease(), *s);
}

// A dense file the format forbids (data_offsets past its end, overlapping
// tensors, a block whose checksum fails), listed by the hub with the SHA-256
// of those very bytes. The hash matching is not enough: the pull checks
// the format as `exlr8 verify` does, and fails (exit 3, as for a checksum
// failure) naming the file and the problem, records none of it, and the
// rank is not complete, so `exlr8d verify` and `status` agree with it.
class PullMalformedDenseTest : public ::testing::TestWithParam<testing::DenseDamage> {};

TEST_P(PullMalformedDenseTest, FailsNamingTheFileAndNeverRecordsIt) {
  const std::string path = "dense/exlr8-dense-003.safetensors";
  TempDir release, cache;
  CopyTinyWithDamagedDense(release.path(), path, GetParam());
  if (HasFatalFailure()) return;
  const ShellRun offline =
      Shell(std::string(EXLR8_BIN_DIR) + "/exlr8 verify " + Quote(release.path().string()));
  EXPECT_EQ(offline.status, 1) << offline.out;
  EXPECT_THAT(offline.out, HasSubstr(testing::DenseDamageMessage(GetParam())));

  auto sim = StartSim(release.path());
  const std::string rank =
      " --repo exlr8/test --manifest home --tp 4 --rank 0 --cache " + Quote(cache.path().string());
  for (int run = 0; run < 2; ++run) {  // the rerun fetches it again, and fails the same way
    SCOPED_TRACE("run " + std::to_string(run));
    const ShellRun pull = Shell(Exlr8d() + " pull --endpoint " + sim->hub_url() + rank + " --no-progress");
    EXPECT_EQ(pull.status, 3) << pull.out;
    EXPECT_THAT(pull.out, HasSubstr("error: " + path + ": "));  // named as the release names it
    EXPECT_THAT(pull.out, HasSubstr("the release itself is malformed"));
    EXPECT_THAT(pull.out, HasSubstr(testing::DenseDamageMessage(GetParam())));
    auto c = Cache::OpenReadOnly(cache.path());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    auto files = FilesOfOnlyFileset(**c);
    ASSERT_TRUE(files.ok()) << files.status().ToString();
    for (const FileInfo& f : *files) {
      if (f.path != path) continue;
      EXPECT_FALSE(f.whole_verified);
      EXPECT_EQ(f.bytes_cached, 0u);
    }
  }
  const ShellRun status = Shell(Exlr8d() + " status" + rank);
  EXPECT_EQ(status.status, 1) << status.out;
  EXPECT_THAT(status.out, HasSubstr("NOT complete"));
  EXPECT_THAT(status.out, HasSubstr(path));
}

INSTANTIATE_TEST_SUITE_P(All, PullMalformedDenseTest,
                         ::testing::Values(testing::DenseDamage::kPastEnd, testing::DenseDamage::kOverlap,
                                           testing::DenseDamage::kBlockChecksum),
                         [](const auto& param_info) {
                           return std::string(testing::DenseDamageName(param_info.param));
                         });

// A pull reuses only what the cache directory still holds: files deleted
// or cut short by hand are fetched again, never "fetched 0 B" with the rank
// complete.
TEST(PullTest, BytesLostFromTheCacheDirectoryAreFetchedAgain) {
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  auto first = Pull(cache.path(), Options(*sim, "home", 4, 1));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->bytes_lost, 0u);
  fs::remove(first->root / "dense/exlr8-vocab.safetensors");
  const fs::path width = first->root / "experts/exlr8-layer-003.k3.safetensors";
  fs::resize_file(width, fs::file_size(width) / 2);
  auto again = Pull(cache.path(), Options(*sim, "home", 4, 1));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_GT(again->bytes_lost, fs::file_size(TinyRelease() / "dense/exlr8-vocab.safetensors"));
  EXPECT_GT(again->bytes_fetched, 0u);
  ExpectCacheHoldsExactlyThePlan(cache.path(), TinyRelease(), *again);
}

// A hub that echoes the Authorization header into its error message: the
// token is in no error the pull returns.
TEST(PullTest, ATokenAHubEchoesNeverReachesTheError) {
  testing::TestHttpServer hub([](const testing::TestRequest& r) {
    testing::TestResponse resp;
    resp.status = 500;
    resp.headers.emplace_back("X-Error-Message", "refused " + r.Header("authorization"));
    return resp;
  });
  TempDir cache;
  PullOptions o;
  o.repo = "exlr8/test";
  o.manifest = "home";
  o.tp = 4;
  o.rank = 1;
  o.hub.endpoint = hub.base_url();
  o.hub.token = "hf_SecretTokenValue123";
  o.hub.token_from_environment = false;
  o.hub.use_env_proxy = false;
  o.hub.max_attempts = 1;
  auto s = Pull(cache.path(), o);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), ::testing::HasSubstr("refused Bearer [token]"));
  EXPECT_EQ(s.status().message().find("hf_SecretTokenValue123"), std::string::npos) << s.status().message();
}

TEST(PullTest, FaultsStillByteExact) {
  hubsim::FaultConfig f;
  f.seed = 11;
  f.drop = 0.06;
  f.corrupt = 0.05;
  f.http500 = 0.02;
  f.http503 = 0.02;
  f.http429 = 0.02;
  f.retry_after_s = 0;
  f.ignore_range = 0.05;
  f.on_hub = false;  // listing stays clean; every CDN answer may be faulty
  auto sim = StartSim(TinyRelease(), "", f);
  sim->SetUrlTtl(1);  // signed URLs expire during the pull
  std::atomic<bool> done{false};
  std::thread expirer([&] {
    while (!done.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(150));
      sim->ExpireSignedUrls();
    }
  });
  TempDir cache;
  PullOptions o = Options(*sim, "up1", 3, 1);
  // URLs expire every 150 ms whatever the machine's speed: do not let a slow
  // run hit the per-file re-resolve bound (its own test is in range_fetcher_test).
  o.fetch.max_reresolves_per_file = 1000;
  // At 5% damaged answers a request fails its default 3 tries about once in
  // 8,000, a header its 4 about once in 2,000: the bounded failure, tested
  // on its own (range_fetcher_test, pull_headers_test). Here what is tested
  // is that the bytes end exact, so the bound is set where it never hits.
  o.fetch.max_refetches = 6;
  o.write_threads = 3;  // requests written and hashed on three threads at once
  CacheOptions co;
  co.write_behind_bytes = 4096;  // write-back started after nearly every write, from every writer
  auto s = Pull(cache.path(), o, co);
  done.store(true);
  expirer.join();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  // What the simulator injected, to tell a pull that missed its faults from
  // a run where the faults missed the pull.
  const std::string injected = sim->StatsJson();
  EXPECT_TRUE(s->complete);
  EXPECT_GT(s->retries, 0u) << injected;
  EXPECT_GT(s->checksum_failures, 0u) << injected;
  ExpectSpaceAccountingExact(*s);  // refetched bytes are written and counted once
  EXPECT_GT(s->refetches, 0u) << injected;
  ExpectCacheHoldsExactlyThePlan(cache.path(), TinyRelease(), *s);
}

TEST(PullTest, TokenGoesToTheHubOnlyNeverTheCdn) {
  auto sim = StartSim(TinyRelease(), "hf_secret_test_token");
  TempDir cache;
  PullOptions o = Options(*sim, "home", 4, 2);
  auto denied = Pull(cache.path(), o);  // the Hub hides private repos: 401 RepoNotFound
  EXPECT_EQ(denied.status().code(), StatusCode::kNotFound) << denied.status().ToString();
  EXPECT_THAT(denied.status().message(), HasSubstr("HF_TOKEN"));
  o.hub.token = "hf_wrong";
  auto wrong = Pull(cache.path(), o);
  EXPECT_EQ(wrong.status().code(), StatusCode::kPermissionDenied) << wrong.status().ToString();
  EXPECT_THAT(wrong.status().message(), ::testing::Not(HasSubstr("hf_wrong")));
  o.hub.token = "hf_secret_test_token";
  auto s = Pull(cache.path(), o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(s->complete);
  const std::string stats = sim->StatsJson();
  EXPECT_THAT(stats, ::testing::ContainsRegex("\"cdn\":\\{[^}]*\"with_authorization\":0"));
  EXPECT_THAT(stats, ::testing::ContainsRegex("\"hub\":\\{[^}]*\"with_authorization\":[1-9]"));
  EXPECT_THAT(denied.status().message(), ::testing::Not(HasSubstr("hf_secret_test_token")));
}

TEST(PullTest, BudgetExhaustedFailsCleanlyThenCompletes) {
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  CacheOptions tight;
  tight.byte_budget = 2'000'000;  // the plan needs more
  auto s = Pull(cache.path(), Options(*sim, "up1", 3, 0), tight);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(s.status().message(), HasSubstr("budget"));
  {  // nothing recorded that is not verified and on disk
    auto c = Cache::Open(cache.path());
    ASSERT_TRUE(c.ok());
    auto recorded = (*c)->RecordedBytes();
    ASSERT_TRUE(recorded.ok());
    EXPECT_LE(*recorded, 2'000'000u);
  }
  auto ok = Pull(cache.path(), Options(*sim, "up1", 3, 0));
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_TRUE(ok->complete);
  ExpectCacheHoldsExactlyThePlan(cache.path(), TinyRelease(), *ok);
}

// Bytes a pull has written but not yet recorded (its whole files, index
// files, headers) count against the budget too, so a pull whose plan is
// larger than the budget never completes leaving the cache over it (here a
// budget of 86% of the plan).
TEST(PullTest, APullNeverLeavesTheCacheOverItsBudget) {
  auto sim = StartSim(TinyRelease());
  std::uint64_t plan = 0;
  {
    TempDir scratch;
    auto full = Pull(scratch.path(), Options(*sim, "home", 4, 1));
    ASSERT_TRUE(full.ok()) << full.status().ToString();
    auto c = Cache::Open(scratch.path());
    ASSERT_TRUE(c.ok());
    plan = *(*c)->RecordedBytes();
  }
  ASSERT_GT(plan, 100'000u);
  for (const std::uint64_t budget : {plan - 1, plan * 95 / 100, plan * 86 / 100, plan * 60 / 100, plan / 4}) {
    TempDir cache;
    CacheOptions tight;
    tight.byte_budget = budget;
    auto s = Pull(cache.path(), Options(*sim, "home", 4, 1), tight);
    EXPECT_EQ(s.status().code(), StatusCode::kResourceExhausted) << "budget " << budget << " of " << plan;
    auto c = Cache::Open(cache.path());
    ASSERT_TRUE(c.ok());
    EXPECT_LE(*(*c)->RecordedBytes(), budget) << "budget " << budget << " of " << plan;
  }
  // Room for the plan is enough: in this release each header ends where
  // its file's first half begins, so what a header's claim counts before
  // its size is known (up to that half) is the header. Several pulls, as
  // the whole files stream and are recorded while the planner claims: bytes
  // recorded meanwhile must count once, not as recorded and as still
  // claimed, or a pull that fits fails.
  for (int i = 0; i < 5; ++i) {
    TempDir cache;
    CacheOptions exact;
    exact.byte_budget = plan;
    auto s = Pull(cache.path(), Options(*sim, "home", 4, 1), exact);
    ASSERT_TRUE(s.ok()) << "pull " << i << ": " << s.status().ToString();
    EXPECT_TRUE(s->complete);
    ExpectSpaceAccountingExact(*s);
    auto c = Cache::Open(cache.path());
    ASSERT_TRUE(c.ok());
    EXPECT_EQ(*(*c)->RecordedBytes(), plan);
  }
}

// --make-room: a pull that does not fit the budget evicts the least
// recently used fileset no one pins, and only then fetches; a pinned one is
// never taken, and the pull then fails saying what it tried.
TEST(PullTest, MakeRoomEvictsAnUnpinnedFilesetToFitTheBudget) {
  auto sim = StartSim(TinyRelease(), "", {}, {"exlr8/old", "exlr8/test"});
  TempDir cache;
  PullOptions old = Options(*sim, "up1", 3, 0);
  old.repo = "exlr8/old";
  auto first = Pull(cache.path(), old);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  std::uint64_t recorded = 0;
  FilesetId old_id = 0;
  {
    auto c = Cache::Open(cache.path());
    ASSERT_TRUE(c.ok());
    recorded = *(*c)->RecordedBytes();
    old_id = *(*c)->PutFileset("exlr8/old", "main", first->commit);
    ASSERT_TRUE((*c)->Pin(old_id, "operator").ok());
  }
  CacheOptions tight;
  tight.byte_budget = recorded + recorded / 2;  // room for one of the two, not both
  PullOptions next = Options(*sim, "up1", 3, 0);
  next.make_room = true;
  auto pinned = Pull(cache.path(), next, tight);
  ASSERT_EQ(pinned.status().code(), StatusCode::kResourceExhausted) << pinned.status().ToString();
  EXPECT_THAT(pinned.status().message(), HasSubstr("after evicting 0 unpinned filesets (--make-room)"));
  {
    auto c = Cache::Open(cache.path());
    ASSERT_TRUE(c.ok());
    ASSERT_TRUE((*c)->Unpin(old_id, "operator").ok());
  }
  next.make_room = false;
  EXPECT_EQ(Pull(cache.path(), next, tight).status().code(), StatusCode::kResourceExhausted);  // not asked to
  // Through the command line, as a unit would run it.
  const fs::path out = cache.path().parent_path() / ("room-" + std::to_string(::getpid()) + ".json");
  const std::string pull = std::string(EXLR8_BIN_DIR) + "/exlr8d pull --repo exlr8/test --manifest up1 --tp 3 " +
                           "--rank 0 --endpoint " + sim->hub_url() + " --cache " + cache.path().string() +
                           " --no-progress --json --budget " + std::to_string(*tight.byte_budget) + " --make-room";
  ASSERT_EQ(std::system((pull + " > " + out.string()).c_str()), 0);
  const auto text = ReadAll(out);
  fs::remove(out);
  auto summary = ParseJson(std::string(text.begin(), text.end()));
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  EXPECT_TRUE(summary->Find("complete")->as_bool());
  EXPECT_EQ(summary->Find("evicted_filesets")->as_uint64(), 1u);
  EXPECT_EQ(summary->Find("bytes_evicted")->as_uint64(), recorded);
  auto made = Pull(cache.path(), next, tight);  // all there now: nothing fetched, nothing evicted
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  EXPECT_TRUE(made->complete);
  EXPECT_EQ(made->bytes_fetched, 0u);
  EXPECT_TRUE(made->evicted.empty());
  ExpectCacheHoldsExactlyThePlan(cache.path(), TinyRelease(), *made);
  auto c = Cache::Open(cache.path());
  ASSERT_TRUE(c.ok());
  auto sets = *(*c)->ListFilesets();
  ASSERT_EQ(sets.size(), 1u);
  EXPECT_EQ(sets[0].repo, "exlr8/test");
  EXPECT_FALSE(fs::exists(cache.path() / "exlr8" / "old"));
}

// The fileset a pull writes is never what it evicts to make room, even
// before its pull row exists (the whole files are claimed for first) and
// though it is the only fileset there.
TEST(PullTest, MakeRoomNeverEvictsThePullsOwnFileset) {
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  auto rank0 = Pull(cache.path(), Options(*sim, "up1", 3, 0));
  ASSERT_TRUE(rank0.ok()) << rank0.status().ToString();
  std::uint64_t recorded = 0;
  {  // one whole file lost (as a scrub forgets damaged bytes): the next run refetches it first
    auto c = Cache::Open(cache.path());
    ASSERT_TRUE(c.ok());
    const FilesetId set = *(*c)->PutFileset("exlr8/test", "main", rank0->commit);
    const FileInfo* dense = nullptr;
    auto files = *(*c)->ListFiles(set);
    for (const FileInfo& f : files)
      if (f.path.rfind("dense/", 0) == 0 && f.whole_verified) dense = &f;
    ASSERT_NE(dense, nullptr);
    const VerifiedExtent all{dense->id, 0, dense->size};
    ASSERT_TRUE((*c)->ForgetExtents({&all, 1}).ok());
    recorded = *(*c)->RecordedBytes();
    ASSERT_GT(recorded, 0u);
  }
  CacheOptions tight;
  tight.byte_budget = recorded + 1000;  // the lost file does not fit again
  PullOptions again = Options(*sim, "up1", 3, 0);
  again.make_room = true;
  auto s = Pull(cache.path(), again, tight);
  ASSERT_EQ(s.status().code(), StatusCode::kResourceExhausted) << s.status().ToString();
  EXPECT_THAT(s.status().message(), HasSubstr("after evicting 0 unpinned filesets"));
  auto c = Cache::Open(cache.path());
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*(*c)->RecordedBytes(), recorded);  // nothing of it was evicted
}

TEST(PullTest, FullDiskFailsCleanlyThenCompletesWhenSpaceIsFreed) {
  TempDir mnt;
  if (::mount("tmpfs", mnt.path().c_str(), "tmpfs", 0, "size=12m") != 0)
    GTEST_SKIP() << "cannot mount a small tmpfs here (" << std::strerror(errno) << "); the cache tests cover ENOSPC";
  struct Unmount {
    const fs::path& p;
    ~Unmount() { ::umount2(p.c_str(), MNT_DETACH); }
  } unmount{mnt.path()};
  const fs::path cache = mnt.path() / "cache";
  const fs::path junk = mnt.path() / "junk";
  {  // leave about 1 MB free: less than the plan needs
    std::ofstream f(junk, std::ios::binary);
    std::vector<char> block(1 << 20, 'x');
    for (int i = 0; i < 11; ++i) f.write(block.data(), static_cast<std::streamsize>(block.size()));
  }
  auto sim = StartSim(TinyRelease());
  auto s = Pull(cache, Options(*sim, "up1", 3, 0));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kResourceExhausted) << s.status().ToString();
  EXPECT_THAT(s.status().message(), HasSubstr("free"));
  fs::remove(junk);
  auto ok = Pull(cache, Options(*sim, "up1", 3, 0));
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_TRUE(ok->complete);
  ExpectCacheHoldsExactlyThePlan(cache, TinyRelease(), *ok);
}

TEST(PullTest, OfflineServesFromTheCacheOnly) {
  TempDir cache;
  PullOptions o;
  {
    auto sim = StartSim(TinyRelease());
    o = Options(*sim, "down1", 5, 3);
    auto offline_empty = o;
    offline_empty.offline = true;
    auto e = Pull(cache.path(), offline_empty);
    EXPECT_EQ(e.status().code(), StatusCode::kFailedPrecondition);
    ASSERT_TRUE(Pull(cache.path(), o).ok());
  }  // the hub is gone
  o.offline = true;
  auto s = Pull(cache.path(), o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(s->complete);
  EXPECT_EQ(s->bytes_fetched, 0u);
  auto other_rank = o;
  other_rank.rank = 4;
  EXPECT_EQ(Pull(cache.path(), other_rank).status().code(), StatusCode::kFailedPrecondition);
}

// With the hub unreachable (not answering no), a pull of a rank the cache
// holds complete is served from the cache, at the commit the revision last
// resolved to, and says why, as huggingface_hub returns the cached file
// there; failing as a network error would make the pull unit restart every
// 30 s while the rank is there.
TEST(PullTest, AHubThatCannotBeAskedLeavesARankTheCacheHoldsCompleteToTheCache) {
  TempDir cache;
  testing::RefusingPort down;
  testing::SilentPort silent;
  ASSERT_NE(down.port(), 0);
  auto sim = StartSim(TinyRelease());
  const PullOptions o = Options(*sim, "down1", 5, 3);
  auto first = Pull(cache.path(), o);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_FALSE(first->served_from_cache);
  EXPECT_EQ(first->hub_error, "");
  const std::string commit = first->commit;

  struct Case {
    std::string name, endpoint, proxy;
    std::chrono::milliseconds connect_timeout;
    std::string said;  // in the error that made the pull use the cache
  };
  std::vector<Case> cases = {
      {"connection refused", down.url(), "", std::chrono::seconds(10), "Couldn't connect to server"},
      {"a proxy that cannot be reached", sim->hub_url(), down.url(), std::chrono::seconds(10),
       "through the proxy " + down.url()},
  };
  if (silent.port() != 0)
    cases.push_back(
        {"a connection never answered", silent.url(), "", std::chrono::milliseconds(300), "Timeout"});
  else
    ADD_FAILURE() << "could not make a port whose connections time out";
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    PullOptions down_o = o;
    down_o.hub.endpoint = c.endpoint;
    down_o.hub.proxy = c.proxy;
    down_o.hub.connect_timeout = c.connect_timeout;
    auto s = Pull(cache.path(), down_o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_TRUE(s->complete);
    EXPECT_TRUE(s->served_from_cache);
    EXPECT_EQ(s->commit, commit);
    EXPECT_EQ(s->bytes_fetched, 0u);
    EXPECT_THAT(s->hub_error, HasSubstr("revision 'main' of exlr8/test: "));
    EXPECT_THAT(s->hub_error, HasSubstr(c.said));
    ExpectCacheHoldsExactlyThePlan(cache.path(), TinyRelease(), *s);
  }

  // A hub answering 503 to every try is "not now" as well (huggingface_hub
  // falls back to its cache there too); a revision resolved here before is
  // asked 3 times, not the usual 5, before the cache serves it.
  hubsim::FaultConfig f;
  f.http503 = 1.0;
  f.retry_after_s = 0;
  f.match = "/revision/";
  sim->Reset();
  sim->SetFaults(f);
  auto busy = Pull(cache.path(), o);
  ASSERT_TRUE(busy.ok()) << busy.status().ToString();
  EXPECT_TRUE(busy->served_from_cache);
  EXPECT_EQ(busy->commit, commit);
  EXPECT_THAT(busy->hub_error, HasSubstr("503"));
  auto stats = ParseJson(sim->StatsJson());
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->Find("faults")->Find("http503")->as_uint64(), 3u) << sim->StatsJson();
}

// What the cache cannot serve without the hub fails as before (the network
// error), saying what the cache lacks.
TEST(PullTest, AHubThatCannotBeAskedFailsARankTheCacheLacksSayingWhat) {
  TempDir cache;
  testing::RefusingPort down;
  ASSERT_NE(down.port(), 0);
  std::string commit;
  {
    auto sim = StartSim(TinyRelease());
    auto first = Pull(cache.path(), Options(*sim, "down1", 5, 3));
    ASSERT_TRUE(first.ok()) << first.status().ToString();
    commit = first->commit;
  }
  auto pull_down = [&](int rank, const std::string& revision = "main") {
    PullOptions o;
    o.repo = "exlr8/test";
    o.revision = revision;
    o.manifest = "down1";
    o.tp = 5;
    o.rank = rank;
    o.hub.endpoint = down.url();
    o.hub.token_from_environment = false;
    o.hub.use_env_proxy = false;
    o.hub.retry_base = std::chrono::milliseconds(5);
    return Pull(cache.path(), o);
  };
  // Another rank, never pulled.
  auto other = pull_down(4);
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.status().code(), StatusCode::kIOError) << other.status().ToString();
  EXPECT_THAT(other.status().message(), HasSubstr("Couldn't connect to server"));
  EXPECT_THAT(other.status().message(), HasSubstr("(after 5 attempts); not served from the cache"));
  EXPECT_THAT(other.status().message(),
              HasSubstr("not served from the cache: it holds commit " + commit +
                        " for main, but TP 5 rank 4 of manifest down1 is not complete there ("));
  EXPECT_THAT(other.status().message(), HasSubstr("is not verified in the cache"));

  // The rank pulled, with one of its whole files forgotten since.
  const std::string path = "config.json";
  {
    auto c = Cache::Open(cache.path());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    auto sets = (*c)->ListFilesets();
    ASSERT_TRUE(sets.ok() && sets->size() == 1u);
    auto files = (*c)->ListFiles((*sets)[0].id);
    ASSERT_TRUE(files.ok());
    bool forgot = false;
    for (const FileInfo& fi : *files)
      if (fi.path == path)
        forgot = (*c)->ForgetExtents(std::vector<VerifiedExtent>{{fi.id, 0, fi.size}}).ok();
    ASSERT_TRUE(forgot) << path;
  }
  auto lacking = pull_down(3);
  ASSERT_FALSE(lacking.ok());
  EXPECT_EQ(lacking.status().code(), StatusCode::kIOError) << lacking.status().ToString();
  EXPECT_THAT(lacking.status().message(), HasSubstr("TP 5 rank 3 of manifest down1 is not complete there"));
  EXPECT_THAT(lacking.status().message(), HasSubstr(path + " (a whole file) is not verified in the cache"));

  // A revision never resolved here: nothing to say of the cache.
  auto never = pull_down(3, "v2");
  ASSERT_FALSE(never.ok());
  EXPECT_EQ(never.status().code(), StatusCode::kIOError) << never.status().ToString();
  EXPECT_THAT(never.status().message(), Not(HasSubstr("cache")));
}

// A hub that answers no (the repo is not there, the token is refused) is
// not worked around with what the cache holds.
TEST(PullTest, AHubThatAnswersNoIsNotWorkedAroundWithTheCache) {
  TempDir cache;
  {
    auto sim = StartSim(TinyRelease());
    ASSERT_TRUE(Pull(cache.path(), Options(*sim, "down1", 5, 3)).ok());
  }
  {
    auto sim = StartSim(TinyRelease(), "", {}, {"exlr8/other"});
    auto s = Pull(cache.path(), Options(*sim, "down1", 5, 3));
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), StatusCode::kNotFound) << s.status().ToString();
  }
  {
    auto sim = StartSim(TinyRelease(), "hf_right_token");
    PullOptions o = Options(*sim, "down1", 5, 3);
    auto anonymous = Pull(cache.path(), o);  // 401 RepoNotFound, as the Hub answers it
    ASSERT_FALSE(anonymous.ok());
    EXPECT_EQ(anonymous.status().code(), StatusCode::kNotFound) << anonymous.status().ToString();
    o.hub.token = "hf_wrong_token";
    auto refused = Pull(cache.path(), o);
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), StatusCode::kPermissionDenied) << refused.status().ToString();
  }
}

struct HostileCase {
  const char* name;
  hubsim::FaultConfig faults;
  StatusCode code;
  const char* message;
};

TEST(PullTest, HostileHubAnswersAreRejected) {
  std::vector<HostileCase> cases;
  {
    hubsim::FaultConfig f;
    f.hostile_listing = true;
    cases.push_back({"hostile listing", f, StatusCode::kCorruption, "path"});
  }
  {
    hubsim::FaultConfig f;
    f.absurd_sizes = true;
    cases.push_back({"absurd sizes", f, StatusCode::kCorruption, "size"});
  }
  {
    hubsim::FaultConfig f;
    f.wrong_content_range = 1.0;
    f.on_hub = false;
    cases.push_back({"always wrong Content-Range", f, StatusCode::kCorruption, "Content-Range"});
  }
  for (const auto& c : cases) {
    TempDir root;
    const fs::path cache_dir = root.path() / "cache";
    auto sim = StartSim(TinyRelease(), "", c.faults);
    PullOptions o = Options(*sim, "home", 4, 0);
    o.fetch.max_attempts = 3;
    auto s = Pull(cache_dir, o);
    ASSERT_FALSE(s.ok()) << c.name;
    EXPECT_EQ(s.status().code(), c.code) << c.name << ": " << s.status().ToString();
    EXPECT_THAT(s.status().message(), HasSubstr(c.message)) << c.name;
    // nothing outside the cache directory
    for (const auto& e : fs::directory_iterator(root.path())) EXPECT_EQ(e.path(), cache_dir) << c.name;
  }
  {  // recoverable hostility: some answers too long or with the wrong range
    hubsim::FaultConfig f;
    f.wrong_content_range = 0.1;
    f.body_longer = 0.1;
    f.on_hub = false;
    auto sim = StartSim(TinyRelease(), "", f);
    TempDir cache;
    auto s = Pull(cache.path(), Options(*sim, "home", 3, 2));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    ExpectCacheHoldsExactlyThePlan(cache.path(), TinyRelease(), *s);
  }
}

TEST(PullTest, BadOptionsAndMissingManifest) {
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  auto o = Options(*sim, "home", 4, 4);
  EXPECT_EQ(Pull(cache.path(), o).status().code(), StatusCode::kInvalidArgument);
  o = Options(*sim, "nope", 4, 0);
  auto s = Pull(cache.path(), o);
  EXPECT_EQ(s.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(s.status().message(), HasSubstr("manifests/exlr8-manifest-nope.json"));
  o = Options(*sim, "home", 4, 0);
  o.repo = "exlr8/missing";
  EXPECT_EQ(Pull(cache.path(), o).status().code(), StatusCode::kNotFound);
}

TEST(PullTest, ManifestFromALocalFile) {
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  const fs::path local = cache.path().parent_path() / ("exlr8-local-manifest-" + std::to_string(::getpid()) + ".json");
  fs::copy_file(TinyRelease() / "manifests" / "exlr8-manifest-down1.json", local, fs::copy_options::overwrite_existing);
  auto by_path = Pull(cache.path(), Options(*sim, local.string(), 4, 3));
  fs::remove(local);
  ASSERT_TRUE(by_path.ok()) << by_path.status().ToString();
  EXPECT_TRUE(by_path->complete);
  TempDir other;
  auto by_name = Pull(other.path(), Options(*sim, "down1", 4, 3));
  ASSERT_TRUE(by_name.ok());
  EXPECT_EQ(by_path->plan.totals.routed_halves, by_name->plan.totals.routed_halves);
  EXPECT_EQ(by_path->plan.totals.half_bytes, by_name->plan.totals.half_bytes);
}

TEST(PullTest, GcCommandEvictsUnpinnedFilesets) {
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  auto s = Pull(cache.path(), Options(*sim, "home", 4, 0));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_TRUE(fs::exists(s->root));
  const std::string gc = std::string(EXLR8_BIN_DIR) + "/exlr8d gc --cache " + cache.path().string();
  // A generous budget keeps everything; budget 0 evicts the (unpinned) fileset.
  ASSERT_EQ(std::system((gc + " --budget 1G > /dev/null").c_str()), 0);
  EXPECT_TRUE(fs::exists(s->root));
  ASSERT_EQ(std::system((gc + " --budget 0 > /dev/null").c_str()), 0);
  EXPECT_FALSE(fs::exists(s->root));
  auto c = Cache::Open(cache.path());
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*(*c)->RecordedBytes(), 0u);
  EXPECT_EQ(std::system((gc + " --budget lots > /dev/null 2>&1").c_str()) >> 8, 2);  // usage error
}

// The whole files may stream during planning on any number of slots, or
// start with the halves (--background-jobs 0): the cache ends up the same.
TEST(PullTest, BackgroundJobsSettingsAllGiveTheExactPlan) {
  auto sim = StartSim(TinyRelease());
  for (auto [bg, writers] : {std::pair{0, 1}, {1, 4}, {8, 2}}) {
    TempDir cache;
    PullOptions o = Options(*sim, "down1", 3, 2);
    o.background_jobs = bg;
    o.write_threads = writers;
    auto s = Pull(cache.path(), o);
    ASSERT_TRUE(s.ok()) << "background_jobs " << bg << ", write_threads " << writers << ": " << s.status().ToString();
    EXPECT_TRUE(s->complete);
    EXPECT_LE(s->resolves, s->plan.files.size() + 3);
    ExpectCacheHoldsExactlyThePlan(cache.path(), TinyRelease(), *s);
  }
  // Through the command line: the option, its bound, and the summary's
  // phase times and resumed bytes in --json.
  TempDir cache;
  const std::string pull = std::string(EXLR8_BIN_DIR) + "/exlr8d pull --repo exlr8/test --manifest down1 --tp 3 " +
                           "--rank 2 --endpoint " + sim->hub_url() + " --cache " + cache.path().string() +
                           " --no-progress --json --jobs 4";
  EXPECT_EQ(std::system((pull + " --background-jobs 5 > /dev/null 2>&1").c_str()) >> 8, 2);  // more than --jobs
  EXPECT_EQ(std::system((pull + " --write-threads 5 > /dev/null 2>&1").c_str()) >> 8, 2);    // 1..4
  EXPECT_EQ(std::system((pull + " --write-behind 8X > /dev/null 2>&1").c_str()) >> 8, 2);    // not a size
  const fs::path out = cache.path().parent_path() / ("bg-" + std::to_string(::getpid()) + ".json");
  ASSERT_EQ(std::system((pull + " --background-jobs 0 --write-behind 0 > " + out.string()).c_str()), 0);
  const auto text = ReadAll(out);
  fs::remove(out);
  auto summary = ParseJson(std::string(text.begin(), text.end()));
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  EXPECT_TRUE(summary->Find("complete")->as_bool());
  EXPECT_EQ(summary->Find("bytes_resumed")->as_uint64(), 0u);
  const JsonValue* phases = summary->Find("phase_s");
  ASSERT_NE(phases, nullptr);
  for (const char* p : {"resolve", "list", "metadata", "headers", "plan", "halves", "commit"})
    EXPECT_NE(phases->Find(p), nullptr) << p;
}

// An --endpoint that is no hub (one with a path) fails naming the URL it
// asked, not a bare "HTTP 404: no such route".
TEST(PullTest, AnEndpointThatIsNoHubSaysWhichUrl) {
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  auto o = Options(*sim, "home", 4, 1);
  o.hub.endpoint = sim->hub_url() + "/api";
  auto s = Pull(cache.path(), o);
  ASSERT_EQ(s.status().code(), StatusCode::kNotFound) << s.status().ToString();
  EXPECT_THAT(s.status().message(), HasSubstr(sim->hub_url() + "/api/api/models/exlr8/test/revision/main is no hub API route"));
}

TEST(PullTest, HfHubDisableProgressBarsSilencesTheProgressLinesAsNoProgressDoes) {
  auto sim = StartSim(TinyRelease());
  const std::string rank = " pull --endpoint " + sim->hub_url() + " --repo exlr8/test --manifest home --tp 4 --rank ";
  TempDir shown, silent, off;
  // stderr is not a terminal here, so the progress comes as log lines.
  const ShellRun with = Shell(Exlr8d() + rank + "0 --cache " + Quote(shown.path().string()));
  ASSERT_EQ(with.status, 0) << with.out;
  EXPECT_THAT(with.out, HasSubstr("exlr8d pull: "));
  for (const char* value : {"1", "true", "YES", "On"}) {
    SCOPED_TRACE(value);
    TempDir cache;
    const ShellRun quiet = Shell(std::string("HF_HUB_DISABLE_PROGRESS_BARS=") + value + " " + Exlr8d() + rank +
                                 "0 --cache " + Quote(cache.path().string()));
    ASSERT_EQ(quiet.status, 0) << quiet.out;
    EXPECT_THAT(quiet.out, Not(HasSubstr("exlr8d pull: ")));
  }
  const ShellRun no = Shell("HF_HUB_DISABLE_PROGRESS_BARS=0 " + Exlr8d() + rank + "1 --cache " +
                            Quote(off.path().string()));
  ASSERT_EQ(no.status, 0) << no.out;
  EXPECT_THAT(no.out, HasSubstr("exlr8d pull: "));
}

// The debug mode (HF_DEBUG=1, EXLR8_DEBUG=1, --debug) shows every request and
// its answer, and never the token, however it was given.
TEST(PullTest, DebugModeLogsEveryRequestAndAnswerButNeverTheToken) {
  const std::string token = "hf_DebugModeSecret42";
  auto sim = StartSim(TinyRelease(), token);
  const std::string rank = " pull exlr8/test --manifest home --tp 4 --rank 1 --endpoint " + sim->hub_url();
  auto count = [](const std::string& text, const std::string& what) {
    std::size_t n = 0;
    for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  for (const std::string how : {"HF_DEBUG=1 ", "EXLR8_DEBUG=true ", "--debug"}) {
    SCOPED_TRACE(how);
    TempDir cache;
    const bool flag = how.starts_with("--");
    const ShellRun r = Shell("HF_TOKEN=" + token + " " + (flag ? "" : how) + Exlr8d() + rank + " --cache " +
                             Quote(cache.path().string()) + (flag ? " " + how : ""));
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_THAT(r.out, HasSubstr("exlr8d debug: > GET " + sim->hub_url() +
                                 "/api/models/exlr8/test/revision/main (token sent)\n"));
    EXPECT_THAT(r.out, HasSubstr("exlr8d debug: < HTTP/1.1 200 for GET " + sim->hub_url() +
                                 "/api/models/exlr8/test/revision/main\n"));
    EXPECT_THAT(r.out, HasSubstr("exlr8d debug: < HTTP/1.1 302 Location: " + sim->cdn_url()));
    EXPECT_THAT(r.out, HasSubstr("?expires=...&sig=..."));  // the signature left out
    EXPECT_THAT(r.out, HasSubstr("exlr8d debug: < HTTP/1.1 206 for GET " + sim->cdn_url()));
    EXPECT_THAT(r.out, HasSubstr(" Range: bytes="));
    EXPECT_GT(count(r.out, "exlr8d debug: > "), 5u);
    EXPECT_EQ(count(r.out, "exlr8d debug: > "), count(r.out, "exlr8d debug: < "));  // an answer for each
    EXPECT_THAT(r.out, Not(HasSubstr(token)));
    EXPECT_THAT(r.out, Not(HasSubstr("DebugModeSecret")));
    EXPECT_THAT(r.out, Not(HasSubstr("Bearer")));
    EXPECT_THAT(r.out, Not(HasSubstr("Authorization")));
  }
  TempDir quiet;
  const ShellRun off = Shell("HF_DEBUG=0 HF_TOKEN=" + token + " " + Exlr8d() + rank + " --cache " +
                             Quote(quiet.path().string()));
  ASSERT_EQ(off.status, 0) << off.out;
  EXPECT_THAT(off.out, Not(HasSubstr("exlr8d debug:")));
}

// The plan says 92.55 MB and the pull fetched 93.42 MB: the summary says
// why (each width-file header is fetched twice, since two fetches must agree).
TEST(PullTest, TheSummarySaysWhyItFetchedMoreThanThePlan) {
  auto sim = StartSim(TinyRelease());
  TempDir library, cli;
  auto s = Pull(library.path(), Options(*sim, "home", 4, 1));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_GT(s->plan.totals.header_bytes, 0u);
  ASSERT_EQ(s->retries + s->refetches, 0u);
  EXPECT_EQ(s->bytes_fetched - s->bytes_written, s->plan.totals.header_bytes);  // the cause, exactly

  const std::string pull = Exlr8d() +
                           " pull exlr8/test --manifest home --tp 4 --rank 1 --no-progress --endpoint " +
                           sim->hub_url() + " --cache " + Quote(cli.path().string());
  const ShellRun first = Shell(pull);
  ASSERT_EQ(first.status, 0) << first.out;
  EXPECT_THAT(first.out, HasSubstr("\n  extra fetched    " + HumanBytes(s->plan.totals.header_bytes) +
                                   ": width-file headers are fetched twice (no checksum: two must agree)\n"));
  const ShellRun again = Shell(pull);  // everything reused: nothing extra
  ASSERT_EQ(again.status, 0) << again.out;
  EXPECT_THAT(again.out, Not(HasSubstr("extra fetched")));
}

TEST(PullTest, HelpAndMisspellingsAreAnsweredAsHuggingFaceUsersExpect) {
  const ShellRun help = Shell(Exlr8d() + " help pull");
  EXPECT_EQ(help.status, 0) << help.out;
  EXPECT_THAT(help.out, HasSubstr("usage: exlr8d pull"));
  const ShellRun dash_h = Shell(Exlr8d() + " pull -h");
  EXPECT_EQ(dash_h.status, 0) << dash_h.out;
  EXPECT_EQ(dash_h.out, help.out);
  const ShellRun typo = Shell(Exlr8d() + " pull --repoo exlr8/test");
  EXPECT_EQ(typo.status, 2) << typo.out;
  EXPECT_THAT(typo.out, HasSubstr("unknown option '--repoo' (did you mean '--repo'?)"));
  const ShellRun command = Shell(Exlr8d() + " pul --repo exlr8/test");
  EXPECT_EQ(command.status, 2) << command.out;
  EXPECT_THAT(command.out, HasSubstr("unknown command 'pul' (did you mean 'pull'?)"));
  const ShellRun unknown_help = Shell(Exlr8d() + " help stauts");
  EXPECT_EQ(unknown_help.status, 2) << unknown_help.out;
  EXPECT_THAT(unknown_help.out, HasSubstr("unknown command 'stauts' (did you mean 'status'?)"));
}

TEST(PullTest, DryRunFetchesOnlyPlanningInputs) {
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  auto o = Options(*sim, "home", 4, 1);
  o.dry_run = true;
  auto s = Pull(cache.path(), o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_GT(s->plan.totals.routed_halves, 0u);
  // index files + manifest + width headers, far less than the plan
  EXPECT_LT(s->bytes_fetched, s->plan.totals.bytes / 2);
  // What a pull would fetch: the plan less what is verified now, not the
  // whole plan when part of it is cached.
  EXPECT_FALSE(s->complete);
  EXPECT_GT(s->bytes_missing, 0u);
  EXPECT_LT(s->bytes_missing, s->plan.totals.bytes);  // what planning fetched is in the cache now
  auto real = Pull(cache.path(), Options(*sim, "home", 4, 1));
  ASSERT_TRUE(real.ok()) << real.status().ToString();
  EXPECT_EQ(real->bytes_fetched, s->bytes_missing);  // a clean link: exactly what it said
  auto again = Pull(cache.path(), o);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(again->complete);
  EXPECT_EQ(again->bytes_missing, 0u);
  EXPECT_EQ(again->ranges_missing, 0u);
  // The command line: its --json, and a cache path JSON must escape.
  const fs::path odd = cache.path() / "a \"quoted\" dir";
  const ShellRun dry = Shell(std::string(EXLR8_BIN_DIR) + "/exlr8d pull --repo exlr8/test --manifest home --tp 4 " +
                             "--rank 2 --endpoint " + sim->hub_url() + " --cache " + Quote(odd.string()) +
                             " --no-progress --dry-run --json");
  ASSERT_EQ(dry.status, 0) << dry.out;
  auto j = ParseJson(dry.out);
  ASSERT_TRUE(j.ok()) << j.status().ToString() << ": " << dry.out;
  EXPECT_TRUE(j->Find("dry_run")->as_bool());
  EXPECT_GT(*j->Find("bytes_missing")->as_uint64(), 0u);
  EXPECT_NE(j->Find("root")->as_string().find("\"quoted\""), std::string::npos);
}

}  // namespace
}  // namespace exlr8
