// The job queue of `exlr8d serve` on a real SQLite file, and the parser of
// POST /v1/pulls bodies.
#include "daemon/serve/job_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <span>

#include "daemon/base/migrations.h"
#include "daemon/base/sqlite_db.h"
#include "daemon/serve/job_runner.h"
#include "daemon/serve/jobs_api.h"
#include "serve_schema_sql.h"
#include "tests/daemon/base/fake_clock.h"
#include "tests/daemon/cache_test_util.h"

namespace exlr8 {
namespace {

using ::exlr8::testing::FakeClock;
using ::exlr8::testing::TempDir;
using ::testing::HasSubstr;

JobRequest Request(int rank = 1) {
  JobRequest r;
  r.repo = "org/model";
  r.manifest = "home";
  r.tp = 4;
  r.rank = rank;
  return r;
}

// A job's times are the injected clock's, as the API reports them.
TEST(JobStoreTest, RecordsTimesFromTheInjectedClock) {
  TempDir dir;
  FakeClock clock;
  JobStoreLimits limits;
  limits.clock = &clock;
  auto store = JobStore::Open(dir.path() / "exlr8d.jobs.db", limits);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto id = (*store)->Add(Request());
  ASSERT_TRUE(id.ok());
  clock.Advance(std::chrono::seconds(5));
  ASSERT_TRUE((*store)->MarkRunning(*id).ok());
  clock.Advance(std::chrono::seconds(7));
  ASSERT_TRUE((*store)->Finish(*id, JobState::kDone).ok());
  auto job = (*store)->Get(*id);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->created_ms, FakeClock::kDefaultUnixMs);
  EXPECT_EQ(job->updated_ms, FakeClock::kDefaultUnixMs + 12'000);
  ASSERT_TRUE(job->finished_ms.has_value());
  EXPECT_EQ(*job->finished_ms, FakeClock::kDefaultUnixMs + 12'000);
}

TEST(JobStoreTest, KeepsJobsInOrderAcrossReopen) {
  TempDir dir;
  const auto path = dir.path() / "exlr8d.jobs.db";
  JobId first = 0, second = 0;
  {
    auto store = JobStore::Open(path);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    auto a = (*store)->Add(Request(1));
    auto b = (*store)->Add(Request(2));
    ASSERT_TRUE(a.ok() && b.ok());
    first = *a;
    second = *b;
    EXPECT_LT(first, second);
  }
  auto store = JobStore::Open(path);  // what a restarted server finds
  ASSERT_TRUE(store.ok());
  auto queued = (*store)->Queued();
  ASSERT_TRUE(queued.ok());
  ASSERT_EQ(queued->size(), 2u);
  EXPECT_EQ((*queued)[0].id, first);  // oldest first
  EXPECT_EQ((*queued)[0].request.rank, 1);
  EXPECT_EQ((*queued)[0].request.revision, "main");
  EXPECT_EQ((*queued)[1].id, second);
  auto head = (*store)->Queued(1);
  ASSERT_TRUE(head.ok());
  ASSERT_EQ(head->size(), 1u);
  EXPECT_EQ((*head)[0].id, first);
  auto list = (*store)->List();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].id, second);  // newest first
  EXPECT_EQ((*list)[0].state, JobState::kQueued);
  EXPECT_EQ((*list)[0].attempts, 0);
  EXPECT_FALSE((*list)[0].pull.has_value());
  EXPECT_FALSE((*list)[0].finished_ms.has_value());
}

TEST(JobStoreTest, StatesMoveOnlyForward) {
  TempDir dir;
  auto store = JobStore::Open(dir.path() / "q.db");
  ASSERT_TRUE(store.ok());
  JobStore& s = **store;
  const JobId id = *s.Add(Request());
  EXPECT_EQ(s.SetPull(id, 5).code(), StatusCode::kFailedPrecondition);  // not running
  EXPECT_EQ(s.Requeue(id).code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(s.MarkRunning(id).ok());
  EXPECT_EQ(s.MarkRunning(id).code(), StatusCode::kFailedPrecondition);  // already running
  ASSERT_TRUE(s.SetPull(id, 5).ok());
  ASSERT_TRUE(s.Requeue(id).ok());  // a stop: queued again, the attempt counted
  ASSERT_TRUE(s.MarkRunning(id).ok());
  ASSERT_TRUE(s.Finish(id, JobState::kDone).ok());
  auto done = s.Get(id);
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->state, JobState::kDone);
  EXPECT_EQ(done->attempts, 2);
  EXPECT_EQ(done->pull, 5);
  EXPECT_TRUE(done->finished_ms.has_value());
  // Finished is final.
  Status again = s.Finish(id, JobState::kCancelled, "late");
  EXPECT_EQ(again.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(again.message(), HasSubstr("is done"));
  EXPECT_EQ(s.MarkRunning(id).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.Finish(id, JobState::kRunning).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.Get(999).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(s.MarkRunning(999).code(), StatusCode::kNotFound);
  // A queued job may be cancelled before it starts.
  const JobId other = *s.Add(Request());
  ASSERT_TRUE(s.Finish(other, JobState::kCancelled, "by a client").ok());
  EXPECT_EQ(s.Get(other)->error, "by a client");
  auto queued = s.Queued();
  ASSERT_TRUE(queued.ok());
  EXPECT_TRUE(queued->empty());
}

// A client's cancel marks only a queued job: one that started meanwhile
// is cancelled by its runner, so a cancel racing the start never marks a
// running pull "cancelled before it started" while it runs on.
TEST(JobStoreTest, CancelQueuedNeverMarksARunningJob) {
  TempDir dir;
  auto store = JobStore::Open(dir.path() / "q.db");
  ASSERT_TRUE(store.ok());
  JobStore& s = **store;
  const JobId queued = *s.Add(Request());
  ASSERT_TRUE(s.CancelQueued(queued, "by a client").ok());
  EXPECT_EQ(s.Get(queued)->state, JobState::kCancelled);
  EXPECT_EQ(s.Get(queued)->error, "by a client");
  EXPECT_TRUE(s.Get(queued)->finished_ms.has_value());
  const JobId started = *s.Add(Request());
  ASSERT_TRUE(s.MarkRunning(started).ok());
  EXPECT_EQ(s.CancelQueued(started, "late").code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.Get(started)->state, JobState::kRunning);
  EXPECT_EQ(s.CancelQueued(queued, "again").code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.CancelQueued(999, "none").code(), StatusCode::kNotFound);
}

TEST(JobStoreTest, RunningJobsOfADeadServerAreQueuedAgain) {
  TempDir dir;
  const auto path = dir.path() / "q.db";
  JobId running = 0, done = 0;
  {
    auto store = JobStore::Open(path);
    ASSERT_TRUE(store.ok());
    running = *(*store)->Add(Request(1));
    done = *(*store)->Add(Request(2));
    ASSERT_TRUE((*store)->MarkRunning(running).ok());
    ASSERT_TRUE((*store)->MarkRunning(done).ok());
    ASSERT_TRUE((*store)->Finish(done, JobState::kDone).ok());
  }  // the server dies here, with `running` running
  auto store = JobStore::Open(path);
  ASSERT_TRUE(store.ok());
  auto n = (*store)->RequeueInterrupted();
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 1);
  EXPECT_EQ((*store)->Get(running)->state, JobState::kQueued);
  EXPECT_EQ((*store)->Get(running)->attempts, 1);
  EXPECT_EQ((*store)->Get(done)->state, JobState::kDone);
}

TEST(JobStoreTest, RefusesBadRequestsNamingTheField) {
  TempDir dir;
  auto store = JobStore::Open(dir.path() / "q.db");
  ASSERT_TRUE(store.ok());
  auto refused = [&](JobRequest r, const std::string& what) {
    auto id = (*store)->Add(r);
    EXPECT_EQ(id.status().code(), StatusCode::kInvalidArgument) << what;
    EXPECT_THAT(id.status().message(), HasSubstr(what));
  };
  JobRequest r = Request();
  r.repo = "no-slash";
  refused(r, "repo");
  r = Request();
  r.rank = 4;
  refused(r, "rank must be in [0, 3]");
  r = Request();
  r.manifest = "";  // the whole fileset: no ranks
  refused(r, "tp and rank need a manifest");
  r = Request();
  r.tp = 0;
  refused(r, "tp");
  r = Request();
  r.manifest = "/etc/passwd";  // the server never reads local files for a client
  refused(r, "manifest");
  r.manifest = "manifests/../../x.json";
  refused(r, "manifest");
  // No name may carry a newline into the server's log, forging a line
  // there.
  r.manifest = "home\nexlr8d serve: job 1: done";
  refused(r, "contains a control character");
  r.manifest = "manifests/exlr8-manifest-x\x1b.json";
  refused(r, "contains a control character");
  r = Request();
  r.revision = "";
  refused(r, "revision");
  r = Request();
  r.pin = std::string(1001, 'p');
  refused(r, "pin");
  // These are refused at submission, not found only once the job has run
  // (the pin after the whole pull).
  r = Request();
  r.pin = "a\nb";
  refused(r, "pin: invalid pin holder");
  r.pin = std::string(300, 'p');
  refused(r, "pin: invalid pin holder");
  r = Request();
  r.revision = "a\nb";
  refused(r, "revision: invalid revision");
  r = Request();
  r.endpoint = "file:///etc/passwd";
  refused(r, "endpoint: 'file:///etc/passwd' is not an http(s) URL");
  r.endpoint = "https://hub.example/?x=1";
  refused(r, "endpoint");
  EXPECT_TRUE((*store)->List()->empty());
  r.endpoint = "https://hub.example/";
  r.pin = "node-7";
  EXPECT_TRUE((*store)->Add(r).ok());
}

TEST(JobStoreTest, APullWithoutAManifestIsAWholeFilesetPull) {
  TempDir dir;
  auto store = JobStore::Open(dir.path() / "q.db");
  ASSERT_TRUE(store.ok());
  JobRequest r = Request();
  r.manifest = "";
  r.tp = 1;
  r.rank = 0;
  auto id = (*store)->Add(r);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  auto jobs = (*store)->List();
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_EQ((*jobs)[0].request.manifest, "");
}

TEST(JobStoreTest, StaysBoundedHoweverManyJobsAreAskedFor) {
  TempDir dir;
  auto store = JobStore::Open(dir.path() / "q.db", JobStoreLimits{3, 2});
  ASSERT_TRUE(store.ok());
  JobStore& s = **store;
  std::vector<JobId> ids;
  for (int i = 0; i < 3; ++i) ids.push_back(*s.Add(Request()));
  auto full = s.Add(Request());
  EXPECT_EQ(full.status().code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(full.status().message(), HasSubstr("3 unfinished jobs"));
  // Finishing makes room; only the 2 newest finished jobs are kept.
  for (JobId id : ids) ASSERT_TRUE(s.Finish(id, JobState::kCancelled).ok());
  for (int i = 0; i < 3; ++i) ids.push_back(*s.Add(Request()));
  auto list = s.List();
  ASSERT_TRUE(list.ok());
  std::vector<JobId> kept;
  for (const auto& j : *list) kept.push_back(j.id);
  EXPECT_EQ(kept, (std::vector<JobId>{ids[5], ids[4], ids[3], ids[2], ids[1]}));
  EXPECT_EQ(s.Get(ids[0]).status().code(), StatusCode::kNotFound);
}

TEST(JobStoreTest, NotADatabaseIsCorruption) {
  TempDir dir;
  const auto path = dir.path() / "q.db";
  std::ofstream(path) << std::string(4096, 'x');
  auto store = JobStore::Open(path);
  EXPECT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kCorruption) << store.status().ToString();
  EXPECT_THAT(store.status().message(), HasSubstr(path.string()));
}

TEST(JobRequestTest, ParsesBodiesAndNamesWhatIsWrong) {
  auto r = ParseJobRequest(R"({"repo":"org/m","manifest":"home","tp":4,"rank":3,"pin":"svc"})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->repo, "org/m");
  EXPECT_EQ(r->revision, "main");
  EXPECT_EQ(r->tp, 4);
  EXPECT_EQ(r->rank, 3);
  EXPECT_EQ(r->pin, "svc");
  EXPECT_EQ(r->endpoint, "");
  EXPECT_FALSE(r->make_room);
  r = ParseJobRequest(R"({"repo":"org/m","manifest":"home","tp":4,"rank":3,"make_room":true})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->make_room);
  // No manifest: the whole fileset (an LVQ5 repository), no ranks.
  r = ParseJobRequest(R"({"repo":"org/m","revision":"v1"})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->manifest, "");
  EXPECT_EQ(r->tp, 1);
  EXPECT_EQ(r->rank, 0);
  auto bad = [](std::string_view body, const std::string& what) {
    auto p = ParseJobRequest(body);
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument) << body;
    EXPECT_THAT(p.status().message(), HasSubstr(what)) << body;
  };
  bad("", "not a JSON object");
  bad("[1]", "must be a JSON object");
  bad(R"({"repo":"org/m","manifest":"home","tp":4})", "missing rank");
  bad(R"({"manifest":"home","tp":4,"rank":0})", "missing repo");
  bad(R"({"repo":"org/m","tp":4,"rank":0})", "tp and rank need a manifest");
  bad(R"({"repo":"org/m","manifest":""})", "missing manifest");
  bad(R"({"repo":"org/m","manifest":"home","tp":"4","rank":0})", "tp must be an integer");
  bad(R"({"repo":"org/m","manifest":"home","tp":4.5,"rank":0})", "tp must be an integer");
  bad(R"({"repo":"org/m","manifest":"home","tp":-1,"rank":0})", "tp must be an integer");
  bad(R"({"repo":"org/m","manifest":"home","tp":4,"rank":0,"ranks":1})", "unknown field 'ranks'");
  bad(R"({"repo":7,"manifest":"home","tp":4,"rank":0})", "repo must be a string");
  bad(R"({"repo":"org/m","manifest":"home","tp":4,"rank":0,"make_room":1})", "make_room must be true or false");
  bad(R"({"repo":"org/m","manifest":"home","tp":4,"rank":0,"repo":"x/y"})", "not a JSON object");  // duplicate
  bad(std::string(100, '['), "not a JSON object");  // deeper than the limit
}

TEST(JobStoreTest, VerifyJobsTakeARepoAndRevisionAndKeepTheirResult) {
  TempDir dir;
  auto store = JobStore::Open(dir.path() / "exlr8d.jobs.db");
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  JobRequest v;
  v.kind = JobKind::kVerify;
  v.repo = "org/model";
  v.revision = "v2";
  auto id = (*store)->Add(v);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  ASSERT_TRUE((*store)->MarkRunning(*id).ok());
  ASSERT_TRUE((*store)->Finish(*id, JobState::kDone, "", R"({"clean":true})").ok());
  auto job = (*store)->Get(*id);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->request.kind, JobKind::kVerify);
  EXPECT_EQ(job->request.revision, "v2");
  EXPECT_EQ(job->result, R"({"clean":true})");
  // Pull fields make no sense on a scrub.
  JobRequest bad = v;
  bad.manifest = "home";
  EXPECT_THAT((*store)->Add(bad).status().message(), HasSubstr("repo and revision only"));
  bad = v;
  bad.repo = "../x";
  EXPECT_EQ((*store)->Add(bad).status().code(), StatusCode::kInvalidArgument);
  // Pulls are pulls, with no result.
  auto pull = (*store)->Add(Request(2));
  ASSERT_TRUE(pull.ok());
  EXPECT_EQ((*store)->Get(*pull)->request.kind, JobKind::kPull);
  EXPECT_EQ((*store)->Get(*pull)->result, "");
}

// A queue written by the previous version (schema 1, pulls only) is
// migrated in place: its jobs read back as pulls.
TEST(JobStoreTest, AVersion1QueueIsUpgradedInPlace) {
  TempDir dir;
  const auto path = dir.path() / "exlr8d.jobs.db";
  {
    auto db = SqliteDb::Open(path.string());
    ASSERT_TRUE(db.ok());
    ASSERT_TRUE(ApplyMigrations(db->get(), std::span(serve_schema::kMigrations).first(1)).ok());
    ASSERT_TRUE((*db)->Exec("INSERT INTO jobs (repo, revision, manifest, tp, rank, state, created, updated) "
                            "VALUES ('org/old', 'main', 'home', 4, 1, 'queued', 1, 1)")
                    .ok());
  }
  auto store = JobStore::Open(path);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto queued = (*store)->Queued();
  ASSERT_TRUE(queued.ok() && queued->size() == 1u);
  EXPECT_EQ((*queued)[0].request.kind, JobKind::kPull);
  EXPECT_EQ((*queued)[0].request.repo, "org/old");
  EXPECT_EQ((*queued)[0].request.rank, 1);
}

// Schema 3 rebuilds the table to allow evict jobs: every row of a version 2
// queue (pulls and verify jobs, their ids, states and results) survives.
TEST(JobStoreTest, AVersion2QueueIsRebuiltKeepingEveryRow) {
  TempDir dir;
  const auto path = dir.path() / "exlr8d.jobs.db";
  {
    auto db = SqliteDb::Open(path.string());
    ASSERT_TRUE(db.ok());
    ASSERT_TRUE(ApplyMigrations(db->get(), std::span(serve_schema::kMigrations).first(2)).ok());
    ASSERT_TRUE((*db)->Exec("INSERT INTO jobs (id, repo, revision, manifest, tp, rank, state, created, updated, "
                            "pull_id, attempts) VALUES (5, 'org/a', 'main', 'home', 4, 1, 'done', 1, 2, 9, 2)")
                    .ok());
    ASSERT_TRUE((*db)->Exec("INSERT INTO jobs (id, repo, revision, manifest, tp, rank, state, created, updated, "
                            "kind, result) VALUES (7, 'org/b', 'v1', '', 1, 0, 'queued', 3, 3, 'verify', '{}')")
                    .ok());
    EXPECT_FALSE((*db)->Exec("INSERT INTO jobs (repo, revision, manifest, tp, rank, state, created, updated, kind) "
                             "VALUES ('org/c', 'main', '', 1, 0, 'queued', 4, 4, 'evict')")
                     .ok());  // not yet
  }
  auto store = JobStore::Open(path);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto a = (*store)->Get(5);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->request.kind, JobKind::kPull);
  EXPECT_EQ(a->state, JobState::kDone);
  EXPECT_EQ(a->pull, std::optional<std::int64_t>(9));
  EXPECT_EQ(a->attempts, 2);
  auto b = (*store)->Get(7);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->request.kind, JobKind::kVerify);
  EXPECT_EQ(b->request.revision, "v1");
  EXPECT_EQ(b->result, "{}");
  JobRequest e;
  e.kind = JobKind::kEvict;
  e.repo = "org/c";
  auto id = (*store)->Add(e);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_GT(*id, 7);  // ids go on from the copied rows
  EXPECT_EQ((*store)->Get(*id)->request.kind, JobKind::kEvict);
  auto queued = (*store)->Queued();
  ASSERT_TRUE(queued.ok());
  ASSERT_EQ(queued->size(), 2u);
  EXPECT_EQ((*queued)[0].id, 7);
  e.pin = "x";
  EXPECT_THAT((*store)->Add(e).status().message(), HasSubstr("an evict job takes repo and revision only"));
}

// Version 4 adds make_room; the rows of version 3 keep theirs (false), and
// a pull that asks for it keeps it across a restart.
TEST(JobStoreTest, AVersion3QueueGainsMakeRoomKeepingItsRows) {
  TempDir dir;
  const auto path = dir.path() / "exlr8d.jobs.db";
  {
    auto db = SqliteDb::Open(path.string());
    ASSERT_TRUE(db.ok());
    ASSERT_TRUE(ApplyMigrations(db->get(), std::span(serve_schema::kMigrations).first(3)).ok());
    ASSERT_TRUE((*db)->Exec("INSERT INTO jobs (id, repo, revision, manifest, tp, rank, state, created, updated) "
                            "VALUES (3, 'org/a', 'main', 'home', 4, 1, 'queued', 1, 1)")
                    .ok());
  }
  JobId asked = 0;
  {
    auto store = JobStore::Open(path);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    auto old = (*store)->Get(3);
    ASSERT_TRUE(old.ok()) << old.status().ToString();
    EXPECT_FALSE(old->request.make_room);
    JobRequest r = Request(2);
    r.make_room = true;
    asked = *(*store)->Add(r);
    JobRequest verify;
    verify.kind = JobKind::kVerify;
    verify.repo = "org/a";
    verify.make_room = true;
    EXPECT_THAT((*store)->Add(verify).status().message(), HasSubstr("takes repo and revision only"));
  }
  auto store = JobStore::Open(path);  // a restarted server
  ASSERT_TRUE(store.ok());
  EXPECT_TRUE((*store)->Get(asked)->request.make_room);
  EXPECT_TRUE(JobRunner::OptionsFor({}, (*store)->Get(asked)->request).make_room);
  EXPECT_FALSE(JobRunner::OptionsFor({}, (*store)->Get(3)->request).make_room);
}

TEST(JobRequestTest, ParsesVerifyAndEvictBodies) {
  for (JobKind kind : {JobKind::kVerify, JobKind::kEvict}) {
    auto r = ParseFilesetRequest(R"({"repo":"org/m"})", kind);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->kind, kind);
    EXPECT_EQ(r->repo, "org/m");
    EXPECT_EQ(r->revision, "main");
    r = ParseFilesetRequest(R"({"repo":"org/m","revision":"abc1234"})", kind);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->revision, "abc1234");
    EXPECT_THAT(ParseFilesetRequest(R"({"repo":"org/m","manifest":"home"})", kind).status().message(),
                HasSubstr("unknown field 'manifest' (fields: repo, revision)"));
    EXPECT_THAT(ParseFilesetRequest("{}", kind).status().message(), HasSubstr("missing repo"));
    EXPECT_THAT(ParseFilesetRequest(R"({"repo":1})", kind).status().message(), HasSubstr("repo must be a string"));
  }
}

TEST(JobRunnerTest, AnotherEndpointNeverGetsTheServersToken) {
  PullOptions defaults;
  defaults.hub.endpoint = "https://hub.example/";
  defaults.hub.token = "secret";
  defaults.fetch.max_parallel = 7;
  JobRequest r = Request();
  PullOptions same = JobRunner::OptionsFor(defaults, r);
  EXPECT_EQ(same.hub.token, "secret");
  EXPECT_EQ(same.repo, "org/model");
  EXPECT_EQ(same.rank, 1);
  EXPECT_FALSE(same.allow_local_manifest);
  EXPECT_EQ(same.fetch.max_parallel, 7);
  r.endpoint = "https://hub.example";  // the same hub, spelled without '/'
  EXPECT_EQ(JobRunner::OptionsFor(defaults, r).hub.token, "secret");
  r.endpoint = "http://elsewhere.example";
  PullOptions other = JobRunner::OptionsFor(defaults, r);
  EXPECT_EQ(other.hub.endpoint, "http://elsewhere.example");
  EXPECT_EQ(other.hub.token, "");
  EXPECT_FALSE(other.hub.token_from_environment);
  EXPECT_TRUE(other.hub.token_file.empty());
}

}  // namespace
}  // namespace exlr8
