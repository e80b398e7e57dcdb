// The holder's record (daemon/stage/stage_state.h): what exlr8d serve reads
// of the holders it started, alive or dead.
#include "daemon/stage/stage_state.h"
#include "daemon/stage/step_reporter.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <fstream>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/daemon/cache_test_util.h"

namespace exlr8 {
namespace {

using ::exlr8::testing::TempDir;
using ::testing::HasSubstr;

TEST(StageStateTest, TheHolderWritesAndAReaderSeesItAlive) {
  TempDir dir;
  auto empty = ReadStageState(dir.path());
  ASSERT_TRUE(empty.ok());
  EXPECT_FALSE(empty->alive);
  EXPECT_EQ(empty->state, "");
  {
    auto writer = StageStateWriter::Open(dir.path());
    ASSERT_TRUE(writer.ok()) << writer.status().ToString();
    ASSERT_TRUE((*writer)->Set("holding", StateMembers().Add("lease", "/run/x.sock").Add("bytes", 42)).ok());
    auto st = ReadStageState(dir.path());
    ASSERT_TRUE(st.ok());
    EXPECT_TRUE(st->alive);
    EXPECT_EQ(st->pid, ::getpid());
    EXPECT_EQ(st->state, "holding");
    EXPECT_EQ(st->record.Find("lease")->as_string(), "/run/x.sock");
    EXPECT_EQ(*st->record.Find("bytes")->as_uint64(), 42u);
    // A second holder in the same directory is refused, naming the first.
    auto second = StageStateWriter::Open(dir.path());
    EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_THAT(second.status().message(), HasSubstr("locked by pid " + std::to_string(::getpid())));
    ASSERT_TRUE((*writer)->Set("released").ok());
  }
  auto after = ReadStageState(dir.path());
  ASSERT_TRUE(after.ok());
  EXPECT_FALSE(after->alive);
  EXPECT_EQ(after->state, "released");
  EXPECT_FALSE(IsLiveStageState(after->state));
  EXPECT_TRUE(IsLiveStageState("holding"));
}

// Whatever a member holds (an error's quotes and newlines, a path of any
// bytes, a rate, a list of pids), the record stays one JSON object that
// reads back member by member.
TEST(StageStateTest, MembersOfAnyTextStayOneJsonRecord) {
  TempDir dir;
  auto writer = StageStateWriter::Open(dir.path());
  ASSERT_TRUE(writer.ok()) << writer.status().ToString();
  const std::string error = "cache: \"L3 e0\" mismatch\n\tat byte 7 \\ \x01";
  const std::vector<pid_t> pids = {12, 345};
  ASSERT_TRUE((*writer)
                  ->Set("failed", StateMembers()
                                      .Add("error", error)
                                      .AddFixed("upload_gb_per_s", 12.34567, 3)
                                      .AddArray("lessees", std::span<const pid_t>(pids))
                                      .Add("exit_status", 3))
                  .ok());
  auto st = ReadStageState(dir.path());
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  ASSERT_TRUE(st->record.is_object());
  EXPECT_EQ(st->record.Find("error")->as_string(), error);
  EXPECT_DOUBLE_EQ(st->record.Find("upload_gb_per_s")->as_double(), 12.346);
  ASSERT_EQ(st->record.Find("lessees")->as_array().size(), 2u);
  EXPECT_EQ(*st->record.Find("lessees")->as_array()[1].as_int64(), 345);
  EXPECT_EQ(*st->record.Find("exit_status")->as_int64(), 3);
}

// Every step a running holder reports is live (lease v2 in device memory
// hashes and decodes after staging); the outcomes are not.
TEST(StageStateTest, EveryStepOfARunningHolderIsLive) {
  for (const char* step : {"reading", "staging", "hashing", "decoding", "holding", "releasing"})
    EXPECT_TRUE(IsLiveStageState(step)) << step;
  for (const char* end : {"released", "failed", "died", "starting", ""})
    EXPECT_FALSE(IsLiveStageState(end)) << end;
}

// Readers probe the lock with a shared lock of their own for an instant; a
// holder starting at that instant must not take it for another holder.
TEST(StageStateTest, ReadersProbingNeverKeepAHolderFromStarting) {
  TempDir dir;
  std::atomic<bool> stop{false};
  std::thread reader([&] {
    while (!stop) (void)ReadStageState(dir.path());
  });
  int failures = 0;
  for (int i = 0; i < 300; ++i) {
    auto writer = StageStateWriter::Open(dir.path());
    if (!writer.ok()) ++failures;
  }
  stop = true;
  reader.join();
  EXPECT_EQ(failures, 0);
}

TEST(StageStateTest, AHolderKilledWhileHoldingIsNotAlive) {
  TempDir dir;
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    auto writer = StageStateWriter::Open(dir.path());
    const char c = writer.ok() && (*writer)->Set("holding").ok() ? '1' : '0';
    (void)!::write(ready[1], &c, 1);
    for (;;) ::pause();
  }
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ASSERT_EQ(c, '1');
  EXPECT_TRUE(ReadStageState(dir.path())->alive);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  auto st = ReadStageState(dir.path());
  ASSERT_TRUE(st.ok());
  EXPECT_FALSE(st->alive);
  EXPECT_EQ(st->state, "holding");  // what it last said: the reader calls it "died"
  EXPECT_EQ(st->pid, child);
  ::close(ready[0]);
  ::close(ready[1]);
}

TEST(StageStateTest, AStateFileThatIsNotOneIsCorruptionNamingIt) {
  TempDir dir;
  for (const std::string& text : std::vector<std::string>{"not json", "{\"pid\":1}", "[1]", std::string(70000, ' ') + "{}"}) {
    std::ofstream(dir.path() / "state.json") << text;
    auto st = ReadStageState(dir.path());
    EXPECT_EQ(st.status().code(), StatusCode::kCorruption) << text.substr(0, 20);
    EXPECT_THAT(st.status().message(), HasSubstr((dir.path() / "state.json").string()));
  }
}

// While a long step runs, the reporter rewrites the record with its
// progress, and prints it now and then; once the next step is set, the old
// step's progress is never written over it.
TEST(StepReporterTest, ALongStepShowsItsProgressAndNeverOutlivesIt) {
  TempDir dir;
  const std::string log = (dir.path() / "out.txt").string();
  std::FILE* out = std::fopen(log.c_str(), "w+");
  ASSERT_NE(out, nullptr);
  auto value = [&](const char* key) -> std::uint64_t {
    auto st = ReadStageState(dir.path());
    if (!st.ok() || !st->record.is_object() || st->record.Find(key) == nullptr) return 0;
    return st->record.Find(key)->as_uint64().value_or(0);
  };
  auto state = [&] {
    auto st = ReadStageState(dir.path());
    return st.ok() ? st->state : "";
  };
  auto wait_for = [](const std::function<bool()>& done) {
    for (int i = 0; i < 500; ++i) {
      if (done()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  };
  std::atomic<std::uint64_t> done{0}, total{0};
  {
    auto writer = StageStateWriter::Open(dir.path());
    ASSERT_TRUE(writer.ok()) << writer.status().ToString();
    StepReporter reporter(std::move(*writer), out, std::chrono::milliseconds(10), std::chrono::milliseconds(30));
    reporter.Step("reading", {}, &done, &total);
    EXPECT_EQ(state(), "reading");  // written at once, before any progress
    EXPECT_EQ(value("done_bytes"), 0u);
    total.store(8'000'000'000);
    done.store(2'000'000'000);
    EXPECT_TRUE(wait_for([&] { return value("done_bytes") == 2'000'000'000; }));
    EXPECT_EQ(value("total_bytes"), 8'000'000'000u);
    done.store(8'000'000'000);
    EXPECT_TRUE(wait_for([&] { return value("done_bytes") == 8'000'000'000; }));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // a few lines printed
    reporter.Step("failed", StateMembers().Add("exit_status", 3));
    EXPECT_EQ(state(), "failed");
    done.store(9);  // the old step's counter moves on: nothing is written for it
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_EQ(state(), "failed");
    EXPECT_EQ(value("exit_status"), 3u);
    EXPECT_EQ(value("done_bytes"), 0u);  // a step without a counter has none
  }
  std::fflush(out);
  std::rewind(out);
  std::string printed(4096, '\0');
  printed.resize(std::fread(printed.data(), 1, printed.size(), out));
  std::fclose(out);
  EXPECT_THAT(printed, HasSubstr(" of 8.00 GB done, "));
  EXPECT_THAT(printed, HasSubstr("reading: "));
}

}  // namespace
}  // namespace exlr8
