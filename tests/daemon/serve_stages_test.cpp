// `exlr8d serve` starting, following and releasing holders (POST
// /v1/stages): a real server process, real holder processes, restarts and
// kill -9. The stand-in tests/daemon/fake_stage_holder.sh (it speaks the
// holder's side of daemon/stage/stage_state.h and nothing else) covers what
// the server does with any holder; the real exlr8d-stage holds a rank in
// host memory everywhere, and in device memory where there is a GPU (run up
// to where it needs the GPU elsewhere).
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <string>

#include "client/lease/host_lease.h"
#include "daemon/base/posix.h"
#include "daemon/cache/process_pin.h"
#include "daemon/stage/rank_reader.h"
#include "daemon/stage/stage_state.h"
#include "tests/daemon/cache_test_util.h"
#include "tests/daemon/lease_test_util.h"
#include "tests/daemon/pull_test_util.h"
#include "tests/daemon/rank_test_util.h"
#include "tests/daemon/serve_test_util.h"
#include "tests/daemon/shell_util.h"

namespace exlr8 {
namespace {

using ::exlr8::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;

std::string StageBody(int tp, int rank, const std::string& extra = "") {
  return R"({"repo":"exlr8/test","manifest":"home","tp":)" + std::to_string(tp) + R"(,"rank":)" +
         std::to_string(rank) + extra + "}";
}

JsonValue StageOf(const HttpAnswer& a) {
  auto v = ParseJson(a.body);
  if (!v.ok() || !v->is_object() || v->Find("stage") == nullptr) return JsonValue();
  return *v->Find("stage");
}

JsonValue GetStage(const ServeProcess& serve, std::uint64_t id) {
  return StageOf(Http(serve.base() + "/v1/stages/" + std::to_string(id)));
}

std::string Text(const JsonValue& stage, const char* key) {
  const JsonValue* v = stage.is_object() ? stage.Find(key) : nullptr;
  return v != nullptr && v->is_string() ? v->as_string() : "";
}

std::uint64_t Number(const JsonValue& stage, const char* key) {
  const JsonValue* v = stage.is_object() ? stage.Find(key) : nullptr;
  return v != nullptr && v->as_uint64() ? *v->as_uint64() : 0;
}

// A member of an object, or null.
JsonValue Member(const JsonValue& object, const char* key) {
  const JsonValue* v = object.is_object() ? object.Find(key) : nullptr;
  return v != nullptr ? *v : JsonValue();
}

// An array of strings as one string, "a b c" ("?" for anything else).
std::string Words(const JsonValue& array) {
  std::string out;
  if (!array.is_array()) return "?";
  for (const JsonValue& e : array.as_array())
    out += (out.empty() ? "" : " ") + (e.is_string() ? e.as_string() : "?");
  return out;
}

bool Alive(const JsonValue& stage) {
  const JsonValue* v = stage.is_object() ? stage.Find("alive") : nullptr;
  return v != nullptr && v->as_bool();
}

// Not running: no such process, or a zombie (the holder of a server that
// is gone is reparented, and not every init reaps at once).
bool Gone(pid_t pid) {
  if (::kill(pid, 0) != 0) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const auto paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'Z';
}

// Kills the holders a test leaves behind (they run in sessions of their
// own, so nothing else would): declared after the TempDir, so it runs first.
class HolderReaper {
 public:
  explicit HolderReaper(const fs::path& cache) : root_(cache / "exlr8d.stages") {}
  ~HolderReaper() {
    std::error_code ec;
    for (fs::directory_iterator it(root_, ec), end; !ec && it != end; it.increment(ec)) {
      std::ifstream lock(it->path() / "holder.lock");
      pid_t pid = 0;
      if (lock >> pid && pid > 0 && !Gone(pid)) ::kill(pid, SIGKILL);
    }
  }

 private:
  fs::path root_;
};

std::string FakeHolder() { return std::string(EXLR8_SOURCE_DIR) + "/tests/daemon/fake_stage_holder.sh"; }

std::uint64_t StartStage(const ServeProcess& serve, const std::string& body) {
  const HttpAnswer a = Http(serve.base() + "/v1/stages", "POST", "", body);
  EXPECT_EQ(a.status, 202) << a.body;
  return Number(StageOf(a), "id");
}

// What the server manages: start, refuse a second holder of the same rank,
// survive its own restart, release on DELETE, forget, and tell a holder
// that died from one that released.
TEST(ServeStagesTest, StartsFollowsAndReleasesHoldersAcrossRestarts) {
  TempDir cache;
  HolderReaper reaper(cache.path());
  const std::vector<std::string> args = {"--listen", "127.0.0.1:0", "--stage-binary", FakeHolder()};
  const std::string log = (cache.path() / "serve.log").string();
  std::uint64_t id = 0;
  pid_t holder = 0;
  {
    // The server's token, from any variable it reads (HUGGING_FACE_HUB_TOKEN
    // included): never the holder's.
    ::setenv("HF_TOKEN", "hf_not_for_holders", 1);
    ::setenv("HUGGING_FACE_HUB_TOKEN", "hf_not_for_holders_either", 1);
    ServeProcess serve(cache.path(), args, log);
    ::unsetenv("HF_TOKEN");
    ::unsetenv("HUGGING_FACE_HUB_TOKEN");
    ASSERT_GT(serve.port(), 0) << serve.ready_line();
    id = StartStage(serve, StageBody(2, 1));
    ASSERT_EQ(id, 1u);
    JsonValue s;
    ASSERT_TRUE(WaitFor([&] { return Text(s = GetStage(serve, id), "state") == "holding"; })) << Text(s, "state");
    EXPECT_TRUE(Alive(s));
    holder = static_cast<pid_t>(Number(s, "pid"));
    EXPECT_GT(holder, 0);
    EXPECT_EQ(Text(s, "lease"), (cache.path() / "exlr8d.stages" / "1" / "lease.sock").string());
    EXPECT_EQ(Number(*s.Find("holder"), "bytes"), 123u);
    EXPECT_EQ(Number(*s.Find("holder"), "hf_token_set"), 0u);
    EXPECT_EQ(s.Find("holder")->Find("upload_gb_per_s")->as_double(), 1.5);
    EXPECT_EQ(Text(s, "repo"), "exlr8/test");
    EXPECT_EQ(Number(s, "rank"), 1u);

    // One holder per rank and device.
    const HttpAnswer twice = Http(serve.base() + "/v1/stages", "POST", "", StageBody(2, 1));
    EXPECT_EQ(twice.status, 409) << twice.body;
    EXPECT_THAT(twice.body, HasSubstr("stage 1 already holds exlr8/test home TP 2 rank 1 on device 0"));
    // Bad requests name the field.
    for (const auto& [body, what] : std::vector<std::pair<std::string, std::string>>{
             {StageBody(2, 2), "rank 2 is not in [0, tp = 2)"},
             {StageBody(2, 0, R"(,"devcie":1)"), "unknown field 'devcie'"},
             {R"({"repo":"exlr8/test","manifest":"/etc/passwd","tp":1,"rank":0})", "manifest"},
             {StageBody(2, 0, R"(,"check":"some")"), "check must be"},
             {R"({"repo":"../x","manifest":"home","tp":1,"rank":0})", "../x"}}) {
      const HttpAnswer bad = Http(serve.base() + "/v1/stages", "POST", "", body);
      EXPECT_EQ(bad.status, 400) << body << " -> " << bad.body;
      EXPECT_THAT(bad.body, HasSubstr(what)) << body;
    }
    EXPECT_EQ(Http(serve.base() + "/v1/stages/99").status, 404);
    EXPECT_EQ(Http(serve.base() + "/v1/stages/x").status, 404);
    EXPECT_EQ(Http(serve.base() + "/v1/stages/1", "PUT").status, 405);
    EXPECT_EQ(serve.Stop(), 0);
  }
  // The holder outlives the server, and the next server finds it.
  EXPECT_FALSE(Gone(holder)) << "the holder died with the server";
  {
    ServeProcess serve(cache.path(), args, log);
    ASSERT_GT(serve.port(), 0) << serve.ready_line();
    JsonValue s = GetStage(serve, id);
    EXPECT_EQ(Text(s, "state"), "holding");
    EXPECT_EQ(static_cast<pid_t>(Number(s, "pid")), holder);
    auto metrics = PrometheusSamples(Http(serve.base() + "/metrics").body);  // grouping checked
    EXPECT_EQ(metrics["exlr8d_stages{state=\"holding\"}"], "1");
    const std::string labels = R"({stage="1",repo="exlr8/test",manifest="home",tp="2",rank="1",device="0"})";
    EXPECT_EQ(metrics["exlr8d_stage_held_bytes" + labels], "123");
    EXPECT_EQ(metrics["exlr8d_stage_lessees" + labels], "0");

    const HttpAnswer release = Http(serve.base() + "/v1/stages/1", "DELETE");
    EXPECT_EQ(release.status, 202) << release.body;
    ASSERT_TRUE(WaitFor([&] { return Text(s = GetStage(serve, id), "state") == "released"; })) << Text(s, "state");
    EXPECT_FALSE(Alive(s));
    EXPECT_TRUE(WaitFor([&] { return Gone(holder); }, 10)) << "released, yet running";
    const HttpAnswer forget = Http(serve.base() + "/v1/stages/1", "DELETE");
    EXPECT_EQ(forget.status, 200) << forget.body;
    EXPECT_THAT(forget.body, HasSubstr("\"forgotten\":true"));
    EXPECT_EQ(Http(serve.base() + "/v1/stages/1").status, 404);
    // A holder killed with -9 says nothing: the server tells it died. (Ids
    // are never reused: a client's id never turns into another stage.)
    const std::uint64_t second = StartStage(serve, StageBody(2, 1));
    EXPECT_EQ(second, 2u);
    ASSERT_TRUE(WaitFor([&] { return Text(s = GetStage(serve, second), "state") == "holding"; }))
        << Text(s, "state") << " " << Text(s, "error");
    ASSERT_EQ(::kill(static_cast<pid_t>(Number(s, "pid")), SIGKILL), 0);
    ASSERT_TRUE(WaitFor([&] { return Text(s = GetStage(serve, second), "state") == "died"; }, 10))
        << Text(s, "state");
    EXPECT_THAT(Text(s, "error"), HasSubstr("gone without releasing, while holding (killed by signal 9)"));
    EXPECT_EQ(Number(s, "exit_status"), 137u);
    // Its rank may be staged again.
    EXPECT_EQ(StartStage(serve, StageBody(2, 1)), 3u);
    const HttpAnswer list = Http(serve.base() + "/v1/stages");
    const JsonValue stages = *Parse(list).Find("stages");
    ASSERT_EQ(stages.as_array().size(), 2u);
    EXPECT_EQ(Number(stages.as_array()[0], "id"), 3u);  // newest first
    ASSERT_TRUE(WaitFor([&] { return Text(GetStage(serve, 3), "state") == "holding"; }));
    EXPECT_EQ(Http(serve.base() + "/v1/stages/3", "DELETE").status, 202);
    ASSERT_TRUE(WaitFor([&] { return Text(GetStage(serve, 3), "state") == "released"; }));
  }
}

// The memory kind and the lease protocol reach the holder's command line
// (the fake holder reports the options it was given as "args": memory,
// lease, device, check, "-" for one not given), come back in the stage's
// JSON with the defaults filled in, and what each holds is reported in
// "held" whether it speaks lease v2 (bytes, regions, the GPU's UUID) or v1
// (bytes only).
TEST(ServeStagesTest, MemoryAndLeaseReachTheHolderAndComeBack) {
  TempDir cache;
  HolderReaper reaper(cache.path());
  ServeProcess serve(cache.path(), {"--listen", "127.0.0.1:0", "--stage-binary", FakeHolder()},
                     (cache.path() / "serve.log").string());
  ASSERT_GT(serve.port(), 0) << serve.ready_line();
  struct Case {
    std::string extra;  // request members
    std::string memory, lease, check, args;
    bool regions, uuid;
  };
  const std::vector<Case> cases = {
      {"", "device", "v2", "sample", "device v2 0 -", true, true},
      {R"(,"memory":"host")", "host", "v2", "none", "host v2 - -", true, false},
      {R"(,"memory":"device","lease":"v1","device":1,"check":"5")", "device", "v1", "5", "device v1 1 5",
       false, false},
      {R"(,"lease":"v1","device":2)", "device", "v1", "64", "device v1 2 64", false, false},
      {R"(,"lease":"v2","device":3,"check":"all")", "device", "v2", "all", "device v2 3 all", true, true},
      {R"(,"device":4,"check":"sample")", "device", "v2", "sample", "device v2 4 -", true, true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.extra);
    const std::uint64_t id = StartStage(serve, StageBody(2, 1, c.extra));
    ASSERT_GT(id, 0u);
    JsonValue s;
    ASSERT_TRUE(WaitFor([&] { return Text(s = GetStage(serve, id), "state") == "holding"; }))
        << Text(s, "state");
    EXPECT_EQ(Text(s, "memory"), c.memory);
    EXPECT_EQ(Text(s, "lease_version"), c.lease);
    EXPECT_EQ(Text(s, "check"), c.check);
    EXPECT_EQ(Words(Member(Member(s, "holder"), "args")), c.args);
    if (c.lease == "v1") {
      EXPECT_THAT(Text(s, "warning"), HasSubstr("lease v1 is deprecated and goes in the next release"));
    } else {
      EXPECT_TRUE(Member(s, "warning").is_null());
    }
    const JsonValue held = Member(s, "held");
    ASSERT_TRUE(held.is_object())
        << Parse(Http(serve.base() + "/v1/stages/" + std::to_string(id))).is_object();
    EXPECT_EQ(Number(held, "bytes"), 123u);
    EXPECT_EQ(Member(held, "regions").is_null(), !c.regions);
    if (c.regions) {
      EXPECT_EQ(Number(held, "regions"), 7u);
    }
    EXPECT_EQ(Text(held, "gpu_uuid"), c.uuid ? "GPU-00000000-1111-2222-3333-444444444444" : "");
    EXPECT_EQ(Member(held, "gpu_uuid").is_null(), !c.uuid);
  }
  // A rank held in host memory is held once; device memory once per GPU.
  const HttpAnswer twice =
      Http(serve.base() + "/v1/stages", "POST", "", StageBody(2, 1, R"(,"memory":"host")"));
  EXPECT_EQ(twice.status, 409) << twice.body;
  EXPECT_THAT(twice.body, HasSubstr("stage 2 already holds exlr8/test home TP 2 rank 1 in host memory"));
  // Once released, "held" is null again.
  ASSERT_EQ(Http(serve.base() + "/v1/stages/2", "DELETE").status, 202);
  JsonValue s;
  ASSERT_TRUE(WaitFor([&] { return Text(s = GetStage(serve, 2), "state") == "released"; }))
      << Text(s, "state");
  EXPECT_TRUE(Member(s, "held").is_null());
}

// Bad "memory" and "lease" values, and combinations the holder would
// refuse, are 400s naming the field; nothing is started.
TEST(ServeStagesTest, BadMemoryOrLeaseIsRefusedNamingTheField) {
  TempDir cache;
  HolderReaper reaper(cache.path());
  ServeProcess serve(cache.path(), {"--listen", "127.0.0.1:0", "--stage-binary", FakeHolder()});
  ASSERT_GT(serve.port(), 0) << serve.ready_line();
  for (const auto& [extra, what] : std::vector<std::pair<std::string, std::string>>{
           {R"(,"memory":"gpu")", R"(memory must be \"device\")"},
           {R"(,"memory":"")", "memory must be"},
           {R"(,"memory":5)", "memory must be a string"},
           {R"(,"lease":"v3")", R"(lease must be \"v2\")"},
           {R"(,"lease":"V2")", "lease must be"},
           {R"(,"lease":2)", "lease must be a string"},
           {R"(,"lease":null)", "lease must be a string"},
           {R"(,"memory":"host","lease":"v1")", "lease \\\"v1\\\" holds device memory only"},
           {R"(,"check":"5")", "check must be \\\"sample\\\""},
           {R"(,"memory":"host","check":"all")", "check must be \\\"none\\\" for host memory"},
           {R"(,"lease":"v1","check":"sample")", "check must be \\\"all\\\" or a count of halves"}}) {
    const HttpAnswer bad = Http(serve.base() + "/v1/stages", "POST", "", StageBody(2, 1, extra));
    EXPECT_EQ(bad.status, 400) << extra << " -> " << bad.body;
    EXPECT_THAT(bad.body, HasSubstr(what)) << extra;
  }
  EXPECT_TRUE(Parse(Http(serve.base() + "/v1/stages")).Find("stages")->as_array().empty());
  EXPECT_FALSE(fs::exists(cache.path() / "exlr8d.stages" / "1"));
}

// A stage recorded by a server from before "memory" and "lease" (its
// request.json has neither) was a lease v1 holder in device memory: that
// is how a later server reports it, with its recorded check.
TEST(ServeStagesTest, AStageRecordedBeforeMemoryAndLeaseIsAV1DeviceStage) {
  TempDir cache;
  const fs::path dir = cache.path() / "exlr8d.stages" / "1";
  fs::create_directories(dir);
  {
    std::ofstream(dir / "request.json")
        << R"({"repo":"exlr8/test","revision":"main","manifest":"home","tp":2,)"
           R"("rank":1,"device":0,"check":"64","release_wait_s":30,"created":1})"
        << "\n";
    std::ofstream(dir / "state.json") << R"({"state":"released","pid":1,"updated":2,"leases_served":0})"
                                      << "\n";
  }
  ServeProcess serve(cache.path(), {"--listen", "127.0.0.1:0", "--stage-binary", FakeHolder()});
  ASSERT_GT(serve.port(), 0) << serve.ready_line();
  const JsonValue s = GetStage(serve, 1);
  EXPECT_EQ(Text(s, "state"), "released");
  EXPECT_EQ(Text(s, "memory"), "device");
  EXPECT_EQ(Text(s, "lease_version"), "v1");
  EXPECT_EQ(Text(s, "check"), "64");
  EXPECT_THAT(Text(s, "warning"), HasSubstr("deprecated"));
  EXPECT_TRUE(Member(s, "held").is_null());
}

// Lease v2 in device memory reports "hashing" and "decoding" after
// "staging": a holder that dies in one of those is "died", as in any other
// step of a living holder, not left in that step for ever.
TEST(ServeStagesTest, AHolderThatDiesWhileHashingIsToldDied) {
  for (const char* step : {"hashing", "decoding"}) {
    SCOPED_TRACE(step);
    TempDir cache;
    HolderReaper reaper(cache.path());
    ::setenv("EXLR8_FAKE_HOLDER_PARK", step, 1);
    ServeProcess serve(cache.path(), {"--listen", "127.0.0.1:0", "--stage-binary", FakeHolder()},
                       (cache.path() / "serve.log").string());
    ::unsetenv("EXLR8_FAKE_HOLDER_PARK");
    ASSERT_GT(serve.port(), 0) << serve.ready_line();
    const std::uint64_t id = StartStage(serve, StageBody(2, 1));
    JsonValue s;
    ASSERT_TRUE(WaitFor([&] { return Text(s = GetStage(serve, id), "state") == step; })) << Text(s, "state");
    EXPECT_TRUE(Alive(s));
    EXPECT_TRUE(Member(s, "held").is_null());
    // One living holder of a rank, in any step.
    EXPECT_EQ(Http(serve.base() + "/v1/stages", "POST", "", StageBody(2, 1)).status, 409);
    ASSERT_EQ(::kill(static_cast<pid_t>(Number(s, "pid")), SIGKILL), 0);
    ASSERT_TRUE(WaitFor([&] { return Text(s = GetStage(serve, id), "state") == "died"; }, 10))
        << Text(s, "state");
    EXPECT_FALSE(Alive(s));
    EXPECT_THAT(Text(s, "error"), HasSubstr(std::string("gone without releasing, while ") + step));
    EXPECT_EQ(Number(s, "exit_status"), 137u);
  }
}

// The record that keeps ids from being reused (exlr8d.stages/last-id) is
// written before a holder starts: when it cannot be, the start fails naming
// it and leaves no stage behind, rather than start one whose id the next
// server could hand out again.
TEST(ServeStagesTest, AStartWhoseIdCannotBeRecordedFailsAndLeavesNoStage) {
  TempDir cache;
  HolderReaper reaper(cache.path());
  const fs::path root = cache.path() / "exlr8d.stages";
  fs::create_directories(root / "last-id");  // a directory where the file goes: its rename fails
  ServeProcess serve(cache.path(), {"--listen", "127.0.0.1:0", "--stage-binary", FakeHolder()},
                     (cache.path() / "serve.log").string());
  ASSERT_GT(serve.port(), 0) << serve.ready_line();
  const HttpAnswer a = Http(serve.base() + "/v1/stages", "POST", "", StageBody(1, 0));
  EXPECT_EQ(a.status, 409) << a.body;
  EXPECT_THAT(a.body, HasSubstr((root / "last-id").string()));
  EXPECT_FALSE(fs::exists(root / "1"));
  const JsonValue list = *Parse(Http(serve.base() + "/v1/stages")).Find("stages");
  EXPECT_TRUE(list.as_array().empty());
  EXPECT_EQ(serve.Stop(), 0);
}

// A dying holder lets go of its lock a moment before the server can reap
// it. A status read in that moment must still say how it ended: the server
// waits the moment out for a holder it started (the fake holder widens it
// to half a second on SIGUSR1, then exits 3).
TEST(ServeStagesTest, AHolderReadWhileItDiesIsToldWithItsExitStatus) {
  TempDir cache;
  HolderReaper reaper(cache.path());
  ServeProcess serve(cache.path(), {"--listen", "127.0.0.1:0", "--stage-binary", FakeHolder()},
                     (cache.path() / "serve.log").string());
  ASSERT_GT(serve.port(), 0) << serve.ready_line();
  const std::uint64_t id = StartStage(serve, StageBody(2, 1));
  JsonValue s;
  ASSERT_TRUE(WaitFor([&] { return Text(s = GetStage(serve, id), "state") == "holding"; })) << Text(s, "state");
  const auto holder = static_cast<pid_t>(Number(s, "pid"));
  ASSERT_EQ(::kill(holder, SIGUSR1), 0);
  // The lock goes at once; the process, half a second later.
  const fs::path dir = cache.path() / "exlr8d.stages" / std::to_string(id);
  ASSERT_TRUE(WaitFor([&] { auto st = ReadStageState(dir); return st.ok() && !st->alive; }, 5));
  s = GetStage(serve, id);
  EXPECT_EQ(Text(s, "state"), "died");
  EXPECT_THAT(Text(s, "error"), HasSubstr("gone without releasing, while holding (exit status 3)"));
  EXPECT_EQ(Number(s, "exit_status"), 3u);
}

// Without the stage program (a build without the CUDA Toolkit), the route
// says so.
TEST(ServeStagesTest, AMissingStageProgramIsAClearError) {
  TempDir cache;
  ServeProcess serve(cache.path(), {"--listen", "127.0.0.1:0", "--stage-binary", "/nonexistent/exlr8d-stage"});
  ASSERT_GT(serve.port(), 0) << serve.ready_line();
  const HttpAnswer a = Http(serve.base() + "/v1/stages", "POST", "", StageBody(2, 1));
  EXPECT_EQ(a.status, 501) << a.body;
  EXPECT_THAT(a.body, HasSubstr("built only with the CUDA Toolkit"));
}

// A cache directory whose serve socket fits but whose stages' lease
// sockets do not (108 bytes) is refused by the POST at once, not after the
// holder has read and uploaded the rank.
TEST(ServeStagesTest, ACacheTooDeepForTheLeaseSocketIsRefusedAtOnce) {
  TempDir base;
  if (base.path().native().size() > 80) GTEST_SKIP() << "TMPDIR is too deep to make a cache path of 90 bytes";
  const std::filesystem::path cache = base.path() / std::string(90 - base.path().native().size() - 1, 'd');
  ASSERT_EQ(cache.native().size(), 90u);
  std::filesystem::create_directories(cache);
  ServeProcess serve(cache, {"--listen", "127.0.0.1:0", "--stage-binary", FakeHolder()});
  ASSERT_GT(serve.port(), 0) << serve.ready_line();
  const HttpAnswer a = Http(serve.base() + "/v1/stages", "POST", "", StageBody(2, 1));
  EXPECT_EQ(a.status, 409) << a.body;
  EXPECT_THAT(a.body, HasSubstr("too deep for the stage's lease socket"));
  EXPECT_TRUE(Parse(Http(serve.base() + "/v1/stages")).Find("stages")->as_array().empty());
}

// The holder itself checks --hold before it reads: a path too long for a
// socket is a usage error at once, never after the read and upload.
TEST(ServeStagesTest, TheRealHolderChecksItsSocketPathBeforeItReads) {
  if (!fs::exists(std::string(EXLR8_BIN_DIR) + "/exlr8d-stage"))
    GTEST_SKIP() << "exlr8d-stage is built only with the CUDA Toolkit";
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  ASSERT_TRUE(Pull(cache.path(), Options(*sim, "home", 2, 1)).ok());
  const std::string hold = (cache.path() / std::string(120, 's')).string();
  const ShellRun r = Shell(std::string(EXLR8_BIN_DIR) + "/exlr8d-stage --repo exlr8/test --manifest home --tp 2 " +
                           "--rank 1 --cache " + Quote(cache.path().string()) + " --hold " + Quote(hold));
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("is longer than 107 bytes"));
  EXPECT_THAT(r.out, Not(HasSubstr("XXH64 checked"))) << "it read the rank first";
}

// A holder that exits before it reports anything fails with its exit
// status; and a node that stages for months keeps only the newest finished
// records (StageManager::kKeepFinished = 64), never reusing an id.
TEST(ServeStagesTest, FinishedRecordsAreBoundedAndAnEarlyExitIsAFailure) {
  TempDir cache;
  ServeProcess serve(cache.path(), {"--listen", "127.0.0.1:0", "--stage-binary", "/bin/false"});
  ASSERT_GT(serve.port(), 0) << serve.ready_line();
  constexpr int kStarted = 70;
  for (int rank = 0; rank < kStarted; ++rank) ASSERT_EQ(StartStage(serve, StageBody(kStarted, rank)), rank + 1u);
  JsonValue s;
  // The newest (older ones may be pruned already, as later ones start).
  ASSERT_TRUE(WaitFor([&] { return Text(s = GetStage(serve, kStarted), "state") == "failed"; }))
      << Text(s, "state") << " " << Text(s, "error");
  EXPECT_THAT(Text(s, "error"), HasSubstr("exit status 1 before it reported"));
  EXPECT_EQ(Number(s, "exit_status"), 1u);
  auto all_failed = [&] {
    const JsonValue list = Parse(Http(serve.base() + "/v1/stages"));
    for (const JsonValue& stage : list.Find("stages")->as_array())
      if (Text(stage, "state") != "failed") return false;
    return true;
  };
  ASSERT_TRUE(WaitFor(all_failed));
  EXPECT_EQ(StartStage(serve, StageBody(kStarted + 1, kStarted)), kStarted + 1u);
  const JsonValue list = Parse(Http(serve.base() + "/v1/stages"));
  const auto& stages = list.Find("stages")->as_array();
  ASSERT_EQ(stages.size(), 65u);  // the newest 64 finished, and the one just started
  EXPECT_EQ(Number(stages.front(), "id"), kStarted + 1u);
  EXPECT_EQ(Number(stages.back(), "id"), 7u);
  EXPECT_EQ(Http(serve.base() + "/v1/stages/6").status, 404);
}

// The real holder in host memory, which needs no GPU: POST, "holding" with
// what it holds, a lessee in this process maps the image (OpenHostLease)
// and finds the cache's bytes there; DELETE sends it the release line
// (schema/lease/PROTOCOL.md), the holder waits for it to let go, then
// exits, unpinned.
TEST(ServeStagesTest, TheRealHolderHoldsARankInHostMemoryUntilDeleted) {
  if (!fs::exists(std::string(EXLR8_BIN_DIR) + "/exlr8d-stage"))
    GTEST_SKIP() << "exlr8d-stage is built only with the CUDA Toolkit";
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  ASSERT_TRUE(Pull(cache.path(), Options(*sim, "home", 2, 1)).ok());
  HolderReaper reaper(cache.path());
  ServeProcess serve(cache.path(), {"--listen", "127.0.0.1:0"}, (cache.path() / "serve.log").string());
  ASSERT_GT(serve.port(), 0) << serve.ready_line();
  const std::uint64_t id = StartStage(serve, StageBody(2, 1, R"(,"memory":"host","release_wait_s":20)"));
  JsonValue s;
  ASSERT_TRUE(WaitFor([&] {
    const std::string state = Text(s = GetStage(serve, id), "state");
    return state != "starting" && state != "reading";
  })) << Text(s, "state");
  ASSERT_EQ(Text(s, "state"), "holding") << Text(s, "error");
  EXPECT_EQ(Text(s, "memory"), "host");
  EXPECT_EQ(Text(s, "lease_version"), "v2");
  EXPECT_EQ(Text(s, "check"), "none");
  const auto holder = static_cast<pid_t>(Number(s, "pid"));
  ASSERT_GT(holder, 0);
  const std::string c = " --cache " + Quote(cache.path().string());
  EXPECT_THAT(Shell(Exlr8d() + " list" + c).out, HasSubstr("exlr8d-stage home tp2 rank1 (pid "));
  {
    auto lease = OpenHostLease(Text(s, "lease"));
    ASSERT_TRUE(lease.ok()) << lease.status().ToString();
    // What the stage reports is what the lease describes.
    const JsonValue held = Member(s, "held");
    EXPECT_EQ(Number(held, "bytes"), lease->allocation_bytes());
    EXPECT_EQ(Number(held, "regions"), lease->tables().checks.size());
    EXPECT_TRUE(Member(held, "gpu_uuid").is_null());
    EXPECT_EQ(lease->description().memory_kind, LeaseMemoryKind::kHost);
    EXPECT_EQ(lease->description().tp, 2);
    EXPECT_EQ(lease->description().rank, 1);
    // Each half's trellis bytes in the image are the cache's (the first
    // bytes of its half record), read from the cache's files directly.
    auto rank = ReadRankHalves(TestRankRequest(cache.path(), 2, 1));
    ASSERT_TRUE(rank.ok()) << rank.status().ToString();
    ASSERT_FALSE(rank->halves.empty());
    for (const RankHalf& h : rank->halves) {
      const ImageTensor* t = lease->tables().FindHalf(h.tag.layer, h.tag.expert, h.tag.proj, h.tag.half);
      ASSERT_NE(t, nullptr) << h.tag.What();
      ASSERT_GE(t->length, h.length) << h.tag.What();
      const std::span<const std::byte> cached = rank->Bytes(h);
      EXPECT_EQ(std::memcmp(lease->Region(*t).data(), cached.data(), cached.size()), 0) << h.tag.What();
    }
    // The lessee is seen; DELETE asks it to let go.
    auto only_me = [&] {
      const JsonValue pids = Member(Member(s = GetStage(serve, id), "holder"), "lessees");
      return pids.is_array() && pids.as_array().size() == 1 &&
             pids.as_array()[0].as_uint64() == static_cast<std::uint64_t>(::getpid());
    };
    EXPECT_TRUE(WaitFor(only_me, 10));
    EXPECT_EQ(Http(serve.base() + "/v1/stages/" + std::to_string(id), "DELETE").status, 202);
    auto release = lease->WaitRelease(std::chrono::seconds(20));
    ASSERT_TRUE(release.ok()) << release.status().ToString();
    ASSERT_TRUE(release->has_value()) << "no release line within 20 s";
    EXPECT_FALSE((*release)->holder_gone);
    EXPECT_EQ((*release)->deadline_s, 20u);
    // It waits for this lessee.
    EXPECT_TRUE(WaitFor([&] { return Text(s = GetStage(serve, id), "state") == "releasing"; }, 10))
        << Text(s, "state");
    EXPECT_FALSE(Gone(holder));
    lease->Close();
  }
  EXPECT_TRUE(WaitFor([&] { return Text(s = GetStage(serve, id), "state") == "released"; }, 30))
      << Text(s, "state");
  EXPECT_EQ(Number(Member(s, "holder"), "leases_served"), 1u);
  // It says "released" a moment before it exits (and lets go of its lock).
  EXPECT_TRUE(WaitFor([&] { return Gone(holder); }, 10)) << "released, yet running";
  EXPECT_TRUE(WaitFor([&] { return !Alive(s = GetStage(serve, id)); }, 10));
  EXPECT_EQ(Text(s, "state"), "released");
  EXPECT_FALSE(fs::exists(cache.path() / "exlr8d.stages" / std::to_string(id) / "lease.sock"));
  EXPECT_THAT(Shell(Exlr8d() + " list" + c).out, Not(HasSubstr("exlr8d-stage")));
}

// The real holder. A rank never pulled fails while reading (everywhere,
// in host memory; in device memory on a machine without a GPU the missing
// device is said first); a pulled one is held in device memory where there
// is a GPU (pinned meanwhile, leased, and released on DELETE once its
// lessee lets go), and elsewhere fails saying there is no CUDA device.
// Lease v2 (the default) and v1 (deprecated, still served).
void StageAPulledRankOnTheGpu(const std::string& lease) {
  if (!fs::exists(std::string(EXLR8_BIN_DIR) + "/exlr8d-stage"))
    GTEST_SKIP() << "exlr8d-stage is built only with the CUDA Toolkit";
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  ASSERT_TRUE(Pull(cache.path(), Options(*sim, "home", 2, 1)).ok());
  HolderReaper reaper(cache.path());
  ServeProcess serve(cache.path(), {"--listen", "127.0.0.1:0"});  // the exlr8d-stage beside exlr8d
  ASSERT_GT(serve.port(), 0) << serve.ready_line();
  auto settled = [&](std::uint64_t id) {
    JsonValue s;
    WaitFor(
        [&] {
          const std::string state = Text(s = GetStage(serve, id), "state");
          return state != "starting" && state != "reading" && state != "staging" && state != "hashing" &&
                 state != "decoding";
        },
        120);
    return s;
  };

  const std::uint64_t never =
      StartStage(serve, R"({"repo":"exlr8/other","manifest":"home","tp":2,"rank":1,"memory":"host"})");
  JsonValue s = settled(never);
  EXPECT_EQ(Text(s, "state"), "failed");
  EXPECT_EQ(Number(s, "exit_status"), 3u);
  EXPECT_THAT(Text(s, "error"), HasSubstr("never pulled"));

  const std::string lease_member = lease.empty() ? "" : R"(,"lease":")" + lease + "\"";
  const std::uint64_t id = StartStage(serve, StageBody(2, 1, R"(,"release_wait_s":20)" + lease_member));
  s = settled(id);
  if (Text(s, "state") == "failed") {
    EXPECT_EQ(Number(s, "exit_status"), 4u) << Text(s, "error");
    EXPECT_THAT(Text(s, "error"), HasSubstr("CUDA"));
    GTEST_SKIP() << "no CUDA device: the holding part runs on the device machine (" << Text(s, "error") << ")";
  }
  ASSERT_EQ(Text(s, "state"), "holding") << Text(s, "error");
  const bool v1 = lease == "v1";
  EXPECT_EQ(Text(s, "lease_version"), v1 ? "v1" : "v2");
  EXPECT_EQ(Text(s, "memory"), "device");
  EXPECT_GT(Number(*s.Find("holder"), "bytes"), 0u);
  EXPECT_EQ(Number(Member(s, "held"), "bytes"), Number(*s.Find("holder"), "bytes"));
  if (v1) {
    EXPECT_TRUE(Member(Member(s, "held"), "regions").is_null());
  } else {
    EXPECT_GT(Number(Member(s, "held"), "regions"), 0u);
    EXPECT_THAT(Text(Member(s, "held"), "gpu_uuid"), HasSubstr("GPU-"));
  }
  // Pinned while held.
  const std::string c = " --cache " + Quote(cache.path().string());
  EXPECT_THAT(Shell(Exlr8d() + " list" + c).out, HasSubstr("exlr8d-stage home tp2 rank1 (pid "));
  EXPECT_EQ(Shell(Exlr8d() + " gc --repo exlr8/test" + c).status, 7);
  {
    // A lessee: reads the description and keeps the connection (v1: the
    // whole stream; v2: the description's line and its descriptors).
    std::string text;
    int fds = 0;
    const UniqueFd lessee =
        v1 ? ConnectAsLessee(Text(s, "lease"), &text) : ConnectAsLesseeV2(Text(s, "lease"), &text, &fds);
    ASSERT_TRUE(lessee.valid()) << Text(s, "lease");
    auto description = ParseJson(text);
    ASSERT_TRUE(description.ok()) << text.substr(0, 200);
    EXPECT_EQ(*description->Find("rank")->as_uint64(), 1u);
    EXPECT_EQ(*description->Find("version")->as_uint64(), v1 ? 1u : 2u);
    if (!v1) {
      EXPECT_GE(fds, 1);  // the tables at least
    }
    // The holder says who holds its lease.
    auto lessees = [&] {
      const JsonValue* holder = s.is_object() ? s.Find("holder") : nullptr;
      const JsonValue* l = holder != nullptr && holder->is_object() ? holder->Find("lessees") : nullptr;
      std::vector<std::uint64_t> pids;
      if (l != nullptr && l->is_array())
        for (const JsonValue& p : l->as_array()) pids.push_back(p.as_uint64().value_or(0));
      return pids;
    };
    const std::vector<std::uint64_t> me = {static_cast<std::uint64_t>(::getpid())};
    EXPECT_TRUE(WaitFor([&] { return (s = GetStage(serve, id), lessees()) == me; }, 10));
    auto metrics = PrometheusSamples(Http(serve.base() + "/metrics").body);
    const std::string labels = "{stage=\"" + std::to_string(id) +
                               R"(",repo="exlr8/test",manifest="home",tp="2",rank="1",device="0"})";
    EXPECT_EQ(metrics["exlr8d_stage_lessees" + labels], "1");
    EXPECT_EQ(metrics["exlr8d_stage_held_bytes" + labels], std::to_string(Number(*s.Find("holder"), "bytes")));
    EXPECT_EQ(Http(serve.base() + "/v1/stages/" + std::to_string(id), "DELETE").status, 202);
    EXPECT_TRUE(WaitFor([&] { return Text(s = GetStage(serve, id), "state") == "releasing"; }, 10));
    EXPECT_EQ(lessees(), me);
    if (!v1) {
      // The release line follows the description on the connection.
      std::string line;
      char ch = 0;
      while (line.size() < 256 && ::read(lessee.get(), &ch, 1) == 1 && ch != '\n') line += ch;
      EXPECT_EQ(line, R"({"type":"release","deadline_s":20})");
    }
  }  // lets go
  EXPECT_TRUE(WaitFor([&] { return Text(s = GetStage(serve, id), "state") == "released"; }, 30)) << Text(s, "state");
  EXPECT_THAT(Shell(Exlr8d() + " list" + c).out, Not(HasSubstr("exlr8d-stage")));
}

TEST(ServeStagesTest, TheRealHolderStagesAPulledRankOrSaysWhyNot) { StageAPulledRankOnTheGpu(""); }

TEST(ServeStagesTest, TheRealHolderStagesAPulledRankOverDeprecatedLeaseV1) { StageAPulledRankOnTheGpu("v1"); }

// A stop that comes before the holder holds (a DELETE right after POST, a
// systemctl stop during a long start) ends the step under way: the holder
// reads no further, releases what it had (its pin) and says so. The stop
// is made certain to come first: SIGTERM is pending when the program
// starts (pending signals and the blocked mask survive execve), so it is
// there before the first half is read. In host memory and over lease v1,
// which read before they need a GPU.
void StopARealHolderBeforeItHolds(const std::vector<std::string>& kind) {
  const std::string bin = std::string(EXLR8_BIN_DIR) + "/exlr8d-stage";
  if (!fs::exists(bin)) GTEST_SKIP() << "exlr8d-stage is built only with the CUDA Toolkit";
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  ASSERT_TRUE(Pull(cache.path(), Options(*sim, "home", 2, 1)).ok());
  const fs::path dir = cache.path() / "stopped";
  fs::create_directories(dir);
  const std::string log = (dir / "log").string();
  std::vector<std::string> args = {bin,
                                   "--cache",
                                   cache.path().string(),
                                   "--repo",
                                   "exlr8/test",
                                   "--manifest",
                                   "home",
                                   "--tp",
                                   "2",
                                   "--rank",
                                   "1",
                                   "--hold",
                                   (dir / "lease.sock").string(),
                                   "--state-dir",
                                   dir.string()};
  args.insert(args.end(), kind.begin(), kind.end());
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    sigset_t term;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    ::sigprocmask(SIG_BLOCK, &term, nullptr);
    ::kill(::getpid(), SIGTERM);  // pending until the program takes it
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(bin.c_str(), argv.data());
    ::_exit(127);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  std::ifstream in(log);
  const std::string printed((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_TRUE(WIFEXITED(status)) << printed;
  EXPECT_EQ(WEXITSTATUS(status), 130) << printed;
  EXPECT_THAT(printed, HasSubstr("stopped by signal 15 while reading: nothing is held"));
  EXPECT_THAT(printed, Not(HasSubstr("XXH64 checked")));  // it read no further (v1)
  EXPECT_THAT(printed, Not(HasSubstr("assembled")));      // (host memory)
  auto state = ReadStageState(dir);
  ASSERT_TRUE(state.ok()) << state.status().ToString();
  EXPECT_FALSE(state->alive);
  EXPECT_EQ(state->state, "released");
  EXPECT_EQ(Text(state->record, "stopped_while"), "reading");
  EXPECT_EQ(Number(state->record, "exit_status"), 130u);
  EXPECT_TRUE(ListProcessPins(cache.path(), true)->empty());
  EXPECT_FALSE(fs::exists(dir / "lease.sock"));
}

TEST(ServeStagesTest, TheRealHolderStoppedBeforeItHoldsReleasesAtOnce) {
  StopARealHolderBeforeItHolds({"--lease", "v1"});
}

TEST(ServeStagesTest, TheRealHolderInHostMemoryStoppedBeforeItHoldsReleasesAtOnce) {
  StopARealHolderBeforeItHolds({"--memory", "host"});
}

}  // namespace
}  // namespace exlr8
