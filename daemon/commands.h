// Subcommands of `exlr8d`. Each takes the arguments after its name and
// returns the process exit status (client/cli/cli.h).
#pragma once

#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "daemon/cache/cache_paths.h"  // CacheDirOr

namespace exlr8 {

int RunPullCommand(const std::vector<std::string>& args);
int RunGcCommand(const std::vector<std::string>& args);
int RunListCommand(const std::vector<std::string>& args);
int RunPinCommand(const std::vector<std::string>& args);
int RunUnpinCommand(const std::vector<std::string>& args);
int RunVerifyCommand(const std::vector<std::string>& args);
int RunServeCommand(const std::vector<std::string>& args);
int RunStatusCommand(const std::vector<std::string>& args);

// Whether `dir` holds a cache's index. Commands that only read or tidy a
// cache check it first: they answer for a directory nothing was pulled
// into (a typo in --cache, a node not yet used) without making a cache
// there; only pull and serve create one.
inline bool HasCacheIndex(const std::string& dir) {
  std::error_code ec;
  return std::filesystem::exists(std::filesystem::path(dir) / kCacheDbName, ec);
}

}  // namespace exlr8
