// exlr8d serve: the local REST API (daemon/api/status_api.h) on a Unix socket
// and, if asked, a loopback TCP port, until SIGINT/SIGTERM.
//
// What it serves today is the cache's state and its pulls' progress, read
// from the index without taking the cache's lock, so it runs beside the
// pulls (`exlr8d pull`, the systemd units) that own the cache. Starting and
// cancelling pulls through it answer 501 until the daemon runs the pull
// engine itself.
#include <signal.h>

#include <cstdio>
#include <filesystem>

#include "client/args.h"
#include "client/cli.h"
#include "daemon/api/api_server.h"
#include "daemon/api/status_api.h"
#include "daemon/commands.h"

namespace exlr8 {

namespace {

constexpr const char* kUsage = R"(usage: exlr8d serve [--cache DIR] [--socket PATH | --no-socket] [--listen ADDR:PORT]

Serves the local REST API: what the cache holds and what its pulls are doing
(GET /v1/health, /v1/filesets, /v1/pulls, /v1/pulls/{id}; JSON). It reads the
cache index without locking the cache, so pulls run beside it and it shows
their progress as of their last commit (about every second). Starting and
cancelling pulls through the API is not built yet (501).

  --cache DIR         the cache (default $EXLR8_CACHE, else $XDG_CACHE_HOME/exlr8,
                      else ~/.cache/exlr8)
  --socket PATH       Unix socket to serve on (default DIR/exlr8d.sock, mode 0660)
  --no-socket         no Unix socket (then --listen is required)
  --listen ADDR:PORT  also serve HTTP on a loopback address, e.g. 127.0.0.1:8478
                      (port 0: any free one); never beyond this machine, as the
                      API has no authentication

Prints one line "exlr8d serve: listening on ..." when ready. Stops on SIGINT or
SIGTERM (exit 0) and removes its socket. Exit status 2 for a bad option or a
non-loopback address, 4 when it cannot bind, 7 when another server answers on
the socket.
)";

// "127.0.0.1:8478" / "[::1]:8478" -> address, port.
Result<std::pair<std::string, std::uint16_t>> SplitHostPort(const std::string& text) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size())
    return InvalidArgumentError("--listen: '" + text + "' is not ADDR:PORT");
  std::string host = text.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const std::string port_text = text.substr(colon + 1);
  if (port_text.find_first_not_of("0123456789") != std::string::npos || port_text.size() > 5 ||
      std::stoul(port_text) > 65535)
    return InvalidArgumentError("--listen: port '" + port_text + "' is not 0..65535");
  return std::make_pair(host, static_cast<std::uint16_t>(std::stoul(port_text)));
}

}  // namespace

int RunServeCommand(const std::vector<std::string>& argv) {
  constexpr const char* kProg = "exlr8d serve";
  Args args;
  if (auto exit = ParseCommandLine(kProg, kUsage, argv, {"cache", "socket", "listen"}, {"no-socket"}, 0, &args))
    return *exit;
  const std::filesystem::path cache_dir = args.GetOr("cache", DefaultCacheDir());
  ApiServerOptions o;
  if (args.Flag("no-socket") && args.Has("socket"))
    return ReportError(kProg, InvalidArgumentError("--socket and --no-socket contradict each other"));
  if (!args.Flag("no-socket")) o.unix_socket = args.GetOr("socket", (cache_dir / "exlr8d.sock").string());
  if (auto listen = args.Get("listen")) {
    auto hp = SplitHostPort(*listen);
    if (!hp.ok()) return ReportError(kProg, hp.status());
    o.tcp_address = hp->first;
    o.tcp_port = hp->second;
  }
  std::error_code ec;
  std::filesystem::create_directories(cache_dir, ec);  // where the default socket goes
  if (ec) return ReportError(kProg, IOError("create " + cache_dir.string() + ": " + ec.message()));

  // Signals are blocked before the server's thread starts, so only sigwait
  // below takes them.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  const StatusApi api(cache_dir, "0.1.0");
  auto server = ApiServer::Start(o, [&api](const ApiRequest& r) { return api.Handle(r); });
  if (!server.ok()) return ReportError(kProg, server.status());
  std::string where;
  if (!o.unix_socket.empty()) where = "unix:" + o.unix_socket;
  if (!o.tcp_address.empty()) {
    const bool v6 = o.tcp_address.find(':') != std::string::npos;
    where += std::string(where.empty() ? "" : " and ") + "http://" + (v6 ? "[" : "") + o.tcp_address +
             (v6 ? "]" : "") + ":" + std::to_string((*server)->tcp_port());
  }
  std::printf("exlr8d serve: listening on %s (cache %s)\n", where.c_str(), cache_dir.c_str());
  std::fflush(stdout);
  int sig = 0;
  while (sigwait(&set, &sig) != 0) {
  }
  (*server)->Stop();
  std::fprintf(stderr, "exlr8d serve: stopped (signal %d)\n", sig);
  return 0;
}

}  // namespace exlr8
