// What a pull may be asked for: the checks a command line runs before it
// opens the cache, and the names of the phases a pull reports.
#include <algorithm>
#include <array>

#include "daemon/pull/pull_job.h"

namespace exlr8 {

namespace {

constexpr std::array<std::string_view, kPullPhaseCount> kPhaseNames = {
    "starting", "resolve", "list", "metadata", "plan", "headers", "halves", "commit", "done", "failed"};

}  // namespace

bool IsValidRepoId(std::string_view repo) {
  const auto slash = repo.find('/');
  if (slash == std::string_view::npos || slash == 0 || slash + 1 == repo.size() ||
      repo.find('/', slash + 1) != std::string_view::npos)
    return false;
  return std::all_of(repo.begin(), repo.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_' || c == '.' || c == '/';
  });
}

std::string_view PullPhaseName(PullPhase p) { return kPhaseNames[static_cast<std::size_t>(p)]; }

Status CheckPullOptions(const PullOptions& opt) {
  if (!IsValidRepoId(opt.repo))
    return InvalidArgumentError("--repo must be ORG/NAME, got '" + opt.repo + "'");
  if (opt.revision.empty()) return InvalidArgumentError("--revision must not be empty");
  // No manifest: the whole fileset (every file of the revision), which has
  // no ranks.
  if (opt.manifest.empty() && (opt.tp != 1 || opt.rank != 0))
    return InvalidArgumentError("--tp and --rank need --manifest (without one, the whole fileset is pulled)");
  if (opt.tp < 1) return InvalidArgumentError("--tp must be >= 1");
  if (opt.rank < 0 || opt.rank >= opt.tp)
    return InvalidArgumentError("--rank must be in [0, " + std::to_string(opt.tp - 1) + "]");
  return Status::Ok();
}

}  // namespace exlr8
