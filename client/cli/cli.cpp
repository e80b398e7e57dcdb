#include "client/cli/cli.h"

#include <cstdio>
#include <iostream>

#include "client/cli/suggest.h"

namespace exlr8 {

int ExitCodeFor(const Status& s) {
  switch (s.code()) {
    case StatusCode::kOk: return 0;
    case StatusCode::kInvalidArgument: return 2;
    case StatusCode::kCorruption:
    case StatusCode::kNotFound:
    case StatusCode::kNeedMore: return 3;
    case StatusCode::kIOError:
    case StatusCode::kUnavailable: return 4;
    case StatusCode::kPermissionDenied: return 5;
    case StatusCode::kResourceExhausted: return 6;
    case StatusCode::kFailedPrecondition: return 7;
    case StatusCode::kUnimplemented: return 8;
    case StatusCode::kCancelled: return 130;
    case StatusCode::kInternal: return 70;
  }
  return 70;
}

int DispatchSubcommand(std::string_view prog, std::string_view version, std::string_view usage, int argc,
                       char** argv, std::span<const Subcommand> commands) {
  std::vector<std::string> args(argv + 1, argv + argc);
  std::vector<std::string> names;
  for (const Subcommand& c : commands) names.emplace_back(c.name);
  if (args.size() == 2 && args[0] == "help") {
    // `help CMD` is `CMD --help`.
    for (const Subcommand& c : commands)
      if (c.name == args[1]) return c.run({"--help"});
    std::cerr << prog << ": unknown command '" << args[1] << "'" << DidYouMean(args[1], names) << "\n";
    return kExitUsage;
  }
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    (args.empty() ? std::cerr : std::cout) << usage;
    return args.empty() ? kExitUsage : 0;
  }
  if (args[0] == "--version") {
    std::cout << prog << " " << version << "\n";
    return 0;
  }
  const std::string name = args[0];
  args.erase(args.begin());
  for (const Subcommand& c : commands)
    if (c.name == name) return c.run(args);
  std::cerr << prog << ": unknown command '" << name << "'" << DidYouMean(name, names) << "\n" << usage;
  return kExitUsage;
}

int ReportError(std::string_view prog, const Status& s) {
  std::cerr << prog << ": error: " << s.message() << " [" << StatusCodeName(s.code()) << "]\n";
  return ExitCodeFor(s);
}

}  // namespace exlr8
