// HubClient against a fake hub + fake CDN on real loopback sockets.
#include "daemon/hub/hub_client.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <curl/curl.h>
#include <stdlib.h>
#include <thread>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <unordered_set>

#include "daemon/hub/http_common.h"
#include "daemon/hub/hub_protocol.h"
#include "tests/daemon/dead_hub_util.h"
#include "tests/daemon/hub_test_server.h"

namespace exlr8 {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::FakeHub;
using testing::MakeBlob;
using testing::TestRequest;
using testing::TestResponse;

HubOptions TestOptions(const FakeHub& hub) {
  HubOptions o;
  o.endpoint = hub.endpoint();
  o.token_from_environment = false;
  o.use_env_proxy = false;
  o.max_attempts = 3;
  o.retry_base = std::chrono::milliseconds(5);
  return o;
}

std::unique_ptr<HubClient> OpenOk(const FakeHub& hub, HubOptions o, const std::string& rev = "main") {
  auto c = HubClient::Open(std::move(o), hub.repo, rev);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? std::move(c).value() : nullptr;
}

TEST(HubClientTest, ResolvesRevisionOnceAndPinsEveryRequest) {
  FakeHub hub;
  hub.lfs_files["experts/a.safetensors"] = MakeBlob(1000, 1);
  hub.regular_files["config.json"] = "{\"x\":1}";
  auto c = OpenOk(hub, TestOptions(hub));
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->commit(), hub.commit);
  auto files = c->ListFiles();
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  auto cfg = c->FetchWholeFileToString("config.json", 1000);
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  EXPECT_EQ(*cfg, "{\"x\":1}");
  auto blob = c->FetchWholeFileToString("experts/a.safetensors", 1 << 20);
  ASSERT_TRUE(blob.ok()) << blob.status().ToString();
  EXPECT_EQ(*blob, hub.lfs_files["experts/a.safetensors"]);

  const auto reqs = hub.hub().requests();
  ASSERT_GE(reqs.size(), 4u);
  EXPECT_EQ(reqs[0].target, "/api/models/org/model/revision/main");
  int revision_calls = 0;
  for (const TestRequest& r : reqs) {
    if (r.target.find("/revision/") != std::string::npos) {
      ++revision_calls;
      continue;
    }
    EXPECT_THAT(r.target, HasSubstr(hub.commit)) << "request not pinned: " << r.target;
    EXPECT_THAT(r.target, Not(HasSubstr("/main")));
    EXPECT_THAT(r.Header("user-agent"), HasSubstr("exlr8d/0.1 (+libcurl/"));
  }
  EXPECT_EQ(revision_calls, 1);
}

// One connection to the hub for a client's requests one after another: on
// a long path each new connection costs its handshakes (TCP, and TLS on the
// real Hub) before the request, so the revision, the tree, the resolves and
// the small files reuse one.
TEST(HubClientTest, RequestsOneAfterAnotherShareOneHubConnection) {
  FakeHub hub;
  hub.lfs_files["experts/a.safetensors"] = MakeBlob(1000, 1);
  hub.regular_files["config.json"] = "{\"x\":1}";
  hub.regular_files["b.json"] = "{}";
  auto c = OpenOk(hub, TestOptions(hub));
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->ListFiles().ok());
  ASSERT_TRUE(c->ResolveFile("experts/a.safetensors").ok());
  ASSERT_TRUE(c->FetchWholeFileToString("config.json", 1000).ok());
  ASSERT_TRUE(c->FetchWholeFileToString("b.json", 1000).ok());
  EXPECT_GE(hub.hub().request_count(), 5u);
  EXPECT_EQ(hub.hub().connections(), 1) << "a new hub connection per request";
}

TEST(HubClientTest, RevisionIsPercentEncodedAsOneSegment) {
  FakeHub hub;
  hub.revision_name = "refs/pr/1";
  auto c = OpenOk(hub, TestOptions(hub), "refs/pr/1");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(hub.hub().requests().at(0).target, "/api/models/org/model/revision/refs%2Fpr%2F1");
}

TEST(HubClientTest, UnknownRepoRevisionAndFileAreNotFoundByName) {
  FakeHub hub;
  auto bad_rev = HubClient::Open(TestOptions(hub), hub.repo, "nope");
  EXPECT_EQ(bad_rev.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(bad_rev.status().message(), HasSubstr("RevisionNotFound"));
  auto bad_repo = HubClient::Open(TestOptions(hub), "org/other", "main");
  EXPECT_EQ(bad_repo.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(bad_repo.status().message(), HasSubstr("RepoNotFound"));
  auto c = OpenOk(hub, TestOptions(hub));
  ASSERT_NE(c, nullptr);
  auto missing = c->ResolveFile("missing/file.bin");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("EntryNotFound"));
  EXPECT_THAT(missing.status().message(), HasSubstr("missing/file.bin"));
}

// What a failed Open says of the hub, for a pull that may serve a rank from
// its cache instead: only no answer at all, or "not now" on every try, is an
// outage; an answer that says no is not.
TEST(HubClientTest, OpenSaysWhetherTheHubCouldBeAsked) {
  FakeHub hub;
  auto open = [&](HubOptions o, const std::string& rev = "main") {
    HubOutage outage = HubOutage::kNotNow;  // Open must set it
    auto c = HubClient::Open(std::move(o), hub.repo, rev, &outage);
    return std::make_pair(c.status(), outage);
  };
  {
    auto [status, outage] = open(TestOptions(hub));
    EXPECT_TRUE(status.ok()) << status.ToString();
    EXPECT_EQ(outage, HubOutage::kNone);
  }
  {
    auto [status, outage] = open(TestOptions(hub), "nope");
    EXPECT_EQ(status.code(), StatusCode::kNotFound);
    EXPECT_EQ(outage, HubOutage::kNone);
  }
  for (int http : {500, 502, 503, 504, 429, 408, 401, 403, 404}) {
    SCOPED_TRACE(http);
    hub.hub_override = [http](const TestRequest&) -> std::optional<TestResponse> {
      TestResponse r;
      r.status = http;
      if (http == 429) r.headers.push_back({"Retry-After", "0"});
      return r;
    };
    auto [status, outage] = open(TestOptions(hub));
    EXPECT_FALSE(status.ok());
    EXPECT_EQ(outage, http >= 500 || http == 429 ? HubOutage::kNotNow : HubOutage::kNone)
        << status.ToString();
  }
  hub.hub_override = nullptr;

  testing::RefusingPort refusing;
  testing::SilentPort silent;
  ASSERT_NE(refusing.port(), 0);
  HubOptions refused = TestOptions(hub);
  refused.endpoint = refusing.url();
  HubOptions dead_proxy = TestOptions(hub);
  dead_proxy.proxy = refusing.url();
  for (const HubOptions& o : {refused, dead_proxy}) {
    auto [status, outage] = open(o);
    EXPECT_EQ(status.code(), StatusCode::kIOError) << status.ToString();
    EXPECT_EQ(outage, HubOutage::kUnreachable) << status.ToString();
  }
  ASSERT_NE(silent.port(), 0) << "could not make a port whose connections time out";
  HubOptions timed_out = TestOptions(hub);
  timed_out.endpoint = silent.url();
  timed_out.connect_timeout = std::chrono::milliseconds(200);
  auto [status, outage] = open(timed_out);
  EXPECT_EQ(status.code(), StatusCode::kIOError) << status.ToString();
  EXPECT_THAT(status.message(), HasSubstr("Timeout"));
  EXPECT_EQ(outage, HubOutage::kUnreachable);

  // The transport failures that are no answer, and those that are.
  EXPECT_TRUE(IsNoAnswerCurlError(CURLE_COULDNT_RESOLVE_HOST, 0, 0));
  EXPECT_TRUE(IsNoAnswerCurlError(CURLE_COULDNT_RESOLVE_PROXY, 0, 0));
  EXPECT_TRUE(IsNoAnswerCurlError(CURLE_SSL_CONNECT_ERROR, 0, 0));
  EXPECT_TRUE(IsNoAnswerCurlError(CURLE_GOT_NOTHING, 0, 0));
  EXPECT_TRUE(IsNoAnswerCurlError(CURLE_RECV_ERROR, 0, 0));
  EXPECT_TRUE(IsNoAnswerCurlError(CURLE_COULDNT_CONNECT, 0, 502));      // the proxy could not reach the hub
  EXPECT_FALSE(IsNoAnswerCurlError(CURLE_COULDNT_CONNECT, 0, 407));     // the proxy refused
  EXPECT_FALSE(IsNoAnswerCurlError(CURLE_OPERATION_TIMEDOUT, 200, 0));  // an answer had begun
  EXPECT_FALSE(IsNoAnswerCurlError(CURLE_PEER_FAILED_VERIFICATION, 0, 0));
  EXPECT_FALSE(IsNoAnswerCurlError(CURLE_OUT_OF_MEMORY, 0, 0));
  EXPECT_FALSE(IsNoAnswerCurlError(CURLE_WRITE_ERROR, 0, 0));
}

// The resolve's own limits (a pull with a cached rank to fall back on) end
// with the resolve: the client's other requests get the usual tries.
TEST(HubClientTest, ResolveLimitsApplyToTheRevisionOnly) {
  FakeHub hub;
  std::atomic<int> failures_left{0};
  hub.hub_override = [&](const TestRequest&) -> std::optional<TestResponse> {
    if (failures_left.fetch_sub(1) <= 0) return std::nullopt;
    TestResponse r;
    r.status = 500;
    return r;
  };
  HubOptions o = TestOptions(hub);  // 3 attempts
  o.resolve_max_attempts = 1;
  o.resolve_connect_timeout = std::chrono::milliseconds(100);
  failures_left = 1;
  auto refused = HubClient::Open(o, hub.repo, "main");
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable) << refused.status().ToString();
  EXPECT_THAT(refused.status().message(), HasSubstr("after 1 attempts"));
  failures_left = 0;
  auto c = OpenOk(hub, o);
  ASSERT_NE(c, nullptr);
  failures_left = 2;
  auto files = c->ListFiles();
  EXPECT_TRUE(files.ok()) << files.status().ToString();
}

TEST(HubClientTest, BadRepoIdIsInvalidArgument) {
  FakeHub hub;
  EXPECT_EQ(HubClient::Open(TestOptions(hub), "../etc", "main").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(HubClient::Open(TestOptions(hub), "a/b/c", "main").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(HubClient::Open(TestOptions(hub), "a b", "main").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(hub.hub().request_count(), 0u);
}

TEST(HubClientTest, TreePagingFollowsLinkHeader) {
  FakeHub hub;
  hub.tree_page_size = 2;
  for (int i = 0; i < 5; ++i) hub.lfs_files["experts/f" + std::to_string(i) + ".bin"] = MakeBlob(100 + i, i);
  hub.regular_files["config.json"] = "{}";
  auto c = OpenOk(hub, TestOptions(hub));
  ASSERT_NE(c, nullptr);
  auto files = c->ListFiles();
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  ASSERT_EQ(files->size(), 6u);
  EXPECT_EQ(hub.CountHub("GET", "/tree/"), 3);
  for (const HubFile& f : *files) {
    if (f.path == "config.json") {
      EXPECT_EQ(f.size, 2u);
      EXPECT_TRUE(f.lfs_sha256.empty());
    } else {
      EXPECT_EQ(f.size, hub.lfs_files[f.path].size());
      EXPECT_TRUE(IsSha256Hex(f.lfs_sha256)) << f.lfs_sha256;
    }
  }
}

// A tree answer with one bad entry must be rejected naming the entry.
Status ListWithEntry(const std::string& entry, const std::string& link = "") {
  FakeHub hub;
  hub.hub_override = [&](const TestRequest& r) -> std::optional<TestResponse> {
    if (r.target.find("/tree/") == std::string::npos) return std::nullopt;
    TestResponse resp;
    resp.body = "[{\"type\":\"file\",\"oid\":\"a\",\"size\":3,\"path\":\"ok.json\"}," + entry + "]";
    if (!link.empty()) resp.headers.emplace_back("Link", link);
    return resp;
  };
  auto c = OpenOk(hub, TestOptions(hub));
  if (c == nullptr) return InternalError("open failed");
  return c->ListFiles().status();
}

TEST(HubClientTest, TreeRejectsHostileEntries) {
  struct Case {
    std::string entry;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {R"({"type":"file","oid":"a","size":3,"path":"../x"})", "../x"},
      {R"({"type":"file","oid":"a","size":3,"path":"a/../../x"})", "a/../../x"},
      {R"({"type":"file","oid":"a","size":3,"path":"/etc/passwd"})", "/etc/passwd"},
      {R"({"type":"directory","oid":"a","size":0,"path":".."})", "'..'"},
      {R"({"type":"file","oid":"a","size":3,"path":"a\u0001b"})", "control character"},
      {R"({"type":"file","oid":"a","size":3,"path":"a//b"})", "empty path segment"},
      {R"({"type":"file","oid":"a","size":3,"path":"a\\b"})", "backslash"},
      {R"({"type":"file","oid":"a","size":1125899906842625,"path":"big"})", "size"},
      {R"({"type":"file","oid":"a","size":-1,"path":"neg"})", "size"},
      {R"({"type":"file","oid":"a","path":"nosize"})", "size"},
      {R"({"type":"file","oid":"a","size":3,"path":"l","lfs":{"oid":"abc","size":3}})", "lfs.oid"},
      {R"({"type":"file","oid":"a","size":3,"path":"l","lfs":{"oid":")" + std::string(64, 'a') +
           R"(","size":4}})", "lfs.size"},
      {R"({"type":"file","oid":"a","size":3,"path":"ok.json"})", "duplicate"},
      {R"({"type":"file","size":3})", "path"},
      {R"("just a string")", "not an object"},
  };
  for (const Case& c : cases) {
    Status s = ListWithEntry(c.entry);
    EXPECT_EQ(s.code(), StatusCode::kCorruption) << c.entry << " -> " << s.ToString();
    EXPECT_THAT(s.message(), HasSubstr(c.needle)) << c.entry;
  }
  // Sanity: the same shape with good values passes.
  EXPECT_TRUE(ListWithEntry(R"({"type":"file","oid":"a","size":3,"path":"dir/x.bin"})").ok());
}

TEST(HubClientTest, TreeRejectsInvalidJsonAndForeignNextLink) {
  FakeHub hub;
  hub.hub_override = [&](const TestRequest& r) -> std::optional<TestResponse> {
    if (r.target.find("/tree/") == std::string::npos) return std::nullopt;
    TestResponse resp;
    resp.body = "[{\"type\":\"file\",\"path\":\"a\",\"path\":\"b\",\"size\":1}]";  // duplicate key
    return resp;
  };
  auto c = OpenOk(hub, TestOptions(hub));
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->ListFiles().status().code(), StatusCode::kCorruption);

  Status foreign = ListWithEntry(R"({"type":"file","oid":"a","size":3,"path":"b"})",
                                 "<http://127.0.0.2:1/api/models/org/model/tree/x?cursor=2>; rel=\"next\"");
  EXPECT_EQ(foreign.code(), StatusCode::kCorruption);
  EXPECT_THAT(foreign.message(), HasSubstr("outside the hub"));
}

TEST(HubClientTest, TokenGoesToHubButNeverToCdn) {
  FakeHub hub;
  hub.required_token = "hf_secret_token_123";
  hub.lfs_files["model.safetensors"] = MakeBlob(50'000, 3);
  HubOptions o = TestOptions(hub);
  o.token = "hf_secret_token_123";
  auto c = OpenOk(hub, o);
  ASSERT_NE(c, nullptr);
  auto data = c->FetchWholeFileToString("model.safetensors", 1 << 20);
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  EXPECT_EQ(*data, hub.lfs_files["model.safetensors"]);
  for (const TestRequest& r : hub.hub().requests()) {
    EXPECT_EQ(r.Header("authorization"), "Bearer hf_secret_token_123") << r.target;
  }
  ASSERT_GE(hub.cdn().request_count(), 1u);
  for (const TestRequest& r : hub.cdn().requests()) {
    EXPECT_FALSE(r.HasHeader("authorization")) << r.target;
    for (const auto& [k, v] : r.headers) EXPECT_THAT(v, Not(HasSubstr("hf_secret"))) << k;
  }
}

TEST(HubClientTest, RejectedTokenIsPermissionDeniedWithoutTheToken) {
  FakeHub hub;
  hub.required_token = "hf_right";
  HubOptions o = TestOptions(hub);
  o.token = "hf_wrong_value_42";
  auto c = HubClient::Open(o, hub.repo, "main");
  EXPECT_EQ(c.status().code(), StatusCode::kPermissionDenied);
  EXPECT_THAT(c.status().message(), HasSubstr("token"));
  EXPECT_THAT(c.status().message(), Not(HasSubstr("hf_wrong_value_42")));

  HubOptions anon = TestOptions(hub);
  auto a = HubClient::Open(anon, hub.repo, "main");
  EXPECT_EQ(a.status().code(), StatusCode::kPermissionDenied);
  EXPECT_THAT(a.status().message(), HasSubstr("HF_TOKEN"));
  EXPECT_THAT(a.status().message(), HasSubstr("hf auth login"));  // today's Hugging Face CLI
  for (const TestRequest& r : hub.hub().requests()) {
    if (r.Header("authorization").empty()) continue;
    EXPECT_EQ(r.Header("authorization"), "Bearer hf_wrong_value_42");
  }
}

TEST(HubClientTest, ServerErrorsAreUnavailableAfterBoundedRetries) {
  FakeHub hub;
  auto c = OpenOk(hub, TestOptions(hub));
  ASSERT_NE(c, nullptr);
  hub.hub_override = [&](const TestRequest&) -> std::optional<TestResponse> {
    TestResponse r;
    r.status = 500;
    return r;
  };
  const std::size_t before = hub.hub().request_count();
  auto files = c->ListFiles();
  EXPECT_EQ(files.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(files.status().message(), HasSubstr("3 attempts"));
  EXPECT_EQ(hub.hub().request_count() - before, 3u);
}

TEST(HubClientTest, RateLimitHonoursRetryAfter) {
  FakeHub hub;
  auto c = OpenOk(hub, TestOptions(hub));
  ASSERT_NE(c, nullptr);
  std::atomic<int> calls{0};
  hub.hub_override = [&](const TestRequest& r) -> std::optional<TestResponse> {
    if (r.target.find("/tree/") == std::string::npos || calls++ > 0) return std::nullopt;
    TestResponse resp;
    resp.status = 429;
    resp.headers.emplace_back("Retry-After", "1");
    return resp;
  };
  const auto t0 = std::chrono::steady_clock::now();
  auto files = c->ListFiles();
  const auto elapsed = std::chrono::steady_clock::now() - t0;
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  EXPECT_GE(elapsed, std::chrono::milliseconds(950));
  EXPECT_EQ(c->stats().rate_limited, 1u);
}

TEST(HubClientTest, RateLimitWaitAboveCapFailsFast) {
  FakeHub hub;
  HubOptions o = TestOptions(hub);
  o.max_throttle_wait = std::chrono::seconds(2);
  auto c = OpenOk(hub, o);
  ASSERT_NE(c, nullptr);
  hub.hub_override = [&](const TestRequest&) -> std::optional<TestResponse> {
    TestResponse resp;
    resp.status = 429;
    resp.headers.emplace_back("RateLimit", "\"api\";r=0;t=300");
    return resp;
  };
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(c->ListFiles().status().code(), StatusCode::kUnavailable);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
}

// A cancel reaches the API calls: an answer that never comes, and a wait
// the server asked for, both end within a second or so: SIGTERM must not
// wait on a revision answer that drips for minutes.
TEST(HubClientTest, CancelEndsAnApiCallAndItsRetryWait) {
  FakeHub hub;
  std::atomic<bool> cancel{false};
  HubOptions o = TestOptions(hub);
  o.cancel = &cancel;
  for (const bool slow_answer : {true, false}) {
    SCOPED_TRACE(slow_answer ? "an answer 20 s away" : "Retry-After: 200");
    cancel.store(false);
    hub.hub_override = [&](const TestRequest& r) -> std::optional<TestResponse> {
      if (r.target.find("/revision/") == std::string::npos) return std::nullopt;
      TestResponse resp;
      if (slow_answer) {
        resp.body = std::string(4'000'000, ' ') + "{}";
        resp.bytes_per_second = 100'000;  // steady: no stall to time out
      } else {
        resp.status = 429;
        resp.headers.emplace_back("Retry-After", "200");
      }
      return resp;
    };
    std::thread canceller([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(400));
      cancel.store(true);
    });
    const auto t0 = std::chrono::steady_clock::now();
    auto c = HubClient::Open(o, hub.repo, "main");
    const auto took = std::chrono::steady_clock::now() - t0;
    canceller.join();
    EXPECT_EQ(c.status().code(), StatusCode::kCancelled) << c.status().ToString();
    EXPECT_LT(took, std::chrono::seconds(4));
  }
}

// However steadily an API answer trickles, it gets api_timeout in all.
TEST(HubClientTest, AnApiAnswerHasADeadline) {
  FakeHub hub;
  HubOptions o = TestOptions(hub);
  o.max_attempts = 1;
  o.api_timeout = std::chrono::seconds(1);
  hub.hub_override = [&](const TestRequest& r) -> std::optional<TestResponse> {
    if (r.target.find("/revision/") == std::string::npos) return std::nullopt;
    TestResponse resp;
    resp.body = std::string(1'000'000, ' ') + "{}";
    resp.bytes_per_second = 50'000;  // 20 s in all, well above the stall limit
    return resp;
  };
  const auto t0 = std::chrono::steady_clock::now();
  auto c = HubClient::Open(o, hub.repo, "main");
  EXPECT_EQ(c.status().code(), StatusCode::kIOError) << c.status().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

// A JSON answer with no Content-Length that a close cuts short is retried;
// it was reported as corrupt (exit 3).
TEST(HubClientTest, AnUnsizedJsonAnswerCutShortIsRetried) {
  FakeHub hub;
  hub.lfs_files["a.bin"] = MakeBlob(1000, 1);
  auto c = OpenOk(hub, TestOptions(hub));
  ASSERT_NE(c, nullptr);
  std::atomic<int> cut{0};
  hub.hub_override = [&](const TestRequest& r) -> std::optional<TestResponse> {
    if (r.target.find("/tree/") == std::string::npos || cut++ > 0) return std::nullopt;
    TestResponse resp;
    resp.body = R"([{"type":"file","path":"a.bin","size":1000,"oid":"0123)";  // cut mid-string
    resp.no_content_length = true;
    resp.close = true;
    return resp;
  };
  auto files = c->ListFiles();
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  EXPECT_EQ(files->size(), 1u);
  EXPECT_EQ(cut.load(), 2);
  EXPECT_GE(c->stats().retries, 1u);
}

// An oversized answer (a 64 MiB tree page) is the server's fault, not exit
// 6, the code that tells an operator to free disk space.
TEST(HubClientTest, AnOversizedApiAnswerIsTheServersFault) {
  FakeHub hub;
  hub.hub_override = [&](const TestRequest& r) -> std::optional<TestResponse> {
    if (r.target.find("/tree/") == std::string::npos) return std::nullopt;
    TestResponse resp;
    resp.body = "[" + std::string(5000, ' ') + "]";
    return resp;
  };
  HubOptions o = TestOptions(hub);
  o.max_json_bytes = 4096;
  auto c = OpenOk(hub, o);
  ASSERT_NE(c, nullptr);
  Status s = c->ListFiles().status();
  EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr("file list page 0: answer larger than 4096 bytes"));
}

// libcurl (before 8.6) reports a header line over 100 kB as "Out of
// memory"; the error names the server's answer so no operator goes looking
// at the node.
TEST(HubClientTest, AnOversizedHeaderLineIsNamedAsTheServers) {
  FakeHub hub;
  hub.hub_override = [&](const TestRequest& r) -> std::optional<TestResponse> {
    if (r.target.find("/revision/") == std::string::npos) return std::nullopt;
    TestResponse resp;
    resp.headers.emplace_back("X-Junk", std::string(200'000, 'a'));
    resp.body = "{}";
    return resp;
  };
  auto c = HubClient::Open(TestOptions(hub), hub.repo, "main");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kIOError) << c.status().ToString();
  EXPECT_THAT(c.status().message(), HasSubstr("header"));
}

TEST(HubClientTest, WholeFileLimitsAndResumesByteExact) {
  FakeHub hub;
  hub.lfs_files["dense.safetensors"] = MakeBlob(300'000, 9);
  auto c = OpenOk(hub, TestOptions(hub));
  ASSERT_NE(c, nullptr);
  auto too_big = c->FetchWholeFileToString("dense.safetensors", 1000);
  EXPECT_EQ(too_big.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(hub.CountCdn("/blobs/"), 0);  // refused before any byte

  std::atomic<int> calls{0};
  std::vector<std::string> ranges;
  std::mutex mu;
  hub.cdn_override = [&](const TestRequest& r) -> std::optional<TestResponse> {
    {
      std::lock_guard<std::mutex> lock(mu);
      ranges.push_back(r.Header("range"));
    }
    if (calls++ > 0) return std::nullopt;
    TestResponse resp = testing::ServeBlobRange(hub.lfs_files["dense.safetensors"], r);
    resp.send_only = 123'457;  // then the connection drops
    return resp;
  };
  auto data = c->FetchWholeFileToString("dense.safetensors", 1 << 20);
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  EXPECT_TRUE(*data == hub.lfs_files["dense.safetensors"]);
  ASSERT_EQ(ranges.size(), 2u);
  EXPECT_EQ(ranges[0], "");
  EXPECT_EQ(ranges[1], "bytes=123457-");
}

TEST(HubClientTest, WholeFileReresolvesAfterCdn403) {
  FakeHub hub;
  hub.lfs_files["a.bin"] = MakeBlob(1000, 2);
  auto c = OpenOk(hub, TestOptions(hub));
  ASSERT_NE(c, nullptr);
  std::atomic<int> calls{0};
  hub.cdn_override = [&](const TestRequest&) -> std::optional<TestResponse> {
    if (calls++ == 0) ++hub.signature;  // the URL just handed out is now stale
    return std::nullopt;
  };
  auto data = c->FetchWholeFileToString("a.bin", 1 << 20);
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  EXPECT_EQ(*data, hub.lfs_files["a.bin"]);
  EXPECT_EQ(hub.CountHub("HEAD", "/resolve/"), 2);
}

TEST(HubClientTest, ResolveReadsRedirectWithoutFollowing) {
  FakeHub hub;
  hub.lfs_files["dir/with space+plus.bin"] = MakeBlob(10, 1);
  hub.regular_files["README.md"] = "hello";
  auto c = OpenOk(hub, TestOptions(hub));
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->ResolveUrl("dir/with space+plus.bin"),
            hub.endpoint() + "/org/model/resolve/" + hub.commit + "/dir/with%20space%2Bplus.bin");
  auto lfs = c->ResolveFile("dir/with space+plus.bin");
  ASSERT_TRUE(lfs.ok()) << lfs.status().ToString();
  EXPECT_FALSE(lfs->on_hub);
  EXPECT_THAT(lfs->url, HasSubstr(hub.cdn().host_port()));
  EXPECT_EQ(lfs->size, 10u);
  EXPECT_EQ(hub.cdn().request_count(), 0u);  // not followed
  auto reg = c->ResolveFile("README.md");
  ASSERT_TRUE(reg.ok());
  EXPECT_TRUE(reg->on_hub);
  EXPECT_EQ(reg->size, 5u);
  EXPECT_EQ(c->stats().resolves, 2u);
}

TEST(HubClientTest, RelativeRedirectIsFollowedOnTheHub) {
  FakeHub hub;
  hub.regular_files["config.json"] = "{\"a\":2}";
  hub.hub_override = [&](const TestRequest& r) -> std::optional<TestResponse> {
    if (r.target.find("/resolve/") == std::string::npos || r.target.find("renamed") != std::string::npos) {
      if (r.target.find("/renamed/") != std::string::npos) {
        TestResponse resp = testing::ServeBlobRange(hub.regular_files["config.json"], r);
        return resp;
      }
      return std::nullopt;
    }
    TestResponse resp;
    resp.status = 307;
    resp.headers.emplace_back("Location", "/api/resolve-cache/models/org/renamed/config.json");
    return resp;
  };
  auto c = OpenOk(hub, TestOptions(hub));
  ASSERT_NE(c, nullptr);
  auto data = c->FetchWholeFileToString("config.json", 100);
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  EXPECT_EQ(*data, "{\"a\":2}");
}

TEST(HubClientTest, ExplicitProxyGetsAbsoluteFormRequests) {
  // The "proxy" is a loopback server that answers as the hub would.
  FakeHub hub;
  testing::TestHttpServer proxy([&](const TestRequest& r) {
    TestResponse resp;
    resp.body = "{\"sha\":\"" + hub.commit + "\"}";
    resp.headers.emplace_back("X-Seen-Target", r.target);
    return resp;
  });
  HubOptions o = TestOptions(hub);
  o.endpoint = "http://hub.invalid";  // only reachable through the proxy
  o.proxy = proxy.base_url();
  auto c = HubClient::Open(o, "org/model", "main");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(proxy.request_count(), 1u);
  EXPECT_EQ(proxy.requests()[0].target, "http://hub.invalid/api/models/org/model/revision/main");
}

// The debug log's URLs: a signed CDN query and a URL's password would let a
// reader of the log fetch what only the node may.
TEST(HubClientTest, UrlForLogLeavesOutQueryValuesAndUserInformation) {
  EXPECT_EQ(UrlForLog("https://huggingface.co/api/models/org/m/revision/main"),
            "https://huggingface.co/api/models/org/m/revision/main");
  EXPECT_EQ(UrlForLog("https://cdn.example/org/m/abc/f.bin?Expires=1&Signature=s3cr3t&Key-Pair-Id=K"),
            "https://cdn.example/org/m/abc/f.bin?Expires=...&Signature=...&Key-Pair-Id=...");
  EXPECT_EQ(UrlForLog("http://user:pa55@mirror:8080/x?flag&y=1#frag"), "http://mirror:8080/x?flag&y=...");
  EXPECT_EQ(UrlForLog("http://user@host"), "http://host");
  EXPECT_EQ(UrlForLog("/relative?sig=1"), "/relative?sig=...");
}

TEST(HubClientTest, ProxyChoiceHonoursBothCasesAndNoProxy) {
  std::map<std::string, std::string> env;
  auto get = [&](const char* n) -> const char* {
    auto it = env.find(n);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  EXPECT_EQ(ProxyForUrl("https://huggingface.co/x", "", true, get), "");
  env["HTTPS_PROXY"] = "http://upper:1";
  EXPECT_EQ(ProxyForUrl("https://huggingface.co/x", "", true, get), "http://upper:1");
  env["https_proxy"] = "http://lower:2";
  EXPECT_EQ(ProxyForUrl("https://huggingface.co/x", "", true, get), "http://lower:2");
  env["HTTP_PROXY"] = "http://plain:3";  // libcurl alone would ignore this one
  EXPECT_EQ(ProxyForUrl("http://huggingface.co/x", "", true, get), "http://plain:3");
  EXPECT_EQ(ProxyForUrl("http://huggingface.co/x", "", false, get), "");
  EXPECT_EQ(ProxyForUrl("http://huggingface.co/x", "http://explicit:4", false, get), "http://explicit:4");
  env["NO_PROXY"] = "localhost, .hf.co,127.0.0.1";
  EXPECT_EQ(ProxyForUrl("https://cdn-lfs.hf.co/x", "", true, get), "");
  EXPECT_EQ(ProxyForUrl("https://hf.co/x", "", true, get), "");
  EXPECT_EQ(ProxyForUrl("http://127.0.0.1:8080/x", "", true, get), "");
  EXPECT_EQ(ProxyForUrl("https://nothf.co/x", "", true, get), "http://lower:2");
  env["no_proxy"] = "*";
  EXPECT_EQ(ProxyForUrl("https://huggingface.co/x", "", true, get), "");
}

TEST(HubClientTest, OfflineFromTheEnvironmentAsHuggingFaceHubReadsIt) {
  for (const char* yes : {"1", "ON", "on", "Yes", "TRUE", "true"}) {
    ::setenv("HF_HUB_OFFLINE", yes, 1);
    EXPECT_TRUE(HubOfflineFromEnvironment()) << yes;
  }
  for (const char* no : {"0", "", "off", "false", "2"}) {
    ::setenv("HF_HUB_OFFLINE", no, 1);
    EXPECT_FALSE(HubOfflineFromEnvironment()) << no;
  }
  ::unsetenv("HF_HUB_OFFLINE");
  EXPECT_FALSE(HubOfflineFromEnvironment());
}

// A connection that fails through a proxy names the proxy, not just
// "Couldn't connect to <host> port <n>". Its password stays out.
TEST(HubClientTest, AConnectionThatFailsThroughAProxySaysSo) {
  const std::string said = DescribeCurlError(CURLE_COULDNT_CONNECT, "Failed to connect", "http://u:s3cret@10.0.0.9:3128");
  EXPECT_THAT(said, HasSubstr("through the proxy http://10.0.0.9:3128"));
  EXPECT_THAT(said, Not(HasSubstr("s3cret")));
  EXPECT_THAT(DescribeCurlError(CURLE_COULDNT_CONNECT, "Failed to connect"), Not(HasSubstr("proxy")));
  FakeHub hub;
  HubOptions o = TestOptions(hub);
  o.proxy = "http://127.0.0.1:1";  // nothing listens there
  auto c = HubClient::Open(o, hub.repo, "main");
  EXPECT_EQ(c.status().code(), StatusCode::kIOError) << c.status().ToString();
  EXPECT_THAT(c.status().message(), HasSubstr("through the proxy http://127.0.0.1:1"));
  EXPECT_TRUE(hub.hub().requests().empty());
}

TEST(HubClientTest, TokenSources) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("exlr8-h6-token-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  {
    std::ofstream(dir / "token") << "  hf_from_home\n";
    std::ofstream(dir / "explicit") << "hf_from_file\n";
    std::ofstream(dir / "bad") << "hf bad token\n";
  }
  ::unsetenv("HF_TOKEN");
  ::unsetenv("HUGGING_FACE_HUB_TOKEN");
  ::unsetenv("HF_TOKEN_PATH");
  ::setenv("HF_HOME", dir.c_str(), 1);
  HubOptions o;
  EXPECT_EQ(*LoadHubToken(o), "hf_from_home");
  ::setenv("HF_TOKEN", "hf_from_env", 1);
  EXPECT_EQ(*LoadHubToken(o), "hf_from_env");
  // The file named on the command line wins over HF_TOKEN.
  o.token_file = (dir / "explicit").string();
  EXPECT_EQ(*LoadHubToken(o), "hf_from_file");
  o.token = "hf_explicit";
  EXPECT_EQ(*LoadHubToken(o), "hf_explicit");
  ::unsetenv("HF_TOKEN");
  // A directory as the token file is an error, not a read that throws and
  // aborts the process. A FIFO must not hang it either.
  HubOptions a_dir;
  a_dir.token_file = dir.string();
  auto d = LoadHubToken(a_dir);
  EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(d.status().message(), HasSubstr("not a regular file"));
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0600), 0);
  HubOptions a_fifo;
  a_fifo.token_file = (dir / "fifo").string();
  EXPECT_THAT(LoadHubToken(a_fifo).status().message(), HasSubstr("not a regular file"));
  {
    std::ofstream(dir / "large") << std::string(5000, 'h');
  }
  HubOptions large;
  large.token_file = (dir / "large").string();
  EXPECT_THAT(LoadHubToken(large).status().message(), HasSubstr("larger than 4096 bytes"));
  ::setenv("HF_HOME", dir.c_str(), 1);
  ::setenv("HF_TOKEN_PATH", dir.c_str(), 1);  // a default location that is a directory: no token there
  EXPECT_EQ(*LoadHubToken(HubOptions()), "");
  ::unsetenv("HF_TOKEN_PATH");
  HubOptions bad;
  bad.token_file = (dir / "bad").string();
  auto b = LoadHubToken(bad);
  EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(b.status().message(), Not(HasSubstr("hf bad")));
  HubOptions missing;
  missing.token_file = (dir / "nope").string();
  EXPECT_EQ(LoadHubToken(missing).status().code(), StatusCode::kInvalidArgument);
  ::setenv("HF_HOME", (dir / "empty").c_str(), 1);
  EXPECT_EQ(*LoadHubToken(HubOptions()), "");  // no file: anonymous
  ::unsetenv("HF_HOME");
  std::filesystem::remove_all(dir);
}

// ---- pure protocol helpers ----

TEST(HubProtocolTest, PercentEncodingKeepsOnlyUnreserved) {
  EXPECT_EQ(PercentEncode("refs/pr/1", false), "refs%2Fpr%2F1");
  EXPECT_EQ(PercentEncode("a b/c+d.e~_-", true), "a%20b/c%2Bd.e~_-");
  EXPECT_EQ(PercentEncode("\xc3\xa9", true), "%C3%A9");
}

TEST(HubProtocolTest, PathValidation) {
  EXPECT_TRUE(ValidateHubPath("experts/exlr8-layer-003.k3.safetensors").ok());
  EXPECT_TRUE(ValidateHubPath("a..b/.hidden").ok());
  for (const char* bad : {"", "/abs", "../x", "a/..", "a/./b", "a//b", "a/", "a\\b", "a\nb", "\x7f"}) {
    EXPECT_EQ(ValidateHubPath(bad).code(), StatusCode::kCorruption) << bad;
  }
  EXPECT_EQ(ValidateHubPath(std::string(5000, 'a')).code(), StatusCode::kCorruption);
}

TEST(HubProtocolTest, TreePageListsFilesAndRefusesWhatIsOff) {
  const std::string sha(64, 'A');
  std::unordered_set<std::string> seen;
  auto files = ParseTreePage(R"([{"type":"directory","path":"dense"},
      {"type":"file","path":"dense/a.safetensors","size":10,"oid":"b1","lfs":{"oid":")" + sha + R"(","size":10}},
      {"type":"file","path":"config.json","size":2}])",
                             "page 0", seen);
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  ASSERT_EQ(files->size(), 2u);
  EXPECT_EQ((*files)[0].path, "dense/a.safetensors");
  EXPECT_EQ((*files)[0].lfs_sha256, std::string(64, 'a'));  // lowercased
  EXPECT_EQ((*files)[0].blob_id, "b1");
  EXPECT_EQ((*files)[1].lfs_sha256, "");
  EXPECT_EQ(seen.size(), 2u);
  // The next page may not list a path again.
  auto again = ParseTreePage(R"([{"type":"file","path":"config.json","size":2}])", "page 1", seen);
  ASSERT_FALSE(again.ok());
  EXPECT_THAT(again.status().message(), HasSubstr("page 1 entry 0 ('config.json'): duplicate path"));
  struct Bad {
    const char* body;
    const char* expect;
  };
  for (const Bad& b : {Bad{"{}", "page 2: expected a JSON array"},
                       Bad{"[1]", "page 2 entry 0: not an object"},
                       Bad{R"([{"path":"x"}])", "missing \"type\""},
                       Bad{R"([{"type":"directory","path":"../x"}])", "page 2 entry 0"},
                       Bad{R"([{"type":"file","path":"x","size":-1}])", "\"size\" missing"},
                       Bad{R"([{"type":"file","path":"x","size":2000000000000000000}])", "\"size\" missing"},
                       Bad{R"([{"type":"file","path":"x","size":1,"lfs":{"oid":"12"}}])", "\"lfs.oid\""},
                       Bad{R"([{"type":"file","path":"y","size":1,"oid":7}])", "\"oid\" is not a short string"}}) {
    std::unordered_set<std::string> none;
    auto r = ParseTreePage(b.body, "page 2", none);
    ASSERT_FALSE(r.ok()) << b.body;
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << b.body;
    EXPECT_THAT(r.status().message(), HasSubstr(b.expect)) << b.body;
  }
}

TEST(HubProtocolTest, HeaderParsers) {
  EXPECT_EQ(ParseNextLink("<https://h/a?c=1>; rel=\"next\""), "https://h/a?c=1");
  EXPECT_EQ(ParseNextLink("<https://h/p>; rel=\"prev\", <https://h/n>; rel=next"), "https://h/n");
  EXPECT_EQ(ParseNextLink("<https://h/p>; rel=\"prev\""), std::nullopt);
  const auto now = std::chrono::system_clock::from_time_t(784111777);  // Sun, 06 Nov 1994 08:49:37 GMT
  EXPECT_EQ(ParseRetryAfter("7", now), std::chrono::seconds(7));
  EXPECT_EQ(ParseRetryAfter("Sun, 06 Nov 1994 08:50:07 GMT", now), std::chrono::seconds(30));
  EXPECT_EQ(ParseRetryAfter("soon", now), std::nullopt);
  // A date long past waits nothing; one centuries away (past what the
  // clock's nanoseconds hold) waits the cap.
  EXPECT_EQ(ParseRetryAfter("Sun, 06 Nov 1904 08:50:07 GMT", now), std::chrono::seconds(0));
  EXPECT_EQ(ParseRetryAfter("Sun, 06 Nov 9194 08:49:37 GMT", now), std::chrono::seconds(86400 * 365));
  EXPECT_EQ(ParseRetryAfter("99999999999", now), std::chrono::seconds(86400 * 365));
  EXPECT_EQ(ParseRateLimitReset("\"api\";r=0;t=55"), std::chrono::seconds(55));
  EXPECT_EQ(ParseRateLimitReset("\"a\";r=10;t=5, \"b\";r=0;t=40"), std::chrono::seconds(40));
  EXPECT_EQ(ParseRateLimitReset("limit=100, remaining=0, reset=9"), std::chrono::seconds(9));
  EXPECT_EQ(ParseRateLimitReset("\"api\";r=3"), std::nullopt);
  auto cr = ParseContentRange("bytes 10-19/100");
  ASSERT_TRUE(cr.has_value());
  EXPECT_EQ(cr->first, 10u);
  EXPECT_EQ(cr->last, 19u);
  EXPECT_EQ(cr->total, 100u);
  EXPECT_FALSE(ParseContentRange("bytes 19-10/100").has_value());
  EXPECT_FALSE(ParseContentRange("bytes 10-19/19").has_value());
  EXPECT_TRUE(ParseContentRange("bytes 10-19/*").has_value());
  EXPECT_FALSE(ParseContentRange("bytes 99999999999999999999-1/2").has_value());
  EXPECT_EQ(UrlOrigin("https://HuggingFace.co/a?b"), "https://huggingface.co:443");
  EXPECT_EQ(UrlOrigin("http://127.0.0.1:8080"), "http://127.0.0.1:8080");
  EXPECT_EQ(UrlOrigin("http://user@evil.com@hf.co/"), "http://hf.co:80");
  EXPECT_NE(UrlOrigin("https://huggingface.co.evil.com/"), UrlOrigin("https://huggingface.co/"));
  EXPECT_EQ(UrlOrigin("ftp://x/"), std::nullopt);
  EXPECT_EQ(ResolveLocation("http://h:1/a/b?x", "/c/d"), "http://h:1/c/d");
  EXPECT_EQ(ResolveLocation("http://h:1/a/b", "https://cdn/x?sig=1"), "https://cdn/x?sig=1");
  EXPECT_EQ(RedactUrl("https://cdn/x?X-Amz-Signature=abc"), "https://cdn/x");
}

TEST(HubProtocolTest, ErrorMappingNamesTheCase) {
  ResponseHead h;
  h.x_error_code = "EntryNotFound";
  EXPECT_EQ(HttpError(404, h, "f", false).code(), StatusCode::kNotFound);
  EXPECT_EQ(HttpError(401, ResponseHead(), "f", true).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(HttpError(403, ResponseHead(), "f", false).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(HttpError(502, ResponseHead(), "f", false).code(), StatusCode::kUnavailable);
  EXPECT_EQ(HttpError(429, ResponseHead(), "f", false).code(), StatusCode::kUnavailable);
  EXPECT_EQ(HttpError(416, ResponseHead(), "f", false).code(), StatusCode::kCorruption);  // the file is not as listed
  EXPECT_EQ(HttpError(400, ResponseHead(), "f", false).code(), StatusCode::kIOError);
}

}  // namespace
}  // namespace exlr8
