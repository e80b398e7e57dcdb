// exlr8d gc [--cache DIR] --budget BYTES
#include <cstdio>
#include <iostream>

#include "client/args.h"
#include "client/cli.h"
#include "daemon/cache/cache.h"
#include "daemon/commands.h"

namespace exlr8 {

namespace {
constexpr const char* kUsage = R"(usage: exlr8d gc [--cache DIR] [--budget BYTES]

Evicts unpinned filesets, least recently used first, until the cache holds at
most BYTES of verified data (default: the cache's configured budget, else 0,
which evicts every unpinned fileset). Pinned filesets are never evicted.
)";
}  // namespace

int RunGcCommand(const std::vector<std::string>& argv) {
  Args parsed;
  if (auto exit = ParseCommandLine("exlr8d gc", kUsage, argv, {"cache", "budget"}, {}, 0, &parsed)) return *exit;
  const Args* args = &parsed;
  std::uint64_t budget = 0;
  if (auto b = args->Get("budget")) {
    auto v = ParseByteCount(*b);
    if (!v.ok()) return ReportError("exlr8d gc", v.status().WithContext("--budget"));
    budget = *v;
  }
  auto cache = Cache::Open(args->GetOr("cache", DefaultCacheDir()));
  if (!cache.ok()) return ReportError("exlr8d gc", cache.status());
  auto r = (*cache)->Gc(budget);
  if (!r.ok()) return ReportError("exlr8d gc", r.status());
  std::printf("evicted %zu filesets, freed %s; %s remain cached\n", r->evicted.size(), HumanBytes(r->bytes_freed).c_str(),
              HumanBytes(r->bytes_remaining).c_str());
  return 0;
}

}  // namespace exlr8
