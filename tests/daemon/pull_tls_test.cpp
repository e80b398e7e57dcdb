// Pulls over HTTPS and HTTP/2, as from the real Hub and its CDN: nginx with
// TLS (a certificate of a private CA made for the test) and HTTP/2 serves
// the hub on 127.0.0.1 (proxying the simulator's API) and the CDN on
// 127.0.0.2 (the release directory), to which the simulator's /resolve/
// sends every file. Real sockets, real TLS handshakes, real libcurl, a real
// cache.
//
// Needs nginx ($EXLR8_NGINX, else the one scripts/setup.sh unpacks under
// .tools/, else a system nginx) and the openssl tool; without them the tests
// skip, saying so.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "daemon/hub/hub_client.h"
#include "daemon/hub/range_fetcher.h"
#include "daemon/pull/pull_job.h"
#include "tests/daemon/cache_test_util.h"
#include "tests/daemon/pull_test_util.h"
#include "tests/hubsim/hubsim.h"
#include "tests/support/files.h"

namespace exlr8 {
namespace {

namespace fs = std::filesystem;
using ::exlr8::testing::TempDir;
using ::testing::HasSubstr;

constexpr char kToken[] = "hf_exlr8_tls_token";

std::string FindProgram(const std::vector<std::string>& candidates) {
  for (const std::string& c : candidates)
    if (::access(c.c_str(), X_OK) == 0) return c;
  return "";
}

std::uint16_t FreePort(const char* address) {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  ::inet_pton(AF_INET, address, &a.sin_addr);
  socklen_t len = sizeof a;
  std::uint16_t port = 0;
  if (::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  ::close(s);
  return port;
}

bool Accepts(const char* address, std::uint16_t port) {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  ::inet_pton(AF_INET, address, &a.sin_addr);
  const bool ok = ::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(s);
  return ok;
}

bool LibcurlSpeaksHttp2() { return (curl_version_info(CURLVERSION_NOW)->features & CURL_VERSION_HTTP2) != 0; }

// nginx in the foreground, with TLS and HTTP/2: the CDN, serving `root` on
// 127.0.0.2:cdn_port, and the hub, proxying 127.0.0.1:hub_port to the
// simulator's plain HTTP at `hub_upstream` (as the Hub's own API is HTTPS
// too). Each request is logged with its protocol, Authorization header,
// status and Range, in a log per server.
class TlsServers {
 public:
  TlsServers(const std::string& nginx, const fs::path& dir, const fs::path& root, const fs::path& cert,
             const fs::path& key, std::uint16_t cdn_port, const std::string& hub_upstream,
             int cdn_requests_per_connection = 0)
      : dir_(dir / "ngx"), cdn_port_(cdn_port), hub_port_(FreePort("127.0.0.1")) {
    fs::create_directories(dir_);
    const auto at = [&](const char* name) { return (dir_ / name).string(); };
    std::ofstream conf(dir_ / "nginx.conf");
    conf << "daemon off;\nworker_processes 2;\n" << (::geteuid() == 0 ? "user root root;\n" : "")
         << "pid " << at("nginx.pid") << ";\nerror_log " << at("error.log") << " warn;\n"
         << "events { worker_connections 256; }\nhttp {\n"
         << "  log_format t '$server_protocol \"$http_authorization\" $status \"$http_range\" c$connection';\n";
    for (const char* temp : {"client_body", "proxy", "fastcgi", "uwsgi", "scgi"})
      conf << "  " << temp << "_temp_path " << at(temp) << ";\n";
    conf << "  default_type application/octet-stream;\n"
         << "  ssl_certificate " << cert.string() << ";\n  ssl_certificate_key " << key.string() << ";\n"
         << "  server {\n    listen 127.0.0.2:" << cdn_port_ << " ssl http2;\n"
         << "    access_log " << at("cdn.log") << " t;\n    root " << root.string() << ";\n    location / { }\n"
         << (cdn_requests_per_connection > 0
                 ? "    keepalive_requests " + std::to_string(cdn_requests_per_connection) + ";\n"
                 : std::string())
         << "  }\n"
         << "  server {\n    listen 127.0.0.1:" << hub_port_ << " ssl http2;\n"
         << "    access_log " << at("hub.log") << " t;\n"
         << "    location / { proxy_pass " << hub_upstream << "; proxy_http_version 1.1; }\n  }\n}\n";
    conf.close();
    pid_ = ::fork();
    if (pid_ == 0) {
      const std::string prefix = dir_.string() + "/", conf_path = at("nginx.conf"), err = at("error.log");
      ::execl(nginx.c_str(), nginx.c_str(), "-p", prefix.c_str(), "-c", conf_path.c_str(), "-e", err.c_str(),
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
    for (int i = 0; i < 100 && !up(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ~TlsServers() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  bool up() const { return pid_ > 0 && Accepts("127.0.0.2", cdn_port_) && Accepts("127.0.0.1", hub_port_); }
  std::string hub_url() const { return "https://127.0.0.1:" + std::to_string(hub_port_); }
  std::string ErrorLog() const { return testing::ReadFileText(dir_ / "error.log"); }
  // One line per request; nginx writes each line as its request ends.
  std::vector<std::string> CdnLog() const { return Lines(dir_ / "cdn.log"); }
  std::vector<std::string> HubLog() const { return Lines(dir_ / "hub.log"); }

 private:
  static std::vector<std::string> Lines(const fs::path& p) {
    std::vector<std::string> lines;
    std::istringstream in(testing::ReadFileText(p));
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    return lines;
  }
  fs::path dir_;
  std::uint16_t cdn_port_, hub_port_;
  pid_t pid_ = -1;
};

// Sets an environment variable for the test's scope, restoring it after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) ::setenv(name_, old_->c_str(), 1);
    else ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

class PullTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // scripts/setup.sh unpacks one under .tools/; else a system nginx.
    const char* env = std::getenv("EXLR8_NGINX");
    nginx_ = FindProgram({env ? env : "", std::string(EXLR8_SOURCE_DIR) + "/.tools/nginx/usr/sbin/nginx",
                          "/usr/sbin/nginx", "/usr/local/sbin/nginx"});
    const std::string openssl = FindProgram({"/usr/bin/openssl", "/usr/local/bin/openssl"});
    if (nginx_.empty() || openssl.empty())
      GTEST_SKIP() << "needs nginx and the openssl tool (scripts/setup.sh installs them): "
                   << (nginx_.empty() ? "no nginx" : "no openssl");
    ::chmod(work_.path().c_str(), 0755);  // nginx workers may run as another user
    cert_ = work_.path() / "cdn-cert.pem";
    key_ = work_.path() / "cdn-key.pem";
    // A self-signed certificate for the CDN's address: a private CA of one.
    const std::string cmd = openssl + " req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2" +
                            " -subj /CN=exlr8-test -addext subjectAltName=IP:127.0.0.1,IP:127.0.0.2 -keyout " + key_.string() +
                            " -out " + cert_.string() + " > /dev/null 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    // The CDN's port first: the simulator's /resolve/ names it, and the
    // hub's server proxies to the simulator.
    cdn_port_ = FreePort("127.0.0.2");
    hubsim::HubSimOptions o;
    o.repos.push_back({"exlr8/test", TinyRelease().string()});
    o.token = kToken;
    o.cdn_base = "https://127.0.0.2:" + std::to_string(cdn_port_);
    o.lfs_threshold = 1;  // every file an LFS file: all bytes come from the CDN
    auto sim = hubsim::HubSim::Start(o);
    ASSERT_TRUE(sim.ok()) << sim.status().ToString();
    sim_ = std::move(*sim);
    tls_ = std::make_unique<TlsServers>(nginx_, work_.path(), TinyRelease(), cert_, key_, cdn_port_, sim_->hub_url());
    ASSERT_TRUE(tls_->up()) << "nginx did not start: " << tls_->ErrorLog();
  }

  // The hub over HTTPS too (nginx in front of the simulator).
  PullOptions TlsOptions(const std::string& ca_bundle) const {
    PullOptions o = Options(*sim_, "home", 4, 1);
    o.hub.endpoint = tls_->hub_url();
    o.hub.token = kToken;
    o.hub.ca_bundle = ca_bundle;
    return o;
  }

  TempDir work_;
  std::string nginx_;
  fs::path cert_, key_;
  std::unique_ptr<hubsim::HubSim> sim_;
  std::unique_ptr<TlsServers> tls_;
  std::uint16_t cdn_port_ = 0;
  // No CA bundle from the environment unless a test sets one.
  ScopedEnv no_curl_ca_{"CURL_CA_BUNDLE", nullptr}, no_requests_ca_{"REQUESTS_CA_BUNDLE", nullptr},
      no_ssl_cert_{"SSL_CERT_FILE", nullptr};
};

TEST_F(PullTlsTest, ThePrivateCaVerifiesHubAndCdnAndEverythingComesOverHttp2) {
  TempDir cache;
  auto s = Pull(cache.path(), TlsOptions(cert_.string()));
  ASSERT_TRUE(s.ok()) << s.status().ToString() << "\nnginx: " << tls_->ErrorLog();
  EXPECT_TRUE(s->complete);
  ExpectCacheHoldsExactlyThePlan(cache.path(), TinyRelease(), *s);
  const std::vector<std::string> cdn = tls_->CdnLog(), hub = tls_->HubLog();
  ASSERT_FALSE(cdn.empty());
  ASSERT_FALSE(hub.empty());
  std::size_t ranged = 0;
  for (const std::string& line : cdn) {
    // The token goes to the hub's origin only: never to the CDN.
    EXPECT_THAT(line, HasSubstr(" \"-\" ")) << "the CDN got an Authorization header: " << line;
    EXPECT_EQ(line.find(kToken), std::string::npos) << line;
    ranged += line.find("\"bytes=") != std::string::npos;
  }
  EXPECT_GT(ranged, 0u) << "the halves come as range requests";
  for (const std::string& line : hub)  // the revision, the tree, one /resolve/ per file
    EXPECT_THAT(line, HasSubstr("\"Bearer " + std::string(kToken) + "\"")) << line;
  if (LibcurlSpeaksHttp2()) {
    for (const auto* log : {&cdn, &hub})
      for (const std::string& line : *log) EXPECT_EQ(line.rfind("HTTP/2.0 ", 0), 0u) << line;
  }
}

// The CDN connections a pull's log lines name (nginx's $connection).
std::set<std::string> ConnectionsOf(const std::vector<std::string>& log) {
  std::set<std::string> ids;
  for (const std::string& line : log) ids.insert(line.substr(line.rfind(" c") + 2));
  return ids;
}

// Over HTTP/2 the transfers spread over transfers / streams connections
// per host when a connection may carry fewer streams than there are
// transfers (as by default), never more (libcurl 7.88 alone opens more, up
// to one per transfer, when transfers start while a connection is
// connecting); with streams 0 they share one connection.
TEST_F(PullTlsTest, TransfersSpreadOverMoreHttp2ConnectionsWhenStreamsAreCapped) {
  if (!LibcurlSpeaksHttp2()) GTEST_SKIP() << "this libcurl has no HTTP/2";
  std::size_t lines_before = 0;
  const std::optional<int> kDefault;  // the options' own value
  for (const std::optional<int> streams : {std::optional<int>(0), kDefault, std::optional<int>(4),
                                           std::optional<int>(2)}) {
    const int per_connection = streams.value_or(kDefaultH2StreamsPerConnection);
    SCOPED_TRACE((streams ? std::to_string(*streams) : "the default " + std::to_string(per_connection)) +
                 " streams per connection");
    TempDir cache;
    PullOptions o = TlsOptions(cert_.string());
    o.fetch.max_parallel = 16;
    if (streams) o.fetch.h2_streams_per_connection = *streams;
    auto s = Pull(cache.path(), o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    ExpectCacheHoldsExactlyThePlan(cache.path(), TinyRelease(), *s);
    const std::vector<std::string> all = tls_->CdnLog();
    const std::set<std::string> used =
        ConnectionsOf(std::vector<std::string>(all.begin() + static_cast<std::ptrdiff_t>(lines_before), all.end()));
    lines_before = all.size();
    std::printf("%d streams per connection: %zu connections used\n", per_connection, used.size());
    if (per_connection == 0) {
      EXPECT_EQ(used.size(), 1u);
    } else {
      EXPECT_GT(used.size(), 1u) << "the transfers stayed on one connection";
      EXPECT_LE(used.size(), static_cast<std::size_t>(16 / per_connection))
          << "more connections than 16 transfers need";
    }
  }
}

// An adaptive pull given no --h2-streams on a short path: libcurl's answer
// timing reaches the fetcher, which puts 16 streams on each connection, so
// the 32 transfers use at most 2 CDN connections (4 streams each would be
// up to 8). "Short" is under a second here: loopback answers come within
// 2 ms on an idle machine, but not always on a loaded one (a CI machine
// building the sanitizer trees beside the tests), where the first resolves
// can judge the path long and give 4 connections; the 2 ms line itself is
// ConnectionSpreadTest's.
TEST_F(PullTlsTest, AShortPathPutsSixteenStreamsOnEachHttp2Connection) {
  if (!LibcurlSpeaksHttp2()) GTEST_SKIP() << "this libcurl has no HTTP/2";
  TempDir cache;
  PullOptions o = TlsOptions(cert_.string());
  o.fetch.adaptive = true;
  o.fetch.max_parallel = 32;
  o.fetch.adaptive_initial = 32;
  o.fetch.h2_streams_by_path = true;
  o.fetch.short_path_wait = std::chrono::seconds(1);
  const std::size_t lines_before = tls_->CdnLog().size();
  auto s = Pull(cache.path(), o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ExpectCacheHoldsExactlyThePlan(cache.path(), TinyRelease(), *s);
  EXPECT_EQ(s->h2_streams, 16u);
  const std::vector<std::string> all = tls_->CdnLog();
  const std::set<std::string> used =
      ConnectionsOf(std::vector<std::string>(all.begin() + static_cast<std::ptrdiff_t>(lines_before), all.end()));
  std::printf("%zu CDN requests over %zu connections\n", all.size() - lines_before, used.size());
  EXPECT_LE(used.size(), 2u);
}

// Bulk transfers (here every range of 64 KiB or more: the whole files)
// never share an HTTP/2 connection with the small ones, so a small answer
// never queues behind a large one in a connection's buffers; the pull is
// byte-exact.
TEST_F(PullTlsTest, BulkTransfersGetConnectionsOfTheirOwn) {
  if (!LibcurlSpeaksHttp2()) GTEST_SKIP() << "this libcurl has no HTTP/2";
  TempDir cache;
  PullOptions o = TlsOptions(cert_.string());
  o.fetch.max_parallel = 16;
  o.fetch.bulk_range_bytes = 64 << 10;
  const std::size_t lines_before = tls_->CdnLog().size();
  auto s = Pull(cache.path(), o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ExpectCacheHoldsExactlyThePlan(cache.path(), TinyRelease(), *s);
  const std::vector<std::string> all = tls_->CdnLog();
  std::map<std::string, std::pair<int, int>> by_connection;  // bulk, small requests
  int bulk = 0;
  int small = 0;
  for (std::size_t i = lines_before; i < all.size(); ++i) {
    const std::string& line = all[i];
    const std::size_t at = line.find("\"bytes=");
    ASSERT_NE(at, std::string::npos) << "a CDN request without a range: " << line;
    const std::uint64_t first = std::stoull(line.substr(at + 7));
    const std::uint64_t last = std::stoull(line.substr(line.find('-', at) + 1));
    const bool is_bulk = last - first + 1 >= o.fetch.bulk_range_bytes;
    auto& [b, n] = by_connection[line.substr(line.rfind(" c") + 2)];
    (is_bulk ? b : n) += 1;
    (is_bulk ? bulk : small) += 1;
  }
  std::printf("%d bulk and %d small CDN requests over %zu connections\n", bulk, small, by_connection.size());
  ASSERT_GT(bulk, 0) << "the release has no range of 64 KiB or more: the test shows nothing";
  ASSERT_GT(small, 0);
  for (const auto& [connection, counts] : by_connection)
    EXPECT_TRUE(counts.first == 0 || counts.second == 0)
        << "connection " << connection << " carried " << counts.first << " bulk and " << counts.second << " small";
}

// Fetches ranges of one file; asks to hold every transfer back a few times
// (as a busy consumer or the pull's background hold does), counting asks.
class HoldAskingConsumer : public RangeConsumer {
 public:
  HoldAskingConsumer(std::string path, std::uint64_t size) : path_(std::move(path)), size_(size) {}
  bool NextRequest(RangeRequest* out) override {
    const std::uint64_t piece = size_ / kRequests;
    if (next_ >= kRequests || piece == 0) return false;
    out->id = next_;
    out->path = path_;
    out->offset = next_ * piece;
    out->length = next_ + 1 == kRequests ? size_ - out->offset : piece;
    out->label = "piece " + std::to_string(next_++);
    return true;
  }
  bool ReadyFor(std::uint64_t id, std::size_t) override {
    ++asked;
    return ++asks_[id] > 3;
  }
  Status OnData(std::uint64_t id, std::uint64_t /*offset*/, std::span<const std::byte> bytes) override {
    got_[id].append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    return Status::Ok();
  }
  RangeVerdict OnComplete(std::uint64_t) override {
    ++completed;
    return RangeVerdict::Accept();
  }
  void OnReset(std::uint64_t id) override { got_[id].clear(); }
  void OnFailed(std::uint64_t, const Status& s) override { failure = s; }
  // The pieces put back together.
  std::string Joined() const {
    std::string all;
    for (const auto& [id, bytes] : got_) all += bytes;
    return all;
  }

  static constexpr std::uint64_t kRequests = 8;
  std::map<std::uint64_t, int> asks_;
  int asked = 0;
  int completed = 0;
  Status failure;

 private:
  std::string path_;
  std::uint64_t size_;
  std::uint64_t next_ = 0;
  std::map<std::uint64_t, std::string> got_;
};

// A transfer multiplexed on an HTTP/2 connection is never held back for
// its consumer: holding one stream held the whole connection, every other
// stream on it too (a pull over the Hub's CDN waited out its background
// hold at every planning step, 5 to 8 times slower than curl).
TEST_F(PullTlsTest, MultiplexedTransfersAreNeverHeldBack) {
  if (!LibcurlSpeaksHttp2()) GTEST_SKIP() << "this libcurl has no HTTP/2";
  HubOptions ho = TlsOptions(cert_.string()).hub;
  auto hub = HubClient::Open(ho, "exlr8/test", "main");
  ASSERT_TRUE(hub.ok()) << hub.status().ToString();
  auto files = (*hub)->ListFiles();
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  const HubFile* biggest = &files->front();
  for (const HubFile& f : *files) biggest = f.size > biggest->size ? &f : biggest;
  HoldAskingConsumer c(biggest->path, biggest->size);
  RangeFetcher fetcher(**hub);
  const Status run = fetcher.Run(c);
  ASSERT_TRUE(run.ok()) << run.ToString();
  ASSERT_TRUE(c.failure.ok()) << c.failure.ToString();
  EXPECT_EQ(c.completed, static_cast<int>(HoldAskingConsumer::kRequests));
  EXPECT_EQ(c.asked, 0) << "a multiplexed transfer was offered for holding back";
  EXPECT_EQ(c.Joined(), testing::ReadFileText(TinyRelease() / biggest->path));
  for (const std::string& line : tls_->CdnLog()) EXPECT_EQ(line.rfind("HTTP/2.0 ", 0), 0u) << line;
}

// The bandwidth limit pauses every stream of the shared HTTP/2 connection
// at once: the pull keeps to the rate and is byte-exact.
TEST_F(PullTlsTest, TheBandwidthLimitHoldsOverOneHttp2Connection) {
  TempDir cache;
  PullOptions o = TlsOptions(cert_.string());
  o.fetch.max_bytes_per_second = 4'000'000;
  o.fetch.h2_streams_per_connection = 0;  // every stream on one connection
  const auto t0 = std::chrono::steady_clock::now();
  auto s = Pull(cache.path(), o);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ExpectCacheHoldsExactlyThePlan(cache.path(), TinyRelease(), *s);
  const double at_rate = static_cast<double>(s->bytes_fetched) / 4e6;
  std::printf("%llu bytes in %.2f s (%.2f s at the rate)\n", static_cast<unsigned long long>(s->bytes_fetched), took,
              at_rate);
  EXPECT_GE(took, 0.8 * at_rate - 0.05);  // less a burst of 50 ms
  EXPECT_LE(took, 4 * at_rate + 2);
  if (LibcurlSpeaksHttp2()) {
    EXPECT_EQ(ConnectionsOf(tls_->CdnLog()).size(), 1u);
  }
}

// A CDN that ends its connections every few requests (nginx sends GOAWAY
// after keepalive_requests; CDNs do so on their own schedules): the streams
// it did not take are sent again on a new connection, and the pull is
// byte-exact.
TEST_F(PullTlsTest, ACdnThatEndsConnectionsEveryFewRequestsStillGivesAnExactPull) {
  tls_.reset();  // the same CDN port, ending each connection after 5 requests
  tls_ = std::make_unique<TlsServers>(nginx_, work_.path(), TinyRelease(), cert_, key_, cdn_port_, sim_->hub_url(), 5);
  ASSERT_TRUE(tls_->up()) << "nginx did not start: " << tls_->ErrorLog();
  TempDir cache;
  auto s = Pull(cache.path(), TlsOptions(cert_.string()));
  ASSERT_TRUE(s.ok()) << s.status().ToString() << "\nnginx: " << tls_->ErrorLog();
  EXPECT_TRUE(s->complete);
  ExpectCacheHoldsExactlyThePlan(cache.path(), TinyRelease(), *s);
  const std::vector<std::string> log = tls_->CdnLog();
  const std::size_t connections = ConnectionsOf(log).size();
  std::printf("%zu CDN requests over %zu connections; %llu retries\n", log.size(), connections,
              static_cast<unsigned long long>(s->retries));
  EXPECT_GE(connections, log.size() / 5);  // the server really ended them
}

// Without the CA the servers' certificate does not verify: the pull fails
// at once (no retry can pass), naming the certificate and what to do. Both
// ways: the hub's API (the hub client's requests) and, with the hub on
// plain HTTP, the CDN (the range fetcher's resolves and ranges).
TEST_F(PullTlsTest, AnUntrustedCertificateFailsAtOnceAndSaysWhatToDo) {
  for (const bool hub_over_tls : {true, false}) {
    SCOPED_TRACE(hub_over_tls ? "hub and CDN over TLS" : "the CDN over TLS");
    TempDir cache;
    auto cache_handle = Cache::Open(cache.path());
    ASSERT_TRUE(cache_handle.ok());
    PullOptions o = TlsOptions("");
    if (!hub_over_tls) o.hub.endpoint = sim_->hub_url();
    o.hub.retry_base = std::chrono::milliseconds(200);  // retries, were there any, would show in the time
    o.fetch.retry_base = std::chrono::milliseconds(200);
    o.fetch.retry_cap = std::chrono::milliseconds(2000);
    PullJob job(**cache_handle, o);
    const auto t0 = std::chrono::steady_clock::now();
    auto s = job.Run();
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), StatusCode::kIOError) << s.status().ToString();
    EXPECT_THAT(s.status().message(), HasSubstr("certificate"));
    EXPECT_THAT(s.status().message(), HasSubstr("--ca-bundle"));
    EXPECT_EQ(s.status().message().find(kToken), std::string::npos);
    EXPECT_EQ(job.Progress().fetch.retries, 0u);
    EXPECT_LT(took, 5.0) << "a certificate failure was retried";
    EXPECT_EQ(*(*cache_handle)->RecordedBytes(), 0u) << "nothing from an unverified server is recorded";
  }
}

// The CA from the environment, as curl and huggingface_hub take it; a file
// that cannot be read is refused up front, naming it and its source.
TEST_F(PullTlsTest, TheCaComesFromTheEnvironmentOrTheOptionAndMustBeReadable) {
  {
    ScopedEnv env("SSL_CERT_FILE", cert_.c_str());
    TempDir cache;
    auto s = Pull(cache.path(), TlsOptions(""));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_TRUE(s->complete);
  }
  {
    ScopedEnv env("REQUESTS_CA_BUNDLE", (work_.path() / "nope.pem").c_str());
    TempDir cache;
    auto s = Pull(cache.path(), TlsOptions(""));
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(s.status().message(), HasSubstr("nope.pem' (from REQUESTS_CA_BUNDLE) cannot be read"));
  }
  // The command line: --ca-bundle wins over the environment.
  ScopedEnv env("CURL_CA_BUNDLE", (work_.path() / "nope.pem").c_str());
  TempDir cache;
  const std::string pull = std::string(EXLR8_BIN_DIR) + "/exlr8d pull --repo exlr8/test --manifest home --tp 4" +
                           " --rank 1 --endpoint " + tls_->hub_url() + " --cache " + cache.path().string() +
                           " --no-progress";
  const std::string err = (work_.path() / "pull.err").string();
  ScopedEnv token("HF_TOKEN", kToken);
  EXPECT_EQ(std::system((pull + " --ca-bundle " + cert_.string() + " > /dev/null 2> " + err).c_str()), 0)
      << testing::ReadFileText(err);
  EXPECT_EQ(std::system((pull + " > /dev/null 2> " + err).c_str()) >> 8, 2);  // the variable's file is missing
  EXPECT_THAT(testing::ReadFileText(err), HasSubstr("(from CURL_CA_BUNDLE) cannot be read"));
}

}  // namespace
}  // namespace exlr8
