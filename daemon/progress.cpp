#include "daemon/progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <string>

#include "daemon/hub/hub_client.h"
#include "daemon/progress_line.h"

namespace exlr8 {

bool ProgressBarsDisabledByEnvironment() { return HfEnvironmentFlag("HF_HUB_DISABLE_PROGRESS_BARS"); }

int TerminalColumns(std::FILE* out) {
  winsize ws{};
  if (::ioctl(fileno(out), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 80;
}

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
  // rate: exponential average of the byte rate off the network
  const double dt = p.elapsed_s - last_time_;
  if (dt > 0.2) {
    const double inst = (static_cast<double>(p.bytes_received) - last_bytes_) / dt;
    rate_ = rate_ == 0 ? inst : 0.7 * rate_ + 0.3 * inst;
    last_bytes_ = static_cast<double>(p.bytes_received);
    last_time_ = p.elapsed_s;
  }
  // The last line says the whole run's rate, as the summary does: the
  // moving average of a fast pull can still read 0 B/s at the end.
  if (final && p.elapsed_s > 0) rate_ = static_cast<double>(p.bytes_received) / p.elapsed_s;
  if (tty_) {
    // Back to the line's start, the line, then erase what a longer line
    // before it left (ESC [ K).
    const std::string line = "\r" + PullProgressBar(p, rate_, TerminalColumns(out_)) + "\x1b[K";
    std::fputs(line.c_str(), out_);
    std::fflush(out_);
    drew_ = true;
  } else if (final || p.elapsed_s - last_log_ >= 5) {
    last_log_ = p.elapsed_s;
    const std::string line = PullProgressLogLine(p, rate_) + "\n";
    std::fputs(line.c_str(), out_);
    std::fflush(out_);
  }
}

}  // namespace exlr8
