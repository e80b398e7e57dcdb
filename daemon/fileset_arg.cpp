#include "daemon/fileset_arg.h"

#include <utility>

#include "format/json.h"  // EscapeForMessage

namespace exlr8 {

Result<FilesetInfo> FindFilesetArg(Cache& cache, const Args& args) {
  EXLR8_ASSIGN_OR_RETURN(std::string repo, args.Require("repo"));
  if (args.Has("revision") && args.Has("commit"))
    return InvalidArgumentError("--revision and --commit name the fileset two ways; give one");
  std::string commit;
  std::string what;
  if (auto c = args.Get("commit")) {
    commit = *c;
    const bool hex = commit.find_first_not_of("0123456789abcdef") == std::string::npos;
    if (commit.size() < 7 || commit.size() > 40 || !hex)
      return InvalidArgumentError("--commit: '" + EscapeForMessage(commit) +
                                  "' is not 7 to 40 lowercase hex digits");
    what = repo + " commit " + commit;
  } else {
    const std::string revision = args.GetOr("revision", "main");
    what = repo + "@" + revision;
    auto resolved = cache.LookupCommit(repo, revision);
    if (!resolved.ok() && resolved.status().code() == StatusCode::kNotFound)
      return NotFoundError(what + " was never pulled into " + cache.dir().string());
    if (!resolved.ok()) return resolved.status();
    commit = *resolved;
  }
  EXLR8_ASSIGN_OR_RETURN(std::vector<FilesetInfo> sets, cache.ListFilesets());
  std::vector<FilesetInfo> found;
  for (auto& s : sets)
    if (s.repo == repo && s.commit.rfind(commit, 0) == 0) found.push_back(std::move(s));
  if (found.empty()) return NotFoundError(what + " is not in " + cache.dir().string() + " (see 'exlr8d list')");
  if (found.size() > 1) return InvalidArgumentError("--commit " + commit + " matches " +
                                                    std::to_string(found.size()) + " commits of " + repo +
                                                    "; give more digits");
  return std::move(found.front());
}

}  // namespace exlr8
