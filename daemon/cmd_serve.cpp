// exlr8d serve: the local REST API on a Unix socket and, if asked, a loopback
// TCP port, until SIGINT/SIGTERM.
//
// It reports the cache's state and its pulls' progress (daemon/api/
// status_api.h), read from the index without taking the cache's lock, so it
// runs beside the pulls (`exlr8d pull`, the systemd units) that own the
// cache. And it runs pulls itself (daemon/serve/): POST /v1/pulls queues a
// job in <cache>/exlr8d.jobs.db, which the runner pulls with the same engine
// as `exlr8d pull`, taking the cache's lock only while it has work.
#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "client/cli/args.h"
#include "client/cli/cli.h"
#include "daemon/api/api_server.h"
#include "daemon/api/api_token.h"
#include "daemon/api/status_api.h"
#include "daemon/base/file_lock.h"
#include "daemon/commands.h"
#include "daemon/hub/hub_client.h"
#include "daemon/serve/job_runner.h"
#include "daemon/serve/jobs_api.h"
#include "daemon/serve/stage_manager.h"
#include "daemon/systemd_notify.h"

namespace exlr8 {

namespace {

constexpr const char* kUsage = R"(usage: exlr8d serve [--cache DIR] [--socket PATH | --no-socket] [--listen ADDR:PORT
                    [--api-token-file FILE] [--allow-host NAME]...] [--max-jobs N]
                    [--stage-binary PATH] [pull options]

Serves the local REST API (JSON; GET /v1/openapi.json describes every route):
what the cache holds and what is being pulled (GET /v1/health, /v1/filesets,
/v1/pulls, /v1/pulls/{id}; GET /metrics for Prometheus), and runs pulls asked
of it (POST /v1/pulls queues a job; GET /v1/jobs, /v1/jobs/{id}; DELETE
/v1/jobs/{id} cancels; POST /v1/verify queues a scrub, POST /v1/evict an
eviction). Jobs run with the engine of 'exlr8d
pull', several at once, but those of one repo one after another in the order
asked. They are kept in DIR/exlr8d.jobs.db, so a job interrupted by a stop or
a crash resumes at the next start. The server takes the cache's lock only
while it runs jobs: between them, 'exlr8d pull', gc and the systemd units use
the cache as before, and jobs wait while one of them owns it.

It also starts holders on request: POST /v1/stages runs an exlr8d-stage
that stages a pulled rank's image in GPU memory ("memory":"device", the
default) or host memory ("host") and leases it over protocol v2 ("lease":"v2",
the default; "v1" is deprecated) (GET /v1/stages/{id} says when it holds;
DELETE releases it). A holder runs in a session of its own and
outlives a restart of this server, which finds it again in DIR/exlr8d.stages/.

  --cache DIR         the cache (default $EXLR8_CACHE, else $XDG_CACHE_HOME/exlr8,
                      else ~/.cache/exlr8)
  --socket PATH       Unix socket to serve on (default DIR/exlr8d.sock, mode 0660:
                      its owner and group may use the API, without a token)
  --no-socket         no Unix socket (then --listen is required)
  --listen ADDR:PORT  also serve HTTP on a loopback address, e.g. 127.0.0.1:8478
                      (port 0: any free one); never beyond this machine. Every
                      request there but GET /v1/health and /v1/openapi.json
                      needs the header 'Authorization: Bearer TOKEN'; a request
                      from a web page (Origin, Host) is refused, and a body
                      must be JSON
  --api-token-file FILE  the TOKEN of --listen: a file of mode 0600 (or 0400),
                      owned by this user or root. Default: DIR/exlr8d.api-token,
                      created with a random token at the first start
  --allow-host NAME   a name the Host header of a --listen request may give,
                      besides localhost and loopback addresses (repeatable)
  --max-jobs N        jobs running at once, each of another repo (default 4;
                      1 runs the queue strictly in order)
  --stage-binary PATH the exlr8d-stage that POST /v1/stages runs (default: the
                      one beside this exlr8d)

Pull options (for every job; as for 'exlr8d pull'):
  --endpoint URL      hub or mirror (default $HF_ENDPOINT, else https://huggingface.co).
                      A job may name another endpoint; it then runs without a token
  --token-file FILE   token file (default: $HF_TOKEN, else $HF_TOKEN_PATH, else
                      $HF_HOME/token); wins over $HF_TOKEN; checked at start
  --proxy URL         proxy for every request (default: HTTPS_PROXY etc.)
  --ca-bundle FILE    CA certificates (PEM) to verify HTTPS servers with
                      (default: $CURL_CA_BUNDLE, $REQUESTS_CA_BUNDLE,
                      $SSL_CERT_FILE, else the system's store)
  --jobs J            parallel transfers per pull (default 16)
  --h2-streams S      HTTP/2 streams per connection: ceil(J/S) connections
                      per host (default 4; S >= J: one multiplexed connection);
                      ranges of 4 MiB or more get connections of their own
  --limit-rate BYTES  download rate limit, e.g. 200M (bytes/s), for all the
                      running jobs together
  --budget BYTES      refuse to grow the cache past this size

Prints one line "exlr8d serve: listening on ..." when ready (naming the token
file with --listen), and a line per job start and end on stderr. Stops on
SIGINT or SIGTERM (exit 0): running jobs are cancelled and resume at the next
start. Exit status 2 for a bad option, a non-loopback address or a token file
that is unsafe or malformed, 4 when it cannot bind, 5 when the cache cannot be
written, 7 when another server answers on the socket or serves the same cache
(DIR/exlr8d.serve.lock).
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

// The defaults every job runs with, from the pull options and environment.
Status ParsePullDefaults(const Args& args, JobRunnerOptions* jobs) {
  PullOptions& p = jobs->pull;
  p.hub.endpoint = args.GetOr("endpoint", "");
  p.hub.token_file = args.GetOr("token-file", "");
  p.hub.proxy = args.GetOr("proxy", "");
  p.hub.ca_bundle = args.GetOr("ca-bundle", "");
  EXLR8_ASSIGN_OR_RETURN(std::int64_t parallel, args.GetInt("jobs", 16, 1, 1024));
  p.fetch.max_parallel = static_cast<int>(parallel);
  p.fetch.max_queued = std::max(64, 4 * static_cast<int>(parallel));
  EXLR8_ASSIGN_OR_RETURN(std::int64_t streams, args.GetInt("h2-streams", kDefaultH2StreamsPerConnection, 1, 1024));
  p.fetch.h2_streams_per_connection = static_cast<int>(streams);
  EXLR8_ASSIGN_OR_RETURN(const std::optional<std::uint64_t> rate, args.GetBytes("limit-rate"));
  if (rate) p.fetch.max_bytes_per_second = *rate;
  EXLR8_ASSIGN_OR_RETURN(std::int64_t max_jobs, args.GetInt("max-jobs", 4, 1, 64));
  jobs->max_running = static_cast<int>(max_jobs);
  EXLR8_ASSIGN_OR_RETURN(jobs->cache.byte_budget, args.GetBytes("budget"));
  p.offline = HubOfflineFromEnvironment();
  // A token file that cannot be read fails every job: say so now, not
  // after the unit reported ready.
  if (Result<std::string> token = LoadHubToken(p.hub); !token.ok()) return token.status();
  return Status::Ok();
}

// The soft descriptor limit raised towards the hard one (systemd's default soft
// limit is 1024): connections, up to --max-jobs pulls' transfers and data
// files, and the queue's database all draw on it.
void RaiseDescriptorLimit() {
  rlimit l{};
  constexpr rlim_t kEnough = 65536;  // a hard limit of 2^30 would reach the holders it starts too
  if (::getrlimit(RLIMIT_NOFILE, &l) != 0 || l.rlim_cur >= std::min(l.rlim_max, kEnough)) return;
  l.rlim_cur = std::min(l.rlim_max, kEnough);
  (void)::setrlimit(RLIMIT_NOFILE, &l);
}

void WarnIfFailed(const Status& s) {
  if (!s.ok()) std::fprintf(stderr, "exlr8d serve: warning: %s\n", s.ToString().c_str());
}

}  // namespace

int RunServeCommand(const std::vector<std::string>& argv) {
  constexpr const char* kProg = "exlr8d serve";
  Args args;
  if (auto exit = ParseCommandLine(
          kProg, kUsage, argv,
          {"cache", "socket", "listen", "api-token-file", "allow-host", "max-jobs", "endpoint", "token-file",
           "proxy", "ca-bundle", "jobs", "h2-streams", "limit-rate", "budget", "stage-binary"},
          {"no-socket"}, 0, &args))
    return *exit;
  const Result<std::string> cache_arg = CacheDirOr(args.Get("cache"));
  if (!cache_arg.ok()) return ReportError(kProg, cache_arg.status());
  const std::filesystem::path cache_dir = *cache_arg;
  ApiServerOptions o;
  if (args.Flag("no-socket") && args.Has("socket"))
    return ReportError(kProg, InvalidArgumentError("--socket and --no-socket contradict each other"));
  if (!args.Flag("no-socket")) o.unix_socket = args.GetOr("socket", (cache_dir / "exlr8d.sock").string());
  if (auto listen = args.Get("listen")) {
    auto hp = SplitHostPort(*listen);
    if (!hp.ok()) return ReportError(kProg, hp.status());
    o.tcp_address = hp->first;
    o.tcp_port = hp->second;
  } else if (args.Has("api-token-file") || args.Has("allow-host")) {
    return ReportError(kProg, InvalidArgumentError(std::string(args.Has("api-token-file") ? "--api-token-file"
                                                                                          : "--allow-host") +
                                                   " is for --listen (the Unix socket needs no token)"));
  }
  o.allowed_hosts = args.GetAll("allow-host");
  for (const std::string& host : o.allowed_hosts)
    if (host.empty() || host.find_first_of(":/[] ") != std::string::npos)
      return ReportError(kProg, InvalidArgumentError("--allow-host: '" + host + "' is not a host name"));
  // Liveness and the API's description: they tell nothing of the cache's contents.
  o.open_paths = {"/v1/health", "/v1/openapi.json"};
  RaiseDescriptorLimit();
  JobRunnerOptions jobs;
  jobs.cache_dir = cache_dir;
  if (Status s = ParsePullDefaults(args, &jobs); !s.ok()) return ReportError(kProg, s);
  std::error_code ec;
  std::filesystem::create_directories(cache_dir, ec);  // where the default socket goes
  if (ec) return ReportError(kProg, IOError("create " + cache_dir.string() + ": " + ec.message()));
  // The queue's own lock: two servers on one cache would run its jobs twice.
  auto serve_lock = FileLock::Acquire(cache_dir / "exlr8d.serve.lock");
  if (!serve_lock.ok() && serve_lock.status().code() == StatusCode::kFailedPrecondition)
    return ReportError(kProg, Status(serve_lock.status().code(),
                                     "another exlr8d serve runs on this cache: " + serve_lock.status().message()));
  // Any other failure (a read-only cache) is reported as itself, never as
  // another exlr8d serve running.
  if (!serve_lock.ok())
    return ReportError(kProg, Status(serve_lock.status().code(),
                                     serve_lock.status().message() + " (serve keeps its queue and lock in " +
                                         cache_dir.string() + ", which must be writable)"));
  // The TCP listener's token: the operator's file, or one made at the first
  // start (only now: the serve lock keeps two servers from racing for it).
  std::string token_file;
  if (!o.tcp_address.empty()) {
    bool created = false;
    token_file = args.GetOr("api-token-file", (cache_dir / "exlr8d.api-token").string());
    auto token =
        args.Has("api-token-file") ? ReadApiTokenFile(token_file) : EnsureApiToken(token_file, &created);
    if (!token.ok()) return ReportError(kProg, token.status());
    o.tcp_token = std::move(*token);
    if (created)
      std::fprintf(stderr,
                   "exlr8d serve: created the API token file %s (mode 0600): clients of --listen send "
                   "'Authorization: Bearer' and its content\n",
                   token_file.c_str());
  }

  // Signals are blocked before the server's thread starts, so only sigwait
  // below takes them.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  auto runner = JobRunner::Start(std::move(jobs));
  if (!runner.ok()) return ReportError(kProg, runner.status());
  const StatusApi status(cache_dir, "0.1.0");
  StageManager stages(cache_dir, args.GetOr("stage-binary", DefaultStageBinary().string()));
  const JobsApi api(**runner, status, &stages);
  auto server = ApiServer::Start(o, [&api](const ApiRequest& r) { return api.Handle(r); });
  if (!server.ok()) return ReportError(kProg, server.status());
  std::string where;
  if (!o.unix_socket.empty()) where = "unix:" + o.unix_socket;
  if (!o.tcp_address.empty()) {
    const bool v6 = o.tcp_address.find(':') != std::string::npos;
    where += std::string(where.empty() ? "" : " and ") + "http://" + (v6 ? "[" : "") + o.tcp_address +
             (v6 ? "]" : "") + ":" + std::to_string((*server)->tcp_port());
  }
  const std::string token_note = token_file.empty() ? "" : "; API token in " + token_file;
  std::printf("exlr8d serve: listening on %s (cache %s%s)\n", where.c_str(), cache_dir.c_str(),
              token_note.c_str());
  std::fflush(stdout);
  WarnIfFailed(NotifySystemd("READY=1"));  // Type=notify: clients may connect now
  int sig = 0;
  while (sigwait(&set, &sig) != 0) {
  }
  WarnIfFailed(NotifySystemd("STOPPING=1"));
  (*server)->Stop();  // no new requests, then the running pull (queued again)
  (*runner)->Stop();
  std::fprintf(stderr, "exlr8d serve: stopped (signal %d)\n", sig);
  return 0;
}

}  // namespace exlr8
