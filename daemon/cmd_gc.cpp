// exlr8d gc [--cache DIR] [--budget BYTES]
// exlr8d gc ORG/NAME [--revision REV | --commit SHA] [--cache DIR]
#include <cstdio>
#include <iostream>

#include "client/cli/args.h"
#include "client/cli/cli.h"
#include "daemon/cache/cache.h"
#include "daemon/commands.h"
#include "daemon/fileset_arg.h"

namespace exlr8 {

namespace {
constexpr const char* kProg = "exlr8d gc";
constexpr const char* kUsage = R"(usage: exlr8d gc [--cache DIR] [--budget BYTES]
       exlr8d gc ORG/NAME [--revision REV | --commit SHA] [--cache DIR]

Evicts unpinned filesets, least recently used first, until the cache holds at
most BYTES of verified data (default 0, which evicts every unpinned fileset).
Pinned filesets, those a pull is writing, and those an exlr8d-stage holds in
GPU memory (a process pin, gone when that process exits) are never evicted.
When they keep the cache over --budget, gc says so (a warning on stderr) and
still exits 0: it evicted all it may.

With ORG/NAME (or --repo ORG/NAME) it evicts that one fileset now, whatever
its place in the order: the commit REV (default main) resolved to when it was
last pulled, or the commit SHA (40 hex digits, or a unique prefix of at least
7). Exit status 3 when the cache has no such fileset, 7 when it is pinned
(unpin it first) or held by an exlr8d-stage, or when another process owns the
cache.

Eviction is crash-safe: the index forgets the fileset durably first, and its
files are removed after; files a crash left behind go at the next gc.
)";
}  // namespace

int RunGcCommand(const std::vector<std::string>& argv) {
  Args args;
  if (auto exit = ParseCommandLine(kProg, kUsage, argv, {"cache", "budget", "repo", "revision", "commit"}, {},
                                   kRepositoryArgument, &args))
    return *exit;
  if (args.Has("repo") && args.Has("budget"))
    return ReportError(kProg, InvalidArgumentError("--budget and a repository: give one or the other"));
  if (!args.Has("repo") && (args.Has("revision") || args.Has("commit")))
    return ReportError(
        kProg,
        InvalidArgumentError("--revision and --commit name a fileset of a repository (ORG/NAME or --repo)"));
  std::uint64_t budget = 0;
  if (auto b = args.Get("budget")) {
    auto v = ParseByteCount(*b);
    if (!v.ok()) return ReportError(kProg, v.status().WithContext("--budget"));
    budget = *v;
  }
  const Result<std::string> cache_dir = CacheDirOr(args.Get("cache"));
  if (!cache_dir.ok()) return ReportError(kProg, cache_dir.status());
  const std::string& dir = *cache_dir;
  if (!HasCacheIndex(dir)) {  // nothing to evict, and no cache made
    if (args.Has("repo")) return ReportError(kProg, NotFoundError("no exlr8d cache in " + dir + " (no exlr8d.db)"));
    std::printf("%s: no exlr8d cache there, nothing to evict\n", dir.c_str());
    return 0;
  }
  CacheOptions options;
  options.use_reserve = true;  // what frees a full disk must work on one
  auto cache = Cache::Open(dir, options);
  if (!cache.ok()) return ReportError(kProg, cache.status());
  if (args.Has("repo")) {
    auto set = FindFilesetArg(**cache, args);
    if (!set.ok()) return ReportError(kProg, set.status());
    auto r = (*cache)->Evict(set->id);
    if (!r.ok()) return ReportError(kProg, r.status());
    std::printf("evicted %s@%s (commit %s), freed %s; %s remain cached\n", set->repo.c_str(), set->revision.c_str(),
                set->commit.c_str(), HumanBytes(r->bytes_freed).c_str(), HumanBytes(r->bytes_remaining).c_str());
    return 0;
  }
  auto r = (*cache)->Gc(budget);
  if (!r.ok()) return ReportError(kProg, r.status());
  std::printf("evicted %zu filesets, freed %s; %s remain cached\n", r->evicted.size(), HumanBytes(r->bytes_freed).c_str(),
              HumanBytes(r->bytes_remaining).c_str());
  // Not a failure (gc took all it may), but said where the timer's journal
  // shows it: pins keeping the cache over budget must not go unnoticed.
  if (args.Has("budget") && r->bytes_remaining > budget)
    std::fprintf(stderr,
                 "%s: warning: the cache stays %s over its budget of %s: what remains is pinned, held by an "
                 "exlr8d-stage or being pulled (exlr8d list shows which)\n",
                 kProg, HumanBytes(r->bytes_remaining - budget).c_str(), HumanBytes(budget).c_str());
  return 0;
}

}  // namespace exlr8
