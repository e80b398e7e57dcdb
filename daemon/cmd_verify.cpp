// exlr8d verify: scrub the cache (daemon/scrub/scrub.h). Every recorded
// byte is checked against the release's own checksums again; what fails is
// forgotten, so the next pull fetches exactly that again.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "client/cli/args.h"
#include "client/cli/cli.h"
#include "daemon/base/mutex.h"
#include "daemon/cache/cache.h"
#include "daemon/commands.h"
#include "daemon/fileset_arg.h"
#include "daemon/progress.h"
#include "daemon/scrub/scrub.h"
#include "daemon/signal_watcher.h"
#include "format/json.h"

namespace exlr8 {

namespace {

constexpr const char* kUsage = R"(usage: exlr8d verify [ORG/NAME [--revision REV | --commit SHA]]
                     [--check-only] [--threads N] [--cache DIR] [--json]
                     [--no-progress]

Checks every byte the cache records as verified against the release's own
checksums again, as a pull checked it: whole files by their SHA-256 (or git
blob SHA-1), expert halves by XXH64 with their index-file vectors, width-file
headers by parsing them against the index, each record of an LVQ5 file by
its XXH64 in the record index (in the pass that hashes the file). Bytes that no longer match (a disk
that rots, a file edited by hand) are forgotten: nothing reports them present
any more, and the next 'exlr8d pull' fetches exactly those bytes again.
Without ORG/NAME (or --repo ORG/NAME), every fileset in the cache.

  --check-only   report only, forget nothing. Reads a read-only view of the
                 index, so it also runs while a pull or 'exlr8d serve' owns
                 the cache.
  --threads N    hashing threads (default: one per core, at most 16)
  --json         one JSON object with a report per fileset, on stdout (the
                 first 1,000 failures of each in full; checks_failed counts all)

Exit status: 0 every check passed; 1 a check failed (its bytes forgotten,
unless --check-only); 2 usage; 3 no such fileset, or no cache in DIR; 7
another process owns the cache (use --check-only beside it); 130
interrupted (nothing forgotten).
)";

// How many failures the text output lists per fileset (--json: up to
// ScrubReport::kMaxFailureDetails).
constexpr std::size_t kFailuresShown = 20;

// "checked 4.2 GB of 8.1 GB, 1.9 GB/s": a bar on a terminal, a log line
// every 5 s otherwise.
class ScrubProgressDisplay {
 public:
  ScrubProgressDisplay(const ScrubCounters& counters, bool enabled)
      : counters_(counters), tty_(isatty(STDERR_FILENO) != 0), enabled_(enabled) {
    if (enabled_) thread_ = std::thread([this] { Loop(); });
  }
  ~ScrubProgressDisplay() {
    {
      MutexLock lock(&mu_);
      stop_ = true;
    }
    cv_.SignalAll();
    if (thread_.joinable()) thread_.join();
    if (drew_) std::fputc('\n', stderr);
  }

 private:
  void Loop() {
    const auto t0 = std::chrono::steady_clock::now();
    const auto every = std::chrono::milliseconds(tty_ ? 200 : 5000);
    MutexLock lock(&mu_);
    while (true) {
      const auto next = std::chrono::steady_clock::now() + every;
      while (!stop_ && cv_.WaitUntil(&mu_, next)) {
      }
      if (stop_) break;
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const std::uint64_t done = counters_.bytes_checked.load(std::memory_order_relaxed);
      const std::uint64_t total = counters_.bytes_total.load(std::memory_order_relaxed);
      const std::uint64_t failures = counters_.failures.load(std::memory_order_relaxed);
      const std::string line = "verify: checked " + HumanBytes(done) + " of " + HumanBytes(total) + ", " +
                               HumanBytes(secs > 0 ? static_cast<std::uint64_t>(done / secs) : 0) + "/s, " +
                               std::to_string(failures) + " failed";
      if (tty_) {
        // Within the terminal's width, so that a redraw never wraps.
        const auto room = static_cast<std::size_t>(std::max(TerminalColumns(stderr) - 1, 1));
        std::fprintf(stderr, "\r%s\x1b[K", line.substr(0, room).c_str());
        drew_ = true;
      } else {
        std::fprintf(stderr, "%s\n", line.c_str());
      }
      std::fflush(stderr);
    }
  }

  const ScrubCounters& counters_;
  bool tty_;
  bool enabled_;
  bool drew_ = false;
  Mutex mu_;
  CondVar cv_;  // stop
  bool stop_ EXLR8_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

void PrintReport(const ScrubReport& r) {
  const std::uint64_t rate = r.seconds > 0 ? static_cast<std::uint64_t>(r.bytes_checked / r.seconds) : 0;
  std::printf("%s@%s: checked %s of %s recorded in %.2f s (%s/s): %llu whole files, %llu halves, %llu headers\n",
              r.repo.c_str(), r.commit.substr(0, 8).c_str(), HumanBytes(r.bytes_checked).c_str(),
              HumanBytes(r.bytes_recorded).c_str(), r.seconds, HumanBytes(rate).c_str(),
              static_cast<unsigned long long>(r.whole_files), static_cast<unsigned long long>(r.halves),
              static_cast<unsigned long long>(r.headers));
  if (r.records > 0)
    std::printf("  %llu LVQ5 records checked against the record index\n",
                static_cast<unsigned long long>(r.records));
  for (std::size_t i = 0; i < r.failures.size() && i < kFailuresShown; ++i) {
    const ScrubFailure& f = r.failures[i];
    std::printf("  FAILED %s (%s, bytes %llu..%llu): %s\n", f.what.c_str(), f.file.c_str(),
                static_cast<unsigned long long>(f.offset), static_cast<unsigned long long>(f.offset + f.length),
                f.error.c_str());
  }
  if (r.checks_failed > std::min<std::uint64_t>(r.failures.size(), kFailuresShown))
    std::printf("  ... and %llu more (--json lists up to %zu)\n",
                static_cast<unsigned long long>(r.checks_failed - std::min<std::uint64_t>(r.failures.size(),
                                                                                           kFailuresShown)),
                ScrubReport::kMaxFailureDetails);
  if (r.bytes_unchecked > 0)
    std::printf("  %s of width files not checked: their index file failed or is not cached; verify again after the "
                "next pull\n",
                HumanBytes(r.bytes_unchecked).c_str());
  if (r.bytes_unaccounted > 0)
    std::printf("  %s recorded that no checksum covers (not written by this exlr8d?)\n",
                HumanBytes(r.bytes_unaccounted).c_str());
  if (r.repaired) {
    std::printf("  forgot %s (%llu failed check%s): 'exlr8d pull' fetches them again\n",
                HumanBytes(r.bytes_forgotten).c_str(), static_cast<unsigned long long>(r.checks_failed),
                r.checks_failed == 1 ? "" : "s");
  } else if (!r.clean()) {
    std::printf("  %llu check%s failed; nothing forgotten (--check-only)\n",
                static_cast<unsigned long long>(r.checks_failed), r.checks_failed == 1 ? "" : "s");
  }
}

}  // namespace

int RunVerifyCommand(const std::vector<std::string>& argv) {
  constexpr const char* kProg = "exlr8d verify";
  Args args;
  if (auto exit = ParseCommandLine(kProg, kUsage, argv, {"cache", "repo", "revision", "commit", "threads"},
                                   {"check-only", "json", "no-progress"}, kRepositoryArgument, &args))
    return *exit;
  if ((args.Has("revision") || args.Has("commit")) && !args.Has("repo"))
    return ReportError(
        kProg, InvalidArgumentError("--revision and --commit need the repository (ORG/NAME or --repo)"));
  auto threads = args.GetInt("threads", 0, 0, 256);
  if (!threads.ok()) return ReportError(kProg, threads.status());
  const bool check_only = args.Flag("check-only");
  const Result<std::string> cache_dir = CacheDirOr(args.Get("cache"));
  if (!cache_dir.ok()) return ReportError(kProg, cache_dir.status());
  const std::string& dir = *cache_dir;
  // Nothing to check where no cache is (and none is made there).
  if (!HasCacheIndex(dir))
    return ReportError(kProg, NotFoundError("no exlr8d cache in " + dir + " (no exlr8d.db)"));
  CacheOptions cache_options;
  cache_options.use_reserve = true;  // forgetting what failed needs room in the index, on a full disk too
  auto cache = check_only ? Cache::OpenReadOnly(dir) : Cache::Open(dir, cache_options);
  if (!cache.ok()) {
    Status s = cache.status();
    if (s.code() == StatusCode::kFailedPrecondition && !check_only)
      s = FailedPreconditionError(s.message() + " (verify forgets what fails, so it needs the lock; " +
                                  "--check-only runs beside its owner)");
    return ReportError(kProg, s);
  }

  std::vector<FilesetInfo> sets;
  if (args.Has("repo")) {
    auto set = FindFilesetArg(**cache, args);
    if (!set.ok()) return ReportError(kProg, set.status());
    sets.push_back(*std::move(set));
  } else {
    auto all = (*cache)->ListFilesets();
    if (!all.ok()) return ReportError(kProg, all.status());
    sets = *std::move(all);
  }

  std::atomic<bool> cancel{false};
  SignalWatcher signals([&cancel](int) { cancel.store(true); });
  ScrubCounters counters;
  ScrubOptions options;
  options.repair = !check_only;
  options.threads = static_cast<int>(*threads);
  options.cancel = &cancel;
  options.counters = &counters;

  const bool json = args.Flag("json");
  JsonValue reports = JsonValue::Array();
  bool clean = true;
  for (const FilesetInfo& set : sets) {
    Result<ScrubReport> report = [&] {
      ScrubProgressDisplay progress(counters,
                                    !json && !args.Flag("no-progress") && !ProgressBarsDisabledByEnvironment());
      return ScrubFileset(**cache, set.id, options);
    }();
    counters.bytes_total = counters.bytes_checked = counters.failures = 0;
    if (!report.ok()) return ReportError(kProg, report.status());
    clean = clean && report->clean();
    if (json) {
      reports.Push(ScrubReportJson(*report));
    } else {
      PrintReport(*report);
    }
  }
  if (json) {
    std::printf("%s\n", JsonValue::Object({{"cache", JsonValue::String(dir)},
                                           {"clean", JsonValue::Bool(clean)},
                                           {"filesets", std::move(reports)}})
                            .Dump()
                            .c_str());
  } else if (sets.empty()) {
    std::printf("%s: no filesets\n", dir.c_str());
  }
  return clean ? kExitOk : kExitVerifyFailed;
}

}  // namespace exlr8
