// exlr8d status: whether one TP rank is complete in the cache, from the
// cache alone (daemon/cache/cached_rank.h). A read-only view, so it answers
// while a pull or `exlr8d serve` owns the cache; GET /v1/ranks is the same
// over the REST API.
#include <cstdio>
#include <filesystem>

#include "client/cli/args.h"
#include "client/cli/cli.h"
#include "daemon/api/cache_report.h"
#include "daemon/base/posix.h"
#include "daemon/cache/cached_rank.h"
#include "daemon/commands.h"
#include "format/json.h"
#include "format/layout.h"
#include "format/manifest.h"
#include "format/units.h"

namespace exlr8 {

namespace {

constexpr const char* kProg = "exlr8d status";
constexpr const char* kUsage =
    R"(usage: exlr8d status ORG/NAME --manifest NAME|PATH --tp N --rank R [options]
       exlr8d status ORG/NAME [--revision REV] [options]

Whether TP rank R of N under the manifest is complete in the cache: every
whole file (dense, vocab, config, index files, manifests), width-file header
and expert half of its plan verified there. The plan is made again from the
cached index files and manifest, so some rank of the fileset must have been
pulled. Without --manifest (and --tp, --rank): whether the whole fileset, as
'exlr8d pull' without a manifest fetches it, is complete: every file
verified whole (LVQ5 files by SHA-256 and structure), with the number of
LVQ5 records indexed. --manifest takes what pull takes: a name, a repo path, or a local
JSON file (a custom width mix). Reads the cache only (a read-only view: it
answers while a pull or 'exlr8d serve' owns it) and fetches nothing.

  ORG/NAME            the pulled repository (or --repo ORG/NAME)
  --revision REV      as pulled (default main), or a commit
  --manifest NAME     manifest name (home, ...) or repo path
  --tp N --rank R     tensor-parallel degree and rank
  --cache DIR         the cache (default $EXLR8_CACHE, else $XDG_CACHE_HOME/exlr8,
                      else ~/.cache/exlr8)
  --json              print the status as JSON (as GET /v1/ranks does)

Only bytes the files still hold count: each file of the plan is looked at
(its size, not its contents), so one truncated, grown or deleted since the
pull makes the rank incomplete, named with what changed. Bytes changed in
place are for 'exlr8d verify', which reads them.

Exit status: 0 complete; 1 not complete (the first thing missing is named:
'exlr8d pull' fetches exactly what is missing); 2 usage; 3 never pulled, or
the manifest or an index file is not in the cache.
)";

// The whole fileset of `repo`@`revision`: every listed file verified whole
// and still at its listed size.
int PrintWholeFilesetStatus(Cache& cache, const std::string& repo, const std::string& revision, bool json) {
  Result<WholeFilesetStatus> st = CheckWholeFilesetStatus(cache, repo, revision);
  if (!st.ok()) return ReportError(kProg, st.status());
  const FilesetInfo& set = st->fileset;
  if (json) {
    const JsonValue out = JsonValue::Object({
        {"repo", JsonValue::String(repo)},
        {"revision", JsonValue::String(revision)},
        {"commit", JsonValue::String(set.commit)},
        {"kind", JsonValue::String(std::string(set.kind()))},
        {"complete", JsonValue::Bool(st->complete())},
        {"files", JsonValue::UInt(st->files)},
        {"files_verified", JsonValue::UInt(st->files_verified)},
        {"records", JsonValue::UInt(set.records)},
        {"bytes_total", JsonValue::UInt(set.bytes_total)},
        {"bytes_verified", JsonValue::UInt(st->bytes_verified)},
        {"files_changed", JsonValue::UInt(st->files_changed)},
        {"first_missing", st->complete() ? JsonValue::Null() : JsonValue::String(st->first_missing)},
    });
    std::printf("%s\n", out.Dump().c_str());
  } else {
    std::printf("%s@%s (commit %s), the whole fileset (%s): %s\n", repo.c_str(), revision.c_str(),
                set.commit.substr(0, 8).c_str(), std::string(set.kind()).c_str(),
                st->complete() ? "complete" : "NOT complete");
    std::printf("  %-14s %llu of %llu verified\n", "files",
                static_cast<unsigned long long>(st->files_verified),
                static_cast<unsigned long long>(st->files));
    std::printf("  %-14s %llu in %llu LVQ5 files\n", "records", static_cast<unsigned long long>(set.records),
                static_cast<unsigned long long>(set.lvq5_files));
    std::printf("  %-14s %s of %s verified\n", "bytes", HumanBytes(st->bytes_verified).c_str(),
                HumanBytes(set.bytes_total).c_str());
    if (st->files_changed > 0)
      std::printf("  %-14s %llu file%s not as pulled (truncated, grown or deleted)\n", "changed",
                  static_cast<unsigned long long>(st->files_changed), st->files_changed == 1 ? "" : "s");
    if (!st->complete()) std::printf("  first missing  %s\n", st->first_missing.c_str());
  }
  return st->complete() ? kExitOk : kExitVerifyFailed;
}

}  // namespace

int RunStatusCommand(const std::vector<std::string>& argv) {
  Args args;
  if (auto exit =
          ParseCommandLine(kProg, kUsage, argv, {"repo", "revision", "manifest", "tp", "rank", "cache"},
                           {"json"}, kRepositoryArgument, &args))
    return *exit;
  RankQuery q;
  auto parse = [&]() -> Status {
    EXLR8_ASSIGN_OR_RETURN(q.repo, args.Require("repo"));
    q.revision = args.GetOr("revision", "main");
    if (!args.Has("manifest")) {
      if (args.Has("tp") || args.Has("rank"))
        return InvalidArgumentError("--tp and --rank need --manifest (without one, the whole fileset)");
      return Status::Ok();
    }
    EXLR8_ASSIGN_OR_RETURN(q.manifest, args.Require("manifest"));
    EXLR8_ASSIGN_OR_RETURN(std::int64_t tp, args.GetInt("tp", -1, 1, 1 << 20));
    if (tp < 0) return InvalidArgumentError("missing --tp");
    EXLR8_ASSIGN_OR_RETURN(std::int64_t rank, args.GetInt("rank", -1, 0, tp - 1));
    if (rank < 0) return InvalidArgumentError("missing --rank");
    q.tp = static_cast<int>(tp);
    q.rank = static_cast<int>(rank);
    return Status::Ok();
  };
  if (Status s = parse(); !s.ok()) return ReportError(kProg, s);
  const Result<std::string> cache_dir = CacheDirOr(args.Get("cache"));
  if (!cache_dir.ok()) return ReportError(kProg, cache_dir.status());
  const std::string& dir = *cache_dir;
  auto cache = Cache::OpenReadOnly(dir);
  if (!cache.ok() && cache.status().code() == StatusCode::kNotFound)
    return ReportError(kProg, NotFoundError(q.repo + "@" + q.revision + " was never pulled into " + dir +
                                            " (nothing was)"));
  if (!cache.ok()) return ReportError(kProg, cache.status());
  if (q.manifest.empty()) return PrintWholeFilesetStatus(**cache, q.repo, q.revision, args.Flag("json"));
  auto st = CheckRankStatus(**cache, q.repo, q.revision, q.manifest, q.tp, q.rank);
  // As for pull: a manifest the release does not have may be a local file
  // (a custom width mix): a rank that can be pulled can be checked.
  std::error_code ec;
  if (!st.ok() && st.status().code() == StatusCode::kNotFound && !IsManifestName(q.manifest) &&
      std::filesystem::is_regular_file(q.manifest, ec)) {
    Result<std::string> text = ReadSmallFile(q.manifest, kMaxManifestBytes);
    if (!text.ok()) return ReportError(kProg, text.status());
    st = CheckRankStatus(**cache, q.repo, q.revision, q.manifest, q.tp, q.rank, &*text);
  }
  if (!st.ok()) return ReportError(kProg, st.status());
  if (args.Flag("json")) {
    std::printf("%s\n", RankStatusJson(q, *st).c_str());
  } else {
    std::printf("%s@%s (commit %s), manifest %s, TP %d rank %d: %s\n", q.repo.c_str(), q.revision.c_str(),
                st->commit.substr(0, 8).c_str(), q.manifest.c_str(), q.tp, q.rank,
                st->complete() ? "complete" : "NOT complete");
    auto line = [](const char* what, std::uint64_t have, std::uint64_t of) {
      std::printf("  %-14s %llu of %llu verified\n", what, static_cast<unsigned long long>(have),
                  static_cast<unsigned long long>(of));
    };
    line("whole files", st->files_verified, st->files);
    line("headers", st->headers_verified, st->headers);
    line("halves", st->halves_verified, st->halves);
    std::printf("  %-14s %s of %s verified\n", "bytes", HumanBytes(st->bytes_verified).c_str(),
                HumanBytes(st->bytes_planned).c_str());
    if (st->files_changed > 0)
      std::printf("  %-14s %llu file%s not as pulled (truncated, grown or deleted)\n", "changed",
                  static_cast<unsigned long long>(st->files_changed), st->files_changed == 1 ? "" : "s");
    if (!st->complete()) std::printf("  first missing  %s\n", st->first_missing.c_str());
  }
  return st->complete() ? kExitOk : kExitVerifyFailed;
}

}  // namespace exlr8
