// `exlr8d serve` as a separate process, spoken to over its real Unix socket
// and loopback port with libcurl, while pulls run against a real cache.
#include <arpa/inet.h>
#include <curl/curl.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "daemon/api/api_server.h"
#include "daemon/api/prometheus_text.h"
#include "daemon/cache/cache.h"
#include "format/json.h"
#include "tests/daemon/cache_test_util.h"
#include "tests/daemon/connection_holder_util.h"
#include "tests/daemon/pull_test_util.h"
#include "tests/daemon/serve_test_util.h"
#include "tests/daemon/shell_util.h"

namespace exlr8 {
namespace {

using ::exlr8::testing::ConnectionHolder;
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

// After `truncate -s 1000` of a cached width file, GET /v1/ranks does not
// say "complete":true. What the files no longer hold is not there: complete
// false, the file named with what changed.
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

constexpr char kTestToken[] = "test-token-0123456789abcdef";

// A server of the test's own on 127.0.0.1 (`o` says the rest), its token
// registered for Http.
Result<std::unique_ptr<ApiServer>> StartLoopback(ApiServerOptions o, ApiHandler handler) {
  o.tcp_address = "127.0.0.1";
  o.tcp_token = kTestToken;
  auto server = ApiServer::Start(std::move(o), std::move(handler));
  if (server.ok()) ApiTokens::Set((*server)->tcp_port(), kTestToken);
  return server;
}

// The server itself, in process: bounded requests, garbage, keep-alive, and
// a handler that throws, each answered without stopping the server.
TEST(ApiServerTest, BoundsGarbageAndFailingHandlers) {
  int calls = 0;
  ApiServerOptions o;
  o.timeout = std::chrono::seconds(2);
  auto server = StartLoopback(o, [&](const ApiRequest& r) {
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
  ApiServerOptions beyond;
  beyond.tcp_address = "192.168.1.1";
  beyond.tcp_token = kTestToken;
  EXPECT_EQ(ApiServer::Start(beyond, nullptr).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ApiServer::Start({}, nullptr).status().code(), StatusCode::kInvalidArgument);
  // Never a TCP listener without a token worth the name.
  for (const char* token : {"", "short", "has a space in it, 1234"}) {
    ApiServerOptions weak;
    weak.tcp_address = "127.0.0.1";
    weak.tcp_token = token;
    EXPECT_EQ(ApiServer::Start(weak, nullptr).status().code(), StatusCode::kInvalidArgument) << token;
  }
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

// What the server answers on `fd` after `requests` until it closes (or
// nothing more comes for 10 s); closes `fd`. A server that answers and
// closes before the requests are all sent (a 503 of a connection over a
// bound) may fail the send: what it answered is still read, and the send
// raises no SIGPIPE, which would kill the test process without a word.
std::string SendAndReadAll(int fd, const std::string& requests) {
  if (fd < 0) return "";
  (void)::send(fd, requests.data(), requests.size(), MSG_NOSIGNAL);
  std::string got;
  char buf[4096];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 10'000) != 1) break;
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    got.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return got;
}

// Sends `requests` on one connection to 127.0.0.1:port and returns all the
// server answered until it closed.
std::string Exchange(std::uint16_t port, const std::string& requests) {
  return SendAndReadAll(ConnectLoopback(port), requests);
}

// A HEAD is the GET of its target, less the body: a body would be read as
// the next answer by a client on the same kept-alive connection, and no
// route that takes GET may answer HEAD with 405.
TEST(ApiServerTest, AHeadIsAnsweredAsItsGetWithoutTheBody) {
  auto server = StartLoopback({}, [](const ApiRequest& r) {
    return ApiResponse{200, "{\"method\":\"" + r.method + "\"}"};
  });
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const std::string h = std::string("Host: 127.0.0.1\r\nAuthorization: Bearer ") + kTestToken + "\r\n";
  const std::string got = Exchange((*server)->tcp_port(), "HEAD /x HTTP/1.1\r\n" + h +
                                                              "\r\n"
                                                              "GET /y HTTP/1.1\r\n" +
                                                              h + "Connection: close\r\n\r\n");
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
    const std::string got =
        Exchange(static_cast<std::uint16_t>(serve.port()),
                 std::string("HEAD ") + route + " HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer " +
                     serve.token() + "\r\nConnection: close\r\n\r\n");
    EXPECT_EQ(got.compare(0, 15, "HTTP/1.1 200 OK"), 0) << route << ": " << got;
    const std::size_t end = got.find("\r\n\r\n");
    ASSERT_NE(end, std::string::npos) << route << ": " << got;
    EXPECT_EQ(end + 4, got.size()) << route << ": a body after the header: " << got;
  }
  EXPECT_EQ(serve.Stop(), 0);
}

// Connections are bounded, so no local client can use up the process's
// descriptors (and fail the pulls).
TEST(ApiServerTest, ConnectionsAreBounded) {
  // Idle connections are held far longer than the waits below, so only the
  // one closed here makes room.
  ApiServerOptions o;
  o.header_timeout = o.idle_timeout = o.timeout = std::chrono::seconds(60);
  o.max_connections = 4;
  o.reserved_connections = 1;
  auto server = StartLoopback(o, [](const ApiRequest&) { return ApiResponse{200, "{}"}; });
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

// Out of descriptors, a failed accept would fail again at once, in a loop,
// at 100% CPU: it pauses, and serves again once there is room.
TEST(ApiServerTest, OutOfDescriptorsPausesInsteadOfSpinning) {
  ApiServerOptions o;
  o.timeout = std::chrono::seconds(5);
  auto server = StartLoopback(o, [](const ApiRequest&) { return ApiResponse{200, "{\"ok\":1}"}; });
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
  // backlog, and each accept of it fails. (Only system calls after fork; it
  // ends within 20 s whatever happens.)
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::alarm(20);
    for (int fd : filler) ::close(fd);
    const int fd = ConnectLoopback(port);
    const char req[] =
        "GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer test-token-0123456789abcdef\r\n"
        "Connection: close\r\n\r\n";
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
  const bool ended = WaitFor([&] { return ::waitpid(child, &status, WNOHANG) == child; }, 10);
  if (!ended) {
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
  }
  ASSERT_TRUE(ended) << "never served";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

// --- Who may use the API ---

// The status of the first answer in `got` ("HTTP/1.1 403 ..."); 0 for none.
int StatusOf(const std::string& got) {
  if (got.size() < 12 || got.compare(0, 5, "HTTP/") != 0) return 0;
  return std::atoi(got.c_str() + 9);
}

// A request closing its connection: `head` is its header lines ("Name: v\r\n").
std::string Request(const std::string& method, const std::string& target, const std::string& head,
                    const std::string& body = "") {
  return method + " " + target + " HTTP/1.1\r\n" + head +
         (body.empty() ? "" : "Content-Length: " + std::to_string(body.size()) + "\r\n") +
         "Connection: close\r\n\r\n" + body;
}

// A connection to the Unix socket at `path` (-1 when refused).
int ConnectUnix(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof a.sun_path, "%s", path.c_str());
  if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return fd;
  if (fd >= 0) ::close(fd);
  return -1;
}

// Sends `requests` on one connection to the Unix socket at `path`, returns
// all it answered until it closed.
std::string ExchangeUnix(const std::string& path, const std::string& requests) {
  return SendAndReadAll(ConnectUnix(path), requests);
}

// The HTTP status curl gets running as `uid` (no groups): "401", "000" when
// it could not connect.
std::string CurlAs(uid_t uid, const std::string& curl_args) {
  const std::string id = std::to_string(uid);
  return Shell("setpriv --reuid=" + id + " --regid=" + id +
               " --clear-groups curl -s -o /dev/null -w '%{http_code}' "
               "--noproxy '*' -m 10 " +
               curl_args)
      .out;
}

bool CanRunAsOtherUsers(std::string* why) {
  if (::geteuid() != 0) {
    *why = "needs root, to run clients as other users";
    return false;
  }
  if (Shell("command -v setpriv && command -v curl").status != 0) {
    *why = "needs setpriv (util-linux) and curl";
    return false;
  }
  return true;
}

// With --listen, another local user must not evict root's fileset, cancel a
// job or start an exlr8d-stage running as root over 127.0.0.1. Every
// request over TCP but GET /v1/health needs the bearer token, which only the
// server's user can read.
TEST(ServeAccessTest, AnotherUserChangesAndReadsNothingOverTcpWithoutTheToken) {
  std::string why;
  if (!CanRunAsOtherUsers(&why)) GTEST_SKIP() << why;
  hubsim::FaultConfig slow;
  slow.throttle_bps = 20'000;  // root's job runs all through the test
  auto sim = StartSim(TinyRelease(), "", slow);
  TempDir cache;
  ServeProcess serve(cache.path(), {"--endpoint", sim->hub_url(), "--listen", "127.0.0.1:0", "--stage-binary",
                                    "/bin/false"});
  ASSERT_GT(serve.port(), 0) << serve.ready_line();
  ASSERT_FALSE(serve.token().empty()) << serve.ready_line();
  const std::string socket = (cache.path() / "exlr8d.sock").string();
  const std::string pull = R"({"repo":"exlr8/test","manifest":"home","tp":4,"rank":1})";
  ASSERT_EQ(Http("http://exlr8d/v1/pulls", "POST", socket, pull).status, 202);
  auto url = [&](const std::string& path) { return Quote(serve.base() + path); };
  const std::string json = "-H 'Content-Type: application/json' ";
  // nobody, as the report did it: changes...
  EXPECT_EQ(CurlAs(65534, "-X DELETE " + url("/v1/jobs/1")), "401");
  EXPECT_EQ(CurlAs(65534, "-X POST " + json + "-d '{\"repo\":\"exlr8/test\"}' " + url("/v1/evict")), "401");
  EXPECT_EQ(CurlAs(65534, "-X POST " + json + "-d " + Quote(pull) + " " + url("/v1/stages")), "401");
  EXPECT_EQ(CurlAs(65534, "-X POST " + json + "-d " + Quote(pull) + " " + url("/v1/pulls")), "401");
  // ...with a guessed token...
  EXPECT_EQ(
      CurlAs(65534, "-H 'Authorization: Bearer " + std::string(64, '0') + "' -X DELETE " + url("/v1/jobs/1")),
      "401");
  // ...and reads: repo names, lease sockets, endpoints.
  for (const char* route : {"/v1/jobs", "/v1/jobs/1", "/v1/filesets", "/v1/pulls", "/v1/stages", "/metrics"})
    EXPECT_EQ(CurlAs(65534, url(route)), "401") << route;
  EXPECT_EQ(CurlAs(65534, url("/v1/health")), "200");  // liveness only
  // Nothing changed: root's job runs on, alone; no holder was started.
  const JsonValue jobs = Parse(Http("http://exlr8d/v1/jobs", "GET", socket));
  ASSERT_EQ(jobs.Find("jobs")->as_array().size(), 1u) << jobs.Find("jobs")->as_array().size();
  const JsonValue& job = jobs.Find("jobs")->as_array()[0];
  EXPECT_NE(job.Find("state")->as_string(), "cancelled");
  EXPECT_EQ(job.Find("cancel_requested"), nullptr);
  EXPECT_TRUE(Parse(Http("http://exlr8d/v1/stages", "GET", socket)).Find("stages")->as_array().empty());
  // The token's owner does what nobody could.
  EXPECT_EQ(Http(serve.base() + "/v1/jobs/1", "DELETE").status, 202);
}

// What an HTML form sends (text/plain, a foreign Origin) must not be
// queued, and a page of attacker.example resolving to 127.0.0.1 (DNS
// rebinding) must read no route. Each is refused with problem details
// naming what was refused, before the token is even looked at.
TEST(ServeAccessTest, RefusesCrossSiteRequestsAndForeignHosts) {
  TempDir cache;
  ServeProcess serve(cache.path(), {"--listen", "127.0.0.1:0", "--allow-host", "node7.example",
                                    "--allow-host", "Api.Node7.example", "--stage-binary", "/bin/false"});
  ASSERT_GT(serve.port(), 0) << serve.ready_line();
  const auto port = static_cast<std::uint16_t>(serve.port());
  const std::string p = std::to_string(port);
  const std::string socket = (cache.path() / "exlr8d.sock").string();
  const std::string host = "Host: 127.0.0.1:" + p + "\r\n";
  const std::string auth = "Authorization: Bearer " + serve.token() + "\r\n";
  const std::string evict = R"({"repo":"exlr8/test"})";

  // Exactly what a form on http://evil.example can send.
  std::string got =
      Exchange(port, Request("POST", "/v1/evict",
                             host + "Origin: http://evil.example\r\nContent-Type: text/plain\r\n", evict));
  EXPECT_EQ(StatusOf(got), 403) << got;
  EXPECT_THAT(got, HasSubstr("Origin 'http://evil.example' is not allowed"));
  // Its body type is refused too, even with the token.
  got = Exchange(port, Request("POST", "/v1/evict", host + auth + "Content-Type: text/plain\r\n", evict));
  EXPECT_EQ(StatusOf(got), 415) << got;
  EXPECT_THAT(got, HasSubstr("Content-Type 'text/plain' is not accepted"));
  got = Exchange(port, Request("POST", "/v1/evict",
                               host + auth + "Content-Type: application/x-www-form-urlencoded\r\n", evict));
  EXPECT_EQ(StatusOf(got), 415) << got;
  got = Exchange(port, Request("POST", "/v1/evict", host + auth, evict));
  EXPECT_EQ(StatusOf(got), 415) << got;
  EXPECT_THAT(got, HasSubstr("a body without Content-Type"));
  // The refusal is problem details, with the old "error" member too.
  {
    HttpOptions o;
    o.headers = {"Origin: http://evil.example", "Content-Type: text/plain"};
    const HttpAnswer a = Http(serve.base() + "/v1/evict", "POST", "", evict, o);
    EXPECT_EQ(a.status, 403);
    EXPECT_EQ(a.content_type, "application/problem+json");
    const JsonValue v = Parse(a);
    ASSERT_TRUE(v.is_object() && v.Find("type") && v.Find("title") && v.Find("status") && v.Find("detail") &&
                v.Find("error"))
        << a.body;
    EXPECT_EQ(v.Find("type")->as_string(), "about:blank");
    EXPECT_EQ(v.Find("title")->as_string(), "Forbidden");
    EXPECT_EQ(*v.Find("status")->as_uint64(), 403u);
    EXPECT_THAT(v.Find("detail")->as_string(), HasSubstr("Origin"));
    EXPECT_EQ(v.Find("error")->Find("code")->as_string(), "PermissionDenied");
    EXPECT_EQ(v.Find("error")->Find("message")->as_string(), v.Find("detail")->as_string());
  }

  // DNS rebinding: every route, token or not.
  for (const char* route :
       {"/v1/health", "/v1/filesets", "/v1/jobs", "/v1/pulls", "/v1/stages", "/metrics"}) {
    got = Exchange(port, Request("GET", route, "Host: attacker.example:" + p + "\r\n" + auth));
    EXPECT_EQ(StatusOf(got), 403) << route << ": " << got;
    EXPECT_THAT(got, HasSubstr("Host 'attacker.example:" + p + "' is not allowed")) << route;
  }
  for (const std::string& bad :
       std::vector<std::string>{"node7.example.attacker.example", "127.0.0.1.nip.io:" + p, "10.0.0.1",
                                "[::2]:" + p, "localhost:" + p + ":1", "[::1", ""}) {
    got = Exchange(port, Request("GET", "/v1/health", "Host: " + bad + "\r\n"));
    EXPECT_EQ(StatusOf(got), 403) << bad << ": " << got;
  }
  for (const std::string& good : std::vector<std::string>{
           "127.0.0.1:" + p, "127.0.0.1", "127.8.9.10:" + p, "localhost:" + p, "LocalHost", "[::1]:" + p,
           "[::1]", "node7.example:" + p, "NODE7.example", "api.node7.example"}) {
    got = Exchange(port, Request("GET", "/v1/health", "Host: " + good + "\r\n"));
    EXPECT_EQ(StatusOf(got), 200) << good << ": " << got;
  }
  // HTTP/1.1 needs a Host; HTTP/1.0 may go without.
  got = Exchange(port, "GET /v1/health HTTP/1.1\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(StatusOf(got), 400) << got;
  EXPECT_THAT(got, HasSubstr("no Host header"));
  got = Exchange(
      port,
      "GET /v1/health HTTP/1.1\r\nHost: localhost\r\nHost: attacker.example\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(StatusOf(got), 400) << got;
  EXPECT_EQ(StatusOf(Exchange(port, "GET /v1/health HTTP/1.0\r\n\r\n")), 200);

  // Origin: the listener's own only.
  for (const std::string& own :
       std::vector<std::string>{"http://127.0.0.1:" + p, "http://localhost:" + p, "http://[::1]:" + p}) {
    got = Exchange(port, Request("GET", "/v1/jobs", host + auth + "Origin: " + own + "\r\n"));
    EXPECT_EQ(StatusOf(got), 200) << own << ": " << got;
  }
  for (const std::string& foreign :
       std::vector<std::string>{"http://127.0.0.1:1", "https://127.0.0.1:" + p, "http://127.0.0.1", "null",
                                "http://evil.example:" + p, "http://localhost:" + p + "/x"}) {
    got = Exchange(port, Request("GET", "/v1/jobs", host + auth + "Origin: " + foreign + "\r\n"));
    EXPECT_EQ(StatusOf(got), 403) << foreign << ": " << got;
  }
  // A preflight gets no CORS grant.
  got = Exchange(port, Request("OPTIONS", "/v1/evict",
                               host + "Origin: http://evil.example\r\n"
                                      "Access-Control-Request-Method: POST\r\n"));
  EXPECT_EQ(StatusOf(got), 403) << got;
  EXPECT_THAT(got, Not(HasSubstr("Access-Control-Allow")));
  // Fetch metadata: a request a page of another site made.
  got = Exchange(port, Request("GET", "/v1/jobs", host + auth + "Sec-Fetch-Site: cross-site\r\n"));
  EXPECT_EQ(StatusOf(got), 403) << got;
  got = Exchange(port, Request("GET", "/v1/jobs", host + auth + "Sec-Fetch-Site: same-site\r\n"));
  EXPECT_EQ(StatusOf(got), 403) << got;
  got = Exchange(port, Request("GET", "/v1/jobs", host + auth + "Sec-Fetch-Site: none\r\n"));
  EXPECT_EQ(StatusOf(got), 200) << got;

  // The socket: no page may reach it either (a proxy passing a browser's
  // request on), but curl's default body type still works there.
  got = ExchangeUnix(socket, Request("POST", "/v1/evict",
                                     "Host: localhost\r\nOrigin: http://evil.example\r\n"
                                     "Content-Type: application/json\r\n",
                                     evict));
  EXPECT_EQ(StatusOf(got), 403) << got;
  got = ExchangeUnix(socket, Request("POST", "/v1/evict", "Host: x\r\nContent-Type: text/plain\r\n", evict));
  EXPECT_EQ(StatusOf(got), 415) << got;
  HttpOptions form;
  form.headers = {"Content-Type: application/x-www-form-urlencoded"};
  EXPECT_EQ(Http("http://exlr8d/v1/evict", "POST", socket, evict, form).status, 202);
  got = ExchangeUnix(socket, Request("POST", "/v1/evict", "Host: x\r\n", evict));
  EXPECT_EQ(StatusOf(got), 202) << got;
  // With everything right, over TCP too.
  got = Exchange(port, Request("POST", "/v1/evict",
                               host + auth + "Content-Type: application/json; charset=utf-8\r\n", evict));
  EXPECT_EQ(StatusOf(got), 202) << got;
  EXPECT_EQ(serve.Stop(), 0);
}

// The token: made at the first start (0600, 32 random bytes in hex) and
// kept; or the operator's file, refused when others may read it. Only
// GET/HEAD /v1/health goes without it over TCP; the socket never needs it.
TEST(ServeAccessTest, TheTcpListenerNeedsTheTokenOfItsFile) {
  TempDir cache;
  const fs::path made = cache.path() / "exlr8d.api-token";
  std::string first;
  {
    ServeProcess serve(cache.path(), {"--listen", "127.0.0.1:0"});
    ASSERT_GT(serve.port(), 0) << serve.ready_line();
    EXPECT_THAT(serve.ready_line(), HasSubstr("; API token in " + made.string() + ")"));
    EXPECT_EQ(serve.token_file(), made.string());
    struct stat st {};
    ASSERT_EQ(::lstat(made.c_str(), &st), 0);
    EXPECT_TRUE(S_ISREG(st.st_mode));
    EXPECT_EQ(st.st_mode & 07777, 0600u);
    first = serve.token();
    EXPECT_EQ(first.size(), 64u);
    EXPECT_EQ(first.find_first_not_of("0123456789abcdef"), std::string::npos) << first;
    EXPECT_EQ(st.st_size, 65);  // and a newline

    HttpOptions none;
    none.token = false;
    HttpAnswer a = Http(serve.base() + "/v1/jobs", "GET", "", "", none);
    EXPECT_EQ(a.status, 401) << a.body;
    EXPECT_THAT(a.headers["www-authenticate"], HasSubstr("Bearer"));
    EXPECT_THAT(a.body, HasSubstr("Authorization: Bearer TOKEN"));
    HttpOptions wrong;
    wrong.token = false;
    wrong.headers = {"Authorization: Bearer " + first.substr(0, 63) + "0"};
    if (first.back() == '0') wrong.headers = {"Authorization: Bearer " + first.substr(0, 63) + "1"};
    a = Http(serve.base() + "/v1/jobs", "GET", "", "", wrong);
    EXPECT_EQ(a.status, 401);
    EXPECT_THAT(a.body, HasSubstr("not this server's"));
    wrong.headers = {"Authorization: Bearer " + first + "0"};  // longer
    EXPECT_EQ(Http(serve.base() + "/v1/jobs", "GET", "", "", wrong).status, 401);
    wrong.headers = {"Authorization: Basic " + first};
    EXPECT_EQ(Http(serve.base() + "/v1/jobs", "GET", "", "", wrong).status, 401);
    HttpOptions lower;
    lower.token = false;
    lower.headers = {"Authorization: bearer   " + first};
    EXPECT_EQ(Http(serve.base() + "/v1/jobs", "GET", "", "", lower).status, 200);
    EXPECT_EQ(Http(serve.base() + "/metrics", "GET", "", "", none).status, 401);
    EXPECT_EQ(Http(serve.base() + "/metrics").status, 200);
    EXPECT_EQ(Http(serve.base() + "/v1/health", "GET", "", "", none).status, 200);
    EXPECT_EQ(Http(serve.base() + "/v1/health", "HEAD", "", "", none).status, 200);
    EXPECT_EQ(Http(serve.base() + "/v1/health", "POST", "", "{}", none).status, 401);
    EXPECT_EQ(Http(serve.base() + "/v1/health?x=1", "GET", "", "", none).status, 200);
    EXPECT_EQ(Http(serve.base() + "/v1/healthz", "GET", "", "", none).status, 401);
    EXPECT_EQ(Http("http://x/v1/jobs", "GET", (cache.path() / "exlr8d.sock").string()).status, 200);
    EXPECT_EQ(serve.Stop(), 0);
  }
  {
    ServeProcess again(cache.path(), {"--no-socket", "--listen", "127.0.0.1:0"});
    ASSERT_GT(again.port(), 0) << again.ready_line();
    EXPECT_EQ(again.token(), first);  // kept, never made anew
  }

  // The operator's file.
  TempDir files;
  auto write = [&](const std::string& name, const std::string& text, mode_t mode) {
    const fs::path path = files.path() / name;
    std::ofstream(path) << text;
    ::chmod(path.c_str(), mode);
    return path.string();
  };
  auto run = [&](const std::string& file, const std::string& more = "") {
    return Shell("timeout 20 " + Exlr8d() + " serve --cache " + Quote(files.path().string()) +
                 " --no-socket --listen 127.0.0.1:0 --api-token-file " + Quote(file) + more);
  };
  const std::string open_file = write("open", "operator-token-0123456789\n", 0644);
  ShellRun r = run(open_file);
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("API token file " + open_file +
                               " has mode 0644: group and others must have no access"));
  r = run(write("group", "operator-token-0123456789\n", 0640));
  EXPECT_EQ(r.status, 2) << r.out;
  r = run(files.path().string());
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("is not a regular file"));
  r = run(write("empty", "", 0600));
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("is empty"));
  r = run(write("short", "abc\n", 0600));
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("too short"));
  r = run(write("two", "operator-token-0123456789 second\n", 0600));
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("not printable ASCII"));
  r = run((files.path() / "missing").string());
  EXPECT_EQ(r.status, 3) << r.out;
  EXPECT_THAT(r.out, HasSubstr("missing"));
  r = Shell("timeout 20 " + Exlr8d() + " serve --cache " + Quote(files.path().string()) +
            " --api-token-file " + Quote(open_file));
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("--api-token-file is for --listen"));
  const std::string good = write("good", "operator-token-0123456789\r\n", 0400);
  TempDir other;
  ServeProcess serve(other.path(), {"--no-socket", "--listen", "127.0.0.1:0", "--api-token-file", good});
  ASSERT_GT(serve.port(), 0) << serve.ready_line();
  EXPECT_EQ(serve.token_file(), good);
  HttpOptions o;
  o.token = false;
  o.headers = {"Authorization: Bearer operator-token-0123456789"};
  EXPECT_EQ(Http(serve.base() + "/v1/jobs", "GET", "", "", o).status, 200);
  EXPECT_FALSE(fs::exists(other.path() / "exlr8d.api-token"));  // none made beside the operator's
}

// Idle TCP connections of one unprivileged user (300, more than the 256
// slots) must not lock out requests on the Unix socket. Each listener has
// its own slots, and a user its own share of them.
TEST(ServeAccessTest, IdleConnectionsOfOneUserLockNobodyOut) {
  std::string why;
  if (!CanRunAsOtherUsers(&why)) GTEST_SKIP() << why;
  TempDir cache;
  ServeProcess serve(cache.path(), {"--listen", "127.0.0.1:0"});
  ASSERT_GT(serve.port(), 0) << serve.ready_line();
  ConnectionHolder holder({"--uid", "65534", "--tcp", std::to_string(serve.port()), "hold", "300"});
  const int held = holder.Report();
  ASSERT_GE(held, 0) << holder.why();
  EXPECT_EQ(held, 32) << "one user's share of the TCP listener (ApiServerOptions::max_connections_per_peer)";
  const std::string socket = (cache.path() / "exlr8d.sock").string();
  const auto start = std::chrono::steady_clock::now();
  int served = 0;
  for (int i = 0; i < 25; ++i) served += Http("http://x/v1/health", "GET", socket).status == 200 ? 1 : 0;
  EXPECT_EQ(served, 25);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  // The TCP listener still serves root, and another user.
  EXPECT_EQ(Http(serve.base() + "/v1/jobs").status, 200);
  EXPECT_EQ(CurlAs(65533, "-H " + Quote("Authorization: Bearer " + serve.token()) + " " +
                              Quote(serve.base() + "/v1/jobs")),
            "200");
}

// The bounds of one listener in process: per peer (the uid SO_PEERCRED
// names), a reserve for root and the server's own user, and the socket's
// slots apart from the TCP port's. A connection turned away is told why.
TEST(ApiServerTest, ConnectionsAreBoundedPerListenerAndPerUser) {
  std::string why;
  if (!CanRunAsOtherUsers(&why)) GTEST_SKIP() << why;
  TempDir dir;
  ASSERT_EQ(::chmod(dir.path().c_str(), 0711), 0);  // others may reach the socket: its mode decides
  ApiServerOptions o;
  o.unix_socket = (dir.path() / "api.sock").string();
  o.max_connections = 8;
  o.max_connections_per_peer = 3;
  o.reserved_connections = 2;
  o.header_timeout = o.idle_timeout = std::chrono::seconds(60);
  auto server = StartLoopback(o, [](const ApiRequest&) { return ApiResponse{200, "{}"}; });
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const std::string path = o.unix_socket;
  // Each holds its connections (gid 0 among its groups) until destroyed.
  auto hold = [&path](uid_t uid, int count) {
    return std::make_unique<ConnectionHolder>(std::vector<std::string>{
        "--uid", std::to_string(uid), "--root-group", "--unix", path, "hold", std::to_string(count)});
  };
  const auto a = hold(65534, 5);
  EXPECT_EQ(a->Report(), 3) << "uid 65534: its 3 " << a->why();
  const auto b = hold(65533, 5);
  EXPECT_EQ(b->Report(), 3) << "uid 65533: its 3 " << b->why();
  const auto c = hold(65532, 2);
  EXPECT_EQ(c->Report(), 0) << "uid 65532: 6 of 8 are open, the last 2 are root's " << c->why();
  // Root takes the reserve...
  std::vector<int> mine = {ConnectUnix(path), ConnectUnix(path)};
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  for (int fd : mine) {
    pollfd p{fd, POLLIN, 0};
    EXPECT_GE(fd, 0) << "root could not connect";
    EXPECT_EQ(::poll(&p, 1, 0), 0) << "root's connection was closed";
  }
  // ...and then the listener is full, and says so.
  const std::string got = ExchangeUnix(path, Request("GET", "/x", "Host: x\r\n"));
  EXPECT_EQ(StatusOf(got), 503) << got;
  EXPECT_THAT(got, HasSubstr("all 8 connections of this listener are in use"));
  // The TCP listener has slots of its own.
  EXPECT_EQ(Http("http://127.0.0.1:" + std::to_string((*server)->tcp_port()) + "/x").status, 200);
  for (int fd : mine)
    if (fd >= 0) ::close(fd);
}

// Seconds until the server closes `fd` (reads and drops what it answers),
// sending `trickle` one byte every 200 ms meanwhile; -1 after 20 s.
double SecondsUntilClosed(int fd, const std::string& trickle = "") {
  const auto start = std::chrono::steady_clock::now();
  std::size_t sent = 0;
  for (;;) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (elapsed > 20) return -1;
    if (sent < trickle.size() && ::send(fd, &trickle[sent], 1, MSG_NOSIGNAL) == 1) ++sent;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 200) == 1) {
      char buf[512];
      if (::read(fd, buf, sizeof buf) <= 0) return elapsed;
    }
  }
}

// A header sent a byte at a time (slowloris) is cut off at header_timeout
// however steadily it comes; a kept-alive connection waits idle_timeout for
// its next request; neither is the per-read timeout.
TEST(ApiServerTest, AHeaderAndAnIdleConnectionHaveDeadlinesOfTheirOwn) {
  ApiServerOptions o;
  o.header_timeout = std::chrono::seconds(1);
  o.idle_timeout = std::chrono::seconds(3);
  o.timeout = std::chrono::seconds(30);
  auto server = StartLoopback(o, [](const ApiRequest&) { return ApiResponse{200, "{}"}; });
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const std::uint16_t port = (*server)->tcp_port();
  int fd = ConnectLoopback(port);
  const double slow =
      SecondsUntilClosed(fd, "GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + std::string(200, 'a'));
  ::close(fd);
  EXPECT_GE(slow, 0.8);
  EXPECT_LE(slow, 2.5) << "the header's deadline did not hold";
  // Kept alive after an answer: closed once idle for idle_timeout.
  fd = ConnectLoopback(port);
  const std::string request =
      std::string("GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ") + kTestToken + "\r\n\r\n";
  ASSERT_EQ(::write(fd, request.data(), request.size()), static_cast<ssize_t>(request.size()));
  const double idle = SecondsUntilClosed(fd);
  ::close(fd);
  EXPECT_GE(idle, 2.5);
  EXPECT_LE(idle, 4.5);
}

// On a cache it may not write, serve says so, not "another exlr8d serve
// runs on this cache".
TEST(ServeAccessTest, ACacheItCannotWriteIsNamedAsSuch) {
  std::string why;
  if (!CanRunAsOtherUsers(&why)) GTEST_SKIP() << why;
  TempDir cache;
  ASSERT_EQ(::chmod(cache.path().c_str(), 0755), 0);  // root's, readable by all
  const ShellRun r = Shell("setpriv --reuid=65534 --regid=65534 --clear-groups timeout 20 " + Exlr8d() +
                           " serve --cache " + Quote(cache.path().string()));
  EXPECT_EQ(r.status, 5) << r.out;
  EXPECT_THAT(r.out, HasSubstr("open lock file " + (cache.path() / "exlr8d.serve.lock").string() +
                               ": Permission denied"));
  EXPECT_THAT(r.out, HasSubstr("must be writable"));
  EXPECT_THAT(r.out, Not(HasSubstr("another exlr8d serve")));
}

// 405 says in Allow what the route takes; 202 says in Location where the
// job or holder it started is followed.
TEST(ServeTest, AnswersSayWhatIsAllowedAndWhereToFollow) {
  TempDir cache;
  ServeProcess serve(cache.path(), {"--stage-binary", "/bin/false"});
  ASSERT_THAT(serve.ready_line(), HasSubstr("listening on unix:"));
  const std::string socket = (cache.path() / "exlr8d.sock").string();
  const std::pair<const char*, const char*> routes[] = {{"/v1/health", "GET, HEAD"},
                                                        {"/v1/filesets", "GET, HEAD"},
                                                        {"/v1/ranks", "GET, HEAD"},
                                                        {"/v1/pulls", "GET, HEAD, POST"},
                                                        {"/v1/pulls/1", "GET, HEAD, DELETE"},
                                                        {"/v1/jobs", "GET, HEAD"},
                                                        {"/v1/jobs/1", "GET, HEAD, DELETE"},
                                                        {"/v1/verify", "POST"},
                                                        {"/v1/evict", "POST"},
                                                        {"/v1/stages", "GET, HEAD, POST"},
                                                        {"/v1/stages/1", "GET, HEAD, DELETE"},
                                                        {"/metrics", "GET, HEAD"}};
  for (const auto& [route, allow] : routes) {
    HttpAnswer a = Http(std::string("http://x") + route, "PUT", socket, "{}");
    EXPECT_EQ(a.status, 405) << route << ": " << a.body;
    EXPECT_EQ(a.headers["allow"], allow) << route;
    EXPECT_THAT(a.body, HasSubstr(std::string("(allowed: ") + allow)) << route;
  }
  HttpAnswer a = Http("http://x/v1/evict", "POST", socket, R"({"repo":"exlr8/test"})");
  ASSERT_EQ(a.status, 202) << a.body;
  EXPECT_EQ(a.headers["location"], "/v1/jobs/1");
  EXPECT_EQ(Http("http://x" + a.headers["location"], "GET", socket).status, 200);
  a = Http("http://x/v1/stages", "POST", socket,
           R"({"repo":"exlr8/test","manifest":"home","tp":2,"rank":1})");
  ASSERT_EQ(a.status, 202) << a.body;
  EXPECT_EQ(a.headers["location"], "/v1/stages/1");
  EXPECT_EQ(Http("http://x" + a.headers["location"], "GET", socket).status, 200);
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
