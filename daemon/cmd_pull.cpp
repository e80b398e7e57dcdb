// exlr8d pull ORG/NAME [--revision REV] --manifest NAME|PATH --tp N --rank R ...
#include <signal.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "client/cli/args.h"
#include "client/cli/cli.h"
#include "daemon/commands.h"
#include "daemon/hub/hub_client.h"
#include "daemon/progress.h"
#include "daemon/pull/pull_job.h"
#include "daemon/signal_watcher.h"
#include "format/json.h"

namespace exlr8 {

namespace {

// The most transfers in flight the adaptive limit reaches (no --jobs).
constexpr int kAdaptiveJobsCeiling = 128;

constexpr const char* kUsage =
    R"(usage: exlr8d pull ORG/NAME --manifest NAME|PATH --tp N --rank R [options]
       exlr8d pull ORG/NAME [--revision REV] [options]

Fetches exactly the bytes TP rank R of N needs under a manifest from a Hugging
Face compatible hub, verifies every slice, and keeps them in the local cache
(<cache>/<org>/<name>/<commit>/<path>, holes where other ranks' bytes are).
Bytes already verified in the cache are not fetched again; an interrupted pull
resumes where it stopped.

  ORG/NAME               repository on the hub (or --repo ORG/NAME)
  --revision REV         branch, tag or commit (default main); resolved once
  --manifest NAME|PATH   manifest name (home, down1, up1, ...), a repo path, or a
                         local JSON file with a custom width mix
  --tp N --rank R        tensor-parallel degree and this node's rank
                         Without --manifest (and --tp, --rank): the whole
                         fileset, every file of the revision, each verified
                         by the hub's SHA-256 (git blob SHA-1 for small
                         regular files) and an LVQ5 file also by its
                         structure, with a per-record index
  --endpoint URL         hub or mirror (default $HF_ENDPOINT, else https://huggingface.co)
  --cache DIR            cache directory (default $EXLR8_CACHE, else
                         $XDG_CACHE_HOME/exlr8, else ~/.cache/exlr8)
  --jobs J               exactly J transfers in flight (default: adaptive,
                         from 64, between 4 and 128 as throughput grows;
                         backs off on 429/503, errors, full buffers)
  --h2-streams S         HTTP/2 streams per connection: transfers spread over
                         ceil(J/S) connections per host (default 4, and 16
                         without --jobs where answers come within 2 ms;
                         S >= J: all on one multiplexed connection). Ranges
                         of 4 MiB or more get connections of their own
  --token-file FILE      token file (default: $HF_TOKEN, else $HF_TOKEN_PATH,
                         else $HF_HOME/token); wins over $HF_TOKEN
  --proxy URL            proxy for every request (default: HTTPS_PROXY etc.)
  --ca-bundle FILE       CA certificates (PEM) to verify HTTPS servers with,
                         e.g. a mirror's private CA (default: $CURL_CA_BUNDLE,
                         else $REQUESTS_CA_BUNDLE, else $SSL_CERT_FILE, else
                         the system's store)
  --limit-rate BYTES     total download rate limit, e.g. 200M (bytes/s)
  --budget BYTES         refuse to grow the cache past this size
  --make-room            when the bytes to fetch do not fit (disk or budget),
                         evict what 'exlr8d gc' would (unpinned filesets no
                         process holds, least recently used first), only as
                         much as needed, instead of failing
  --coalesce-gap BYTES   merge ranges whose gap is <= BYTES (default 0)
  --offline              use the cache only (also HF_HUB_OFFLINE=1). Without
                         it, a hub that cannot be reached (or answers 5xx or
                         429 on every try) still lets a rank the cache holds
                         complete be served, at the commit the revision last
                         resolved to here; the summary says so
  --dry-run              fetch only what planning needs, print the plan
  --no-progress          no progress bar or progress log lines (also
                         HF_HUB_DISABLE_PROGRESS_BARS=1)
  --json                 print the summary as JSON on stdout
  --debug                log every request and answer line to stderr
                         (method, URL with the query's values left out,
                         range, status, redirect), never the token; no
                         progress bar (also HF_DEBUG=1 or EXLR8_DEBUG=1)
  --background-jobs N    transfers the dense, vocab and other whole files may
                         use while the index files and headers are fetched
                         (default: a quarter of --jobs; 0: start them with
                         the halves)
  --write-threads N      threads writing and hashing what arrives, 1-4
                         (default: a quarter of the cores, at least 1)
  --commit-interval-ms MS  how often verified bytes are made durable and
                         recorded (default 1000); a crash refetches at most
                         what arrived since the last commit
  --write-behind BYTES   start writing a file's pages to disk after this many
                         new bytes, before the commit needs them durable
                         (default 8M; 0: only at commits)

Exit status: 0 when everything in the plan is verified in the cache; 1 when
the pull ended without that; 2 usage; 3 corrupt or missing data; 4 network or
I/O; 5 permission (token); 6 out of space or budget; 7 cache locked or
offline with missing bytes; 130 interrupted.
)";

// "resolve 0.01 s, list 0.00 s, ..." or, for JSON, "\"resolve\":0.010,...":
// the phases the pull went through, with the wall time spent in each.
std::string PhaseTimes(const PullSummary& s) {
  std::string out;
  char buf[64];
  for (int i = 0; i < kPullPhaseCount; ++i) {
    const auto phase = static_cast<PullPhase>(i);
    if (phase == PullPhase::kStarting || phase == PullPhase::kDone || phase == PullPhase::kFailed) continue;
    if (!out.empty()) out += ", ";
    std::snprintf(buf, sizeof buf, "%s %.2f s", std::string(PullPhaseName(phase)).c_str(), s.phase_s[i]);
    out += buf;
  }
  return out;
}

// Why the pull received more bytes than it wrote, so that its totals and
// the plan's differ: "X: why; why" for the summary's "extra fetched" line,
// or "" when it did not.
std::string ExtraFetched(const PullSummary& s) {
  if (s.bytes_fetched <= s.bytes_written) return "";
  std::vector<std::string> why;
  // No checksum covers a width file's header (spec 5.3): HeaderStep records
  // one only when two fetches agree.
  if (s.plan.totals.header_bytes > 0)
    why.push_back("width-file headers are fetched twice (no checksum: two must agree)");
  if (s.refetches > 0 || s.checksum_failures > 0) why.push_back("bytes that failed their checks, refetched");
  if (s.retries > 0) why.push_back("answers cut short, retried");
  if (s.plan.totals.bytes > s.plan.totals.needed_bytes) why.push_back("other ranks' bytes (--coalesce-gap)");
  if (why.empty()) why.push_back("received and not kept (--debug shows every request)");
  std::string out = HumanBytes(s.bytes_fetched - s.bytes_written) + ": ";
  for (std::size_t i = 0; i < why.size(); ++i) out += (i == 0 ? "" : "; ") + why[i];
  return out;
}

void PrintSummary(const PullSummary& s, bool json, bool dry_run) {
  const double mbps = s.elapsed_s > 0 ? static_cast<double>(s.bytes_fetched) / s.elapsed_s : 0;
  if (json) {
    // Built, not printed: a path or a name with a quote stays valid JSON.
    std::vector<JsonValue::Member> phases;
    for (int i = 0; i < kPullPhaseCount; ++i) {
      const auto phase = static_cast<PullPhase>(i);
      if (phase == PullPhase::kStarting || phase == PullPhase::kDone || phase == PullPhase::kFailed) continue;
      phases.emplace_back(std::string(PullPhaseName(phase)), JsonValue::Double(std::round(s.phase_s[i] * 1000) / 1000));
    }
    const auto u = [](std::uint64_t v) { return JsonValue::UInt(v); };
    const JsonValue out = JsonValue::Object({
        {"repo", JsonValue::String(s.repo)},
        {"revision", JsonValue::String(s.revision)},
        {"commit", JsonValue::String(s.commit)},
        {"root", JsonValue::String(s.root.string())},
        {"dry_run", JsonValue::Bool(dry_run)},
        {"complete", JsonValue::Bool(s.complete)},
        {"bytes_planned", u(s.bytes_planned)},
        {"bytes_missing", u(s.bytes_missing)},
        {"ranges_missing", u(s.ranges_missing)},
        {"bytes_fetched", u(s.bytes_fetched)},
        {"bytes_reused", u(s.bytes_reused)},
        {"bytes_resumed", u(s.bytes_resumed)},
        {"bytes_written", u(s.bytes_written)},
        {"requests", u(s.requests)},
        {"retries", u(s.retries)},
        {"refetches", u(s.refetches)},
        {"checksum_failures", u(s.checksum_failures)},
        {"resolves", u(s.resolves)},
        {"jobs", JsonValue::Object({{"adaptive", JsonValue::Bool(s.jobs_adaptive)},
                                    {"limit", u(s.jobs_limit)},
                                    {"peak", u(s.jobs_peak)},
                                    {"backoffs", u(s.jobs_backoffs)},
                                    {"h2_streams", u(s.h2_streams)}})},
        {"routed_halves", u(s.plan.totals.routed_halves)},
        {"shared_halves", u(s.plan.totals.shared_halves)},
        {"evicted_filesets", u(s.evicted.size())},
        {"bytes_evicted", u(s.bytes_evicted)},
        {"bytes_lost", u(s.bytes_lost)},
        {"served_from_cache", JsonValue::Bool(s.served_from_cache)},
        {"hub_error", s.hub_error.empty() ? JsonValue::Null() : JsonValue::String(s.hub_error)},
        {"elapsed_s", JsonValue::Double(std::round(s.elapsed_s * 1000) / 1000)},
        {"bytes_per_second", u(static_cast<std::uint64_t>(std::llround(mbps)))},
        {"phase_s", JsonValue::Object(std::move(phases))},
    });
    std::printf("%s\n", out.Dump().c_str());
    return;
  }
  if (s.plan.manifest.empty())
    std::printf("pulled %s@%s (commit %s), the whole fileset\n", s.repo.c_str(), s.revision.c_str(),
                s.commit.c_str());
  else
    std::printf("pulled %s@%s (commit %s), manifest %s, TP %d rank %d\n", s.repo.c_str(), s.revision.c_str(),
                s.commit.c_str(), s.plan.manifest.c_str(), s.plan.tp, s.plan.rank);
  std::printf("  cache            %s\n", s.root.c_str());
  if (!s.hub_error.empty())
    std::printf(
        "  hub              could not be asked what %s is now (%s); served from the cache: commit %s, what "
        "%s last resolved to here, where the rank is complete\n",
        s.revision.c_str(), s.hub_error.c_str(), s.commit.c_str(), s.revision.c_str());
  if (s.plan.manifest.empty())
    std::printf("  planned          %s (%llu files, every file of the revision)\n",
                HumanBytes(s.bytes_planned).c_str(), static_cast<unsigned long long>(s.plan.files.size()));
  else
    std::printf("  planned          %s (%llu routed + %llu shared halves, %llu files; release %s)\n",
                HumanBytes(s.bytes_planned).c_str(),
                static_cast<unsigned long long>(s.plan.totals.routed_halves),
                static_cast<unsigned long long>(s.plan.totals.shared_halves),
                static_cast<unsigned long long>(s.plan.files.size()),
                HumanBytes(s.plan.totals.release_bytes).c_str());
  if (s.plan.totals.bytes > s.plan.totals.needed_bytes)
    std::printf("  requests span    %s (--coalesce-gap: %s of other ranks' bytes fetched and dropped, never "
                "written)\n",
                HumanBytes(s.plan.totals.bytes).c_str(),
                HumanBytes(s.plan.totals.bytes - s.plan.totals.needed_bytes).c_str());
  std::printf("  fetched          %s\n", HumanBytes(s.bytes_fetched).c_str());
  if (const std::string extra = ExtraFetched(s); !extra.empty())
    std::printf("  extra fetched    %s\n", extra.c_str());
  std::printf("  reused           %s (already verified in the cache)\n", HumanBytes(s.bytes_reused).c_str());
  if (s.bytes_resumed > 0)
    std::printf("  resumed          %s (interrupted downloads, read back from the cache and verified)\n",
                HumanBytes(s.bytes_resumed).c_str());
  if (s.bytes_lost > 0)
    std::printf("  lost             %s recorded but no longer in the cache directory (files deleted or cut short "
                "by hand): fetched again\n",
                HumanBytes(s.bytes_lost).c_str());
  if (!s.evicted.empty())
    std::printf("  made room        evicted %zu fileset%s (%s), least recently used first (--make-room)\n",
                s.evicted.size(), s.evicted.size() == 1 ? "" : "s", HumanBytes(s.bytes_evicted).c_str());
  std::printf("  requests         %llu (%llu retries, %llu refetches, %llu /resolve/)\n",
              static_cast<unsigned long long>(s.requests), static_cast<unsigned long long>(s.retries),
              static_cast<unsigned long long>(s.refetches), static_cast<unsigned long long>(s.resolves));
  if (s.jobs_adaptive)
    std::printf(
        "  in flight        adaptive: %llu transfers at the end, %llu at most, %llu backoffs, %llu per "
        "HTTP/2 connection (--jobs N fixes it at N)\n",
        static_cast<unsigned long long>(s.jobs_limit), static_cast<unsigned long long>(s.jobs_peak),
        static_cast<unsigned long long>(s.jobs_backoffs), static_cast<unsigned long long>(s.h2_streams));
  else if (s.jobs_limit > 0)
    std::printf("  in flight        %llu transfers (--jobs)\n",
                static_cast<unsigned long long>(s.jobs_limit));
  std::printf("  checksum errors  %llu (discarded and refetched)\n", static_cast<unsigned long long>(s.checksum_failures));
  std::printf("  time             %.2f s, %s/s\n", s.elapsed_s, HumanBytes(static_cast<std::uint64_t>(mbps)).c_str());
  std::printf("  phases           %s\n", PhaseTimes(s).c_str());
  std::printf("  verified         %s\n", s.complete ? "yes: every byte of the plan is in the cache" : "NO");
}

}  // namespace

int RunPullCommand(const std::vector<std::string>& argv) {
  Args parsed;
  if (auto exit = ParseCommandLine(
          "exlr8d pull", kUsage, argv,
          {"repo", "revision", "manifest", "tp", "rank", "endpoint", "cache", "jobs", "token-file", "proxy",
           "ca-bundle", "limit-rate", "budget", "coalesce-gap", "commit-interval-ms", "background-jobs",
           "write-threads", "write-behind", "h2-streams"},
          {"dry-run", "offline", "no-progress", "json", "make-room", "debug"}, kRepositoryArgument, &parsed))
    return *exit;
  const Args* args = &parsed;
  PullOptions opt;
  CacheOptions cache_opt;
  auto parse = [&]() -> Status {
    EXLR8_ASSIGN_OR_RETURN(opt.repo, args->Require("repo"));
    opt.manifest = args->GetOr("manifest", "");
    opt.revision = args->GetOr("revision", "main");
    if (!args->Has("manifest") && (args->Has("tp") || args->Has("rank")))
      return InvalidArgumentError(
          "--tp and --rank need --manifest (without one, the whole fileset is pulled)");
    if (args->Has("manifest")) {
      if (opt.manifest.empty()) return InvalidArgumentError("--manifest must not be empty");
      EXLR8_ASSIGN_OR_RETURN(std::int64_t tp, args->GetInt("tp", -1, 1, 1 << 20));
      if (tp < 0) return InvalidArgumentError("missing --tp");
      EXLR8_ASSIGN_OR_RETURN(std::int64_t rank, args->GetInt("rank", -1, 0, tp - 1));
      if (rank < 0) return InvalidArgumentError("missing --rank");
      opt.tp = static_cast<int>(tp);
      opt.rank = static_cast<int>(rank);
    }
    // No --jobs: the limit adapts between 4 and kAdaptiveJobsCeiling; --jobs N:
    // exactly N, as before.
    EXLR8_ASSIGN_OR_RETURN(std::int64_t jobs, args->GetInt("jobs", kAdaptiveJobsCeiling, 1, 1024));
    opt.fetch.adaptive = !args->Has("jobs");
    opt.fetch.max_parallel = static_cast<int>(jobs);
    opt.fetch.max_queued = std::max(64, 4 * static_cast<int>(jobs));
    EXLR8_ASSIGN_OR_RETURN(std::int64_t streams, args->GetInt("h2-streams", kDefaultH2StreamsPerConnection, 1, 1024));
    opt.fetch.h2_streams_per_connection = static_cast<int>(streams);
    opt.fetch.h2_streams_by_path = opt.fetch.adaptive && !args->Has("h2-streams");
    opt.hub.endpoint = args->GetOr("endpoint", "");
    opt.hub.token_file = args->GetOr("token-file", "");
    opt.hub.proxy = args->GetOr("proxy", "");
    opt.hub.ca_bundle = args->GetOr("ca-bundle", "");
    EXLR8_ASSIGN_OR_RETURN(const std::optional<std::uint64_t> rate, args->GetBytes("limit-rate"));
    if (rate) opt.fetch.max_bytes_per_second = *rate;
    EXLR8_ASSIGN_OR_RETURN(cache_opt.byte_budget, args->GetBytes("budget"));
    EXLR8_ASSIGN_OR_RETURN(const std::optional<std::uint64_t> behind, args->GetBytes("write-behind"));
    if (behind) cache_opt.write_behind_bytes = *behind;
    EXLR8_ASSIGN_OR_RETURN(const std::optional<std::uint64_t> gap, args->GetBytes("coalesce-gap"));
    if (gap) opt.coalesce_gap = *gap;
    EXLR8_ASSIGN_OR_RETURN(std::int64_t bg, args->GetInt("background-jobs", -1, -1, jobs));
    opt.background_jobs = static_cast<int>(bg);
    EXLR8_ASSIGN_OR_RETURN(std::int64_t writers, args->GetInt("write-threads", 0, 1, 4));
    opt.write_threads = static_cast<int>(writers);
    EXLR8_ASSIGN_OR_RETURN(std::int64_t commit_ms, args->GetInt("commit-interval-ms", 1000, 1, 3'600'000));
    opt.commit_interval = std::chrono::milliseconds(commit_ms);
    opt.offline = args->Flag("offline") || HubOfflineFromEnvironment();
    opt.dry_run = args->Flag("dry-run");
    opt.hub.debug = args->Flag("debug") || HubDebugFromEnvironment();
    opt.make_room = args->Flag("make-room");
    cache_opt.use_reserve = opt.make_room;  // it frees space, so it must work on a full disk
    return CheckPullOptions(opt);
  };
  if (Status s = parse(); !s.ok()) return ReportError("exlr8d pull", s);

  const Result<std::string> cache_dir = CacheDirOr(args->Get("cache"));
  if (!cache_dir.ok()) return ReportError("exlr8d pull", cache_dir.status());
  auto cache = Cache::Open(*cache_dir, cache_opt);
  if (!cache.ok()) return ReportError("exlr8d pull", cache.status());

  PullJob job(**cache, opt);
  Result<PullSummary> result = Status(StatusCode::kInternal, "not run");
  {
    SignalWatcher signals([&job](int) { job.Cancel(); });
    ProgressDisplay progress(
        job, stderr,
        !args->Flag("no-progress") && !ProgressBarsDisabledByEnvironment() && !opt.dry_run && !opt.hub.debug);
    result = job.Run();
    progress.Stop();
  }
  if (!result.ok()) return ReportError("exlr8d pull", result.status());
  if (opt.dry_run && !args->Flag("json") && opt.manifest.empty()) {
    std::printf("dry run: %s@%s (commit %s), the whole fileset\n", result->repo.c_str(),
                result->revision.c_str(), result->commit.c_str());
    std::printf("  fileset          %s in %llu files\n",
                HumanBytes(result->plan.totals.release_bytes).c_str(),
                static_cast<unsigned long long>(result->plan.files.size()));
    std::printf("  would fetch      %s in %llu files (the rest is verified in the cache)\n",
                HumanBytes(result->bytes_missing).c_str(),
                static_cast<unsigned long long>(result->ranges_missing));
    return 0;
  }
  if (opt.dry_run && !args->Flag("json")) {
    const PlanTotals& t = result->plan.totals;
    std::printf("dry run: %s@%s (commit %s), manifest %s, TP %d rank %d\n", result->repo.c_str(),
                result->revision.c_str(), result->commit.c_str(), result->plan.manifest.c_str(), opt.tp, opt.rank);
    std::printf("  plan             %s in %llu requests (%llu routed + %llu shared halves) of a %s release; %.4f b/w "
                "on this rank\n",
                HumanBytes(t.bytes).c_str(), static_cast<unsigned long long>(t.requests),
                static_cast<unsigned long long>(t.routed_halves), static_cast<unsigned long long>(t.shared_halves),
                HumanBytes(t.release_bytes).c_str(), t.rank_bits_per_weight);
    std::printf("  would fetch      %s in %llu requests (the rest is verified in the cache)\n",
                HumanBytes(result->bytes_missing).c_str(), static_cast<unsigned long long>(result->ranges_missing));
    std::printf("  planning fetched %s (index files, manifest, headers), now in the cache\n",
                HumanBytes(result->bytes_fetched).c_str());
    if (!result->hub_error.empty())
      std::printf(
          "  hub              could not be asked what %s is now (%s); planned from the cache: commit %s, "
          "what %s last resolved to here\n",
          result->revision.c_str(), result->hub_error.c_str(), result->commit.c_str(),
          result->revision.c_str());
    return 0;
  }
  PrintSummary(*result, args->Flag("json"), opt.dry_run);
  if (opt.dry_run) return 0;
  return result->complete ? 0 : kExitVerifyFailed;
}

}  // namespace exlr8
