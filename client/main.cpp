// exlr8: the offline command for EXLR8 releases (plan, verify, decode, synth).
#include <string>
#include <vector>

#include "client/cli/cli.h"
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
  static constexpr exlr8::Subcommand kCommands[] = {
      {"plan", exlr8::RunPlan},
      {"verify", exlr8::RunVerify},
      {"decode", exlr8::RunDecode},
      {"synth", exlr8::RunSynth},
  };
  return exlr8::DispatchSubcommand("exlr8", "0.1.0", kUsage, argc, argv, kCommands);
}
