// Helpers for the tests of `exlr8d serve`: the server as a separate process,
// and HTTP requests to it over its Unix socket or loopback port (libcurl),
// which send the bearer token of the server on that port as a client with
// its token file would (ServeProcess registers it; RegisterApiToken for a
// server of the test's own).
#pragma once

#include <curl/curl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <strings.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "format/json.h"
#include "tests/daemon/child_process.h"

namespace exlr8 {

// The bearer tokens of the servers on 127.0.0.1 ports, which Http sends.
class ApiTokens {
 public:
  static void Set(int port, const std::string& token) {
    std::lock_guard<std::mutex> l(mu());
    map()[port] = token;
  }
  static void Forget(int port) {
    std::lock_guard<std::mutex> l(mu());
    map().erase(port);
  }
  static std::string Get(int port) {
    std::lock_guard<std::mutex> l(mu());
    auto it = map().find(port);
    return it == map().end() ? std::string() : it->second;
  }

 private:
  static std::mutex& mu() {
    static std::mutex m;
    return m;
  }
  static std::map<int, std::string>& map() {
    static std::map<int, std::string> m;
    return m;
  }
};

// A running `exlr8d serve`; SIGTERM and reaped on destruction. Its stderr
// goes to `stderr_file` when given (appended), else to the test's stderr.
class ServeProcess {
 public:
  explicit ServeProcess(const std::filesystem::path& cache,
                        std::vector<std::string> extra = {"--listen", "127.0.0.1:0"},
                        const std::string& stderr_file = "")
      : child_("exlr8d", Args(cache, std::move(extra)), stderr_file) {
    child_.ReadUntil("\n");  // the ready line, or EOF if it exited
    line_ = child_.printed();
    if (!line_.empty() && line_.back() == '\n') line_.pop_back();
    const auto at = line_.find("http://127.0.0.1:");
    if (at != std::string::npos) port_ = std::stoi(line_.substr(at + 17));
    // "...; API token in PATH)": what a client of the port reads.
    const std::string note = "; API token in ";
    if (const auto t = line_.rfind(note); t != std::string::npos && line_.back() == ')') {
      token_file_ = line_.substr(t + note.size(), line_.size() - 1 - t - note.size());
      std::ifstream in(token_file_);
      std::getline(in, token_);
      if (port_ > 0) ApiTokens::Set(port_, token_);
    }
  }
  ~ServeProcess() {
    if (port_ > 0) ApiTokens::Forget(port_);
  }

  // Exit status after SIGTERM (or after it exited on its own).
  int Stop() { return child_.Signal(SIGTERM); }
  // kill -9: no chance to clean up anything.
  int Kill() { return child_.Signal(SIGKILL); }
  const std::string& ready_line() const { return line_; }
  int port() const { return port_; }
  std::string base() const { return "http://127.0.0.1:" + std::to_string(port_); }
  // The TCP listener's token and the file the ready line named ("" without).
  const std::string& token() const { return token_; }
  const std::string& token_file() const { return token_file_; }

 private:
  static std::vector<std::string> Args(const std::filesystem::path& cache, std::vector<std::string> extra) {
    std::vector<std::string> args = {"serve", "--cache", cache.string()};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }

  ChildProcess child_;
  std::string line_;
  int port_ = 0;
  std::string token_file_, token_;
};

struct HttpAnswer {
  long status = 0;
  std::string body;
  std::string content_type;
  std::map<std::string, std::string> headers;  // by lower-case name (the last of a name)
};

inline std::size_t CollectBody(char* p, std::size_t size, std::size_t n, void* ud) {
  static_cast<std::string*>(ud)->append(p, size * n);
  return size * n;
}

inline std::size_t CollectHeader(char* p, std::size_t size, std::size_t n, void* ud) {
  std::string line(p, size * n);
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
  if (const auto colon = line.find(':'); colon != std::string::npos) {
    std::string name = line.substr(0, colon);
    for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    std::string value = line.substr(colon + 1);
    while (!value.empty() && value.front() == ' ') value.erase(0, 1);
    (*static_cast<std::map<std::string, std::string>*>(ud))[name] = value;
  }
  return size * n;
}

struct HttpOptions {
  std::vector<std::string> headers;  // more request headers, "Name: value" ("Name:" drops curl's own)
  bool token = true;                 // over TCP, the bearer token of the server on the URL's port (ApiTokens)
};

// The port of "http://127.0.0.1:PORT/..."; 0 for anything else.
inline int LoopbackPort(const std::string& url) {
  const std::string prefix = "http://127.0.0.1:";
  if (url.rfind(prefix, 0) != 0) return 0;
  return std::atoi(url.c_str() + prefix.size());
}

// One request; `unix_socket` non-empty: over that socket instead of TCP. A
// body goes as application/json unless `options` names a Content-Type.
inline HttpAnswer Http(const std::string& url, const std::string& method = "GET",
                       const std::string& unix_socket = "", const std::string& body = "",
                       const HttpOptions& options = {}) {
  HttpAnswer a;
  CURL* c = curl_easy_init();
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  if (method == "HEAD") {
    curl_easy_setopt(c, CURLOPT_NOBODY, 1L);  // a header only: never wait for a body
  } else {
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method.c_str());
  }
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, &CollectBody);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &a.body);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, &CollectHeader);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &a.headers);
  curl_easy_setopt(c, CURLOPT_TIMEOUT, 10L);
  curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
  if (!body.empty()) {
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body.c_str());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
  }
  curl_slist* headers = nullptr;
  bool typed = false;
  for (const std::string& h : options.headers) {
    headers = curl_slist_append(headers, h.c_str());
    if (h.size() >= 13 && strncasecmp(h.c_str(), "Content-Type:", 13) == 0) typed = true;
  }
  if (!body.empty() && !typed) headers = curl_slist_append(headers, "Content-Type: application/json");
  const std::string token = unix_socket.empty() && options.token ? ApiTokens::Get(LoopbackPort(url)) : "";
  if (!token.empty()) headers = curl_slist_append(headers, ("Authorization: Bearer " + token).c_str());
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
  if (!unix_socket.empty()) curl_easy_setopt(c, CURLOPT_UNIX_SOCKET_PATH, unix_socket.c_str());
  if (curl_easy_perform(c) == CURLE_OK) {
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &a.status);
    const char* type = nullptr;
    curl_easy_getinfo(c, CURLINFO_CONTENT_TYPE, &type);
    if (type != nullptr) a.content_type = type;
  }
  curl_easy_cleanup(c);
  curl_slist_free_all(headers);
  return a;
}

inline JsonValue Parse(const HttpAnswer& a) {
  auto v = ParseJson(a.body);
  EXPECT_TRUE(v.ok()) << a.status << " " << a.body;
  return v.ok() ? *v : JsonValue();
}

// Calls `done` every 50 ms until it returns true or `seconds` pass.
inline bool WaitFor(const std::function<bool()>& done, int seconds = 30) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < until) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return done();
}

// A /metrics body as Prometheus reads it: "series value" per sample line.
// Checks the grouping the text format demands: every sample follows the
// # TYPE line of its own family, and each family is declared once, its
// samples together.
inline std::map<std::string, std::string> PrometheusSamples(const std::string& body) {
  std::map<std::string, std::string> out;
  std::set<std::string> declared;
  std::string family;
  std::istringstream lines(body);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("# TYPE ", 0) == 0) {
      family = line.substr(7, line.find(' ', 7) - 7);
      EXPECT_TRUE(declared.insert(family).second) << "family declared twice: " << family;
      continue;
    }
    if (line.empty() || line[0] == '#') continue;
    const std::string name = line.substr(0, line.find_first_of("{ "));
    EXPECT_EQ(name, family) << "a sample outside its family's group: " << line;
    const auto space = line.rfind(' ');
    EXPECT_NE(space, std::string::npos) << line;
    if (space != std::string::npos) out[line.substr(0, space)] = line.substr(space + 1);
  }
  return out;
}

}  // namespace exlr8
