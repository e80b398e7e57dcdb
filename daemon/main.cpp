// exlr8d: per-node storage and distribution of EXLR8 filesets.
#include <string>
#include <vector>
#if defined(__GLIBC__)  // (defined once a libc header is in)
#include <malloc.h>
#endif

#include "client/cli/cli.h"
#include "daemon/commands.h"

namespace {

constexpr const char* kUsage = R"(usage: exlr8d COMMAND [options]

Commands:
  pull     fetch exactly one TP rank's bytes from a hub into the verified cache
  gc       evict least recently used, unpinned filesets down to a byte budget,
           or one fileset by name
  list     the filesets in the cache: bytes verified, pins, latest pull
  status   whether one TP rank is complete in the cache (exit 0) or what is missing
  pin      keep a fileset from gc (unpin: let it go again)
  verify   check every cached byte against the release's checksums again;
           forget what no longer matches, so the next pull refetches it
  serve    the local REST API: what the cache holds, what is being pulled, how fast

Commands that name a repository take it as their argument (exlr8d pull
ORG/NAME ...) or as --repo ORG/NAME. Run 'exlr8d COMMAND --help' for a
command's options. Environment: HF_ENDPOINT,
HF_TOKEN, HF_HOME, HF_HUB_OFFLINE, EXLR8_CACHE, XDG_CACHE_HOME, HTTPS_PROXY,
HTTP_PROXY, NO_PROXY. docs/OPERATIONS.md explains errors and exit statuses.
)";

// glibc's defaults let each write worker keep its own arena and raise the
// mmap threshold after the first large free, so freed header buffers (~1.3
// MB each at GLM-5.3 scale) stayed in the process: with four write workers
// a full-scale pull peaked ~30 MB higher (bench/pull_bench.sh part B).
// Buffers of 1 MiB and more now go back to the system when freed (the 256
// KiB transfer messages are recycled, not freed), and two arenas serve all
// threads. Set before any thread starts.
void TuneAllocator() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  mallopt(M_ARENA_MAX, 2);
#endif
}

}  // namespace

int main(int argc, char** argv) {
  TuneAllocator();
  static constexpr exlr8::Subcommand kCommands[] = {
      {"pull", exlr8::RunPullCommand},
      {"gc", exlr8::RunGcCommand},
      {"list", exlr8::RunListCommand},
      {"status", exlr8::RunStatusCommand},
      {"pin", exlr8::RunPinCommand},
      {"unpin", exlr8::RunUnpinCommand},
      {"verify", exlr8::RunVerifyCommand},
      {"serve", exlr8::RunServeCommand},
  };
  return exlr8::DispatchSubcommand("exlr8d", "0.1.0", kUsage, argc, argv, kCommands);
}
