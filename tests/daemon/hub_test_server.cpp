#include "tests/daemon/hub_test_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <random>
#include <stdexcept>

namespace exlr8::testing {
namespace {

bool SendAll(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w <= 0) return false;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

const char* Reason(int status) {
  switch (status) {
    case 200: return "OK";
    case 206: return "Partial Content";
    case 302: return "Found";
    case 307: return "Temporary Redirect";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 416: return "Range Not Satisfiable";
    case 429: return "Too Many Requests";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Status";
  }
}

}  // namespace

TestHttpServer::TestHttpServer(TestHandler handler, const std::string& host)
    : handler_(std::move(handler)), host_(host) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  if (listen_fd_ < 0) throw std::runtime_error("socket");
  int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = 0;
  if (::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) throw std::runtime_error("inet_pton");
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) throw std::runtime_error("bind");
  if (::listen(listen_fd_, 128) != 0) throw std::runtime_error("listen");
  socklen_t len = sizeof(addr);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  acceptor_ = std::thread([this] { AcceptLoop(); });
}

TestHttpServer::~TestHttpServer() {
  stop_.store(true);
  ::shutdown(listen_fd_, SHUT_RDWR);
  ::close(listen_fd_);
  acceptor_.join();
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
  }
  for (std::thread& t : workers_) t.join();
}

std::string TestHttpServer::host_port() const { return host_ + ":" + std::to_string(port_); }
std::string TestHttpServer::base_url() const { return "http://" + host_port(); }

std::vector<TestRequest> TestHttpServer::requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return requests_;
}

std::size_t TestHttpServer::request_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return requests_.size();
}

void TestHttpServer::AcceptLoop() {
  while (!stop_.load()) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    const int fd = ::accept(listen_fd_, nullptr, nullptr);
    if (fd < 0) continue;
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    const int serial = ++conn_serial_;
    std::lock_guard<std::mutex> lock(mu_);
    fds_.push_back(fd);
    workers_.emplace_back([this, fd, serial] { Serve(fd, serial); });
  }
}

void TestHttpServer::Serve(int fd, int serial) {
  const int now_active = ++active_;
  int prev = max_active_.load();
  while (prev < now_active && !max_active_.compare_exchange_weak(prev, now_active)) {
  }
  std::string buf;
  char tmp[16384];
  bool open = true;
  while (open && !stop_.load()) {
    // Read one request head.
    std::size_t end;
    while ((end = buf.find("\r\n\r\n")) == std::string::npos) {
      const ssize_t r = ::recv(fd, tmp, sizeof(tmp), 0);
      if (r <= 0) {
        open = false;
        break;
      }
      buf.append(tmp, static_cast<std::size_t>(r));
    }
    if (!open) break;
    const std::string head = buf.substr(0, end);
    buf.erase(0, end + 4);
    TestRequest req;
    req.connection = serial;
    std::size_t line_end = head.find("\r\n");
    const std::string request_line = head.substr(0, line_end);
    const std::size_t sp1 = request_line.find(' ');
    const std::size_t sp2 = request_line.find(' ', sp1 + 1);
    req.method = request_line.substr(0, sp1);
    req.target = request_line.substr(sp1 + 1, sp2 - sp1 - 1);
    std::size_t pos = line_end == std::string::npos ? head.size() : line_end + 2;
    while (pos < head.size()) {
      std::size_t e = head.find("\r\n", pos);
      if (e == std::string::npos) e = head.size();
      const std::string line = head.substr(pos, e - pos);
      const std::size_t colon = line.find(':');
      if (colon != std::string::npos) {
        std::string name = line.substr(0, colon);
        for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        std::string value = line.substr(colon + 1);
        value.erase(0, value.find_first_not_of(' '));
        req.headers[name] = value;
      }
      pos = e + 2;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      requests_.push_back(req);
    }
    TestResponse resp = handler_(req);
    if (resp.delay.count() > 0) std::this_thread::sleep_for(resp.delay);
    std::string out = "HTTP/1.1 " + std::to_string(resp.status) + " " + Reason(resp.status) + "\r\n";
    for (const auto& [k, v] : resp.headers) out += k + ": " + v + "\r\n";
    if (!resp.no_content_length)
      out += "Content-Length: " + std::to_string(resp.content_length.value_or(resp.body.size())) + "\r\n";
    if (resp.close) out += "Connection: close\r\n";
    out += "\r\n";
    if (!SendAll(fd, out.data(), out.size())) break;
    if (req.method != "HEAD") {
      const std::size_t n = std::min(resp.body.size(), resp.send_only.value_or(resp.body.size()));
      if (resp.bytes_per_second == 0) {
        if (!SendAll(fd, resp.body.data(), n)) break;
      } else {
        const std::size_t chunk = std::max<std::size_t>(1024, resp.bytes_per_second / 50);
        for (std::size_t off = 0; off < n; off += chunk) {
          const std::size_t c = std::min(chunk, n - off);
          if (!SendAll(fd, resp.body.data() + off, c)) break;
          std::this_thread::sleep_for(std::chrono::microseconds(c * 1'000'000 / resp.bytes_per_second));
        }
      }
      if (resp.send_only) break;  // cut: close the connection
    }
    if (resp.close || req.Header("connection") == "close") break;
  }
  ::shutdown(fd, SHUT_RDWR);
  ::close(fd);
  {
    std::lock_guard<std::mutex> lock(mu_);
    fds_.erase(std::remove(fds_.begin(), fds_.end(), fd), fds_.end());
  }
  --active_;
}

bool ParseRangeHeader(const std::string& value, std::uint64_t* first, std::optional<std::uint64_t>* last) {
  if (value.rfind("bytes=", 0) != 0) return false;
  const std::string spec = value.substr(6);
  if (spec.find(',') != std::string::npos) return false;
  const std::size_t dash = spec.find('-');
  if (dash == std::string::npos || dash == 0) return false;
  *first = std::stoull(spec.substr(0, dash));
  const std::string rest = spec.substr(dash + 1);
  *last = rest.empty() ? std::nullopt : std::optional<std::uint64_t>(std::stoull(rest));
  return true;
}

TestResponse ServeBlobRange(const std::string& blob, const TestRequest& req) {
  TestResponse r;
  const std::string range = req.Header("range");
  if (range.empty()) {
    r.status = 200;
    r.body = blob;
    return r;
  }
  std::uint64_t first = 0;
  std::optional<std::uint64_t> last;
  if (!ParseRangeHeader(range, &first, &last) || first >= blob.size()) {
    r.status = 416;
    r.headers.emplace_back("Content-Range", "bytes */" + std::to_string(blob.size()));
    return r;
  }
  const std::uint64_t l = std::min<std::uint64_t>(last.value_or(blob.size() - 1), blob.size() - 1);
  r.status = 206;
  r.headers.emplace_back("Content-Range", "bytes " + std::to_string(first) + "-" + std::to_string(l) + "/" +
                                              std::to_string(blob.size()));
  r.body = blob.substr(first, l - first + 1);
  return r;
}

std::string MakeBlob(std::size_t size, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(size, '\0');
  for (char& c : s) c = static_cast<char>(rng() & 0xff);
  return s;
}

}  // namespace exlr8::testing

namespace exlr8::testing {
namespace {

std::string PercentDecode(const std::string& s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      out.push_back(static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16)));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

std::string Encode(const std::string& s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~' || c == '/') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    }
  }
  return out;
}

TestResponse Json(int status, std::string body) {
  TestResponse r;
  r.status = status;
  r.headers.emplace_back("Content-Type", "application/json");
  r.body = std::move(body);
  return r;
}

TestResponse ErrorCode(int status, const std::string& code) {
  TestResponse r = Json(status, "{\"error\":\"" + code + "\"}");
  r.headers.emplace_back("X-Error-Code", code);
  return r;
}

std::string FakeSha256(const std::string& path) {
  std::string h;
  std::uint64_t x = std::hash<std::string>{}(path);
  static const char* hex = "0123456789abcdef";
  for (int i = 0; i < 64; ++i) {
    h.push_back(hex[x & 15]);
    x = x * 6364136223846793005ull + 1442695040888963407ull;
  }
  return h;
}

}  // namespace

FakeHub::FakeHub() {
  hub_ = std::make_unique<TestHttpServer>([this](const TestRequest& r) { return HandleHub(r); }, "127.0.0.1");
  cdn_ = std::make_unique<TestHttpServer>([this](const TestRequest& r) { return HandleCdn(r); }, "127.0.0.2");
}

FakeHub::~FakeHub() {
  hub_.reset();
  cdn_.reset();
}

int FakeHub::CountHub(const std::string& method, const std::string& needle) const {
  int n = 0;
  for (const TestRequest& r : hub_->requests()) {
    if (r.method == method && r.target.find(needle) != std::string::npos) ++n;
  }
  return n;
}

int FakeHub::CountCdn(const std::string& needle) const {
  int n = 0;
  for (const TestRequest& r : cdn_->requests()) {
    if (r.target.find(needle) != std::string::npos) ++n;
  }
  return n;
}

TestResponse FakeHub::HandleHub(const TestRequest& req) {
  if (hub_override) {
    if (auto r = hub_override(req)) return *r;
  }
  if (!required_token.empty() && req.Header("authorization") != "Bearer " + required_token) {
    return ErrorCode(401, "Unauthorized");
  }
  const std::string api = "/api/models/" + repo + "/";
  std::string target = req.target;
  std::string query;
  if (auto q = target.find('?'); q != std::string::npos) {
    query = target.substr(q + 1);
    target = target.substr(0, q);
  }
  if (target.rfind("/api/models/", 0) == 0 && target.rfind(api, 0) != 0) return ErrorCode(404, "RepoNotFound");
  if (target.rfind(api + "revision/", 0) == 0) {
    const std::string rev = target.substr(api.size() + 9);
    std::string want;
    for (char c : revision_name) {
      if (c == '/') want += "%2F";
      else want.push_back(c);
    }
    if (rev != want && rev != commit) return ErrorCode(404, "RevisionNotFound");
    return Json(200, "{\"_id\":\"x\",\"id\":\"" + repo + "\",\"sha\":\"" + commit + "\",\"siblings\":[]}");
  }
  if (target.rfind(api + "tree/", 0) == 0) {
    if (target != api + "tree/" + commit) return ErrorCode(404, "RevisionNotFound");
    std::vector<std::string> entries;
    for (const auto& [path, bytes] : regular_files) {
      entries.push_back("{\"type\":\"file\",\"oid\":\"abc\",\"size\":" + std::to_string(bytes.size()) +
                        ",\"path\":\"" + path + "\"}");
    }
    for (const auto& [path, bytes] : lfs_files) {
      entries.push_back("{\"type\":\"file\",\"oid\":\"def\",\"size\":" + std::to_string(bytes.size()) +
                        ",\"lfs\":{\"oid\":\"" + FakeSha256(path) + "\",\"size\":" + std::to_string(bytes.size()) +
                        ",\"pointerSize\":134},\"path\":\"" + path + "\"}");
    }
    std::size_t cursor = 0;
    if (auto c = query.find("cursor="); c != std::string::npos) cursor = std::stoul(query.substr(c + 7));
    const std::size_t end = std::min(entries.size(), cursor + tree_page_size);
    std::string body = "[";
    for (std::size_t i = cursor; i < end; ++i) body += (i > cursor ? "," : "") + entries[i];
    body += "]";
    TestResponse r = Json(200, body);
    if (end < entries.size()) {
      r.headers.emplace_back("Link", "<" + endpoint() + api + "tree/" + commit +
                                         "?recursive=true&cursor=" + std::to_string(end) + ">; rel=\"next\"");
    }
    return r;
  }
  const std::string resolve = "/" + repo + "/resolve/";
  if (target.rfind(resolve, 0) == 0) {
    const std::string rest = target.substr(resolve.size());
    const std::size_t slash = rest.find('/');
    if (rest.substr(0, slash) != commit) return ErrorCode(404, "RevisionNotFound");
    const std::string path = PercentDecode(rest.substr(slash + 1));
    if (auto it = lfs_files.find(path); it != lfs_files.end()) {
      TestResponse r;
      r.status = 302;
      r.headers.emplace_back("Location", cdn_->base_url() + "/blobs/" + Encode(path) +
                                             "?sig=" + std::to_string(signature.load()) + "&Expires=9999");
      r.headers.emplace_back("X-Linked-Size", std::to_string(it->second.size()));
      r.headers.emplace_back("X-Linked-Etag", "\"" + FakeSha256(path) + "\"");
      r.headers.emplace_back("X-Repo-Commit", commit);
      return r;
    }
    if (auto it = regular_files.find(path); it != regular_files.end()) {
      TestResponse r = ServeBlobRange(it->second, req);
      r.headers.emplace_back("X-Repo-Commit", commit);
      r.headers.emplace_back("ETag", "\"abc\"");
      return r;
    }
    return ErrorCode(404, "EntryNotFound");
  }
  return ErrorCode(404, "RepoNotFound");
}

TestResponse FakeHub::HandleCdn(const TestRequest& req) {
  if (cdn_override) {
    if (auto r = cdn_override(req)) return *r;
  }
  std::string target = req.target;
  std::string query;
  if (auto q = target.find('?'); q != std::string::npos) {
    query = target.substr(q + 1);
    target = target.substr(0, q);
  }
  if (query.find("sig=" + std::to_string(signature.load()) + "&") == std::string::npos) {
    TestResponse r;
    r.status = 403;
    r.body = "<Error>AccessDenied: Request has expired</Error>";
    return r;
  }
  if (target.rfind("/blobs/", 0) != 0) return ErrorCode(404, "NoSuchKey");
  const auto it = lfs_files.find(PercentDecode(target.substr(7)));
  if (it == lfs_files.end()) return ErrorCode(404, "NoSuchKey");
  return ServeBlobRange(it->second, req);
}

}  // namespace exlr8::testing
