#include "daemon/progress_line.h"

#include <algorithm>
#include <cstdio>

#include "client/cli/cli.h"

namespace exlr8 {

namespace {

struct Numbers {
  double frac = 0, eta = 0;
  std::string phase, done, planned, rate;
};

Numbers Compute(const PullProgress& p, double rate) {
  Numbers n;
  const double done = static_cast<double>(p.bytes_verified + p.bytes_reused);
  const double planned = static_cast<double>(p.bytes_planned);
  n.frac = planned > 0 ? std::min(1.0, done / planned) : 0;
  n.eta = rate > 0 && planned > done ? (planned - done) / rate : 0;
  n.phase = std::string(PullPhaseName(p.phase));
  n.done = HumanBytes(static_cast<std::uint64_t>(done));
  n.planned = HumanBytes(static_cast<std::uint64_t>(planned));
  n.rate = HumanBytes(static_cast<std::uint64_t>(std::max(rate, 0.0)));
  return n;
}

std::string Format(const char* fmt, auto... args) {
  char buf[256];
  const int n = std::snprintf(buf, sizeof buf, fmt, args...);
  return std::string(buf, static_cast<std::size_t>(std::clamp(n, 0, static_cast<int>(sizeof buf) - 1)));
}

}  // namespace

std::string ProgressDuration(double s) {
  if (!(s >= 0) || s > 1e7) return "--:--";
  const long t = static_cast<long>(s + 0.5);
  if (t >= 3600) return Format("%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
  return Format("%02ld:%02ld", t / 60, t % 60);
}

std::string PullProgressBar(const PullProgress& p, double rate, int columns) {
  const std::size_t room = static_cast<std::size_t>(std::max(columns, 2) - 1);
  const Numbers n = Compute(p, rate);
  const std::string eta = ProgressDuration(n.eta);
  const std::string ranges = Format("  ranges %llu/%llu", static_cast<unsigned long long>(p.ranges_done),
                                    static_cast<unsigned long long>(p.ranges_total));
  const std::string retries = Format("  retries %llu", static_cast<unsigned long long>(p.fetch.retries));
  const std::string pct = Format("%5.1f%%", 100 * n.frac);
  const std::string amount = n.done + "/" + n.planned;
  // Richest first; the first that fits is drawn. The ranges count (which
  // says the pull moves when the bytes barely do) outlasts the bar.
  const std::string head = Format("%-7s ", n.phase.c_str());
  const std::string rest = " " + pct + " " + amount + " " + n.rate + "/s ETA " + eta;
  for (const std::string& tail : {ranges + retries, ranges}) {
    const std::size_t fixed = head.size() + 2 + rest.size() + tail.size();  // 2: the brackets
    if (fixed + 8 > room) continue;  // no room for a useful bar
    const std::size_t width = std::min<std::size_t>(24, room - fixed);
    std::string bar(width, ' ');
    std::fill_n(bar.begin(), static_cast<std::size_t>(n.frac * static_cast<double>(width)), '#');
    return head + "[" + bar + "]" + rest + tail;
  }
  for (const std::string& line : {head + rest.substr(1) + ranges, head + rest.substr(1),
                                  n.phase + " " + pct + " " + amount + " ETA " + eta, pct + " ETA " + eta}) {
    if (line.size() <= room) return line;
  }
  return (pct + " ETA " + eta).substr(0, room);
}

std::string PullProgressLogLine(const PullProgress& p, double rate) {
  const Numbers n = Compute(p, rate);
  return Format("exlr8d pull: %s %.1f%% %s of %s, %s/s, ranges %llu/%llu, retries %llu, checksum failures %llu",
                n.phase.c_str(), 100 * n.frac, n.done.c_str(), n.planned.c_str(), n.rate.c_str(),
                static_cast<unsigned long long>(p.ranges_done), static_cast<unsigned long long>(p.ranges_total),
                static_cast<unsigned long long>(p.fetch.retries),
                static_cast<unsigned long long>(p.checksum_failures));
}

}  // namespace exlr8
