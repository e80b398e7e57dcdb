// Subcommands of `exlr8d`. Each takes the arguments after its name and
// returns the process exit status (client/cli.h).
#pragma once

#include <string>
#include <vector>

namespace exlr8 {

int RunPullCommand(const std::vector<std::string>& args);
int RunGcCommand(const std::vector<std::string>& args);
int RunListCommand(const std::vector<std::string>& args);
int RunPinCommand(const std::vector<std::string>& args);
int RunUnpinCommand(const std::vector<std::string>& args);
int RunServeCommand(const std::vector<std::string>& args);

// The cache directory: --cache, else $EXLR8_CACHE, else $XDG_CACHE_HOME/exlr8,
// else ~/.cache/exlr8.
std::string DefaultCacheDir();

}  // namespace exlr8
