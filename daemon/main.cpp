// exlr8d: per-node storage and distribution of EXLR8 filesets.
#include <iostream>
#include <string>
#include <vector>

#include "client/cli.h"
#include "daemon/commands.h"

namespace {

constexpr const char* kUsage = R"(usage: exlr8d COMMAND [options]

Commands:
  pull     fetch exactly one TP rank's bytes from a hub into the verified cache
  gc       evict least recently used, unpinned filesets down to a byte budget
  serve    the long-lived daemon with its REST API (not implemented yet)

Run 'exlr8d COMMAND --help' for a command's options. Environment: HF_ENDPOINT,
HF_TOKEN, HF_HOME, HF_HUB_OFFLINE, EXLR8_CACHE, XDG_CACHE_HOME, HTTPS_PROXY,
HTTP_PROXY, NO_PROXY. docs/OPERATIONS.md explains errors and exit statuses.
)";

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::cout << kUsage;
    return args.empty() ? exlr8::kExitUsage : 0;
  }
  if (args[0] == "--version") {
    std::cout << "exlr8d 0.1.0\n";
    return 0;
  }
  const std::string cmd = args[0];
  args.erase(args.begin());
  if (cmd == "pull") return exlr8::RunPullCommand(args);
  if (cmd == "gc") return exlr8::RunGcCommand(args);
  if (cmd == "serve")
    return exlr8::ReportError("exlr8d serve",
                              exlr8::UnimplementedError("the daemon and its REST API are not built yet; use "
                                                        "'exlr8d pull' (it resumes where it stopped)"));
  std::cerr << "exlr8d: unknown command '" << cmd << "'\n" << kUsage;
  return exlr8::kExitUsage;
}
