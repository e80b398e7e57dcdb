// A small, deliberately misbehaving-on-demand HTTP/1.1 server on loopback for
// the hub client and range fetcher tests. One thread per connection,
// keep-alive, records every request (method, target, headers) and counts
// concurrent connections. Handlers decide each answer, including faults:
// cut bodies, resets, delays.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace exlr8::testing {

struct TestRequest {
  std::string method;
  std::string target;  // as sent (path+query, or absolute-form via a proxy)
  std::map<std::string, std::string> headers;  // lowercase names
  int connection = 0;  // connection serial number

  std::string Header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? std::string() : it->second;
  }
  bool HasHeader(const std::string& lower_name) const { return headers.count(lower_name) != 0; }
};

struct TestResponse {
  int status = 200;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  // Faults.
  std::optional<std::size_t> send_only;      // send this many body bytes, then close
  std::optional<std::uint64_t> content_length;  // announce this instead of body.size()
  std::chrono::milliseconds delay{0};        // before answering
  std::uint64_t bytes_per_second = 0;        // pace the body (0 = full speed)
  bool close = false;                        // close after this answer
  bool no_content_length = false;            // no length (with close: the close ends the body)
};

using TestHandler = std::function<TestResponse(const TestRequest&)>;

class TestHttpServer {
 public:
  // Binds `host` (e.g. "127.0.0.1", "127.0.0.2") on an ephemeral port.
  explicit TestHttpServer(TestHandler handler, const std::string& host = "127.0.0.1");
  ~TestHttpServer();
  TestHttpServer(const TestHttpServer&) = delete;
  TestHttpServer& operator=(const TestHttpServer&) = delete;

  std::string base_url() const;  // "http://host:port"
  std::string host_port() const;
  int port() const { return port_; }

  std::vector<TestRequest> requests() const;
  std::size_t request_count() const;
  int max_concurrent_connections() const { return max_active_.load(); }
  int connections() const { return conn_serial_.load(); }

 private:
  void AcceptLoop();
  void Serve(int fd, int serial);

  TestHandler handler_;
  std::string host_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  mutable std::mutex mu_;
  std::vector<TestRequest> requests_;
  std::vector<std::thread> workers_;
  std::vector<int> fds_;
  std::atomic<int> active_{0};
  std::atomic<int> max_active_{0};
  std::atomic<int> conn_serial_{0};
};

// Answers a GET with Range `bytes=a-b` over `blob` as a correct server does
// (206 + Content-Range; 200 without Range; 416 past the end).
TestResponse ServeBlobRange(const std::string& blob, const TestRequest& req);

// Parses "bytes=a-b" (b optional). False if malformed.
bool ParseRangeHeader(const std::string& value, std::uint64_t* first, std::optional<std::uint64_t>* last);

// Deterministic pseudo-random bytes.
std::string MakeBlob(std::size_t size, std::uint32_t seed);

// A fake Hugging Face Hub on 127.0.0.1 plus a fake CDN on 127.0.0.2 (another
// host): revision API, paged tree API, /resolve/ answering 302 to signed CDN
// URLs for LFS files and 200 for regular files, CDN serving ranges.
// Overrides run first; returning nullopt falls through to the default.
class FakeHub {
 public:
  FakeHub();
  ~FakeHub();

  std::string repo = "org/model";
  std::string commit = "0123456789abcdef0123456789abcdef01234567";
  std::string revision_name = "main";    // also accepted: refs/pr/1 (encoded)
  std::map<std::string, std::string> lfs_files;      // path -> bytes (via CDN)
  std::map<std::string, std::string> regular_files;  // path -> bytes (hub 200)
  std::size_t tree_page_size = 1000;
  std::string required_token;  // non-empty: hub answers 401 without it
  std::atomic<int> signature{1};  // bump to invalidate old CDN URLs (403)

  std::function<std::optional<TestResponse>(const TestRequest&)> hub_override;
  std::function<std::optional<TestResponse>(const TestRequest&)> cdn_override;

  std::string endpoint() const { return hub_->base_url(); }
  TestHttpServer& hub() { return *hub_; }
  TestHttpServer& cdn() { return *cdn_; }
  // Requests whose target contains `needle`.
  int CountHub(const std::string& method, const std::string& needle) const;
  int CountCdn(const std::string& needle) const;

 private:
  TestResponse HandleHub(const TestRequest& req);
  TestResponse HandleCdn(const TestRequest& req);
  std::unique_ptr<TestHttpServer> hub_;
  std::unique_ptr<TestHttpServer> cdn_;
};

}  // namespace exlr8::testing
