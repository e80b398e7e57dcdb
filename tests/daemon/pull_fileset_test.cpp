// `exlr8d pull` without a manifest: the whole fileset of a repository
// (LVQ5 files and the others), each file verified whole, against the hub
// simulator on loopback and a real cache; the crash test kills the real
// binary.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <thread>

#include "daemon/base/sqlite_db.h"
#include "daemon/scrub/scrub.h"
#include "format/byte_source.h"
#include "format/checksum.h"
#include "format/lvq5/index.h"
#include "format/lvq5/writer.h"
#include "tests/daemon/cache_test_util.h"
#include "tests/daemon/pull_test_util.h"
#include "tests/daemon/shell_util.h"

namespace exlr8 {
namespace {

using ::exlr8::testing::TempDir;

fs::path Lvq5Tiny() { return fs::path(EXLR8_SHARED_DIR) / "fixtures" / "lvq5-tiny"; }

// A writable copy of the fixture in `to`.
void CopyLvq5Tiny(const fs::path& to) {
  fs::copy(Lvq5Tiny(), to, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  for (const auto& e : fs::recursive_directory_iterator(to))
    fs::permissions(e.path(), fs::perms::owner_write, fs::perm_options::add);
}

// Overwrites one byte of `path` in place (same inode: a hub that opened it
// at start-up lists the old content's hash and serves the new bytes).
void FlipByteInPlace(const fs::path& path, std::uint64_t at) {
  std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
  ASSERT_TRUE(f.good()) << path;
  f.seekg(static_cast<std::streamoff>(at));
  char c = 0;
  f.get(c);
  f.seekp(static_cast<std::streamoff>(at));
  f.put(static_cast<char>(c ^ 0x5a));
  ASSERT_TRUE(f.good()) << path;
}

PullOptions FilesetOptions(const hubsim::HubSim& sim) {
  PullOptions o = Options(sim, "", 1, 0);
  o.repo = "lvq5/tiny";
  return o;
}

std::unique_ptr<hubsim::HubSim> StartLvq5Sim(const fs::path& dir, hubsim::FaultConfig faults = {}) {
  return StartSim(dir, "", faults, {"lvq5/tiny"});
}

std::vector<std::byte> Bytes(const fs::path& p) {
  const std::vector<char> c = ReadAll(p);
  std::vector<std::byte> out(c.size());
  std::memcpy(out.data(), c.data(), c.size());
  return out;
}

// The record index a file of `source` must have in the cache: computed here
// from the source with the reader alone (kinds, shapes, ranges, XXH64 of
// the source's bytes); empty for a file that is not LVQ5.
std::vector<FileRecord> ExpectedRecords(const fs::path& file) {
  const std::vector<std::byte> bytes = Bytes(file);
  if (file.extension() != ".bin" || bytes.size() < 4 || std::memcmp(bytes.data(), "LVQ5", 4) != 0) return {};
  SpanByteSource src(bytes, file.filename().string());
  auto index = lvq5::ReadIndex(src);
  EXPECT_TRUE(index.ok()) << index.status().ToString();
  if (!index.ok()) return {};
  std::vector<FileRecord> out;
  auto add = [&](const std::string& name, std::string kind, std::string shape, std::uint64_t begin,
                 std::uint64_t end) {
    out.push_back({name, std::move(kind), std::move(shape), begin, end - begin,
                   Xxh64::Hash(std::span<const std::byte>(bytes).subspan(begin, end - begin))});
  };
  for (const auto& m : index->matrices)
    add(m.name, lvq5::KindName(static_cast<std::uint32_t>(m.kind)),
        std::to_string(m.d_out) + "x" + std::to_string(m.d_in), m.offset, m.end);
  for (const auto& t : index->raw) {
    std::string dims;
    for (std::uint64_t d : t.dims) dims += (dims.empty() ? "" : "x") + std::to_string(d);
    add(t.name, t.tag == lvq5::RawTag::kF16 ? "f16" : "quant", dims, t.offset, t.end);
  }
  for (const auto& b : index->blobs) add(b.name, "blob", "", b.offset, b.end);
  return out;
}

// Every file of `source` is in the cache's only fileset, whole-verified,
// byte for byte, with the record index its LVQ5 structure gives.
void ExpectWholeFilesetCached(const fs::path& cache_dir, const fs::path& source) {
  auto cache = Cache::Open(cache_dir);
  ASSERT_TRUE(cache.ok()) << cache.status().ToString();
  auto sets = (*cache)->ListFilesets();
  ASSERT_TRUE(sets.ok());
  ASSERT_EQ(sets->size(), 1u);
  auto files = (*cache)->ListFiles((*sets)[0].id);
  ASSERT_TRUE(files.ok());
  std::size_t n = 0;
  for (const auto& e : fs::recursive_directory_iterator(source)) n += e.is_regular_file() ? 1 : 0;
  ASSERT_EQ(files->size(), n);
  for (const FileInfo& f : *files) {
    EXPECT_TRUE(f.whole_verified) << f.path;
    EXPECT_EQ(f.bytes_cached, f.size) << f.path;
    auto path = (*cache)->DataPath(f.id);
    ASSERT_TRUE(path.ok());
    EXPECT_EQ(ReadAll(*path), ReadAll(source / f.path)) << f.path;
    const std::vector<FileRecord> want = ExpectedRecords(source / f.path);
    auto got = (*cache)->Records(f.id);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_EQ(got->size(), want.size()) << f.path;
    for (std::size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ((*got)[i].name, want[i].name) << f.path << " record " << i;
      EXPECT_EQ((*got)[i].kind, want[i].kind) << f.path << " record " << i;
      EXPECT_EQ((*got)[i].shape, want[i].shape) << f.path << " record " << i;
      EXPECT_EQ((*got)[i].offset, want[i].offset) << f.path << " record " << i;
      EXPECT_EQ((*got)[i].length, want[i].length) << f.path << " record " << i;
      EXPECT_EQ((*got)[i].xxh64, want[i].xxh64) << f.path << " record " << i;
    }
  }
}

// A generated LVQ5 file of another geometry than the fixture's, `records`
// Tetra records of d_out x d_in (random words), an f16 raw tensor and a
// blob, written at `path`.
void WriteLvq5(const fs::path& path, std::uint32_t records, std::uint32_t d_out, std::uint32_t d_in) {
  std::ofstream out(path, std::ios::binary);
  ASSERT_TRUE(out.good()) << path;
  lvq5::Writer w([&](std::span<const std::byte> b) -> Status {
    out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
    return out.good() ? Status::Ok() : IOError("write failed");
  });
  lvq5::Header h;
  h.matrices = records;
  h.ball_fingerprint = lvq5::kBallFingerprint;
  h.tetra_fingerprint = *lvq5::ExpectedTetraFingerprint();
  h.default_kind = 1;
  h.kinds_mask = 6;
  ASSERT_TRUE(w.WriteHeader(h).ok());
  for (std::uint32_t i = 0; i < records; ++i)
    ASSERT_TRUE(w.WriteRandomTetraRecord("layers." + std::to_string(i) + ".w", d_out, d_in, 100 + i).ok());
  const auto norm = lvq5::RandomRawF16("norm.weight", {d_in}, 5);
  ASSERT_TRUE(w.BeginRaw(1).ok());
  ASSERT_TRUE(w.WriteRaw(norm).ok());
  ASSERT_TRUE(w.BeginBlobs(1).ok());
  const std::string cfg = "{\"x\": 1}";
  ASSERT_TRUE(w.WriteBlob("config.json", std::as_bytes(std::span(cfg))).ok());
  ASSERT_TRUE(w.Finish().ok());
}

TEST(PullFilesetTest, PullsEveryFileOfTheRevisionByteExact) {
  TempDir cache;
  auto sim = StartLvq5Sim(Lvq5Tiny());
  auto s = Pull(cache.path(), FilesetOptions(*sim));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(s->complete);
  EXPECT_EQ(s->bytes_missing, 0u);
  ExpectWholeFilesetCached(cache.path(), Lvq5Tiny());
  // A second run reuses everything.
  auto again = Pull(cache.path(), FilesetOptions(*sim));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(again->complete);
  EXPECT_EQ(again->bytes_fetched, 0u);
  EXPECT_EQ(again->bytes_reused, again->bytes_planned);
}

TEST(PullFilesetTest, AnotherGeometryGetsItsOwnRecordIndex) {
  TempDir release, cache;
  WriteLvq5(release.path() / "model-a.bin", 3, 7, 53);
  fs::create_directories(release.path() / "sub");
  WriteLvq5(release.path() / "sub/model-b.bin", 1, 2, 24);
  if (HasFatalFailure()) return;
  auto sim = StartLvq5Sim(release.path());
  auto s = Pull(cache.path(), FilesetOptions(*sim));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(s->complete);
  ExpectWholeFilesetCached(cache.path(), release.path());
}

TEST(PullFilesetTest, AStructurallyBadLvq5FileIsRefusedThoughItsSha256Matches) {
  TempDir release, cache;
  CopyLvq5Tiny(release.path());
  // shell_cap of the first matrix record becomes 13: the hub lists the
  // SHA-256 of these bytes, so only the structure check can refuse it.
  const std::vector<std::byte> good = Bytes(release.path() / "tiny-sealed.bin");
  SpanByteSource src(good, "tiny-sealed.bin");
  auto index = lvq5::ReadIndex(src);
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  ASSERT_FALSE(index->matrices.empty());
  const auto& m = index->matrices[0];
  const std::uint64_t shell_cap_at = m.offset + 4 + m.name.size() + 8;
  {
    std::fstream f(release.path() / "tiny-sealed.bin", std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(static_cast<std::streamoff>(shell_cap_at));
    const char thirteen[4] = {13, 0, 0, 0};
    f.write(thirteen, 4);
    ASSERT_TRUE(f.good());
  }
  auto sim = StartLvq5Sim(release.path());
  auto s = Pull(cache.path(), FilesetOptions(*sim));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kCorruption) << s.status().ToString();
  EXPECT_NE(s.status().message().find("tiny-sealed.bin"), std::string::npos) << s.status().ToString();
  EXPECT_NE(s.status().message().find("shell_cap"), std::string::npos) << s.status().ToString();
  auto c = Cache::Open(cache.path());
  ASSERT_TRUE(c.ok());
  auto sets = (*c)->ListFilesets();
  ASSERT_TRUE(sets.ok() && sets->size() == 1);
  auto info = (*c)->GetFile(*(*c)->FindFile((*sets)[0].id, "tiny-sealed.bin"));
  ASSERT_TRUE(info.ok());
  EXPECT_FALSE(info->whole_verified);
  EXPECT_EQ(info->bytes_cached, 0u);
  EXPECT_TRUE((*c)->Records(info->id)->empty());
}

TEST(PullFilesetTest, AHubOutageIsBridgedByAFilesetTheCacheHoldsWhole) {
  TempDir cache;
  auto sim = StartLvq5Sim(Lvq5Tiny());
  PullOptions o = FilesetOptions(*sim);
  auto s = Pull(cache.path(), o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  sim.reset();  // the hub is down: connections are refused
  o.hub.max_attempts = 2;
  auto offline = Pull(cache.path(), o);
  ASSERT_TRUE(offline.ok()) << offline.status().ToString();
  EXPECT_TRUE(offline->complete);
  EXPECT_TRUE(offline->served_from_cache);
  EXPECT_FALSE(offline->hub_error.empty());
  EXPECT_EQ(offline->bytes_fetched, 0u);
}

TEST(PullFilesetTest, TpOrRankWithoutAManifestIsRefused) {
  TempDir cache;
  auto sim = StartLvq5Sim(Lvq5Tiny());
  PullOptions o = FilesetOptions(*sim);
  o.tp = 2;
  auto s = Pull(cache.path(), o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
}

TEST(PullFilesetTest, AFileWhoseBytesDoNotMatchTheHubsSha256IsRefusedAndNotPresent) {
  TempDir release, cache;
  CopyLvq5Tiny(release.path());
  auto sim = StartLvq5Sim(release.path());
  // The hub lists the good file's SHA-256 and now serves other bytes.
  FlipByteInPlace(release.path() / "tiny-sealed.bin", 1000);
  if (HasFatalFailure()) return;
  auto s = Pull(cache.path(), FilesetOptions(*sim));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("tiny-sealed.bin"), std::string::npos) << s.status().ToString();
  auto c = Cache::Open(cache.path());
  ASSERT_TRUE(c.ok());
  auto sets = (*c)->ListFilesets();
  ASSERT_TRUE(sets.ok());
  ASSERT_EQ(sets->size(), 1u);
  auto f = (*c)->FindFile((*sets)[0].id, "tiny-sealed.bin");
  ASSERT_TRUE(f.ok());
  auto info = (*c)->GetFile(*f);
  ASSERT_TRUE(info.ok());
  EXPECT_FALSE(info->whole_verified);
  EXPECT_EQ(info->bytes_cached, 0u);
}

pid_t SpawnFilesetPull(const std::string& hub, const fs::path& cache, const fs::path& log) {
  const std::string bin = std::string(EXLR8_BIN_DIR) + "/exlr8d";
  std::fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    FILE* f = std::freopen(log.c_str(), "a", stdout);
    (void)f;
    dup2(fileno(stdout), 2);
    execl(bin.c_str(), bin.c_str(), "pull", "--repo", "lvq5/tiny", "--endpoint", hub.c_str(), "--cache",
          cache.c_str(), "--jobs", "4", "--commit-interval-ms", "100", "--write-behind", "64K",
          "--no-progress", "--json", static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

std::uint64_t LargestDurablePrefix(const fs::path& cache) {
  if (!fs::exists(cache / "exlr8d.db")) return 0;
  auto db = SqliteDb::Open((cache / "exlr8d.db").string());
  if (!db.ok()) return 0;
  auto q = (*db)->Prepare("SELECT max(durable_prefix) FROM files");
  if (!q.ok()) return 0;
  auto row = q->Step();
  if (!row.ok() || !*row) return 0;
  return static_cast<std::uint64_t>(q->Int(0));
}

TEST(PullFilesetTest, AKilledPullResumesFromTheDurablePrefixAndCompletes) {
  TempDir release, cache, logs;
  CopyLvq5Tiny(release.path());
  // An LVQ5 file large enough to be killed in the middle of (about 7.4 MB
  // at 2 MB/s).
  WriteLvq5(release.path() / "large.bin", 3, 4096, 2400);
  if (HasFatalFailure()) return;
  hubsim::FaultConfig f;
  f.throttle_bps = 2'000'000;
  f.on_hub = false;
  auto sim = StartLvq5Sim(release.path(), f);
  const pid_t pid = SpawnFilesetPull(sim->hub_url(), cache.path(), logs.path() / "pull.log");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  std::uint64_t prefix = 0;
  while (std::chrono::steady_clock::now() < deadline &&
         (prefix = LargestDurablePrefix(cache.path())) < 2'000'000)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_GE(prefix, 2'000'000u) << "no file became 2 MB durable in time";
  ASSERT_TRUE(WIFSIGNALED(status)) << "the pull ended before the kill";
  {  // nothing of the interrupted file is reported present
    auto c = Cache::Open(cache.path());
    ASSERT_TRUE(c.ok());
    auto sets = (*c)->ListFilesets();
    ASSERT_TRUE(sets.ok() && sets->size() == 1);
    auto large = (*c)->GetFile(*(*c)->FindFile((*sets)[0].id, "large.bin"));
    ASSERT_TRUE(large.ok());
    EXPECT_FALSE(large->whole_verified);
    EXPECT_EQ(large->bytes_cached, 0u);
  }
  PullOptions o = FilesetOptions(*sim);
  auto s = Pull(cache.path(), o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(s->complete);
  EXPECT_GE(s->bytes_resumed, prefix);
  ExpectWholeFilesetCached(cache.path(), release.path());
}

std::uint64_t RecordCount(const fs::path& source) {
  std::uint64_t n = 0;
  for (const auto& e : fs::recursive_directory_iterator(source))
    if (e.is_regular_file()) n += ExpectedRecords(e.path()).size();
  return n;
}

// Damages one byte in the middle of record `k` of `path` in the cache.
FileRecord DamageRecord(const fs::path& cache_dir, const std::string& path, std::size_t k) {
  auto cache = Cache::Open(cache_dir);
  EXPECT_TRUE(cache.ok());
  auto sets = (*cache)->ListFilesets();
  auto id = (*cache)->FindFile((*sets)[0].id, path);
  EXPECT_TRUE(id.ok());
  auto records = (*cache)->Records(*id);
  EXPECT_TRUE(records.ok() && records->size() > k);
  const FileRecord r = (*records)[k];
  FlipByteInPlace(*(*cache)->DataPath(*id), r.offset + r.length / 2);
  return r;
}

TEST(PullFilesetTest, VerifyChecksEveryRecordAndNamesADamagedOne) {
  TempDir cache;
  auto sim = StartLvq5Sim(Lvq5Tiny());
  auto s = Pull(cache.path(), FilesetOptions(*sim));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  {
    auto c = Cache::Open(cache.path());
    ASSERT_TRUE(c.ok());
    auto report = ScrubFileset(**c, (*(*c)->ListFilesets())[0].id);
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    EXPECT_TRUE(report->clean());
    EXPECT_EQ(report->records, RecordCount(Lvq5Tiny()));
    EXPECT_EQ(report->bytes_checked, report->bytes_recorded);
  }
  const FileRecord damaged = DamageRecord(cache.path(), "tiny-sealed.bin", 2);
  if (HasFatalFailure()) return;
  {
    auto c = Cache::Open(cache.path());
    ASSERT_TRUE(c.ok());
    auto report = ScrubFileset(**c, (*(*c)->ListFilesets())[0].id);
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    EXPECT_EQ(report->checks_failed, 1u);
    ASSERT_EQ(report->failures.size(), 1u);
    EXPECT_EQ(report->failures[0].file, "tiny-sealed.bin");
    EXPECT_NE(report->failures[0].error.find("'" + damaged.name + "'"), std::string::npos)
        << report->failures[0].error;
    EXPECT_TRUE(report->repaired);
    auto f = (*c)->GetFile(*(*c)->FindFile((*(*c)->ListFilesets())[0].id, "tiny-sealed.bin"));
    EXPECT_FALSE(f->whole_verified);
    EXPECT_EQ(f->bytes_cached, 0u);
  }
  // The next pull fetches it again, checks and indexes it anew.
  auto again = Pull(cache.path(), FilesetOptions(*sim));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(again->complete);
  ExpectWholeFilesetCached(cache.path(), Lvq5Tiny());
}

TEST(PullFilesetTest, TheCommandLinePullsShowsVerifiesAndEvictsAWholeFileset) {
  TempDir cache;
  auto sim = StartLvq5Sim(Lvq5Tiny());
  const std::string c = " --cache " + Quote(cache.path().string());
  ShellRun r = Shell(Exlr8d() + " pull --repo lvq5/tiny --dry-run --endpoint " + sim->hub_url() + c);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("the whole fileset"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("would fetch"), std::string::npos) << r.out;
  r = Shell(Exlr8d() + " pull --repo lvq5/tiny --tp 2 --rank 0 --endpoint " + sim->hub_url() + c);
  EXPECT_EQ(r.status, 2) << r.out;  // usage: tp and rank need a manifest
  // The repository as the argument, as `hf download ORG/NAME` takes it.
  r = Shell(Exlr8d() + " pull lvq5/tiny --endpoint " + sim->hub_url() + c + " --no-progress --json");
  ASSERT_EQ(r.status, 0) << r.out;
  auto pulled = ParseJson(r.out.substr(r.out.find('{')));
  ASSERT_TRUE(pulled.ok()) << r.out;
  EXPECT_TRUE(pulled->Find("complete")->as_bool()) << r.out;

  r = Shell(Exlr8d() + " status --repo lvq5/tiny --json" + c);
  ASSERT_EQ(r.status, 0) << r.out;
  auto st = ParseJson(r.out);
  ASSERT_TRUE(st.ok()) << r.out;
  std::size_t n_files = 0;
  for (const auto& e : fs::recursive_directory_iterator(Lvq5Tiny())) n_files += e.is_regular_file() ? 1 : 0;
  EXPECT_EQ(st->Find("kind")->as_string(), "lvq5") << r.out;
  EXPECT_EQ(st->Find("files_verified")->as_uint64().value_or(0), n_files) << r.out;
  EXPECT_EQ(st->Find("records")->as_uint64().value_or(0), RecordCount(Lvq5Tiny())) << r.out;
  EXPECT_TRUE(st->Find("complete")->as_bool()) << r.out;

  r = Shell(Exlr8d() + " list --json" + c);
  ASSERT_EQ(r.status, 0) << r.out;
  auto list = ParseJson(r.out);
  ASSERT_TRUE(list.ok()) << r.out;
  const JsonValue& set = list->Find("filesets")->as_array()[0];
  EXPECT_EQ(set.Find("kind")->as_string(), "lvq5") << r.out;
  EXPECT_EQ(set.Find("files_verified")->as_uint64().value_or(0), n_files) << r.out;
  EXPECT_EQ(set.Find("records")->as_uint64().value_or(0), RecordCount(Lvq5Tiny())) << r.out;
  r = Shell(Exlr8d() + " list" + c);
  EXPECT_NE(r.out.find("\n  latest pull: whole fileset: done\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\n  lvq5: " + std::to_string(n_files) + " of " + std::to_string(n_files) +
                       " files verified"),
            std::string::npos)
      << r.out;
  for (std::size_t at = 0, end; at < r.out.size(); at = end + 1) {  // read in 100 columns
    end = r.out.find('\n', at);
    if (end == std::string::npos) end = r.out.size();
    EXPECT_LE(end - at, 100u) << r.out.substr(at, end - at);
  }

  r = Shell(Exlr8d() + " verify --json" + c);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("\"records\":" + std::to_string(RecordCount(Lvq5Tiny()))), std::string::npos) << r.out;
  DamageRecord(cache.path(), "tiny-sealed.bin", 0);
  r = Shell(Exlr8d() + " verify" + c);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("tiny-sealed.bin"), std::string::npos) << r.out;
  r = Shell(Exlr8d() + " status --repo lvq5/tiny" + c);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("first missing  tiny-sealed.bin"), std::string::npos) << r.out;

  r = Shell(Exlr8d() + " gc --repo lvq5/tiny" + c);
  EXPECT_EQ(r.status, 0) << r.out;
  r = Shell(Exlr8d() + " list --json" + c);
  EXPECT_TRUE(ParseJson(r.out)->Find("filesets")->as_array().empty()) << r.out;
  EXPECT_FALSE(fs::exists(cache.path() / "lvq5" / "tiny"));
}

}  // namespace
}  // namespace exlr8
