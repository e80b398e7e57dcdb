// Helpers for the tests of `exlr8d serve`: the server as a separate process,
// and HTTP requests to it over its Unix socket or loopback port (libcurl).
#pragma once

#include <curl/curl.h>
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "format/json.h"

namespace exlr8 {

// A running `exlr8d serve`; SIGTERM and reaped on destruction. Its stderr
// goes to `stderr_file` when given (appended), else to the test's stderr.
class ServeProcess {
 public:
  explicit ServeProcess(const std::filesystem::path& cache,
                        std::vector<std::string> extra = {"--listen", "127.0.0.1:0"},
                        const std::string& stderr_file = "") {
    int out[2];
    EXPECT_EQ(::pipe(out), 0);
    const std::string bin = std::string(EXLR8_BIN_DIR) + "/exlr8d";
    std::vector<std::string> args = {bin, "serve", "--cache", cache.string()};
    args.insert(args.end(), extra.begin(), extra.end());
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(out[1], 1);
      ::close(out[0]);
      if (!stderr_file.empty()) {
        const int err = ::open(stderr_file.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (err >= 0) ::dup2(err, 2);
      }
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(bin.c_str(), argv.data());
      ::_exit(127);
    }
    ::close(out[1]);
    // The ready line, or EOF if it exited.
    char c;
    while (::read(out[0], &c, 1) == 1 && c != '\n') line_ += c;
    ::close(out[0]);
    const auto at = line_.find("http://127.0.0.1:");
    if (at != std::string::npos) port_ = std::stoi(line_.substr(at + 17));
  }
  ~ServeProcess() { Stop(); }

  // Exit status after SIGTERM (or after it exited on its own).
  int Stop() { return Signal(SIGTERM); }
  // kill -9: no chance to clean up anything.
  int Kill() { return Signal(SIGKILL); }
  const std::string& ready_line() const { return line_; }
  int port() const { return port_; }
  std::string base() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  int Signal(int sig) {
    if (pid_ <= 0) return status_;
    ::kill(pid_, sig);
    int w = 0;
    ::waitpid(pid_, &w, 0);
    pid_ = -1;
    status_ = WIFEXITED(w) ? WEXITSTATUS(w) : 128 + WTERMSIG(w);
    return status_;
  }

  pid_t pid_ = -1;
  std::string line_;
  int port_ = 0;
  int status_ = -1;
};

struct HttpAnswer {
  long status = 0;
  std::string body;
};

inline std::size_t CollectBody(char* p, std::size_t size, std::size_t n, void* ud) {
  static_cast<std::string*>(ud)->append(p, size * n);
  return size * n;
}

// One request; `unix_socket` non-empty: over that socket instead of TCP.
inline HttpAnswer Http(const std::string& url, const std::string& method = "GET", const std::string& unix_socket = "",
                       const std::string& body = "") {
  HttpAnswer a;
  CURL* c = curl_easy_init();
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method.c_str());
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, &CollectBody);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &a.body);
  curl_easy_setopt(c, CURLOPT_TIMEOUT, 10L);
  curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
  if (!body.empty()) {
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body.c_str());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
  }
  if (!unix_socket.empty()) curl_easy_setopt(c, CURLOPT_UNIX_SOCKET_PATH, unix_socket.c_str());
  if (curl_easy_perform(c) == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &a.status);
  curl_easy_cleanup(c);
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

}  // namespace exlr8
