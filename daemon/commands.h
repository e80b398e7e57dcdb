// Subcommands of `exlr8d`. Each takes the arguments after its name and
// returns the process exit status (client/cli.h).
#pragma once

#include <string>
#include <vector>

#include "daemon/cache/cache_paths.h"  // DefaultCacheDir

namespace exlr8 {

int RunPullCommand(const std::vector<std::string>& args);
int RunGcCommand(const std::vector<std::string>& args);
int RunListCommand(const std::vector<std::string>& args);
int RunPinCommand(const std::vector<std::string>& args);
int RunUnpinCommand(const std::vector<std::string>& args);
int RunVerifyCommand(const std::vector<std::string>& args);
int RunServeCommand(const std::vector<std::string>& args);
int RunStatusCommand(const std::vector<std::string>& args);

}  // namespace exlr8
