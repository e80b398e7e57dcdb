// The pull's progress display: the bar fits any terminal width (a line that
// wraps would turn every redraw into a new line), and `exlr8d pull` on a
// real pseudo-terminal draws it that way and ends on a fresh line.
#include <gtest/gtest.h>
#include <poll.h>
#include <pty.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "daemon/progress_line.h"
#include "tests/daemon/cache_test_util.h"
#include "tests/daemon/pull_test_util.h"
#include "tests/daemon/shell_util.h"

namespace exlr8 {
namespace {

using ::exlr8::testing::TempDir;

PullProgress Halfway() {
  PullProgress p;
  p.phase = PullPhase::kHalves;
  p.bytes_planned = 82'300'000'000;
  p.bytes_verified = 41'150'000'000;
  p.ranges_total = 230'400;
  p.ranges_done = 115'200;
  p.fetch.retries = 12;
  return p;
}

TEST(ProgressLineTest, AWideTerminalGetsEveryField) {
  const std::string line = PullProgressBar(Halfway(), 250e6, 200);
  EXPECT_LE(line.size(), 199u);
  for (const char* part : {"halves", "[", "50.0%", "41.15 GB/82.30 GB", "250.00 MB/s", "ETA 02:45",
                           "ranges 115200/230400", "retries 12"})
    EXPECT_NE(line.find(part), std::string::npos) << part << " in: " << line;
  const auto open = line.find('['), close = line.find(']');
  const std::string bar = line.substr(open + 1, close - open - 1);
  EXPECT_EQ(bar.size(), 24u);
  EXPECT_EQ(bar, std::string(12, '#') + std::string(12, ' '));
}

TEST(ProgressLineTest, EveryWidthGetsALineThatFitsAndDropsTheLeastUsefulFirst) {
  std::size_t last = 0;
  for (int columns = 1; columns <= 200; ++columns) {
    SCOPED_TRACE(columns);
    const std::string line = PullProgressBar(Halfway(), 250e6, columns);
    EXPECT_LE(line.size(), static_cast<std::size_t>(std::max(columns - 1, 1)));
    EXPECT_GE(line.size(), last > 0 ? std::min<std::size_t>(last, 4) : 0u);
    last = line.size();
    if (columns >= 12) {
      EXPECT_NE(line.find("50.0%"), std::string::npos) << line;
    }
    if (columns >= 20) {
      EXPECT_NE(line.find("ETA"), std::string::npos) << line;
    }
    // What goes first goes before what is kept longer.
    if (line.find('[') != std::string::npos) {
      EXPECT_NE(line.find("ranges"), std::string::npos) << line;
    }
    if (line.find("retries") != std::string::npos) {
      EXPECT_NE(line.find("ranges"), std::string::npos) << line;
    }
  }
  // 80 columns keep what the bar must show: bytes, rate, ETA, ranges.
  const std::string eighty = PullProgressBar(Halfway(), 250e6, 80);
  for (const char* part : {"41.15 GB/82.30 GB", "250.00 MB/s", "ETA 02:45", "ranges 115200/230400"})
    EXPECT_NE(eighty.find(part), std::string::npos) << part << " in: " << eighty;
  // 100 columns have room for a bar as well.
  EXPECT_NE(PullProgressBar(Halfway(), 250e6, 100).find("[#"), std::string::npos);
}

TEST(ProgressLineTest, BeforeThePlanAndWithoutARate) {
  PullProgress p;  // starting: nothing planned, no rate
  const std::string line = PullProgressBar(p, 0, 120);
  EXPECT_NE(line.find("  0.0%"), std::string::npos) << line;
  EXPECT_NE(line.find("ETA 00:00"), std::string::npos) << line;
  EXPECT_EQ(PullProgressLogLine(p, 0).rfind("exlr8d pull: starting 0.0% 0 B of 0 B", 0), 0u)
      << PullProgressLogLine(p, 0);
}

TEST(ProgressLineTest, Durations) {
  EXPECT_EQ(ProgressDuration(0), "00:00");
  EXPECT_EQ(ProgressDuration(65.4), "01:05");
  EXPECT_EQ(ProgressDuration(3725), "1:02:05");
  EXPECT_EQ(ProgressDuration(-1), "--:--");
  EXPECT_EQ(ProgressDuration(std::nan("")), "--:--");
  EXPECT_EQ(ProgressDuration(std::numeric_limits<double>::infinity()), "--:--");
}

// What a terminal `columns` wide shows of `text`: each redraw (after a
// carriage return) and each line, with the erase-line sequences taken out.
std::vector<std::string> Redraws(std::string text) {
  for (std::size_t at; (at = text.find("\x1b[K")) != std::string::npos;) text.erase(at, 3);
  std::vector<std::string> out;
  std::string cur;
  for (char c : text) {
    if (c == '\r' || c == '\n') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

TEST(ProgressTerminalTest, PullOnANarrowTerminalRedrawsInPlaceAndEndsOnAFreshLine) {
  hubsim::FaultConfig slow;
  slow.throttle_bps = 400'000;  // per body: the pull takes a second or two
  auto sim = StartSim(TinyRelease(), "", slow);
  ASSERT_NE(sim, nullptr);
  TempDir cache;
  constexpr int kColumns = 50;
  int master = -1;
  winsize ws{};
  ws.ws_row = 24;
  ws.ws_col = kColumns;
  const std::vector<std::string> args = {Exlr8d(),  "pull",  "--repo",     "exlr8/test",  "--manifest",
                                         "home",    "--tp",  "4",          "--rank",      "1",
                                         "--endpoint", sim->hub_url(), "--cache", cache.path().string(),
                                         "--jobs",  "4"};
  // Nothing of this process's buffered output may reach the child's terminal.
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::forkpty(&master, nullptr, nullptr, &ws);
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // stdout (the summary) away from the terminal: only stderr's bar is on it.
    if (std::freopen("/dev/null", "w", stdout) == nullptr) ::_exit(126);
    ::setenv("HF_HUB_DISABLE_TELEMETRY", "1", 1);
    ::unsetenv("HF_TOKEN");
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  std::string seen;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (;;) {
    pollfd pfd{master, POLLIN, 0};
    if (::poll(&pfd, 1, 200) > 0) {
      char buf[4096];
      const ssize_t n = ::read(master, buf, sizeof buf);
      if (n <= 0) break;  // EIO: the child is gone and the terminal closed
      seen.append(buf, static_cast<std::size_t>(n));
    }
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "pull did not end; so far: " << seen;
  }
  ::close(master);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << seen;

  const std::vector<std::string> draws = Redraws(seen);
  ASSERT_GE(draws.size(), 3u) << "a bar drawn and redrawn: " << seen;
  for (const std::string& d : draws) EXPECT_LE(d.size(), static_cast<std::size_t>(kColumns - 1)) << d;
  EXPECT_NE(draws.back().find("100.0%"), std::string::npos) << draws.back();
  // Finished on a fresh line (the terminal turns \n into \r\n), so what is
  // printed next does not overwrite the last bar.
  ASSERT_GE(seen.size(), 2u);
  EXPECT_EQ(seen.substr(seen.size() - 2), "\r\n") << seen;
}

// A quick pull's last log line (not a terminal) must not say "0 B/s" when
// the moving average has not been updated yet: the last line says the run's
// rate, as the summary does.
TEST(ProgressLogTest, TheLastLineSaysTheRunsRate) {
  auto sim = StartSim(TinyRelease());
  ASSERT_NE(sim, nullptr);
  TempDir cache;
  const std::string err = (cache.path() / "err.log").string();
  const ShellRun pull = Shell("(" + Exlr8d() + " pull --repo exlr8/test --manifest home --tp 4 --rank 1 --endpoint " +
                              sim->hub_url() + " --cache " + Quote((cache.path() / "c").string()) +
                              " > /dev/null 2> " + Quote(err) + ")");  // stderr to the file, not to Shell's 2>&1
  ASSERT_EQ(pull.status, 0) << pull.out;
  std::ifstream in(err);
  const std::string log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::size_t done = log.rfind("exlr8d pull: done 100.0%");
  ASSERT_NE(done, std::string::npos) << log;
  EXPECT_EQ(log.find(" 0 B/s", done), std::string::npos) << log.substr(done);
}

}  // namespace
}  // namespace exlr8
