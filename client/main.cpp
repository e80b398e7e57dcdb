// exlr8: the offline command for EXLR8 releases (plan, verify, decode, synth).
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "client/cli.h"
#include "client/commands.h"

namespace {

constexpr const char* kUsage = R"(usage: exlr8 COMMAND [options]

Commands:
  plan     which files and byte ranges a TP rank needs under a manifest
  verify   check every checksum of a release (or of one rank's plan)
  decode   decode an expert half or a dense matrix to float32
  synth    write a synthetic release of any geometry

Run 'exlr8 COMMAND --help' for a command's options.
Exit statuses: 0 ok, 1 verification failed, 2 usage, 3 corrupt or missing
input, 4 I/O error, 5 permission, 6 out of space, 7 wrong state, 8 not
implemented, 70 internal error.
)";

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::cout << kUsage;
    return args.empty() ? exlr8::kExitUsage : 0;
  }
  if (args[0] == "--version") {
    std::cout << "exlr8 0.1.0\n";
    return 0;
  }
  const std::string cmd = args[0];
  args.erase(args.begin());
  if (cmd == "plan") return exlr8::RunPlan(args);
  if (cmd == "verify") return exlr8::RunVerify(args);
  if (cmd == "decode") return exlr8::RunDecode(args);
  if (cmd == "synth") return exlr8::RunSynth(args);
  std::cerr << "exlr8: unknown command '" << cmd << "'\n" << kUsage;
  return exlr8::kExitUsage;
}
