// libexlr8client's REST client (exlr8client.h's exlr8_api_*, the C++
// Api) against a real `exlr8d serve` over the hub simulator and the shared
// fixture, through its Unix socket and its loopback port; and against fake
// servers in this process that answer garbage, cut an answer short, send
// an endless header or never answer.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>

#include "exlr8/exlr8client.hpp"
#include "format/json.h"
#include "tests/daemon/cache_test_util.h"
#include "tests/daemon/pull_test_util.h"
#include "tests/daemon/serve_test_util.h"

namespace exlr8 {
namespace {

using ::exlr8::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// A string the library returned, freed at the end of scope.
struct Str {
  char* p = nullptr;
  ~Str() { exlr8_free_string(p); }
  char** out() { return &p; }
  std::string str() const { return p != nullptr ? p : ""; }
};

JsonValue ParsedOrNull(const std::string& text) {
  auto v = ParseJson(text);
  return v.ok() ? *v : JsonValue();
}

std::string Member(const std::string& json, const char* key) {
  const JsonValue v = ParsedOrNull(json);
  const JsonValue* m = v.is_object() ? v.Find(key) : nullptr;
  return m == nullptr ? "" : m->is_string() ? m->as_string() : m->Dump();
}

// Kills the holders a test leaves behind (they outlive the server).
class HolderReaper {
 public:
  explicit HolderReaper(const fs::path& cache) : root_(cache / "exlr8d.stages") {}
  ~HolderReaper() {
    std::error_code ec;
    for (fs::directory_iterator it(root_, ec), end; !ec && it != end; it.increment(ec)) {
      std::ifstream lock(it->path() / "holder.lock");
      pid_t pid = 0;
      if (lock >> pid && pid > 0) ::kill(pid, SIGKILL);
    }
  }

 private:
  fs::path root_;
};

// A job's progress callback: counts its calls and the states it saw.
struct Progress {
  int calls = 0;
  std::string states;
  static int Call(void* user, uint64_t, const char* state, const char*) {
    auto* p = static_cast<Progress*>(user);
    ++p->calls;
    if (p->states.empty() || p->states.substr(p->states.rfind(' ') + 1) != state)
      p->states += std::string(" ") + state;
    return 0;
  }
};

// The whole way through the C API: filesets, a pull followed to done, the
// rank's status, a host-memory stage held, leased and deleted; the error
// answers of the real server, the TCP listener's token, the C program.
TEST(RestApiTest, PullsAndStagesARankThroughTheCApi) {
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  HolderReaper reaper(cache.path());
  ServeProcess serve(cache.path(), {"--endpoint", sim->hub_url(), "--listen", "127.0.0.1:0"},
                     (cache.path() / "serve.log").string());
  ASSERT_GT(serve.port(), 0) << serve.ready_line();
  const std::string endpoint = "unix:" + (cache.path() / "exlr8d.sock").string();
  exlr8_api* api = nullptr;
  ASSERT_EQ(exlr8_api_open(endpoint.c_str(), nullptr, &api), EXLR8_OK) << exlr8_last_error_message();
  std::unique_ptr<exlr8_api, decltype(&exlr8_api_close)> owned(api, &exlr8_api_close);

  {
    Str json;
    size_t count = 99;
    ASSERT_EQ(exlr8_api_filesets(api, json.out(), &count), EXLR8_OK) << exlr8_last_error_message();
    EXPECT_EQ(count, 0u);
    EXPECT_EQ(json.str(), "[]");
  }
  // A pull, followed to its end with a progress callback.
  exlr8_pull_request pull;
  exlr8_pull_request_init(&pull);
  pull.repo = "exlr8/test";
  pull.manifest = "home";
  pull.tp = 2;
  pull.rank = 1;
  uint64_t job = 0;
  {
    Str json;
    ASSERT_EQ(exlr8_api_submit_pull(api, &pull, &job, json.out()), EXLR8_OK) << exlr8_last_error_message();
    EXPECT_EQ(job, 1u);
    EXPECT_EQ(Member(json.str(), "kind"), "pull");
    EXPECT_EQ(Member(json.str(), "repo"), "exlr8/test");
  }
  Progress progress;
  {
    Str state, json;
    ASSERT_EQ(exlr8_api_follow_job(api, job, 20, 60000, &Progress::Call, &progress, state.out(), json.out()),
              EXLR8_OK)
        << exlr8_last_error_message();
    EXPECT_EQ(state.str(), "done") << json.str();
    EXPECT_EQ(Member(json.str(), "state"), "done");
    EXPECT_GE(progress.calls, 1);
    EXPECT_THAT(progress.states, ::testing::EndsWith(" done"));
  }
  {
    Str state;
    ASSERT_EQ(exlr8_api_get_job(api, job, state.out(), nullptr), EXLR8_OK);
    EXPECT_EQ(state.str(), "done");
  }
  {
    int complete = 0;
    Str json;
    ASSERT_EQ(exlr8_api_rank_status(api, "exlr8/test", "home", 2, 1, nullptr, &complete, json.out()),
              EXLR8_OK)
        << exlr8_last_error_message();
    EXPECT_EQ(complete, 1) << json.str();
    EXPECT_EQ(Member(json.str(), "rank"), "1");
    // Rank 0 was not pulled.
    ASSERT_EQ(exlr8_api_rank_status(api, "exlr8/test", "home", 2, 0, "main", &complete, nullptr), EXLR8_OK)
        << exlr8_last_error_message();
    EXPECT_EQ(complete, 0);
  }
  {
    Str json;
    size_t count = 0;
    ASSERT_EQ(exlr8_api_filesets(api, json.out(), &count), EXLR8_OK);
    EXPECT_EQ(count, 1u);
    EXPECT_THAT(json.str(), HasSubstr("\"exlr8/test\""));
  }
  // The same through C, linked with the shared library alone.
  {
    const std::string cmd = std::string(EXLR8_REST_CHECK) + " " + endpoint + " 2>&1";
    std::FILE* p = ::popen(cmd.c_str(), "r");
    ASSERT_NE(p, nullptr);
    std::string out;
    char buf[512];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
    EXPECT_EQ(::pclose(p), 0) << out;
    EXPECT_EQ(out, "ok: 1 filesets\n");
  }

  // Error answers of the real server: code and "METHOD PATH: STATUS: message".
  {
    Str state;
    EXPECT_EQ(exlr8_api_get_job(api, 77, state.out(), nullptr), EXLR8_NOT_FOUND);
    EXPECT_THAT(exlr8_last_error_message(), StartsWith("GET /v1/jobs/77: 404: "));
    EXPECT_EQ(state.p, nullptr);  // outputs untouched on an error
    int status = 0;
    Str body;
    EXPECT_EQ(exlr8_api_request(api, "GET", "/v1/no-such-route", nullptr, &status, body.out()),
              EXLR8_NOT_FOUND);
    EXPECT_EQ(status, 404);
    EXPECT_EQ(Member(body.str(), "status"), "404") << body.str();
    EXPECT_THAT(exlr8_last_error_message(), StartsWith("GET /v1/no-such-route: 404: "));
    // A bad body: 400 naming the field, the server's message passed through.
    pull.rank = 3;
    uint64_t unused = 0;
    EXPECT_EQ(exlr8_api_submit_pull(api, &pull, &unused, nullptr), EXLR8_INVALID_ARGUMENT);
    EXPECT_THAT(exlr8_last_error_message(), StartsWith("POST /v1/pulls: 400: "));
    EXPECT_THAT(exlr8_last_error_message(), HasSubstr("rank must be in [0, 1]"));
    EXPECT_EQ(exlr8_api_request(api, "POST", "/v1/pulls", "{\"repo\":", &status, nullptr),
              EXLR8_INVALID_ARGUMENT);
    EXPECT_EQ(status, 400);
    EXPECT_EQ(exlr8_api_request(api, "PUT", "/v1/jobs", nullptr, &status, nullptr), EXLR8_INVALID_ARGUMENT);
    EXPECT_EQ(status, 405);
    EXPECT_THAT(exlr8_last_error_message(), StartsWith("PUT /v1/jobs: 405: "));
    // A job that has ended cannot be cancelled.
    EXPECT_EQ(exlr8_api_cancel_job(api, job, nullptr), EXLR8_FAILED_PRECONDITION);
    EXPECT_THAT(exlr8_last_error_message(), StartsWith("DELETE /v1/jobs/1: 409: "));
    // What cannot be sent is refused here.
    EXPECT_EQ(exlr8_api_request(api, "GET", "/v1/jobs\r\nX: y", nullptr, &status, nullptr),
              EXLR8_INVALID_ARGUMENT);
    EXPECT_THAT(exlr8_last_error_message(), HasSubstr("no space or control character"));
    EXPECT_EQ(exlr8_api_request(api, "GE T", "/v1/jobs", nullptr, &status, nullptr), EXLR8_INVALID_ARGUMENT);
  }

  // Over TCP every route but /v1/health needs the token: 401 without it.
  {
    exlr8client::Api tcp = exlr8client::Api::Open(serve.base());
    EXPECT_EQ(tcp.Request("GET", "/v1/health").status, 200);
    try {
      tcp.Filesets();
      ADD_FAILURE() << "no 401";
    } catch (const exlr8client::Error& e) {
      EXPECT_EQ(e.status(), EXLR8_PERMISSION_DENIED);
      EXPECT_THAT(e.what(), HasSubstr("GET /v1/filesets: 401: "));
    }
    exlr8client::Api wrong = exlr8client::Api::Open(serve.base(), "not-the-token-at-all");
    EXPECT_THROW(wrong.Filesets(), exlr8client::Error);
    ASSERT_FALSE(serve.token().empty());
    exlr8client::Api with = exlr8client::Api::Open(serve.base(), serve.token());
    EXPECT_THAT(with.Filesets(), HasSubstr("\"exlr8/test\""));
    bool complete = false;
    with.RankStatus("exlr8/test", "home", 2, 1, &complete);
    EXPECT_TRUE(complete);
    const exlr8client::JobInfo j = with.FollowJob(job);
    EXPECT_EQ(j.state, "done");
    // The C++ wrapper's moves.
    exlr8client::Api moved = std::move(with);
    EXPECT_EQ(with.get(), nullptr);
    EXPECT_EQ(moved.Job(job).state, "done");
  }

  // A holder in host memory: started, held, leased, deleted.
  if (!fs::exists(std::string(EXLR8_BIN_DIR) + "/exlr8d-stage")) {
    GTEST_SKIP() << "exlr8d-stage is built only with the CUDA Toolkit";
  }
  exlr8_stage_request stage;
  exlr8_stage_request_init(&stage);
  stage.repo = "exlr8/test";
  stage.manifest = "home";
  stage.tp = 2;
  stage.rank = 1;
  stage.memory = "host";
  stage.release_wait_s = 20;
  uint64_t sid = 0;
  ASSERT_EQ(exlr8_api_start_stage(api, &stage, &sid, nullptr), EXLR8_OK) << exlr8_last_error_message();
  EXPECT_EQ(sid, 1u);
  std::string lease_path;
  {
    Str state, json;
    ASSERT_EQ(exlr8_api_wait_stage(api, sid, 20, 60000, state.out(), json.out()), EXLR8_OK)
        << exlr8_last_error_message();
    ASSERT_EQ(state.str(), "holding") << json.str();
    EXPECT_EQ(Member(json.str(), "memory"), "host");
    lease_path = Member(json.str(), "lease");
  }
  // The same rank once more in host memory: 409.
  {
    uint64_t again = 0;
    EXPECT_EQ(exlr8_api_start_stage(api, &stage, &again, nullptr), EXLR8_FAILED_PRECONDITION);
    EXPECT_THAT(exlr8_last_error_message(), StartsWith("POST /v1/stages: 409: "));
    EXPECT_THAT(exlr8_last_error_message(), HasSubstr("already holds"));
    // A bad memory kind: 400, the server's message naming the field.
    stage.memory = "gpu";
    EXPECT_EQ(exlr8_api_start_stage(api, &stage, &again, nullptr), EXLR8_INVALID_ARGUMENT);
    EXPECT_THAT(exlr8_last_error_message(), HasSubstr("memory must be"));
  }
  {
    exlr8client::Lease lease = exlr8client::Lease::Open(lease_path);
    EXPECT_EQ(lease.info().memory_kind, static_cast<uint32_t>(EXLR8_MEMORY_HOST));
    EXPECT_GT(lease.tensor_count(), 0u);
    Str json;
    ASSERT_EQ(exlr8_api_delete_stage(api, sid, json.out()), EXLR8_OK) << exlr8_last_error_message();
    EXPECT_FALSE(lease.PollRelease(std::chrono::seconds(20)) == std::nullopt) << "no release line";
  }  // lets go
  {
    exlr8client::Api cpp = exlr8client::Api::Open(endpoint);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    // "released" a moment before the holder exits: wait for both.
    exlr8client::StageInfo s;
    while (((s = cpp.Stage(sid)).state != "released" || Member(s.json, "alive") != "false") &&
           std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(s.state, "released");
    EXPECT_EQ(Member(s.json, "alive"), "false");
    // A finished record is forgotten, then gone.
    EXPECT_THAT(cpp.DeleteStage(sid), HasSubstr("\"forgotten\":true"));
    try {
      cpp.Stage(sid);
      ADD_FAILURE() << "the stage is still there";
    } catch (const exlr8client::Error& e) {
      EXPECT_EQ(e.status(), EXLR8_NOT_FOUND);
    }
  }
}

TEST(RestApiTest, NoServerAtTheEndpointIsAClearError) {
  TempDir dir;
  const std::string missing = "unix:" + (dir.path() / "nothing.sock").string();
  exlr8_api* api = nullptr;
  ASSERT_EQ(exlr8_api_open(missing.c_str(), nullptr, &api), EXLR8_OK);
  size_t count = 0;
  EXPECT_EQ(exlr8_api_filesets(api, nullptr, &count), EXLR8_UNAVAILABLE);
  EXPECT_EQ(std::string(exlr8_last_error_message()),
            "GET /v1/filesets: cannot connect to " + missing + ": No such file or directory");
  exlr8_api_close(api);

  // A closed port.
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ASSERT_EQ(::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len), 0);
  ::close(s);
  const std::string closed = "http://127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  ASSERT_EQ(exlr8_api_open(closed.c_str(), "tok", &api), EXLR8_OK);
  EXPECT_EQ(exlr8_api_request(api, "GET", "/v1/health", nullptr, nullptr, nullptr), EXLR8_UNAVAILABLE);
  EXPECT_THAT(exlr8_last_error_message(), HasSubstr("cannot connect to " + closed + ": Connection refused"));
  exlr8_api_close(api);

  // Endpoints and tokens that cannot be used.
  EXPECT_EQ(exlr8_api_open("https://127.0.0.1:1", nullptr, &api), EXLR8_INVALID_ARGUMENT);
  EXPECT_THAT(exlr8_last_error_message(), HasSubstr("https://127.0.0.1:1: exlr8d serves plain HTTP"));
  EXPECT_EQ(exlr8_api_open("127.0.0.1:8478", nullptr, &api), EXLR8_INVALID_ARGUMENT);
  EXPECT_THAT(exlr8_last_error_message(), HasSubstr("127.0.0.1:8478"));
  EXPECT_EQ(exlr8_api_open("http://127.0.0.1:1", "a\r\nX-Injected: 1", &api), EXLR8_INVALID_ARGUMENT);
  EXPECT_EQ(exlr8_api_open(nullptr, nullptr, &api), EXLR8_INVALID_ARGUMENT);
  EXPECT_EQ(exlr8_api_filesets(nullptr, nullptr, nullptr), EXLR8_INVALID_ARGUMENT);
  try {
    exlr8client::Api::Open("ftp://x");
    ADD_FAILURE() << "opened ftp://x";
  } catch (const exlr8client::Error& e) {
    EXPECT_EQ(e.status(), EXLR8_INVALID_ARGUMENT);
  }
}

// A server on a loopback port that reads each request's header, then
// runs `answer` on the connection (in its own thread) and closes it.
class FakeServer {
 public:
  explicit FakeServer(std::function<void(int fd)> answer) : answer_(std::move(answer)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(fd_, 8), 0);
    EXPECT_EQ(::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len), 0);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] {
      while (true) {
        const int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0 || stop_) {
          if (c >= 0) ::close(c);
          return;
        }
        std::string request;
        char ch = 0;
        while (request.size() < 65536 && request.find("\r\n\r\n") == std::string::npos &&
               ::read(c, &ch, 1) == 1)
          request += ch;
        last_request_ = request;
        answer_(c);
        ::close(c);
      }
    });
  }
  ~FakeServer() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    // Wake the accept: connect once.
    const int w = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port_));
    ::connect(w, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::close(w);
    thread_.join();
    ::close(fd_);
  }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::string last_request() const { return last_request_; }

 private:
  std::function<void(int)> answer_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::string last_request_;
  std::thread thread_;
};

void Send(int fd, const std::string& s) { (void)::send(fd, s.data(), s.size(), MSG_NOSIGNAL); }

struct Outcome {
  exlr8_status status;
  std::string message;
  double seconds;
};

Outcome Ask(const std::string& endpoint, const std::function<exlr8_status(exlr8_api*)>& call,
            uint32_t timeout_ms = 2000) {
  exlr8_api* api = nullptr;
  EXPECT_EQ(exlr8_api_open(endpoint.c_str(), "secret-token-1234", &api), EXLR8_OK);
  exlr8_api_set_timeout(api, timeout_ms);
  const auto start = std::chrono::steady_clock::now();
  const exlr8_status s = call(api);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  Outcome o{s, s == EXLR8_OK ? "" : exlr8_last_error_message(), seconds};
  exlr8_api_close(api);
  return o;
}

exlr8_status GetFilesets(exlr8_api* api) { return exlr8_api_filesets(api, nullptr, nullptr); }

TEST(RestApiTest, AServerThatAnswersBadlyIsAClearErrorAndNoHang) {
  {  // What is sent: the request line, Host, the token, Connection: close.
    FakeServer ok([](int fd) {
      Send(fd,
           "HTTP/1.1 200 OK\r\nTransfer-Encoding: "
           "chunked\r\n\r\n7\r\n{\"files\r\n8\r\nets\":[]}\r\n0\r\n\r\n");
    });
    const Outcome o = Ask(ok.endpoint(), &GetFilesets);
    EXPECT_EQ(o.status, EXLR8_OK) << o.message;
    EXPECT_THAT(ok.last_request(), StartsWith("GET /v1/filesets HTTP/1.1\r\n"));
    EXPECT_THAT(ok.last_request(), HasSubstr("\r\nHost: 127.0.0.1:"));
    EXPECT_THAT(ok.last_request(), HasSubstr("\r\nAuthorization: Bearer secret-token-1234\r\n"));
    EXPECT_THAT(ok.last_request(), HasSubstr("\r\nConnection: close\r\n"));
  }
  {
    FakeServer garbage([](int fd) { Send(fd, "220 smtp.example.com ESMTP\r\n"); });
    const Outcome o = Ask(garbage.endpoint(), &GetFilesets);
    EXPECT_EQ(o.status, EXLR8_CORRUPTION);
    EXPECT_EQ(o.message,
              "GET /v1/filesets: the answer from " + garbage.endpoint() +
                  ": HTTP answer byte 0: not an HTTP/1.x status line: \"220 smtp.example.com ESMTP\"");
  }
  {
    FakeServer truncated(
        [](int fd) { Send(fd, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"filesets\":"); });
    const Outcome o = Ask(truncated.endpoint(), &GetFilesets);
    EXPECT_EQ(o.status, EXLR8_CORRUPTION);
    EXPECT_THAT(o.message, HasSubstr("the connection closed in the body after 12 of 100 bytes"));
  }
  {
    FakeServer endless([](int fd) {
      Send(fd, "HTTP/1.1 200 OK\r\nX-Endless: ");
      const std::string chunk(4096, 'a');
      for (int i = 0; i < 100000; ++i)  // until the client has gone (send fails)
        if (::send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL) < 0) break;
    });
    const Outcome o = Ask(endless.endpoint(), &GetFilesets);
    EXPECT_EQ(o.status, EXLR8_RESOURCE_EXHAUSTED);
    EXPECT_THAT(o.message, HasSubstr("the header section over the limit of 65536 bytes"));
    EXPECT_LT(o.seconds, 2.0);
  }
  {
    FakeServer huge([](int fd) { Send(fd, "HTTP/1.1 200 OK\r\nContent-Length: 1099511627776\r\n\r\n"); });
    const Outcome o = Ask(huge.endpoint(), &GetFilesets);
    EXPECT_EQ(o.status, EXLR8_RESOURCE_EXHAUSTED);
    EXPECT_THAT(o.message, HasSubstr("a body of 1099511627776 bytes is over the limit of 67108864 bytes"));
  }
  {  // A server that never answers: the timeout, then a clear error.
    FakeServer silent([](int) { std::this_thread::sleep_for(std::chrono::milliseconds(700)); });
    const Outcome o = Ask(silent.endpoint(), &GetFilesets, 300);
    EXPECT_EQ(o.status, EXLR8_UNAVAILABLE);
    EXPECT_THAT(o.message, HasSubstr("waiting for the answer of " + silent.endpoint() + " took over 300 ms"));
    EXPECT_LT(o.seconds, 1.5);
  }
  {  // A slow trickle is bounded by the same timeout as a whole.
    FakeServer trickle([](int fd) {
      Send(fd, "HTTP/1.1 200 OK\r\n");
      for (int i = 0; i < 40; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        if (::send(fd, "X: y\r\n", 6, MSG_NOSIGNAL) < 0) break;
      }
    });
    const Outcome o = Ask(trickle.endpoint(), &GetFilesets, 300);
    EXPECT_EQ(o.status, EXLR8_UNAVAILABLE);
    EXPECT_LT(o.seconds, 1.5);
  }
  {  // A 2xx that is not the JSON a typed helper needs.
    FakeServer text([](int fd) { Send(fd, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"); });
    const Outcome o = Ask(text.endpoint(), &GetFilesets);
    EXPECT_EQ(o.status, EXLR8_CORRUPTION);
    EXPECT_THAT(o.message, StartsWith("GET /v1/filesets: 200: the answer is not JSON"));
    FakeServer other([](int fd) { Send(fd, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"); });
    EXPECT_THAT(Ask(other.endpoint(), &GetFilesets).message, HasSubstr("the answer has no \"filesets\""));
  }
  {  // Error statuses without problem details: the body's start is the message.
    FakeServer down(
        [](int fd) { Send(fd, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 11\r\n\r\nproxy error"); });
    const Outcome o = Ask(down.endpoint(), &GetFilesets);
    EXPECT_EQ(o.status, EXLR8_UNAVAILABLE);
    EXPECT_EQ(o.message, "GET /v1/filesets: 502: proxy error");
    FakeServer busy([](int fd) {
      Send(fd,
           "HTTP/1.1 501 Not Implemented\r\nContent-Length: 33\r\n\r\n{\"error\":\"no stage binary here!\"}");
    });
    const Outcome b = Ask(busy.endpoint(), &GetFilesets);
    EXPECT_EQ(b.status, EXLR8_UNIMPLEMENTED);
    EXPECT_EQ(b.message, "GET /v1/filesets: 501: no stage binary here!");
  }
  {  // follow_job: stopped by its callback, or bounded by its timeout.
    FakeServer running([](int fd) {
      Send(fd, "HTTP/1.1 200 OK\r\nContent-Length: 34\r\n\r\n{\"job\":{\"id\":4,\"state\":\"running\"}}");
    });
    const Outcome stopped = Ask(running.endpoint(), [](exlr8_api* api) {
      return exlr8_api_follow_job(
          api, 4, 10, 0, [](void*, uint64_t, const char*, const char*) { return 1; }, nullptr, nullptr,
          nullptr);
    });
    EXPECT_EQ(stopped.status, EXLR8_CANCELLED);
    EXPECT_EQ(stopped.message, "job 4: stopped by the progress callback while running");
    const Outcome late = Ask(running.endpoint(), [](exlr8_api* api) {
      return exlr8_api_follow_job(api, 4, 20, 200, nullptr, nullptr, nullptr, nullptr);
    });
    EXPECT_EQ(late.status, EXLR8_UNAVAILABLE);
    EXPECT_EQ(late.message, "job 4 is still running after 200 ms");
    EXPECT_LT(late.seconds, 1.5);
    // The C++ wrapper: the callback stops it, and what it throws comes through.
    exlr8client::Api api = exlr8client::Api::Open(running.endpoint(), "tok-tok-tok-tok");
    int calls = 0;
    try {
      api.FollowJob(4, std::chrono::milliseconds(10), std::chrono::milliseconds(0),
                    [&](const exlr8client::JobInfo& j) { return ++calls == 2 && j.state == "running"; });
      ADD_FAILURE() << "not stopped";
    } catch (const exlr8client::Error& e) {
      EXPECT_EQ(e.status(), EXLR8_CANCELLED);
    }
    EXPECT_EQ(calls, 2);
    EXPECT_THROW(api.FollowJob(4, std::chrono::milliseconds(10), std::chrono::milliseconds(0),
                               [](const exlr8client::JobInfo&) -> bool { throw std::logic_error("mine"); }),
                 std::logic_error);
  }
}

}  // namespace
}  // namespace exlr8
