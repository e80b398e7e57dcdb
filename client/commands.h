// The subcommands of `exlr8`. Each takes the arguments after its name and
// returns the process exit status (client/cli/cli.h).
#pragma once

#include <string>
#include <vector>

namespace exlr8 {

int RunPlan(const std::vector<std::string>& args);
int RunVerify(const std::vector<std::string>& args);
int RunDecode(const std::vector<std::string>& args);
int RunSynth(const std::vector<std::string>& args);

}  // namespace exlr8
