// exlr8-hubsim: the Hugging Face Hub simulator as a process.
//
//   exlr8-hubsim --repo ORG/NAME=DIR [--repo ...] [--hub 127.0.0.1:0]
//                [--cdn 127.0.0.2:0] [--cdn-base URL] [--port-file F] [--token T] ...
//
// Prints "hub=http://127.0.0.1:PORT cdn=http://127.0.0.2:PORT" on stdout (and
// writes the same line to --port-file, atomically) once both listeners are
// bound, then serves until SIGINT or SIGTERM. Exit status: 0 after a clean
// stop, 2 for bad arguments, 1 when the server cannot start.
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <string_view>

#include "tests/hubsim/http_util.h"
#include "tests/hubsim/hubsim.h"

namespace {

using exlr8::hubsim::FaultConfig;
using exlr8::hubsim::HubSimOptions;

constexpr std::string_view kUsage = R"(usage: exlr8-hubsim --repo ORG/NAME=DIR [options]
  --repo ORG/NAME=DIR         serve DIR as model repo ORG/NAME (repeatable)
  --hub ADDR:PORT             hub listener (default 127.0.0.1:0)
  --cdn ADDR:PORT             CDN listener (default 127.0.0.2:0)
  --cdn-base URL              LFS resolves redirect to URL/<path>, unsigned
                              (an external server, e.g. nginx, serves the files)
  --port-file F               write "hub=URL cdn=URL" to F once listening
  --token T                   hub requires "Authorization: Bearer T"
  --url-ttl S                 signed CDN URL lifetime in seconds (3600)
  --tree-page-size N          tree entries per page (50)
  --lfs-threshold BYTES       files this large are LFS (10000000)
  --unhashed GLOB             LFS files matching GLOB are listed with a stand-in
                              sha256 instead of being hashed (benchmarks on
                              sparse releases only)
  --threads N                 server threads (4)
  --read-timeout S            per-read / per-write timeout (30)
faults (probabilities in [0,1], decisions seeded by --seed):
  --seed N  --fault-drop P  --fault-corrupt P  --fault-500 P  --fault-503 P
  --fault-429 P  --retry-after S  --fault-ignore-range P  --throttle BYTES_PER_S
  --fault-wrong-content-range P  --fault-body-longer P  --hostile-listing
  --absurd-sizes  --fault-hosts hub|cdn|both  --fault-match SUBSTR  --max-faults N
  --fault-every N (a kind hits only each Nth request it applies to)
)";

bool SplitHostPort(std::string_view s, std::string* host, std::uint16_t* port) {
  const std::size_t colon = s.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return false;
  const auto p = exlr8::hubsim::ParseU64(s.substr(colon + 1));
  if (!p || *p > 65535) return false;
  *host = std::string(s.substr(0, colon));
  *port = static_cast<std::uint16_t>(*p);
  return true;
}

bool ParseProbability(const std::string& s, double* out) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || *end != '\0' || !(v >= 0.0 && v <= 1.0)) return false;
  *out = v;
  return true;
}

int Usage(const std::string& why) {
  std::cerr << "exlr8-hubsim: " << why << "\n" << kUsage;
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  HubSimOptions options;
  FaultConfig& faults = options.faults;
  std::string port_file;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      std::cout << kUsage;
      return 0;
    }
    if (arg == "--hostile-listing") {
      faults.hostile_listing = true;
      continue;
    }
    if (arg == "--absurd-sizes") {
      faults.absurd_sizes = true;
      continue;
    }
    if (i + 1 >= argc) return Usage(arg + " needs a value");
    const std::string v = argv[++i];
    auto u64 = [&](std::uint64_t max, std::uint64_t* out) {
      const auto p = exlr8::hubsim::ParseU64(v);
      if (!p || *p > max) return false;
      *out = *p;
      return true;
    };
    std::uint64_t n = 0;
    bool ok = true;
    if (arg == "--repo") {
      const std::size_t eq = v.find('=');
      if (eq == std::string::npos) return Usage("--repo wants ORG/NAME=DIR, got '" + v + "'");
      options.repos.push_back({v.substr(0, eq), v.substr(eq + 1)});
    } else if (arg == "--hub") {
      ok = SplitHostPort(v, &options.hub_address, &options.hub_port);
    } else if (arg == "--cdn") {
      ok = SplitHostPort(v, &options.cdn_address, &options.cdn_port);
    } else if (arg == "--cdn-base") {
      options.cdn_base = v;
    } else if (arg == "--unhashed") {
      options.unhashed_glob = v;
    } else if (arg == "--port-file") {
      port_file = v;
    } else if (arg == "--token") {
      options.token = v;
    } else if (arg == "--url-ttl") {
      ok = u64(30 * 86400, &n);
      options.url_ttl_s = static_cast<std::uint32_t>(n);
    } else if (arg == "--tree-page-size") {
      ok = u64(1000, &n);
      options.tree_page_size = static_cast<std::uint32_t>(n);
    } else if (arg == "--lfs-threshold") {
      ok = u64(UINT64_MAX, &options.lfs_threshold);
    } else if (arg == "--threads") {
      ok = u64(64, &n);
      options.threads = static_cast<int>(n);
    } else if (arg == "--read-timeout") {
      ok = u64(3600, &n);
      options.read_timeout_s = static_cast<std::uint32_t>(n);
    } else if (arg == "--seed") {
      ok = u64(UINT64_MAX, &faults.seed);
    } else if (arg == "--fault-drop") {
      ok = ParseProbability(v, &faults.drop);
    } else if (arg == "--fault-corrupt") {
      ok = ParseProbability(v, &faults.corrupt);
    } else if (arg == "--fault-500") {
      ok = ParseProbability(v, &faults.http500);
    } else if (arg == "--fault-503") {
      ok = ParseProbability(v, &faults.http503);
    } else if (arg == "--fault-429") {
      ok = ParseProbability(v, &faults.http429);
    } else if (arg == "--retry-after") {
      ok = u64(86400, &n);
      faults.retry_after_s = static_cast<std::uint32_t>(n);
    } else if (arg == "--fault-ignore-range") {
      ok = ParseProbability(v, &faults.ignore_range);
    } else if (arg == "--throttle") {
      ok = u64(UINT64_MAX, &faults.throttle_bps);
    } else if (arg == "--fault-wrong-content-range") {
      ok = ParseProbability(v, &faults.wrong_content_range);
    } else if (arg == "--fault-body-longer") {
      ok = ParseProbability(v, &faults.body_longer);
    } else if (arg == "--fault-hosts") {
      ok = v == "hub" || v == "cdn" || v == "both";
      faults.on_hub = v != "cdn";
      faults.on_cdn = v != "hub";
    } else if (arg == "--fault-match") {
      faults.match = v;
    } else if (arg == "--max-faults") {
      ok = u64(INT64_MAX, &n);
      faults.max_faults = static_cast<std::int64_t>(n);
    } else if (arg == "--fault-every") {
      ok = u64(UINT32_MAX, &n) && n >= 1;
      faults.every = static_cast<std::uint32_t>(n);
    } else {
      return Usage("unknown option " + arg);
    }
    if (!ok) return Usage("bad value '" + v + "' for " + arg);
  }

  // Block the stop signals in every thread (the server's threads inherit the
  // mask) and take them synchronously below.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  auto sim = exlr8::hubsim::HubSim::Start(std::move(options));
  if (!sim.ok()) {
    std::cerr << "exlr8-hubsim: " << sim.status().message() << "\n";
    return 1;
  }
  const std::string line = "hub=" + (*sim)->hub_url() + " cdn=" + (*sim)->cdn_url();
  if (!port_file.empty()) {
    const std::string tmp = port_file + ".tmp";
    {
      std::ofstream out(tmp, std::ios::trunc);
      out << line << "\n";
      if (!out.flush()) {
        std::cerr << "exlr8-hubsim: cannot write " << tmp << "\n";
        return 1;
      }
    }
    if (std::rename(tmp.c_str(), port_file.c_str()) != 0) {
      std::cerr << "exlr8-hubsim: cannot rename " << tmp << " to " << port_file << "\n";
      return 1;
    }
  }
  std::cout << line << std::endl;

  int sig = 0;
  sigwait(&stop_signals, &sig);
  std::cerr << "exlr8-hubsim: signal " << sig << ", stopping\n";
  (*sim)->Stop();
  return 0;
}
