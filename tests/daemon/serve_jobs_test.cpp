// `exlr8d serve` running pulls: a real server process, spoken to over its
// Unix socket and loopback port, pulling from the hub simulator into a real
// cache, cancelled, stopped, killed and restarted.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <stdlib.h>

#include <atomic>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>

#include "daemon/cache/cache.h"
#include "daemon/serve/job_store.h"
#include "format/layout.h"
#include "tests/daemon/cache_test_util.h"
#include "tests/daemon/dead_hub_util.h"
#include "tests/daemon/pull_test_util.h"
#include "tests/daemon/serve_test_util.h"
#include "tests/daemon/shell_util.h"

namespace exlr8 {
namespace {

using ::exlr8::testing::TempDir;
using ::testing::HasSubstr;

std::string Body(int tp, int rank, const std::string& extra = "") {
  return R"({"repo":"exlr8/test","manifest":"home","tp":)" + std::to_string(tp) + R"(,"rank":)" +
         std::to_string(rank) + extra + "}";
}

// GET /v1/jobs/{id} -> the job object ({} when the request failed).
JsonValue Job(const ServeProcess& serve, std::uint64_t id) {
  auto v = ParseJson(Http(serve.base() + "/v1/jobs/" + std::to_string(id)).body);
  if (!v.ok() || v->Find("job") == nullptr) return JsonValue();
  return *v->Find("job");
}

std::string State(const JsonValue& job) {
  const JsonValue* s = job.is_object() ? job.Find("state") : nullptr;
  return s != nullptr && s->is_string() ? s->as_string() : "";
}

bool IsFinishedState(const std::string& state) {
  return state == "done" || state == "failed" || state == "cancelled";
}

std::uint64_t Progress(const JsonValue& job, const char* field) {
  const JsonValue* p = job.is_object() ? job.Find("progress") : nullptr;
  const JsonValue* f = p != nullptr ? p->Find(field) : nullptr;
  return f != nullptr && f->as_uint64() ? *f->as_uint64() : 0;
}

std::string Waiting(const JsonValue& job) {
  const JsonValue* w = job.is_object() ? job.Find("waiting") : nullptr;
  return w != nullptr && w->is_string() ? w->as_string() : "";
}

std::string ReadLog(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::uint64_t Submit(const ServeProcess& serve, const std::string& body) {
  const HttpAnswer a = Http(serve.base() + "/v1/pulls", "POST", "", body);
  EXPECT_EQ(a.status, 202) << a.body;
  const JsonValue v = Parse(a);
  const JsonValue* id = v.is_object() && v.Find("job") ? v.Find("job")->Find("id") : nullptr;
  return id != nullptr && id->as_uint64() ? *id->as_uint64() : 0;
}

// The plan of a pull, made by a dry run into a scratch cache.
PullSummary PlanOf(const hubsim::HubSim& sim, int tp, int rank) {
  TempDir scratch;
  PullOptions o = Options(sim, "home", tp, rank);
  o.dry_run = true;
  auto s = Pull(scratch.path(), o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? *s : PullSummary();
}

// The server releases the cache's lock once its queue is empty.
bool CacheReleased(const fs::path& dir) {
  return WaitFor([&] { return Cache::Open(dir).ok(); }, 10);
}

TEST(ServeJobsTest, APullJobWithoutAManifestPullsTheWholeFilesetAndListsIt) {
  const fs::path lvq5 = fs::path(EXLR8_SHARED_DIR) / "fixtures" / "lvq5-tiny";
  auto sim = StartSim(lvq5, "", {}, {"lvq5/tiny"});
  TempDir cache;
  ServeProcess serve(cache.path(), {"--endpoint", sim->hub_url(), "--listen", "127.0.0.1:0"});
  ASSERT_GT(serve.port(), 0) << serve.ready_line();
  // tp and rank belong to a manifest.
  EXPECT_EQ(Http(serve.base() + "/v1/pulls", "POST", "", R"({"repo":"lvq5/tiny","tp":2,"rank":0})").status,
            400);
  const std::uint64_t id = Submit(serve, R"({"repo":"lvq5/tiny"})");
  ASSERT_GT(id, 0u);
  JsonValue j;
  ASSERT_TRUE(WaitFor([&] { return IsFinishedState(State(j = Job(serve, id))); })) << State(j);
  ASSERT_EQ(State(j), "done") << j.Dump();
  const JsonValue sets = Parse(Http(serve.base() + "/v1/filesets"));
  ASSERT_TRUE(sets.is_object() && sets.Find("filesets") != nullptr) << sets.Dump();
  ASSERT_EQ(sets.Find("filesets")->as_array().size(), 1u) << sets.Dump();
  const JsonValue& set = sets.Find("filesets")->as_array()[0];
  EXPECT_EQ(set.Find("kind")->as_string(), "lvq5") << sets.Dump();
  std::uint64_t files = 0;
  for (const auto& e : fs::directory_iterator(lvq5)) files += e.is_regular_file() ? 1 : 0;
  EXPECT_EQ(set.Find("files_verified")->as_uint64().value_or(0), files) << sets.Dump();
  EXPECT_GT(set.Find("records")->as_uint64().value_or(0), 0u) << sets.Dump();
  EXPECT_EQ(set.Find("bytes_cached")->as_uint64(), set.Find("bytes_total")->as_uint64()) << sets.Dump();
}

TEST(ServeJobsTest, RunsAPullAskedOverTheSocketAndPinsIt) {
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  ServeProcess serve(cache.path(), {"--endpoint", sim->hub_url(), "--listen", "127.0.0.1:0"});
  ASSERT_GT(serve.port(), 0) << serve.ready_line();
  const std::string socket = (cache.path() / "exlr8d.sock").string();

  const HttpAnswer posted = Http("http://exlr8d/v1/pulls", "POST", socket, Body(3, 2, R"(,"pin":"svc")"));
  ASSERT_EQ(posted.status, 202) << posted.body;
  const JsonValue job = *Parse(posted).Find("job");
  const std::uint64_t id = *job.Find("id")->as_uint64();
  EXPECT_EQ(job.Find("href")->as_string(), "/v1/jobs/" + std::to_string(id));
  JsonValue last;
  ASSERT_TRUE(WaitFor([&] { return State(last = Job(serve, id)) == "done"; })) << State(last);
  EXPECT_EQ(*last.Find("attempts")->as_uint64(), 1u);
  EXPECT_EQ(last.Find("error")->as_string(), "");
  EXPECT_EQ(last.Find("progress"), nullptr);  // only while it runs
  ASSERT_TRUE(last.Find("pull")->as_uint64().has_value()) << "the job never linked its pull";
  const std::uint64_t pull = *last.Find("pull")->as_uint64();
  const JsonValue p = Parse(Http(serve.base() + "/v1/pulls/" + std::to_string(pull)));
  EXPECT_EQ(p.Find("pull")->Find("state")->as_string(), "done");
  EXPECT_EQ(*p.Find("pull")->Find("rank")->as_uint64(), 2u);
  const JsonValue jobs = Parse(Http("http://exlr8d/v1/jobs", "GET", socket));
  ASSERT_EQ(jobs.Find("jobs")->as_array().size(), 1u);

  // The cache holds exactly that rank's plan, pinned, and the server let go
  // of the cache once its queue was empty.
  ASSERT_TRUE(CacheReleased(cache.path()));
  ExpectCacheHoldsExactlyThePlan(cache.path(), TinyRelease(), PlanOf(*sim, 3, 2));
  {
    auto c = Cache::Open(cache.path());
    ASSERT_TRUE(c.ok());
    auto sets = (*c)->ListFilesets();
    ASSERT_TRUE(sets.ok() && sets->size() == 1);
    EXPECT_EQ((*sets)[0].pins, std::vector<std::string>{"svc"});
  }
  // Refused at the door, naming the field; nothing queued.
  const HttpAnswer bad = Http(serve.base() + "/v1/pulls", "POST", "", Body(3, 3));
  EXPECT_EQ(bad.status, 400);
  EXPECT_THAT(bad.body, HasSubstr("rank must be in [0, 2]"));
  EXPECT_EQ(Http(serve.base() + "/v1/pulls", "POST", "", "{\"repo\":").status, 400);
  EXPECT_EQ(Http(serve.base() + "/v1/jobs/77").status, 404);
  EXPECT_EQ(Http(serve.base() + "/v1/jobs", "POST").status, 405);
  EXPECT_EQ(Parse(Http(serve.base() + "/v1/jobs")).Find("jobs")->as_array().size(), 1u);
  // A finished job cannot be cancelled.
  EXPECT_EQ(Http(serve.base() + "/v1/jobs/" + std::to_string(id), "DELETE").status, 409);
  EXPECT_EQ(serve.Stop(), 0);
}

// A pull job with the hub down, whose rank the cache holds complete, is
// done, served from the cache, and says so.
TEST(ServeJobsTest, APullJobWithTheHubDownIsDoneFromARankTheCacheHoldsComplete) {
  TempDir cache, logs;
  std::string commit;
  {
    auto sim = StartSim(TinyRelease());
    auto first = Pull(cache.path(), Options(*sim, "home", 3, 2));
    ASSERT_TRUE(first.ok()) << first.status().ToString();
    commit = first->commit;
  }
  testing::RefusingPort down;
  ASSERT_NE(down.port(), 0);
  const std::string log = (logs.path() / "serve.log").string();
  ServeProcess serve(cache.path(), {"--endpoint", down.url(), "--listen", "127.0.0.1:0"}, log);
  ASSERT_GT(serve.port(), 0) << serve.ready_line();
  auto wait_done = [&](std::uint64_t id) {
    JsonValue last;
    EXPECT_TRUE(WaitFor([&] { return IsFinishedState(State(last = Job(serve, id))); })) << State(last);
    return last;
  };
  const JsonValue done = wait_done(Submit(serve, Body(3, 2)));
  ASSERT_EQ(State(done), "done") << done.Find("error")->as_string();
  const JsonValue* result = done.Find("result");
  ASSERT_NE(result, nullptr);
  EXPECT_TRUE(result->Find("served_from_cache")->as_bool());
  EXPECT_EQ(result->Find("commit")->as_string(), commit);
  EXPECT_THAT(result->Find("hub_error")->as_string(), HasSubstr("Couldn't connect to server"));
  EXPECT_THAT(ReadLog(log), HasSubstr("served from the cache: commit " + commit));
  // A rank it does not hold fails as before, saying what is missing.
  const JsonValue lacking = wait_done(Submit(serve, Body(3, 1)));
  EXPECT_EQ(State(lacking), "failed");
  EXPECT_THAT(lacking.Find("error")->as_string(),
              HasSubstr("TP 3 rank 1 of manifest home is not complete there"));
  EXPECT_EQ(serve.Stop(), 0);
}

// POST /v1/verify scrubs a fileset: a rotted half is found and forgotten,
// and the next pull job fetches exactly it again.
TEST(ServeJobsTest, AVerifyJobForgetsWhatRottedAndTheNextPullFetchesIt) {
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  ServeProcess serve(cache.path(), {"--endpoint", sim->hub_url(), "--listen", "127.0.0.1:0"});
  ASSERT_GT(serve.port(), 0) << serve.ready_line();
  auto wait_done = [&](std::uint64_t id) {
    JsonValue last;
    EXPECT_TRUE(WaitFor([&] { return IsFinishedState(State(last = Job(serve, id))); })) << State(last);
    return last;
  };
  auto verify = [&](const std::string& body) {
    const HttpAnswer a = Http(serve.base() + "/v1/verify", "POST", "", body);
    EXPECT_EQ(a.status, 202) << a.body;
    const JsonValue v = Parse(a);
    const JsonValue* job = v.is_object() ? v.Find("job") : nullptr;
    EXPECT_TRUE(job != nullptr && job->Find("kind")->as_string() == "verify") << a.body;
    return job != nullptr ? *job->Find("id")->as_uint64() : 0;
  };
  ASSERT_EQ(State(wait_done(Submit(serve, Body(3, 2)))), "done");

  const PullSummary plan = PlanOf(*sim, 3, 2);
  const PlanFile* width = nullptr;
  for (const PlanFile& f : plan.plan.files)
    if (!f.whole && width == nullptr) width = &f;
  ASSERT_NE(width, nullptr);
  const PlanRange& half = width->ranges.back();
  ASSERT_EQ(half.kind, PlanRange::Kind::kHalf);
  {
    std::fstream f(cache.path() / "exlr8" / "test" / plan.commit / width->path,
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(half.offset + 3));
    f.put('\x11');
    f.put('\x77');
    ASSERT_TRUE(f.good());
  }

  const JsonValue scrubbed = wait_done(verify(R"({"repo":"exlr8/test"})"));
  ASSERT_EQ(State(scrubbed), "done") << scrubbed.Find("error")->as_string();
  EXPECT_EQ(scrubbed.Find("manifest"), nullptr);  // pull fields only on pulls
  const JsonValue* result = scrubbed.Find("result");
  ASSERT_NE(result, nullptr);
  EXPECT_FALSE(result->Find("clean")->as_bool());
  EXPECT_TRUE(result->Find("repaired")->as_bool());
  EXPECT_EQ(*result->Find("bytes_forgotten")->as_uint64(), half.length);
  ASSERT_EQ(result->Find("failures")->as_array().size(), 1u);
  EXPECT_EQ(result->Find("failures")->as_array()[0].Find("what")->as_string(), half.What());
  EXPECT_EQ(*result->Find("halves")->as_uint64(), [&] {
    std::uint64_t n = 0;
    for (const PlanFile& f : plan.plan.files)
      for (const PlanRange& r : f.ranges) n += r.kind == PlanRange::Kind::kHalf;
    return n;
  }());

  // A fileset never pulled fails, saying so; a bad body is refused.
  const JsonValue unknown = wait_done(verify(R"({"repo":"nobody/nothing"})"));
  EXPECT_EQ(State(unknown), "failed");
  EXPECT_THAT(unknown.Find("error")->as_string(), HasSubstr("never pulled"));
  const HttpAnswer bad = Http(serve.base() + "/v1/verify", "POST", "", R"({"repo":"exlr8/test","tp":4})");
  EXPECT_EQ(bad.status, 400);
  EXPECT_THAT(bad.body, HasSubstr("unknown field 'tp'"));

  // The next pull fetches exactly the forgotten half.
  const JsonValue pulled = wait_done(Submit(serve, Body(3, 2)));
  ASSERT_EQ(State(pulled), "done") << pulled.Find("error")->as_string();
  const JsonValue p = Parse(Http(serve.base() + "/v1/pulls/" + std::to_string(*pulled.Find("pull")->as_uint64())));
  EXPECT_EQ(*p.Find("pull")->Find("bytes_fetched")->as_uint64(), half.length);
  EXPECT_EQ(State(wait_done(verify(R"({"repo":"exlr8/test","revision":"main"})"))), "done");
  ASSERT_TRUE(CacheReleased(cache.path()));
  ExpectCacheHoldsExactlyThePlan(cache.path(), TinyRelease(), plan);
  EXPECT_EQ(serve.Stop(), 0);
}

// While another process owns the cache, a job waits and says why; it runs
// once the cache is free.
TEST(ServeJobsTest, WaitsWhileAnotherProcessOwnsTheCache) {
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  auto owner = Cache::Open(cache.path());
  ASSERT_TRUE(owner.ok());
  ServeProcess serve(cache.path(), {"--endpoint", sim->hub_url(), "--no-socket", "--listen", "127.0.0.1:0"});
  ASSERT_GT(serve.port(), 0) << serve.ready_line();
  const std::uint64_t id = Submit(serve, Body(4, 3));
  JsonValue last;
  ASSERT_TRUE(WaitFor([&] {
    last = Job(serve, id);
    const JsonValue* w = last.is_object() ? last.Find("waiting") : nullptr;
    return w != nullptr && w->as_string().find("locked by pid") != std::string::npos;
  })) << State(last);
  EXPECT_EQ(State(last), "queued");
  EXPECT_EQ(Http(serve.base() + "/v1/filesets").status, 200);  // the status routes still answer
  owner->reset();
  ASSERT_TRUE(WaitFor([&] { return State(last = Job(serve, id)) == "done"; })) << State(last);
  EXPECT_EQ(last.Find("waiting"), nullptr);
  EXPECT_EQ(serve.Stop(), 0);
}

TEST(ServeJobsTest, CancelsQueuedAndRunningJobs) {
  hubsim::FaultConfig slow;
  slow.throttle_bps = 100'000;
  auto sim = StartSim(TinyRelease(), "", slow);
  TempDir cache;
  ServeProcess serve(cache.path(), {"--endpoint", sim->hub_url(), "--jobs", "4", "--listen", "127.0.0.1:0"});
  ASSERT_GT(serve.port(), 0) << serve.ready_line();
  const std::uint64_t a = Submit(serve, Body(4, 1));
  const std::uint64_t b = Submit(serve, Body(4, 2));
  const std::uint64_t c = Submit(serve, Body(4, 3));
  JsonValue last;
  ASSERT_TRUE(WaitFor([&] {
    last = Job(serve, a);
    return State(last) == "running" && Progress(last, "bytes_received") > 0;
  })) << State(last);
  EXPECT_TRUE(WaitFor([&] { return !Waiting(last = Job(serve, b)).empty(); })) << State(last);
  EXPECT_EQ(State(last), "queued");  // one job of a repo at a time
  EXPECT_EQ(Waiting(last), "after job " + std::to_string(a) + " of the same repo");

  // Queued: cancelled at once, never run.
  HttpAnswer cancel_b = Http(serve.base() + "/v1/jobs/" + std::to_string(b), "DELETE");
  EXPECT_EQ(cancel_b.status, 202) << cancel_b.body;
  EXPECT_EQ(State(*Parse(cancel_b).Find("job")), "cancelled");
  // Running: its pull is cancelled, the job ends cancelled.
  HttpAnswer cancel_a = Http(serve.base() + "/v1/jobs/" + std::to_string(a), "DELETE");
  EXPECT_EQ(cancel_a.status, 202) << cancel_a.body;
  EXPECT_THAT(cancel_a.body, HasSubstr("\"cancel_requested\":true"));
  ASSERT_TRUE(WaitFor([&] { return State(last = Job(serve, a)) == "cancelled"; })) << State(last);
  EXPECT_THAT(last.Find("error")->as_string(), HasSubstr("cancelled by a client"));
  EXPECT_EQ(Http(serve.base() + "/v1/jobs/" + std::to_string(a), "DELETE").status, 409);
  EXPECT_EQ(*Job(serve, b).Find("attempts")->as_uint64(), 0u);

  // By its pull's id, as GET /v1/pulls shows it.
  ASSERT_TRUE(WaitFor([&] {
    last = Job(serve, c);
    return State(last) == "running" && last.Find("pull")->as_uint64().has_value();
  })) << State(last);
  const std::string pull = std::to_string(*last.Find("pull")->as_uint64());
  HttpAnswer cancel_c = Http(serve.base() + "/v1/pulls/" + pull, "DELETE");
  EXPECT_EQ(cancel_c.status, 202) << cancel_c.body;
  ASSERT_TRUE(WaitFor([&] { return State(last = Job(serve, c)) == "cancelled"; })) << State(last);
  ASSERT_TRUE(WaitFor([&] {
    return Parse(Http(serve.base() + "/v1/pulls/" + pull)).Find("pull")->Find("state")->as_string() == "cancelled";
  }));
  EXPECT_EQ(Http(serve.base() + "/v1/pulls/" + pull, "DELETE").status, 409);
  ASSERT_TRUE(CacheReleased(cache.path()));
  EXPECT_EQ(serve.Stop(), 0);
}

// A job whose end the queue cannot record (its database busy or
// unwritable) is recorded once it can, not left "running" until the server
// restarts with its repo's later jobs behind it. Here another process holds the
// queue's write lock past SQLite's 5 s busy wait as the pull ends; once it
// lets go, the end is recorded.
TEST(ServeJobsTest, AJobEndTheQueueCouldNotRecordIsRecordedOnceItCan) {
  hubsim::FaultConfig slow;
  slow.throttle_bps = 400'000;
  auto sim = StartSim(TinyRelease(), "", slow);
  TempDir cache, logs;
  const std::string log = (logs.path() / "serve.log").string();
  ServeProcess serve(cache.path(), {"--endpoint", sim->hub_url(), "--listen", "127.0.0.1:0"}, log);
  ASSERT_GT(serve.port(), 0) << serve.ready_line();
  const std::uint64_t a = Submit(serve, Body(4, 1));
  JsonValue last;
  ASSERT_TRUE(WaitFor([&] {
    last = Job(serve, a);
    return State(last) == "running" && last.Find("pull")->as_uint64().has_value();
  })) << State(last);
  auto logged = [&](const std::string& what) {
    std::ifstream in(log);
    return std::string(std::istreambuf_iterator<char>(in), {}).find(what) != std::string::npos;
  };
  const std::string pull = std::to_string(*last.Find("pull")->as_uint64());
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((cache.path() / "exlr8d.jobs.db").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "BEGIN EXCLUSIVE", nullptr, nullptr, nullptr), SQLITE_OK);
  ASSERT_TRUE(WaitFor([&] {
    return Parse(Http(serve.base() + "/v1/pulls/" + pull)).Find("pull")->Find("state")->as_string() == "done";
  }, 60));
  ASSERT_TRUE(WaitFor([&] { return logged("job 1: could not record its end (retrying)"); }, 30));
  ASSERT_EQ(sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  EXPECT_TRUE(WaitFor([&] { return State(last = Job(serve, a)) == "done"; }, 10)) << State(last);
  // Said right after the record that the state above reads, so on a
  // loaded machine the state can read "done" before the line is logged.
  EXPECT_TRUE(WaitFor([&] { return logged("job 1: its end is recorded now"); }, 10));
  EXPECT_EQ(serve.Stop(), 0);
}

// When the queue cannot record a job's start (a full disk), the job says
// why it waits, the log says it once, and the job starts once the queue can
// record it; the scheduler, woken by the failed start, must not start it
// again at once, spinning at full CPU on a full disk. (A writer holding the queue's
// database stands in for the full disk, readers still reading: each start
// then fails after the busy timeout.)
TEST(ServeJobsTest, AJobWhoseStartTheQueueCannotRecordSaysSoAndStartsLater) {
  auto sim = StartSim(TinyRelease());
  TempDir cache, logs;
  const std::string log = (logs.path() / "serve.log").string();
  auto owner = Cache::Open(cache.path());
  ASSERT_TRUE(owner.ok());
  ServeProcess serve(cache.path(), {"--endpoint", sim->hub_url(), "--no-socket", "--listen", "127.0.0.1:0"}, log);
  ASSERT_GT(serve.port(), 0) << serve.ready_line();
  const std::uint64_t id = Submit(serve, Body(4, 3));
  JsonValue last;
  ASSERT_TRUE(WaitFor([&] { return Waiting(last = Job(serve, id)).find("locked by pid") != std::string::npos; }))
      << State(last);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((cache.path() / "exlr8d.jobs.db").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
  owner->reset();  // the job would start now
  ASSERT_TRUE(WaitFor([&] {
    return Waiting(last = Job(serve, id)).find("the job queue could not record its start") != std::string::npos;
  }, 30)) << Waiting(last) << "\n" << ReadLog(log);
  EXPECT_EQ(State(last), "queued");
  EXPECT_THAT(Waiting(last), HasSubstr("retrying every"));
  // At least one more try (5 s busy timeout, then the 2 s back-off), which
  // fails the same way: logged once, not once a try.
  std::this_thread::sleep_for(std::chrono::seconds(8));
  ASSERT_EQ(sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  ASSERT_TRUE(WaitFor([&] { return State(last = Job(serve, id)) == "done"; }, 60)) << State(last);
  EXPECT_EQ(serve.Stop(), 0);
  const std::string text = ReadLog(log);
  std::size_t said = 0;
  for (std::size_t at = 0; (at = text.find("could not record its start", at)) != std::string::npos; ++at) ++said;
  EXPECT_EQ(said, 1u) << text;
  EXPECT_THAT(text, HasSubstr("job 1: its start is recorded now"));
}

// An unknown pull's DELETE is a 404, not 409; a wrong method on a known
// route is a 405 naming every method it takes (GET /v1/verify, PUT
// /v1/pulls), never "no route".
TEST(ServeJobsTest, RoutesSayWhatTheyTakeAndWhatIsNotThere) {
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  ServeProcess serve(cache.path(), {"--endpoint", sim->hub_url(), "--listen", "127.0.0.1:0"});
  ASSERT_GT(serve.port(), 0) << serve.ready_line();
  const std::uint64_t a = Submit(serve, Body(4, 1));
  JsonValue last;
  ASSERT_TRUE(WaitFor([&] { return State(last = Job(serve, a)) == "done"; })) << State(last);
  const std::string pull = std::to_string(*last.Find("pull")->as_uint64());
  EXPECT_EQ(Http(serve.base() + "/v1/pulls/999", "DELETE").status, 404);
  EXPECT_EQ(Http(serve.base() + "/v1/pulls/" + pull, "DELETE").status, 409);  // there, but finished
  for (const char* route : {"/v1/verify", "/v1/evict"}) {
    HttpAnswer get = Http(serve.base() + route);
    EXPECT_EQ(get.status, 405) << route << ": " << get.body;
    EXPECT_THAT(get.body, HasSubstr("(allowed: POST)")) << route;
    EXPECT_EQ(get.headers["allow"], "POST") << route;
  }
  HttpAnswer put = Http(serve.base() + "/v1/pulls", "PUT", "", "{}");
  EXPECT_EQ(put.status, 405) << put.body;
  EXPECT_THAT(put.body, HasSubstr("(allowed: GET, HEAD, POST)"));
  EXPECT_EQ(put.headers["allow"], "GET, HEAD, POST");
  EXPECT_EQ(Http(serve.base() + "/v1/pulls/" + pull, "PUT", "", "{}").status, 405);
  EXPECT_THAT(Http(serve.base() + "/v1/nothing").body, HasSubstr("/v1/verify, /v1/evict"));
  // The jobs of one state: a running job behind 100 newer queued ones can
  // still be listed.
  auto ids = [&](const std::string& query) {
    std::vector<std::uint64_t> out;
    const JsonValue v = Parse(Http(serve.base() + "/v1/jobs" + query));
    if (v.is_object() && v.Find("jobs") != nullptr)
      for (const JsonValue& j : v.Find("jobs")->as_array()) out.push_back(*j.Find("id")->as_uint64());
    return out;
  };
  EXPECT_EQ(ids("?state=done"), std::vector<std::uint64_t>{a});
  EXPECT_TRUE(ids("?state=running").empty());
  EXPECT_EQ(ids(""), std::vector<std::uint64_t>{a});
  EXPECT_EQ(Http(serve.base() + "/v1/jobs?state=bogus").status, 400);
  EXPECT_THAT(Http(serve.base() + "/v1/jobs?limit=5").body, HasSubstr("unknown query parameter 'limit'"));
  EXPECT_EQ(serve.Stop(), 0);
}

// A job survives a stop (SIGTERM) and a crash (kill -9) of the server: each
// restart resumes it, and the cache ends holding exactly its plan.
TEST(ServeJobsTest, ResumesAfterAStopAndAKill) {
  hubsim::FaultConfig slow;
  slow.throttle_bps = 200'000;
  auto sim = StartSim(TinyRelease(), "", slow);
  TempDir cache;
  const std::vector<std::string> args = {"--endpoint", sim->hub_url(), "--jobs", "4", "--listen", "127.0.0.1:0"};
  const std::string log = (cache.path() / "serve.log").string();
  std::uint64_t id = 0, first_pull = 0;
  JsonValue last;
  {
    ServeProcess serve(cache.path(), args, log);
    ASSERT_GT(serve.port(), 0) << serve.ready_line();
    id = Submit(serve, Body(2, 0));
    ASSERT_TRUE(WaitFor([&] {
      last = Job(serve, id);
      return Progress(last, "bytes_verified") > 0 && last.Find("pull")->as_uint64().has_value();
    })) << State(last);
    first_pull = *last.Find("pull")->as_uint64();
    EXPECT_EQ(serve.Stop(), 0);
  }
  {
    auto store = JobStore::Open(cache.path() / "exlr8d.jobs.db");
    ASSERT_TRUE(store.ok());
    auto job = (*store)->Get(static_cast<JobId>(id));
    ASSERT_TRUE(job.ok());
    EXPECT_EQ(job->state, JobState::kQueued) << "a stopped server queues its running job again";
    EXPECT_EQ(job->attempts, 1);
  }
  std::uint64_t second_pull = 0;
  {
    ServeProcess serve(cache.path(), args, log);
    ASSERT_GT(serve.port(), 0) << serve.ready_line();
    ASSERT_TRUE(WaitFor([&] {
      last = Job(serve, id);
      return State(last) == "running" && *last.Find("attempts")->as_uint64() == 2 &&
             Progress(last, "bytes_verified") > 0 && last.Find("pull")->as_uint64().has_value() &&
             *last.Find("pull")->as_uint64() != first_pull;
    })) << State(last);
    second_pull = *last.Find("pull")->as_uint64();
    EXPECT_EQ(serve.Kill(), 128 + SIGKILL);
  }
  sim->SetFaults({});  // full speed for the rest
  {
    ServeProcess serve(cache.path(), args, log);
    ASSERT_GT(serve.port(), 0) << serve.ready_line();
    ASSERT_TRUE(WaitFor([&] { return State(last = Job(serve, id)) == "done"; })) << State(last);
    EXPECT_EQ(*last.Find("attempts")->as_uint64(), 3u);
    EXPECT_NE(*last.Find("pull")->as_uint64(), second_pull);
    // Each attempt is a pull of the cache: cancelled by the stop, failed by
    // the kill (marked so when the cache was next opened), done.
    const JsonValue pulls = Parse(Http(serve.base() + "/v1/pulls"));
    std::vector<std::string> states;
    for (const auto& p : pulls.Find("pulls")->as_array()) states.push_back(p.Find("state")->as_string());
    EXPECT_EQ(states, (std::vector<std::string>{"done", "failed", "cancelled"}));
    EXPECT_EQ(serve.Stop(), 0);
  }
  ExpectCacheHoldsExactlyThePlan(cache.path(), TinyRelease(), PlanOf(*sim, 2, 0));
  const auto text = ReadAll(log);
  EXPECT_THAT(std::string(text.begin(), text.end()), HasSubstr("queued again; resuming"));
}

// The server's token goes to the server's hub only: a job naming another
// endpoint runs anonymously there.
// Jobs of two repos run at once, within one --limit-rate for both; jobs of
// one repo run in order, the second reusing what the first fetched.
TEST(ServeJobsTest, RunsTwoReposAtOnceUnderOneRateLimitAndOneRepoInOrder) {
  auto sim = StartSim(TinyRelease(), "", {}, {"exlr8/test", "exlr8/other"});
  const PullSummary plan = PlanOf(*sim, 2, 0);
  ASSERT_GT(plan.bytes_planned, 0u);
  // Both first pulls together take about 3 s at this rate; each alone at
  // the full rate would take 1.5 s.
  const std::uint64_t rate = 2 * plan.bytes_planned / 3;
  TempDir cache;
  ServeProcess serve(cache.path(), {"--endpoint", sim->hub_url(), "--no-socket", "--listen", "127.0.0.1:0",
                                    "--limit-rate", std::to_string(rate)});
  ASSERT_GT(serve.port(), 0) << serve.ready_line();
  const auto t0 = std::chrono::steady_clock::now();
  const std::uint64_t a = Submit(serve, Body(2, 0));
  const std::uint64_t b = Submit(serve, Body(2, 1));
  const std::uint64_t c =
      Submit(serve, R"({"repo":"exlr8/other","manifest":"home","tp":2,"rank":0})");
  JsonValue ja, jb, jc;
  ASSERT_TRUE(WaitFor([&] {
    ja = Job(serve, a);
    jb = Job(serve, b);
    jc = Job(serve, c);
    return Progress(ja, "bytes_received") > 0 && Progress(jc, "bytes_received") > 0;
  })) << State(ja) << " " << State(jc);
  EXPECT_EQ(State(jb), "queued");
  EXPECT_EQ(Waiting(jb), "after job " + std::to_string(a) + " of the same repo");

  ASSERT_TRUE(WaitFor([&] {
    return State(ja = Job(serve, a)) == "done" && State(jc = Job(serve, c)) == "done";
  })) << State(ja) << " " << State(jc);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  auto pull_of = [&](const JsonValue& job) {
    const JsonValue p = Parse(Http(serve.base() + "/v1/pulls/" + std::to_string(*job.Find("pull")->as_uint64())));
    return p.is_object() && p.Find("pull") != nullptr ? *p.Find("pull") : JsonValue();
  };
  const std::uint64_t fetched =
      *pull_of(ja).Find("bytes_fetched")->as_uint64() + *pull_of(jc).Find("bytes_fetched")->as_uint64();
  // Each job with a limit of its own would be done in half of this.
  EXPECT_GE(seconds, 0.8 * static_cast<double>(fetched) / static_cast<double>(rate))
      << fetched << " bytes at " << rate << " B/s";

  ASSERT_TRUE(WaitFor([&] { return IsFinishedState(State(jb = Job(serve, b))); })) << State(jb);
  ASSERT_EQ(State(jb), "done") << jb.Find("error")->as_string();
  EXPECT_GT(*pull_of(jb).Find("bytes_reused")->as_uint64(), 0u) << "rank 1 fetched the dense files again";
  ASSERT_TRUE(CacheReleased(cache.path()));
  ExpectCacheHoldsExactlyThePlan(cache.path(), TinyRelease(), plan, "exlr8/other");
  EXPECT_EQ(serve.Stop(), 0);
}

std::string Phase(const JsonValue& job) {
  const JsonValue* p = job.is_object() ? job.Find("progress") : nullptr;
  const JsonValue* f = p != nullptr ? p->Find("phase") : nullptr;
  return f != nullptr && f->is_string() ? f->as_string() : "";
}

// A hub of two repos, throttled until a test lifts it, and a server whose
// --budget holds one TP 2 rank 0 plan, not two.
struct RoomForOnePlan {
  RoomForOnePlan() {
    hubsim::FaultConfig slow;
    slow.throttle_bps = 200'000;
    sim = StartSim(TinyRelease(), "", slow, {"exlr8/test", "exlr8/other"});
    plan = PlanOf(*sim, 2, 0);
    budget = plan.bytes_planned * 3 / 2;
    serve = std::make_unique<ServeProcess>(
        cache.path(), std::vector<std::string>{"--endpoint", sim->hub_url(), "--no-socket", "--listen",
                                               "127.0.0.1:0", "--jobs", "4", "--budget", std::to_string(budget)});
  }
  std::unique_ptr<hubsim::HubSim> sim;
  PullSummary plan;
  std::uint64_t budget = 0;
  TempDir cache;
  std::unique_ptr<ServeProcess> serve;  // last: stopped first
};

// Two pulls at once under one --budget: the second counts what the first
// has claimed and still writes, and stops before it writes a half, instead
// of both fitting alone and overrunning the budget together. (Its small
// whole files stream from the listing on, before the plan's size is known,
// so one, a 1,180-byte manifest say, may be recorded already.)
TEST(ServeJobsTest, APullCountsTheSpaceAnotherRunningPullClaimed) {
  RoomForOnePlan room;
  auto& sim = room.sim;
  const PullSummary& plan = room.plan;
  const std::uint64_t budget = room.budget;
  const TempDir& cache = room.cache;
  ServeProcess& serve = *room.serve;
  ASSERT_GT(serve.port(), 0) << serve.ready_line();
  const std::uint64_t a = Submit(serve, Body(2, 0));
  JsonValue ja, jb;
  ASSERT_TRUE(WaitFor([&] { return Phase(ja = Job(serve, a)) == "halves"; })) << State(ja) << " " << Phase(ja);
  const std::uint64_t b = Submit(serve, R"({"repo":"exlr8/other","manifest":"home","tp":2,"rank":0})");
  ASSERT_TRUE(WaitFor([&] { return IsFinishedState(State(jb = Job(serve, b))); })) << State(jb);
  EXPECT_EQ(State(jb), "failed");
  EXPECT_THAT(jb.Find("error")->as_string(), HasSubstr("promised to pulls running now"));
  EXPECT_EQ(State(Job(serve, a)), "running");  // b failed while a was still at it
  sim->SetFaults(hubsim::FaultConfig());
  ASSERT_TRUE(WaitFor([&] { return IsFinishedState(State(ja = Job(serve, a))); })) << State(ja);
  EXPECT_EQ(State(ja), "done") << ja.Find("error")->as_string();
  ASSERT_TRUE(CacheReleased(cache.path()));
  EXPECT_EQ(serve.Stop(), 0);
  auto c = Cache::Open(cache.path());
  ASSERT_TRUE(c.ok());
  EXPECT_LE(*(*c)->RecordedBytes(), budget);
  const std::vector<FilesetInfo> sets = *(*c)->ListFilesets();
  for (const FilesetInfo& set : sets) {
    if (set.repo == "exlr8/test") {
      EXPECT_EQ(set.bytes_cached, plan.bytes_planned);
      continue;
    }
    const std::vector<FileInfo> files = *(*c)->ListFiles(set.id);
    for (const FileInfo& f : files) {
      if (ClassifyReleasePath(f.path).kind == ReleaseFileKind::kExpertWidth) {
        EXPECT_EQ(f.bytes_cached, 0u) << f.path << ": the second pull wrote halves";
      }
    }
  }
}

// "make_room": true: a pull that does not fit evicts what gc would, but
// never a fileset another job is pulling; once that one is done and
// unpinned, it is what goes, and the job's result says so.
TEST(ServeJobsTest, APullThatMakesRoomSparesARunningPullThenEvictsWhatIsDone) {
  RoomForOnePlan room;
  auto& sim = room.sim;
  const PullSummary& plan = room.plan;
  const TempDir& cache = room.cache;
  ServeProcess& serve = *room.serve;
  ASSERT_GT(serve.port(), 0) << serve.ready_line();
  const std::string other = R"({"repo":"exlr8/other","manifest":"home","tp":2,"rank":0,"make_room":true})";
  const std::uint64_t a = Submit(serve, Body(2, 0));
  JsonValue ja, jb;
  ASSERT_TRUE(WaitFor([&] { return Phase(ja = Job(serve, a)) == "halves"; })) << State(ja) << " " << Phase(ja);
  const std::uint64_t b = Submit(serve, other);
  ASSERT_TRUE(WaitFor([&] { return IsFinishedState(State(jb = Job(serve, b))); })) << State(jb);
  EXPECT_EQ(State(jb), "failed");
  EXPECT_THAT(jb.Find("error")->as_string(), HasSubstr("after evicting 0 unpinned filesets (--make-room)"));
  EXPECT_TRUE(jb.Find("make_room")->as_bool());
  sim->SetFaults(hubsim::FaultConfig());
  ASSERT_TRUE(WaitFor([&] { return IsFinishedState(State(ja = Job(serve, a))); })) << State(ja);
  ASSERT_EQ(State(ja), "done") << ja.Find("error")->as_string();
  const std::uint64_t c = Submit(serve, other);
  JsonValue jc;
  ASSERT_TRUE(WaitFor([&] { return IsFinishedState(State(jc = Job(serve, c))); })) << State(jc);
  ASSERT_EQ(State(jc), "done") << jc.Find("error")->as_string();
  ASSERT_NE(jc.Find("result"), nullptr);
  EXPECT_EQ(*jc.Find("result")->Find("evicted_filesets")->as_uint64(), 1u);
  EXPECT_EQ(*jc.Find("result")->Find("bytes_evicted")->as_uint64(), plan.bytes_planned);
  ASSERT_TRUE(CacheReleased(cache.path()));
  EXPECT_EQ(serve.Stop(), 0);
  auto cache_view = Cache::Open(cache.path());
  ASSERT_TRUE(cache_view.ok());
  auto sets = *(*cache_view)->ListFilesets();
  ASSERT_EQ(sets.size(), 1u);
  EXPECT_EQ(sets[0].repo, "exlr8/other");
  EXPECT_EQ(*(*cache_view)->RecordedBytes(), plan.bytes_planned);
}

// POST /v1/evict: evicts a fileset after the jobs of its repo asked before
// it; a pinned one fails the job, naming its holders.
// An evict job whose server is killed mid-eviction runs again after the
// restart, but must not resolve its revision again: a pull in between may
// have fetched another commit of the repo, which it would evict instead.
// The first attempt records its commit; a retry evicts that one or, as
// here, finds it gone and is done, sparing what the revision names now.
TEST(ServeJobsTest, AnEvictJobRetriedAfterACrashEvictsTheCommitItChoseOrNothing) {
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  auto pulled = Pull(cache.path(), Options(*sim, "home", 2, 0));
  ASSERT_TRUE(pulled.ok()) << pulled.status().ToString();
  const std::string chose = std::string(40, 'e');  // the commit the killed attempt chose (and evicted)
  {
    auto store = JobStore::Open(cache.path() / "exlr8d.jobs.db");
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    JobRequest r;
    r.kind = JobKind::kEvict;
    r.repo = "exlr8/test";
    r.manifest = "";
    auto id = (*store)->Add(r);
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    ASSERT_TRUE((*store)->MarkRunning(*id).ok());
    ASSERT_TRUE((*store)->SetTargetCommit(*id, chose).ok());
  }  // as a kill -9 leaves it: running
  ServeProcess serve(cache.path(), {"--endpoint", sim->hub_url(), "--no-socket", "--listen", "127.0.0.1:0"});
  ASSERT_GT(serve.port(), 0) << serve.ready_line();
  JsonValue j;
  ASSERT_TRUE(WaitFor([&] { return IsFinishedState(State(j = Job(serve, 1))); })) << State(j);
  ASSERT_EQ(State(j), "done") << j.Find("error")->as_string();
  EXPECT_EQ(j.Find("result")->Find("commit")->as_string(), chose);
  EXPECT_TRUE(j.Find("result")->Find("evicted_before_a_restart")->as_bool());
  EXPECT_EQ(*j.Find("attempts")->as_uint64(), 2u);
  EXPECT_EQ(serve.Stop(), 0);
  auto c = Cache::Open(cache.path());
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*(*c)->RecordedBytes(), pulled->bytes_planned);  // the pulled commit is still there
}

TEST(ServeJobsTest, AnEvictJobWaitsForItsRepoAndSparesPinnedFilesets) {
  hubsim::FaultConfig slow;
  slow.throttle_bps = 400'000;
  auto sim = StartSim(TinyRelease(), "", slow, {"exlr8/test", "exlr8/other"});
  TempDir cache;
  ServeProcess serve(cache.path(), {"--endpoint", sim->hub_url(), "--no-socket", "--listen", "127.0.0.1:0"});
  ASSERT_GT(serve.port(), 0) << serve.ready_line();
  auto evict = [&](const std::string& body) {
    const HttpAnswer a = Http(serve.base() + "/v1/evict", "POST", "", body);
    EXPECT_EQ(a.status, 202) << a.body;
    const JsonValue v = Parse(a);
    const JsonValue* job = v.is_object() ? v.Find("job") : nullptr;
    EXPECT_TRUE(job != nullptr && job->Find("kind")->as_string() == "evict") << a.body;
    return job != nullptr ? *job->Find("id")->as_uint64() : 0;
  };
  auto wait_end = [&](std::uint64_t id) {
    JsonValue last;
    EXPECT_TRUE(WaitFor([&] { return IsFinishedState(State(last = Job(serve, id))); })) << State(last);
    return last;
  };
  const std::uint64_t pulled = Submit(serve, Body(2, 0));
  const std::uint64_t pinned =
      Submit(serve, R"({"repo":"exlr8/other","manifest":"home","tp":2,"rank":0,"pin":"svc"})");
  const std::uint64_t gone = evict(R"({"repo":"exlr8/test"})");
  JsonValue j;
  EXPECT_TRUE(WaitFor([&] { return !Waiting(j = Job(serve, gone)).empty(); })) << State(j);
  EXPECT_EQ(State(j), "queued");
  EXPECT_EQ(Waiting(j), "after job " + std::to_string(pulled) + " of the same repo");
  sim->SetFaults(hubsim::FaultConfig());
  ASSERT_EQ(State(wait_end(pulled)), "done");
  ASSERT_EQ(State(wait_end(pinned)), "done");
  j = wait_end(gone);
  ASSERT_EQ(State(j), "done") << j.Find("error")->as_string();
  const PullSummary plan = PlanOf(*sim, 2, 0);
  EXPECT_EQ(j.Find("result")->Find("repo")->as_string(), "exlr8/test");
  EXPECT_EQ(*j.Find("result")->Find("bytes_freed")->as_uint64(), plan.bytes_planned);
  // exlr8/other's, as far as its pull had got then.
  EXPECT_LE(*j.Find("result")->Find("bytes_remaining")->as_uint64(), plan.bytes_planned);

  j = wait_end(evict(R"({"repo":"exlr8/other"})"));
  EXPECT_EQ(State(j), "failed");
  EXPECT_THAT(j.Find("error")->as_string(), HasSubstr("pinned by svc"));
  j = wait_end(evict(R"({"repo":"exlr8/test"})"));  // gone already
  EXPECT_EQ(State(j), "failed");
  EXPECT_THAT(j.Find("error")->as_string(), HasSubstr("never pulled"));
  EXPECT_EQ(Http(serve.base() + "/v1/evict", "POST", "", R"({"repo":"exlr8/test","tp":2})").status, 400);
  ASSERT_TRUE(CacheReleased(cache.path()));
  EXPECT_EQ(serve.Stop(), 0);
  auto c = Cache::Open(cache.path());
  ASSERT_TRUE(c.ok());
  auto sets = (*c)->ListFilesets();
  ASSERT_TRUE(sets.ok());
  ASSERT_EQ(sets->size(), 1u);
  EXPECT_EQ((*sets)[0].repo, "exlr8/other");
  EXPECT_FALSE(fs::exists(cache.path() / "exlr8" / "test"));
}

// --max-jobs 1: the queue runs strictly in order, whatever the repo.
TEST(ServeJobsTest, OneJobAtATimeWithMaxJobs1) {
  hubsim::FaultConfig slow;
  slow.throttle_bps = 100'000;
  auto sim = StartSim(TinyRelease(), "", slow, {"exlr8/test", "exlr8/other"});
  TempDir cache;
  ServeProcess serve(cache.path(),
                     {"--endpoint", sim->hub_url(), "--no-socket", "--listen", "127.0.0.1:0", "--max-jobs", "1"});
  ASSERT_GT(serve.port(), 0) << serve.ready_line();
  const std::uint64_t a = Submit(serve, Body(2, 0));
  const std::uint64_t c = Submit(serve, R"({"repo":"exlr8/other","manifest":"home","tp":2,"rank":0})");
  JsonValue ja, jc;
  ASSERT_TRUE(WaitFor([&] { return Progress(ja = Job(serve, a), "bytes_received") > 0; })) << State(ja);
  EXPECT_TRUE(WaitFor([&] { return !Waiting(jc = Job(serve, c)).empty(); })) << State(jc);
  EXPECT_EQ(State(jc), "queued");
  EXPECT_EQ(Waiting(jc), "waiting for a free slot: 1 job running (--max-jobs)");
  EXPECT_EQ(Http(serve.base() + "/v1/jobs/" + std::to_string(a), "DELETE").status, 202);
  // The slot freed, the other repo's job starts.
  ASSERT_TRUE(WaitFor([&] { return Progress(jc = Job(serve, c), "bytes_received") > 0; })) << State(jc);
  EXPECT_EQ(State(Job(serve, a)), "cancelled");
  EXPECT_EQ(serve.Stop(), 0);
  auto store = JobStore::Open(cache.path() / "exlr8d.jobs.db");
  ASSERT_TRUE(store.ok());
  EXPECT_EQ((*store)->Get(static_cast<JobId>(c))->state, JobState::kQueued) << "a stop queues a running job again";
}

// Two jobs running when the server stops are both queued again, and both
// resume at the next start.
TEST(ServeJobsTest, AStopQueuesEveryRunningJobAgain) {
  hubsim::FaultConfig slow;
  slow.throttle_bps = 200'000;
  auto sim = StartSim(TinyRelease(), "", slow, {"exlr8/test", "exlr8/other"});
  TempDir cache;
  const std::vector<std::string> args = {"--endpoint", sim->hub_url(), "--no-socket", "--listen", "127.0.0.1:0",
                                         "--jobs", "4"};
  std::uint64_t a = 0, c = 0;
  {
    ServeProcess serve(cache.path(), args);
    ASSERT_GT(serve.port(), 0) << serve.ready_line();
    a = Submit(serve, Body(2, 1));
    c = Submit(serve, R"({"repo":"exlr8/other","manifest":"home","tp":2,"rank":1})");
    JsonValue ja, jc;
    ASSERT_TRUE(WaitFor([&] {
      return Progress(ja = Job(serve, a), "bytes_verified") > 0 && Progress(jc = Job(serve, c), "bytes_verified") > 0;
    })) << State(ja) << " " << State(jc);
    EXPECT_EQ(serve.Stop(), 0);
  }
  {
    auto store = JobStore::Open(cache.path() / "exlr8d.jobs.db");
    ASSERT_TRUE(store.ok());
    EXPECT_EQ((*store)->Get(static_cast<JobId>(a))->state, JobState::kQueued);
    EXPECT_EQ((*store)->Get(static_cast<JobId>(c))->state, JobState::kQueued);
  }
  sim->SetFaults(hubsim::FaultConfig());  // full speed now
  ServeProcess serve(cache.path(), args);
  ASSERT_GT(serve.port(), 0) << serve.ready_line();
  JsonValue ja, jc;
  ASSERT_TRUE(WaitFor([&] {
    return IsFinishedState(State(ja = Job(serve, a))) && IsFinishedState(State(jc = Job(serve, c)));
  })) << State(ja) << " " << State(jc);
  EXPECT_EQ(State(ja), "done") << ja.Find("error")->as_string();
  EXPECT_EQ(State(jc), "done") << jc.Find("error")->as_string();
  EXPECT_EQ(*ja.Find("attempts")->as_uint64(), 2u);
  EXPECT_EQ(*jc.Find("attempts")->as_uint64(), 2u);
  ASSERT_TRUE(CacheReleased(cache.path()));
  EXPECT_EQ(serve.Stop(), 0);
  ExpectCacheHoldsExactlyThePlan(cache.path(), TinyRelease(), PlanOf(*sim, 2, 1), "exlr8/test");
  ExpectCacheHoldsExactlyThePlan(cache.path(), TinyRelease(), PlanOf(*sim, 2, 1), "exlr8/other");
}

// GET /metrics as Prometheus reads it: "series value" per line (grouping
// checked).
std::map<std::string, std::string> Metrics(const ServeProcess& serve) {
  const HttpAnswer a = Http(serve.base() + "/metrics");
  EXPECT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(a.content_type, "text/plain; version=0.0.4; charset=utf-8");
  return PrometheusSamples(a.body);
}

TEST(ServeJobsTest, MetricsShowTheCacheTheQueueAndWhatTheServerDid) {
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  ServeProcess serve(cache.path(), {"--endpoint", sim->hub_url(), "--no-socket", "--listen", "127.0.0.1:0"});
  ASSERT_GT(serve.port(), 0) << serve.ready_line();
  auto m = Metrics(serve);  // nothing pulled yet
  EXPECT_EQ(m["exlr8d_jobs{state=\"queued\"}"], "0");
  EXPECT_EQ(m["exlr8d_received_bytes_total"], "0");
  EXPECT_EQ(m["exlr8d_jobs_max_running"], "4");
  EXPECT_EQ(m.count("exlr8d_cache_filesets"), 0u);
  EXPECT_EQ(Http(serve.base() + "/metrics", "POST").status, 405);

  const std::uint64_t id = Submit(serve, Body(3, 2));
  JsonValue last;
  ASSERT_TRUE(WaitFor([&] { return IsFinishedState(State(last = Job(serve, id))); })) << State(last);
  ASSERT_EQ(State(last), "done") << last.Find("error")->as_string();
  const JsonValue pull =
      *Parse(Http(serve.base() + "/v1/pulls/" + std::to_string(*last.Find("pull")->as_uint64()))).Find("pull");
  const PullSummary plan = PlanOf(*sim, 3, 2);
  m = Metrics(serve);
  const std::string set = "{repo=\"exlr8/test\",revision=\"main\",commit=\"" + plan.commit + "\"}";
  EXPECT_EQ(m["exlr8d_fileset_verified_bytes" + set], std::to_string(plan.bytes_planned));
  EXPECT_EQ(m["exlr8d_cache_verified_bytes"], std::to_string(plan.bytes_planned));
  EXPECT_EQ(m["exlr8d_cache_filesets"], "1");
  EXPECT_EQ(m["exlr8d_fileset_pins" + set], "0");
  EXPECT_EQ(m.count("exlr8d_fileset_last_verified_timestamp_seconds" + set), 0u);  // never scrubbed
  EXPECT_EQ(m["exlr8d_jobs{state=\"done\"}"], "1");
  EXPECT_EQ(m["exlr8d_pulls{state=\"done\"}"], "1");
  // Into a fresh cache: the whole plan (the pull fetched a little more:
  // each width-file header twice).
  EXPECT_EQ(m["exlr8d_verified_bytes_total"], std::to_string(plan.bytes_planned));
  EXPECT_GE(std::stoull(m["exlr8d_received_bytes_total"]), *pull.Find("bytes_fetched")->as_uint64());
  EXPECT_EQ(m["exlr8d_http_requests_total"], std::to_string(*pull.Find("requests")->as_uint64()));
  EXPECT_GT(std::stoull(m["exlr8d_hub_resolves_total"]), 0u);
  EXPECT_GT(std::stoull(m["exlr8d_cache_free_bytes"]), 0u);

  // A verify job adds its checked bytes, and the fileset its last scrub.
  const HttpAnswer v = Http(serve.base() + "/v1/verify", "POST", "", R"({"repo":"exlr8/test"})");
  ASSERT_EQ(v.status, 202) << v.body;
  const std::uint64_t vid = *Parse(v).Find("job")->Find("id")->as_uint64();
  ASSERT_TRUE(WaitFor([&] { return State(last = Job(serve, vid)) == "done"; })) << State(last);
  m = Metrics(serve);
  EXPECT_EQ(m["exlr8d_scrubbed_bytes_total"], std::to_string(plan.bytes_planned));
  EXPECT_EQ(m["exlr8d_scrub_failures_total"], "0");
  EXPECT_EQ(m["exlr8d_fileset_verify_failures" + set], "0");
  EXPECT_EQ(m.count("exlr8d_fileset_last_verified_timestamp_seconds" + set), 1u);
  EXPECT_EQ(m["exlr8d_jobs{state=\"done\"}"], "2");
  EXPECT_EQ(serve.Stop(), 0);
}

// A running job's samples are labelled `job_id`, not `job`, which
// Prometheus overwrites with its own target label (or renames to
// exported_job).
TEST(ServeJobsTest, ARunningJobsMetricsAreLabelledJobId) {
  hubsim::FaultConfig slow;
  slow.throttle_bps = 100'000;
  auto sim = StartSim(TinyRelease(), "", slow);
  TempDir cache;
  ServeProcess serve(cache.path(), {"--endpoint", sim->hub_url(), "--no-socket", "--listen", "127.0.0.1:0"});
  ASSERT_GT(serve.port(), 0) << serve.ready_line();
  const std::uint64_t id = Submit(serve, Body(4, 1));
  JsonValue last;
  ASSERT_TRUE(WaitFor([&] { return Progress(last = Job(serve, id), "bytes_planned") > 0; })) << State(last);
  const auto m = Metrics(serve);
  const std::string labels = "{job_id=\"" + std::to_string(id) + "\",kind=\"pull\",repo=\"exlr8/test\"}";
  EXPECT_EQ(m.count("exlr8d_job_planned_bytes" + labels), 1u);
  EXPECT_EQ(m.count("exlr8d_job_done_bytes" + labels), 1u);
  for (const auto& [series, value] : m) EXPECT_EQ(series.find("{job=\""), std::string::npos) << series;
  EXPECT_EQ(Http(serve.base() + "/v1/jobs/" + std::to_string(id), "DELETE").status, 202);
}

// Many jobs of several repos at once, some cancelled, while two clients
// poll the jobs and the metrics: never two of a repo at once, never more
// than --max-jobs, every job ends as asked, and what the cache then holds
// checks clean.
TEST(ServeJobsTest, ManyJobsOfSeveralReposCancelledAndWatchedAtOnce) {
  const std::vector<std::string> repos = {"exlr8/r0", "exlr8/r1", "exlr8/r2", "exlr8/r3", "exlr8/r4"};
  hubsim::FaultConfig slow;
  slow.throttle_bps = 2'000'000;
  auto sim = StartSim(TinyRelease(), "", slow, repos);
  TempDir cache;
  ServeProcess serve(cache.path(), {"--endpoint", sim->hub_url(), "--no-socket", "--listen", "127.0.0.1:0",
                                    "--max-jobs", "3", "--jobs", "4"});
  ASSERT_GT(serve.port(), 0) << serve.ready_line();
  struct Asked {
    std::uint64_t id;
    std::string repo;
    bool cancel;
  };
  std::vector<Asked> asked;
  for (int rank = 0; rank < 3; ++rank) {
    for (std::size_t r = 0; r < repos.size(); ++r) {
      const std::string body = R"({"repo":")" + repos[r] + R"(","manifest":"home","tp":3,"rank":)" +
                               std::to_string(rank) + "}";
      asked.push_back({Submit(serve, body), repos[r], (rank + r) % 4 == 1});
    }
  }
  std::atomic<bool> done{false};
  std::atomic<int> most_running{0}, same_repo_at_once{0}, polls{0};
  std::thread watcher([&] {
    while (!done.load()) {
      const JsonValue jobs = Parse(Http(serve.base() + "/v1/jobs"));
      if (!jobs.is_object() || jobs.Find("jobs") == nullptr) continue;
      std::map<std::string, int> running_of;
      int running = 0;
      for (const JsonValue& j : jobs.Find("jobs")->as_array()) {
        if (State(j) != "running") continue;
        ++running;
        if (++running_of[j.Find("repo")->as_string()] > 1) ++same_repo_at_once;
      }
      most_running = std::max(most_running.load(), running);
      ++polls;
    }
  });
  std::thread scraper([&] {
    while (!done.load()) (void)Metrics(serve);  // status, type and grouping checked while jobs run
  });
  for (const Asked& a : asked)
    if (a.cancel) Http(serve.base() + "/v1/jobs/" + std::to_string(a.id), "DELETE");
  const bool all_ended = WaitFor(
      [&] {
        for (const Asked& a : asked)
          if (!IsFinishedState(State(Job(serve, a.id)))) return false;
        return true;
      },
      120);
  done = true;
  watcher.join();
  scraper.join();
  ASSERT_TRUE(all_ended);
  EXPECT_GT(polls.load(), 0);
  EXPECT_EQ(same_repo_at_once.load(), 0);
  EXPECT_LE(most_running.load(), 3);
  for (const Asked& a : asked) {
    const JsonValue j = Job(serve, a.id);
    // A cancel can come after a quick job ended; otherwise it was honoured.
    if (a.cancel) {
      EXPECT_TRUE(State(j) == "cancelled" || State(j) == "done") << a.id << " " << State(j);
    } else {
      EXPECT_EQ(State(j), "done") << a.id << " " << j.Find("error")->as_string();
    }
  }
  ASSERT_TRUE(CacheReleased(cache.path()));
  EXPECT_EQ(serve.Stop(), 0);
  const ShellRun scrub = Shell(Exlr8d() + " verify --no-progress --cache " + Quote(cache.path().string()));
  EXPECT_EQ(scrub.status, 0) << scrub.out;
}

TEST(ServeJobsTest, ATokenNeverFollowsAJobToAnotherEndpoint) {
  auto own = StartSim(TinyRelease(), "hf_servers_secret");
  auto other = StartSim(TinyRelease());
  TempDir cache;
  ::setenv("HF_TOKEN", "hf_servers_secret", 1);
  ServeProcess serve(cache.path(), {"--endpoint", own->hub_url(), "--no-socket", "--listen", "127.0.0.1:0"});
  ::unsetenv("HF_TOKEN");
  ASSERT_GT(serve.port(), 0) << serve.ready_line();
  const std::uint64_t mine = Submit(serve, Body(4, 1));  // the token is required there
  JsonValue last;
  ASSERT_TRUE(WaitFor([&] { return IsFinishedState(State(last = Job(serve, mine))); })) << State(last);
  EXPECT_EQ(State(last), "done") << last.Find("error")->as_string();
  const std::uint64_t theirs = Submit(serve, Body(4, 2, R"(,"endpoint":")" + other->hub_url() + R"(")"));
  ASSERT_TRUE(WaitFor([&] { return IsFinishedState(State(last = Job(serve, theirs))); })) << State(last);
  EXPECT_EQ(State(last), "done") << last.Find("error")->as_string();
  EXPECT_THAT(own->StatsJson(), ::testing::ContainsRegex("\"hub\":\\{[^}]*\"with_authorization\":[1-9]"));
  const std::string stats = other->StatsJson();
  EXPECT_THAT(stats, ::testing::ContainsRegex("\"hub\":\\{[^}]*\"requests\":[1-9]"));
  EXPECT_THAT(stats, ::testing::ContainsRegex("\"hub\":\\{[^}]*\"with_authorization\":0"));
  EXPECT_THAT(stats, ::testing::ContainsRegex("\"cdn\":\\{[^}]*\"with_authorization\":0"));
  EXPECT_EQ(serve.Stop(), 0);
}

}  // namespace
}  // namespace exlr8
