#include "daemon/progress.h"

#include <unistd.h>

#include <string>

#include "client/cli.h"

namespace exlr8 {

namespace {
std::string Duration(double s) {
  if (s < 0 || s > 1e7) return "--:--";
  const long t = static_cast<long>(s + 0.5);
  char buf[32];
  if (t >= 3600) std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
  else std::snprintf(buf, sizeof buf, "%02ld:%02ld", t / 60, t % 60);
  return buf;
}
}  // namespace

ProgressDisplay::ProgressDisplay(const PullJob& job, std::FILE* out, bool enabled)
    : job_(job), out_(out), tty_(isatty(fileno(out)) != 0), enabled_(enabled) {
  if (enabled_) thread_ = std::thread([this] { Loop(); });
}

ProgressDisplay::~ProgressDisplay() { Stop(); }

void ProgressDisplay::Stop() {
  if (stop_.exchange(true) || !enabled_) return;
  thread_.join();
  Draw(job_.Progress(), true);
  if (tty_ && drew_) std::fputc('\n', out_);
  std::fflush(out_);
}

void ProgressDisplay::Loop() {
  while (!stop_.load()) {
    Draw(job_.Progress(), false);
    for (int i = 0; i < 5 && !stop_.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

void ProgressDisplay::Draw(const PullProgress& p, bool final) {
  const double done = static_cast<double>(p.bytes_verified + p.bytes_reused);
  const double planned = static_cast<double>(p.bytes_planned);
  // rate: exponential average of the verified byte rate
  const double dt = p.elapsed_s - last_time_;
  if (dt > 0.2) {
    const double inst = (static_cast<double>(p.bytes_received) - last_bytes_) / dt;
    rate_ = rate_ == 0 ? inst : 0.7 * rate_ + 0.3 * inst;
    last_bytes_ = static_cast<double>(p.bytes_received);
    last_time_ = p.elapsed_s;
  }
  const double eta = rate_ > 0 && planned > done ? (planned - done) / rate_ : 0;
  const double frac = planned > 0 ? std::min(1.0, done / planned) : 0;
  char line[256];
  if (tty_) {
    constexpr int kWidth = 24;
    std::string bar(kWidth, ' ');
    for (int i = 0; i < static_cast<int>(frac * kWidth); ++i) bar[i] = '#';
    std::snprintf(line, sizeof line, "\r%-7s [%s] %5.1f%% %s/%s %s/s ETA %s  ranges %llu/%llu  retries %llu   ",
                  std::string(PullPhaseName(p.phase)).c_str(), bar.c_str(), 100 * frac,
                  HumanBytes(static_cast<std::uint64_t>(done)).c_str(),
                  HumanBytes(static_cast<std::uint64_t>(planned)).c_str(),
                  HumanBytes(static_cast<std::uint64_t>(rate_)).c_str(), Duration(eta).c_str(),
                  static_cast<unsigned long long>(p.ranges_done), static_cast<unsigned long long>(p.ranges_total),
                  static_cast<unsigned long long>(p.fetch.retries));
    std::fputs(line, out_);
    std::fflush(out_);
    drew_ = true;
  } else if (final || p.elapsed_s - last_log_ >= 5) {
    last_log_ = p.elapsed_s;
    std::snprintf(line, sizeof line,
                  "exlr8d pull: %s %.1f%% %s of %s, %s/s, ranges %llu/%llu, retries %llu, checksum failures %llu\n",
                  std::string(PullPhaseName(p.phase)).c_str(), 100 * frac,
                  HumanBytes(static_cast<std::uint64_t>(done)).c_str(),
                  HumanBytes(static_cast<std::uint64_t>(planned)).c_str(),
                  HumanBytes(static_cast<std::uint64_t>(rate_)).c_str(),
                  static_cast<unsigned long long>(p.ranges_done), static_cast<unsigned long long>(p.ranges_total),
                  static_cast<unsigned long long>(p.fetch.retries),
                  static_cast<unsigned long long>(p.checksum_failures));
    std::fputs(line, out_);
    std::fflush(out_);
  }
}

}  // namespace exlr8
