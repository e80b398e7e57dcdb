// exlr8d list | pin | unpin: what the cache holds, and which filesets gc
// must keep.
//
// pin and unpin open the cache like any other command: while a pull owns it
// they fail at once with exit status 7. list then reads a read-only view of
// the index instead (Cache::OpenReadOnly), so it shows a running pull's
// progress as of its last commit.
#include <algorithm>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "client/cli/args.h"
#include "client/cli/cli.h"
#include "daemon/api/cache_report.h"
#include "daemon/cache/cache.h"
#include "daemon/commands.h"
#include "daemon/fileset_arg.h"
#include "format/json.h"

namespace exlr8 {

namespace {

constexpr const char* kListUsage = R"(usage: exlr8d list [--cache DIR] [--json]

Lists the filesets in the cache, most recently used first: repo, the revision
last resolved to the commit, how many of the release's bytes are verified in
the cache, pins, when 'exlr8d verify' last checked it (and how many checks
failed then), and the fileset's latest pull (manifest, TP rank, state;
while it runs, its bytes done as of its last commit). A fileset pulled whole
that holds LVQ5 files gets a second line: files verified, LVQ5 files and
their indexed records (JSON: kind "lvq5", files_verified, records). Works while a pull owns
the cache (a read-only view of its index).
)";

constexpr const char* kPinUsage = R"(usage: exlr8d pin|unpin ORG/NAME [--revision REV | --commit SHA]
                         [--holder NAME] [--cache DIR]

ORG/NAME may also be given as --repo ORG/NAME.

A pinned fileset is never evicted by 'exlr8d gc'. Pins are named by holder
(default "user"; any text without control characters, at most 255 bytes), so
several owners can pin one fileset and each removes only its own. The
fileset is the commit REV (default main) resolved to when it was last
pulled, or the commit SHA (40 hex digits, or a unique prefix of at least 7).
Pin and unpin are idempotent. Exit status 3 when the cache has no such
fileset.
)";

// Index pins by holder, then process pins as "holder (pid N)".
std::string JoinPins(const FilesetInfo& s) {
  std::string out;
  for (const auto& p : s.pins) out += (out.empty() ? "" : ", ") + p;
  for (const auto& p : s.process_pins)
    out += (out.empty() ? "" : ", ") + p.holder + " (pid " + std::to_string(p.pid) + ")";
  return out;
}

// The table is read in 100 columns: one row of fixed columns per fileset,
// then its details, one per line, wrapped at spaces.
constexpr std::size_t kListWidth = 100;
constexpr std::size_t kRepoWidth = 28;
constexpr std::size_t kRevisionWidth = 10;

// "  label: text", wrapped at spaces, continued lines indented deeper. A
// word wider than the line is never cut.
void PrintDetail(const char* label, const std::string& text) {
  std::string line = "  " + std::string(label) + ":";
  std::size_t words_on_line = 0;
  bool continued = false;
  std::size_t at = 0;
  while (at < text.size()) {
    std::size_t end = text.find(' ', at);
    if (end == std::string::npos) end = text.size();
    const std::string_view word = std::string_view(text).substr(at, end - at);
    at = end + 1;
    if (word.empty()) continue;
    if (words_on_line > 0 && line.size() + 1 + word.size() > kListWidth) {
      std::printf("%s\n", line.c_str());
      line = "    ";
      words_on_line = 0;
      continued = true;
    }
    if (words_on_line > 0 || !continued) line += ' ';
    line += word;
    ++words_on_line;
  }
  std::printf("%s\n", line.c_str());
}

void PrintTable(const Cache& cache, const CacheReport& report) {
  if (report.owned_by_another_process.value_or(false))
    std::printf("(another exlr8d owns %s: a read-only view as of its last commit)\n", cache.dir().c_str());
  if (report.filesets.empty()) {
    std::printf("%s: no filesets\n", cache.dir().c_str());
    return;
  }
  std::printf("%-28s %-10s %-8s %9s %9s %6s  %s\n", "REPO", "REVISION", "COMMIT", "CACHED", "OF", "FILES",
              "LAST USED");
  for (std::size_t i = 0; i < report.filesets.size(); ++i) {
    const FilesetInfo& s = report.filesets[i];
    // A name wider than its column gets a line of its own, never cut.
    std::string repo = s.repo;
    std::string revision = s.revision;
    if (repo.size() > kRepoWidth || revision.size() > kRevisionWidth) {
      std::printf("%s\n", (revision.size() > kRevisionWidth ? repo + "@" + revision : repo).c_str());
      repo.clear();
      if (revision.size() > kRevisionWidth) revision.clear();
    }
    std::printf("%-28s %-10s %-8s %9s %9s %6llu  %s\n", repo.c_str(), revision.c_str(),
                s.commit.substr(0, 8).c_str(), HumanBytes(s.bytes_cached).c_str(),
                HumanBytes(s.bytes_total).c_str(), static_cast<unsigned long long>(s.file_count),
                UtcTime(s.last_used_ms).c_str());
    if (const std::string pins = JoinPins(s); !pins.empty()) PrintDetail("pins", pins);
    if (s.verified_ms)
      PrintDetail(
          "verified",
          UtcTime(*s.verified_ms) +
              (s.verify_failures == 0 ? " clean" : " " + std::to_string(s.verify_failures) + " failed"));
    if (const auto& latest = report.latest_pull[i]) {
      const PullInfo& p = *latest;
      std::string pull = (p.spec.manifest.empty() ? std::string("whole fileset")
                                                  : p.spec.manifest + " TP " + std::to_string(p.spec.tp) +
                                                        " rank " + std::to_string(p.spec.rank)) +
                         ": " + std::string(PullStateName(p.state));
      if (p.state == PullState::kRunning) {
        pull += ", " + HumanBytes(p.counters.bytes_fetched + p.counters.bytes_reused) + " of " +
                HumanBytes(p.counters.bytes_planned);
        if (const std::uint64_t rate = FetchRate(p)) pull += " at " + HumanBytes(rate) + "/s";
      }
      PrintDetail("latest pull", pull);
    }
    if (s.lvq5_files > 0)
      PrintDetail("lvq5", std::to_string(s.files_verified) + " of " + std::to_string(s.file_count) +
                              " files verified, " + std::to_string(s.lvq5_files) + " LVQ5 files with " +
                              std::to_string(s.records) + " records indexed");
  }
}

int RunPinOrUnpin(const std::vector<std::string>& argv, bool pin) {
  const char* prog = pin ? "exlr8d pin" : "exlr8d unpin";
  Args args;
  if (auto exit = ParseCommandLine(prog, kPinUsage, argv, {"cache", "repo", "revision", "commit", "holder"},
                                   {}, kRepositoryArgument, &args))
    return *exit;
  const std::string holder = args.GetOr("holder", "user");
  if (Result<std::string> repo = args.Require("repo"); !repo.ok()) return ReportError(prog, repo.status());
  const Result<std::string> cache_dir = CacheDirOr(args.Get("cache"));
  if (!cache_dir.ok()) return ReportError(prog, cache_dir.status());
  const std::string& dir = *cache_dir;
  if (!HasCacheIndex(dir)) return ReportError(prog, NotFoundError("no exlr8d cache in " + dir + " (no exlr8d.db)"));
  CacheOptions options;
  options.use_reserve = true;  // unpin before gc on a full disk
  auto cache = Cache::Open(dir, options);
  if (!cache.ok()) return ReportError(prog, cache.status());
  auto set = FindFilesetArg(**cache, args);
  if (!set.ok()) return ReportError(prog, set.status());
  // Unpinning what is not pinned changes nothing and is no error (a stop
  // script may run twice), but say so: a mistyped holder must not look
  // like success while the real pin stays.
  if (!pin && std::find(set->pins.begin(), set->pins.end(), holder) == set->pins.end()) {
    std::string others;
    for (const std::string& p : set->pins) others += (others.empty() ? "" : ", ") + std::string("'") + p + "'";
    std::printf("%s@%s (commit %s) has no pin of '%s': nothing to unpin (%s)\n", set->repo.c_str(),
                set->revision.c_str(), set->commit.c_str(), holder.c_str(),
                others.empty() ? "it has no pins" : ("its pins: " + others).c_str());
    return 0;
  }
  Status s = pin ? (*cache)->Pin(set->id, holder) : (*cache)->Unpin(set->id, holder);
  if (!s.ok()) return ReportError(prog, s);
  std::printf("%s %s@%s (commit %s) for '%s'\n", pin ? "pinned" : "unpinned", set->repo.c_str(),
              set->revision.c_str(), set->commit.c_str(), holder.c_str());
  return 0;
}

}  // namespace

int RunListCommand(const std::vector<std::string>& argv) {
  Args args;
  if (auto exit = ParseCommandLine("exlr8d list", kListUsage, argv, {"cache"}, {"json"}, 0, &args)) return *exit;
  const Result<std::string> cache_dir = CacheDirOr(args.Get("cache"));
  if (!cache_dir.ok()) return ReportError("exlr8d list", cache_dir.status());
  const std::string& dir = *cache_dir;
  if (!HasCacheIndex(dir)) {  // nothing pulled there yet: an empty list, and no cache made
    CacheReport empty;
    empty.owned_by_another_process = false;
    if (args.Flag("json")) {
      std::printf("%s\n", CacheReportJson(empty).c_str());
    } else {
      std::printf("%s: no filesets (no exlr8d cache there yet)\n", dir.c_str());
    }
    return 0;
  }
  CacheOptions at_once;
  at_once.lock_wait = {};  // a running pull: read its figures instead, no waiting
  auto cache = Cache::Open(dir, at_once);
  const bool locked = !cache.ok() && cache.status().code() == StatusCode::kFailedPrecondition;
  if (locked || (!cache.ok() && cache.status().code() == StatusCode::kPermissionDenied)) {
    // Locked by a running pull (or an index this binary cannot migrate,
    // which the read-only view reports in its own words), or a cache this
    // user may read but not write.
    auto view = Cache::OpenReadOnly(dir);
    cache = view.ok() ? std::move(view) : Result<std::unique_ptr<Cache>>(cache.status());
  }
  if (!cache.ok()) return ReportError("exlr8d list", cache.status());
  auto report = ReadCacheReport(**cache);
  if (!report.ok()) return ReportError("exlr8d list", report.status());
  report->owned_by_another_process = locked && (*cache)->read_only();
  if (args.Flag("json")) {
    std::printf("%s\n", CacheReportJson(*report).c_str());
  } else {
    PrintTable(**cache, *report);
  }
  return 0;
}

int RunPinCommand(const std::vector<std::string>& argv) { return RunPinOrUnpin(argv, true); }
int RunUnpinCommand(const std::vector<std::string>& argv) { return RunPinOrUnpin(argv, false); }

}  // namespace exlr8
