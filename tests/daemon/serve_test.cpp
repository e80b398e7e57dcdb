// `exlr8d serve` as a separate process, spoken to over its real Unix socket
// and loopback port with libcurl, while pulls run against a real cache.
#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "daemon/api/api_server.h"
#include "daemon/api/prometheus_text.h"
#include "daemon/cache/cache.h"
#include "format/json.h"
#include "tests/daemon/cache_test_util.h"
#include "tests/daemon/pull_test_util.h"
#include "tests/daemon/serve_test_util.h"

namespace exlr8 {
namespace {

using ::exlr8::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(ServeTest, ReportsTheCacheAndItsPullsOverBothListeners) {
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  ServeProcess serve(cache.path());
  ASSERT_GT(serve.port(), 0) << serve.ready_line();
  const std::string socket = (cache.path() / "exlr8d.sock").string();
  EXPECT_THAT(serve.ready_line(), HasSubstr("unix:" + socket));
  const std::string base = "http://127.0.0.1:" + std::to_string(serve.port());

  // Before any pull: healthy, nothing cached, over TCP and the socket alike.
  HttpAnswer h = Http(base + "/v1/health");
  ASSERT_EQ(h.status, 200) << h.body;
  EXPECT_EQ(Parse(h).Find("status")->as_string(), "ok");
  EXPECT_EQ(Parse(Http("http://exlr8d/v1/health", "GET", socket)).Find("cache")->as_string(),
            cache.path().string());
  HttpAnswer empty = Http("http://exlr8d/v1/filesets", "GET", socket);
  ASSERT_EQ(empty.status, 200);
  EXPECT_TRUE(Parse(empty).Find("filesets")->as_array().empty());
  EXPECT_TRUE(Parse(Http(base + "/v1/pulls")).Find("pulls")->as_array().empty());
  EXPECT_EQ(Http(base + "/v1/pulls/1").status, 404);
  const std::string rank_query = base + "/v1/ranks?repo=exlr8%2Ftest&manifest=home&tp=3";
  EXPECT_EQ(Http(rank_query + "&rank=1").status, 404);  // nothing pulled yet

  // A pull in this process (it owns the cache; the server never locks it).
  auto s = Pull(cache.path(), Options(*sim, "home", 3, 1));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const JsonValue sets = Parse(Http(base + "/v1/filesets"));
  ASSERT_EQ(sets.Find("filesets")->as_array().size(), 1u);
  const JsonValue& set = sets.Find("filesets")->as_array()[0];
  EXPECT_EQ(set.Find("repo")->as_string(), "exlr8/test");
  EXPECT_EQ(set.Find("commit")->as_string(), s->commit);
  EXPECT_EQ(*set.Find("bytes_cached")->as_uint64(), s->bytes_planned);
  EXPECT_EQ(set.Find("latest_pull")->Find("state")->as_string(), "done");
  // Whether a rank is all there, from the cache alone.
  const JsonValue rank1 = Parse(Http(rank_query + "&rank=1"));
  ASSERT_NE(rank1.Find("rank"), nullptr);
  EXPECT_TRUE(rank1.Find("rank")->Find("complete")->as_bool());
  EXPECT_EQ(*rank1.Find("rank")->Find("bytes_verified")->as_uint64(), s->bytes_planned);
  EXPECT_EQ(rank1.Find("rank")->Find("commit")->as_string(), s->commit);
  const JsonValue rank0 = Parse(Http("http://exlr8d/v1/ranks?repo=exlr8/test&manifest=home&tp=3&rank=0&revision=main",
                                     "GET", socket));
  EXPECT_FALSE(rank0.Find("rank")->Find("complete")->as_bool());
  EXPECT_TRUE(rank0.Find("rank")->Find("first_missing")->is_string());
  HttpAnswer bad_rank = Http(rank_query + "&rank=3");
  EXPECT_EQ(bad_rank.status, 400);
  EXPECT_THAT(bad_rank.body, HasSubstr("rank must be an integer in [0, 2]"));
  EXPECT_THAT(Http(rank_query).body, HasSubstr("missing rank"));
  EXPECT_THAT(Http(rank_query + "&rank=1&ranks=2").body, HasSubstr("unknown query parameter 'ranks'"));
  EXPECT_EQ(Http(rank_query + "&rank=1&tp=4").status, 400);  // tp twice
  EXPECT_EQ(Http(base + "/v1/ranks?repo=exlr8/other&manifest=home&tp=3&rank=1").status, 404);
  EXPECT_EQ(Http(rank_query + "&rank=1", "POST").status, 405);
  const JsonValue pulls = Parse(Http(base + "/v1/pulls"));
  ASSERT_EQ(pulls.Find("pulls")->as_array().size(), 1u);
  const std::uint64_t id = *pulls.Find("pulls")->as_array()[0].Find("id")->as_uint64();
  const JsonValue one = Parse(Http(base + "/v1/pulls/" + std::to_string(id)));
  EXPECT_EQ(one.Find("repo")->as_string(), "exlr8/test");
  EXPECT_EQ(*one.Find("pull")->Find("bytes_planned")->as_uint64(), s->bytes_planned);
  EXPECT_EQ(*one.Find("pull")->Find("tp")->as_uint64(), 3u);
  EXPECT_FALSE(one.Find("pull")->Find("finished")->is_null());

  // Errors: JSON with a code, and the right HTTP status.
  HttpAnswer missing = Http(base + "/v1/pulls/999");
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(Parse(missing).Find("error")->Find("code")->as_string(), "NotFound");
  EXPECT_EQ(Http(base + "/v1/pulls/-1").status, 404);
  EXPECT_EQ(Http(base + "/v1/pulls/1x").status, 404);
  EXPECT_EQ(Http(base + "/v2/anything").status, 404);
  EXPECT_EQ(Http(base + "/v1/pulls/1", "PUT").status, 405);
  EXPECT_EQ(Http(base + "/v1/filesets", "PUT").status, 405);
  // A pull another process ran cannot be cancelled here.
  HttpAnswer del = Http(base + "/v1/pulls/" + std::to_string(id), "DELETE");
  EXPECT_EQ(del.status, 409);
  EXPECT_THAT(del.body, HasSubstr("not running in this server"));

  // SIGTERM: exit 0, socket removed.
  EXPECT_EQ(serve.Stop(), 0);
  EXPECT_FALSE(fs::exists(socket));
}

// Found by review: after `truncate -s 1000` of a cached width file, GET
// /v1/ranks said "complete":true. What the files no longer hold is not
// there: complete false, the file named with what changed.
TEST(ServeTest, RanksSayARankWithATruncatedFileIsNotComplete) {
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  auto s = Pull(cache.path(), Options(*sim, "home", 3, 1));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ServeProcess serve(cache.path());
  ASSERT_GT(serve.port(), 0) << serve.ready_line();
  const std::string query = serve.base() + "/v1/ranks?repo=exlr8%2Ftest&manifest=home&tp=3&rank=1";
  ASSERT_TRUE(Parse(Http(query)).Find("rank")->Find("complete")->as_bool());

  std::string width;  // a width file the rank read from
  for (const fs::directory_entry& e : fs::directory_iterator(s->root / "experts")) {
    const std::string name = e.path().filename().string();
    if (name.find(".k") != std::string::npos && fs::file_size(e.path()) > 1000) {
      width = "experts/" + name;
      break;
    }
  }
  ASSERT_FALSE(width.empty());
  ASSERT_EQ(::truncate((s->root / width).c_str(), 1000), 0);
  const HttpAnswer after = Http(query);
  ASSERT_EQ(after.status, 200) << after.body;
  const JsonValue answer = Parse(after);
  const JsonValue* rank = answer.Find("rank");
  ASSERT_NE(rank, nullptr) << after.body;
  EXPECT_FALSE(rank->Find("complete")->as_bool()) << after.body;
  EXPECT_LT(*rank->Find("bytes_verified")->as_uint64(), s->bytes_planned);
  ASSERT_TRUE(rank->Find("first_missing")->is_string()) << after.body;
  EXPECT_THAT(rank->Find("first_missing")->as_string(),
              HasSubstr(width + " is 1000 bytes in the cache directory"));
  ASSERT_NE(rank->Find("files_changed"), nullptr) << after.body;
  EXPECT_EQ(*rank->Find("files_changed")->as_uint64(), 1u);
  EXPECT_EQ(serve.Stop(), 0);
}

// While a slow pull runs (owning the cache), the API shows it running, with
// its progress and rate, and then its end.
TEST(ServeTest, ShowsAPullWhileItRuns) {
  hubsim::FaultConfig slow;
  slow.throttle_bps = 100'000;
  auto sim = StartSim(TinyRelease(), "", slow);
  TempDir cache;
  ServeProcess serve(cache.path(), {"--no-socket", "--listen", "127.0.0.1:0"});
  ASSERT_GT(serve.port(), 0) << serve.ready_line();
  const std::string base = "http://127.0.0.1:" + std::to_string(serve.port());
  Result<PullSummary> result = InternalError("not run");
  std::string last;
  std::uint64_t rate = 0;
  const bool seen = WhilePullRuns(cache.path(), Options(*sim, "home", 4, 1), [&] {
    const HttpAnswer a = Http(base + "/v1/pulls");
    last = a.body;
    auto v = ParseJson(a.body);
    if (a.status != 200 || !v.ok() || v->Find("pulls")->as_array().empty()) return false;
    const JsonValue& p = v->Find("pulls")->as_array()[0];
    rate = *p.Find("bytes_per_second")->as_uint64();
    return p.Find("state")->as_string() == "running" && *p.Find("bytes_planned")->as_uint64() > 0 &&
           *p.Find("bytes_fetched")->as_uint64() > 0 && rate > 0 && p.Find("finished")->is_null();
  }, &result);
  EXPECT_TRUE(seen) << "never saw the pull running; last answer: " << last;
  // The server throttles each body to 100 kB/s and the pull runs at most 8
  // at once (~0.8 MB/s, a little more in bursts): far above that, the rate
  // would count bytes fetched before the pull recorded itself over only the
  // time since (it showed 45 MB/s that way).
  EXPECT_LE(rate, 2'000'000u) << last;
  EXPECT_EQ(result.status().code(), StatusCode::kCancelled);
  const JsonValue after = Parse(Http(base + "/v1/pulls"));
  EXPECT_EQ(after.Find("pulls")->as_array()[0].Find("state")->as_string(), "cancelled");
}

TEST(ServeTest, RefusesToListenBeyondThisMachineOrTwiceOnOneSocket) {
  TempDir cache;
  const std::string bin = std::string(EXLR8_BIN_DIR) + "/exlr8d serve --cache " + cache.path().string();
  EXPECT_EQ(std::system((bin + " --listen 0.0.0.0:0 2> /dev/null").c_str()) >> 8, 2);
  EXPECT_EQ(std::system((bin + " --listen 10.1.2.3:80 2> /dev/null").c_str()) >> 8, 2);
  EXPECT_EQ(std::system((bin + " --listen 127.0.0.1:99999 2> /dev/null").c_str()) >> 8, 2);
  EXPECT_EQ(std::system((bin + " --listen nonsense 2> /dev/null").c_str()) >> 8, 2);
  EXPECT_EQ(std::system((bin + " --no-socket 2> /dev/null").c_str()) >> 8, 2);  // no listener at all
  ServeProcess first(cache.path(), {});
  ASSERT_THAT(first.ready_line(), HasSubstr("listening on unix:"));
  ServeProcess second(cache.path(), {});  // the same cache: exit 7 (FailedPrecondition)
  EXPECT_THAT(second.ready_line(), ::testing::Not(HasSubstr("listening")));
  EXPECT_EQ(second.Stop(), 7);
  TempDir elsewhere;  // another cache, but the first server's socket: exit 7 too
  ServeProcess third_on_socket(elsewhere.path(), {"--socket", (cache.path() / "exlr8d.sock").string()});
  EXPECT_THAT(third_on_socket.ready_line(), ::testing::Not(HasSubstr("listening")));
  EXPECT_EQ(third_on_socket.Stop(), 7);
  EXPECT_EQ(Http("http://x/v1/health", "GET", (cache.path() / "exlr8d.sock").string()).status, 200);
  // A stale socket file (its server killed -9) is replaced.
  TempDir other;
  const fs::path stale = other.path() / "exlr8d.sock";
  {
    int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", stale.c_str());
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    ::close(fd);  // the file stays, nobody listens
  }
  ServeProcess third(other.path(), {});
  EXPECT_THAT(third.ready_line(), HasSubstr("listening on unix:" + stale.string()));
  EXPECT_EQ(Http("http://x/v1/health", "GET", stale.string()).status, 200);
}

// The server itself, in process: bounded requests, garbage, keep-alive, and
// a handler that throws, each answered without stopping the server.
TEST(ApiServerTest, BoundsGarbageAndFailingHandlers) {
  int calls = 0;
  auto server = ApiServer::Start({"", "127.0.0.1", 0, std::chrono::seconds(2)}, [&](const ApiRequest& r) {
    ++calls;
    if (r.target == "/throw") throw std::runtime_error("boom");
    return ApiResponse{200, "{\"target\":\"" + r.target + "\"}"};
  });
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const std::string base = "http://127.0.0.1:" + std::to_string((*server)->tcp_port());
  EXPECT_EQ(Http(base + "/a").body, "{\"target\":\"/a\"}");
  EXPECT_EQ(Http(base + "/throw").status, 500);
  EXPECT_EQ(Http(base + "/" + std::string(9000, 'x')).status, 431);  // header over 8 KiB
  // Not HTTP at all: a 400, then the connection closes; the server goes on.
  {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons((*server)->tcp_port());
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    const char junk[] = "\x16\x03\x01 not http at all\r\n\r\n";
    ASSERT_GT(::write(fd, junk, sizeof junk - 1), 0);
    char buf[512];
    const ssize_t n = ::read(fd, buf, sizeof buf);
    ASSERT_GT(n, 0);
    EXPECT_THAT(std::string(buf, static_cast<std::size_t>(n)), HasSubstr("400"));
    ::close(fd);
  }
  EXPECT_EQ(Http(base + "/b").status, 200);
  EXPECT_EQ(calls, 3);  // /a, /throw, /b
  EXPECT_EQ(ApiServer::Start({"", "192.168.1.1", 0}, nullptr).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ApiServer::Start({}, nullptr).status().code(), StatusCode::kInvalidArgument);
  (*server)->Stop();
  EXPECT_NE(Http(base + "/c").status, 200);
}

// A connection to 127.0.0.1:port; -1 when refused.
int ConnectLoopback(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return fd;
  if (fd >= 0) ::close(fd);
  return -1;
}

// Sends `requests` on one connection to 127.0.0.1:port and returns all the
// server answered until it closed.
std::string Exchange(std::uint16_t port, const std::string& requests) {
  const int fd = ConnectLoopback(port);
  if (fd < 0) return "";
  if (::write(fd, requests.data(), requests.size()) != static_cast<ssize_t>(requests.size())) {
    ::close(fd);
    return "";
  }
  std::string got;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) got.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  return got;
}

// Found by review: a HEAD got its answer's body too, which a client on the
// same kept-alive connection then read as the next answer; and then every
// route answered HEAD 405. A HEAD is the GET of its target, less the body.
TEST(ApiServerTest, AHeadIsAnsweredAsItsGetWithoutTheBody) {
  auto server = ApiServer::Start({"", "127.0.0.1", 0},
                                 [](const ApiRequest& r) { return ApiResponse{200, "{\"method\":\"" + r.method + "\"}"}; });
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const std::string got = Exchange((*server)->tcp_port(), "HEAD /x HTTP/1.1\r\nHost: a\r\n\r\n"
                                                          "GET /y HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
  // The HEAD's header says the length the GET's body has, and the next
  // thing on the connection is the GET's status line.
  const std::size_t head_end = got.find("\r\n\r\n");
  ASSERT_NE(head_end, std::string::npos) << got;
  EXPECT_EQ(got.compare(0, 15, "HTTP/1.1 200 OK"), 0) << got;
  EXPECT_THAT(got.substr(0, head_end), HasSubstr("Content-Length: 16"));
  EXPECT_EQ(got.compare(head_end + 4, 9, "HTTP/1.1 "), 0) << got;
  EXPECT_THAT(got.substr(head_end + 4), HasSubstr("{\"method\":\"GET\"}"));
  EXPECT_EQ(got.find("HEAD"), std::string::npos) << got;  // the handler saw a GET
}

TEST(ServeTest, EveryGetRouteAnswersHead) {
  TempDir cache;
  ServeProcess serve(cache.path(), {"--no-socket", "--listen", "127.0.0.1:0"});
  ASSERT_GT(serve.port(), 0) << serve.ready_line();
  for (const char* route : {"/v1/health", "/v1/filesets", "/v1/jobs", "/v1/pulls", "/metrics"}) {
    const std::string got = Exchange(static_cast<std::uint16_t>(serve.port()),
                                     std::string("HEAD ") + route + " HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
    EXPECT_EQ(got.compare(0, 15, "HTTP/1.1 200 OK"), 0) << route << ": " << got;
    const std::size_t end = got.find("\r\n\r\n");
    ASSERT_NE(end, std::string::npos) << route << ": " << got;
    EXPECT_EQ(end + 4, got.size()) << route << ": a body after the header: " << got;
  }
  EXPECT_EQ(serve.Stop(), 0);
}

// Found by review: connections were unbounded, so a local client could use
// up the process's descriptors (and fail the pulls).
TEST(ApiServerTest, ConnectionsAreBounded) {
  // Idle connections are held far longer than the waits below, so only the
  // one closed here makes room.
  ApiServerOptions o{"", "127.0.0.1", 0, std::chrono::seconds(60)};
  o.max_connections = 4;
  auto server = ApiServer::Start(o, [](const ApiRequest&) { return ApiResponse{200, "{}"}; });
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const std::uint16_t port = (*server)->tcp_port();
  const std::string base = "http://127.0.0.1:" + std::to_string(port);
  std::vector<int> idle;
  for (int i = 0; i < 4; ++i) idle.push_back(ConnectLoopback(port));
  ASSERT_TRUE(WaitFor([&] { return Http(base + "/x").status != 200; }, 5)) << "a fifth connection was served";
  ::close(idle.back());
  idle.pop_back();
  EXPECT_TRUE(WaitFor([&] { return Http(base + "/x").status == 200; }, 10)) << "room again after one closed";
  for (int fd : idle) ::close(fd);
}

// Found by review: out of descriptors, the accept failed again at once, in a
// loop, at 100% CPU. Now it pauses, and serves again once there is room.
TEST(ApiServerTest, OutOfDescriptorsPausesInsteadOfSpinning) {
  auto server = ApiServer::Start({"", "127.0.0.1", 0, std::chrono::seconds(5)},
                                 [](const ApiRequest&) { return ApiResponse{200, "{\"ok\":1}"}; });
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const std::uint16_t port = (*server)->tcp_port();
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &old), 0);
  int highest = 0;
  for (int fd = 0; fd < 4096; ++fd)
    if (::fcntl(fd, F_GETFD) != -1) highest = fd;
  rlimit low = old;
  low.rlim_cur = static_cast<rlim_t>(highest + 64);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  std::vector<int> filler;
  for (int fd; (fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) filler.push_back(fd);
  ASSERT_EQ(errno, EMFILE);
  // A client with descriptors of its own: its connection waits in the
  // backlog, and each accept of it fails.
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    for (int fd : filler) ::close(fd);
    const int fd = ConnectLoopback(port);
    const char req[] = "GET /x HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";
    if (fd < 0 || ::write(fd, req, sizeof req - 1) != static_cast<ssize_t>(sizeof req - 1)) ::_exit(2);
    char buf[256];
    const ssize_t n = ::read(fd, buf, sizeof buf);
    ::_exit(n > 12 && std::string_view(buf, static_cast<std::size_t>(n)).find(" 200 ") != std::string_view::npos ? 0 : 1);
  }
  auto cpu = [] {
    rusage u{};
    ::getrusage(RUSAGE_SELF, &u);
    return std::chrono::seconds(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
           std::chrono::microseconds(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
  };
  const auto before = cpu();
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  const auto spent = cpu() - before;
  for (int fd : filler) ::close(fd);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &old), 0);
  EXPECT_LT(spent, std::chrono::milliseconds(200)) << "the accept loop spun";
  int status = 0;
  ASSERT_TRUE(WaitFor([&] { return ::waitpid(child, &status, WNOHANG) == child; }, 10)) << "never served";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

TEST(PrometheusTextTest, WritesFamiliesOnceAndEscapesLabels) {
  PrometheusText m;
  m.Family("x_bytes", "gauge", "Bytes.\nTwo lines \\ here.");
  m.Family("x_bytes", "gauge", "again: ignored");
  m.Sample("x_bytes", {{"repo", "a/b"}, {"rev", "say \"hi\"\\\n"}}, std::uint64_t{18446744073709551615u});
  m.Sample("x_bytes", {}, 0.5);
  m.Sample("x_bytes", {}, 1.0 / 0.0);
  EXPECT_EQ(m.text(),
            "# HELP x_bytes Bytes.\\nTwo lines \\\\ here.\n"
            "# TYPE x_bytes gauge\n"
            "x_bytes{repo=\"a/b\",rev=\"say \\\"hi\\\"\\\\\\n\"} 18446744073709551615\n"
            "x_bytes 0.5\n"
            "x_bytes +Inf\n");
}

// Samples added family after family for each object (a fileset, a job)
// still come out grouped by family, as the format wants.
TEST(PrometheusTextTest, GroupsEachFamilysSamples) {
  PrometheusText m;
  m.Family("a", "gauge", "A.");
  m.Family("b", "counter", "B.");
  for (const char* set : {"x", "y"}) {
    m.Sample("a", {{"set", set}}, std::uint64_t{1});
    m.Sample("b", {{"set", set}}, std::uint64_t{2});
  }
  EXPECT_EQ(m.text(),
            "# HELP a A.\n# TYPE a gauge\na{set=\"x\"} 1\na{set=\"y\"} 1\n"
            "# HELP b B.\n# TYPE b counter\nb{set=\"x\"} 2\nb{set=\"y\"} 2\n");
}

}  // namespace
}  // namespace exlr8
