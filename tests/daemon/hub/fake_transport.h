// FakeHubTransport: an in-memory Hugging Face hub and CDN behind the
// HttpTransport seam (daemon/hub/http_transport.h), for RangeFetcher and
// HubClient unit tests without sockets or sleeps.
//
//   FakeHubTransport net(hub->ResolveUrl(""), hub->commit());
//   net.lfs_files["w.safetensors"] = bytes;   // resolve: 302 to the CDN
//   net.regular_files["config.json"] = bytes; // resolve: 200 from the hub
//   net.FailCall(3, {503, {"Retry-After: 30"}}); // the 3rd request gets this
//   net.canned[api_url] = {200, {}, R"({"sha": "..."})"}; // any other route
//   RangeFetcherOptions o; o.transport = &net; o.clock = &fake_clock;
//
// Answers as the hub does: HEAD of `{resolve_prefix}{path}` is 302 to
// `{cdn}{path}` with X-Linked-Size and X-Repo-Commit for LFS files, 200
// with Content-Length for regular ones; a GET with a range is 206 with
// Content-Range (200 and the whole file without one). Bodies go out in
// `chunk` bytes at a time; a paused transfer continues on the next Perform
// after Resume. A `canned` URL gets its answer as given (Content-Length
// added unless `no_length`); any other URL is 404.
//
// Time: with a FakeClock, Wait advances it by the timeout it is given (the
// fetcher only waits when nothing is in flight), so a test of a 30 s
// Retry-After runs in microseconds and the clock shows the wait.
//
// Thread rules: Wake from any thread; the rest on one thread at a time: the
// fetcher's Run thread, the thread of a HubClient request (HubRequester
// holds an injected transport for the whole exchange), or the test's
// between them.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "daemon/hub/http_transport.h"
#include "tests/daemon/base/fake_clock.h"

namespace exlr8::testing {

class FakeHubTransport final : public HttpTransport {
 public:
  // What the Nth request gets instead of its own answer: status 0 and no
  // reset_after, no answer at all (the connection was reset); a status, that
  // answer with `headers` and `body` (no Content-Length); reset_after, its
  // own answer cut (reset) after that many body bytes.
  struct Fault {
    long status = 0;
    std::vector<std::string> headers;  // "Name: value"
    std::optional<std::size_t> reset_after;
    std::string body;
  };
  // A whole answer for one URL (the API routes: revision, tree pages).
  struct Canned {
    long status = 200;
    std::vector<std::string> headers;
    std::string body;
    bool no_length = false;  // no Content-Length: the body ends with the connection
  };

  FakeHubTransport(std::string resolve_prefix, std::string commit, FakeClock* clock = nullptr)
      : resolve_prefix_(std::move(resolve_prefix)), commit_(std::move(commit)), clock_(clock) {}

  std::map<std::string, std::string> lfs_files;      // path -> bytes, via the CDN
  std::map<std::string, std::string> regular_files;  // path -> bytes, from the hub
  std::map<std::string, Canned> canned;              // exact URL -> answer
  std::string cdn = "http://cdn.test/";
  std::size_t chunk = 16 * 1024;

  // The `n`th request (1-based, in the order started) gets `fault` instead.
  void FailCall(int n, Fault fault) { faults_[n] = std::move(fault); }
  // Every request started, in order.
  const std::vector<HttpRequest>& calls() const { return calls_; }
  int CountCalls(bool head_only) const {
    return static_cast<int>(std::count_if(calls_.begin(), calls_.end(),
                                          [&](const HttpRequest& r) { return r.head_only == head_only; }));
  }

  // When each request started, on the FakeClock (empty without one).
  const std::vector<Clock::TimePoint>& call_times() const { return call_times_; }

  void Start(const HttpRequest& req, HttpTransfer* t) override {
    calls_.push_back(req);
    if (clock_ != nullptr) call_times_.push_back(clock_->Now());
    t->head.Reset();
    t->multiplexed = false;
    Live live;
    live.transfer = t;
    Answer(req, static_cast<int>(calls_.size()), &live);
    live_.push_back(std::move(live));
    max_live_ = std::max(max_live_, static_cast<int>(live_.size()));
  }

  void Resume(HttpTransfer* t) override {
    for (Live& l : live_)
      if (l.transfer == t) l.paused = false;
  }

  void Abandon(HttpTransfer* t) override {
    live_.erase(std::remove_if(live_.begin(), live_.end(), [&](const Live& l) { return l.transfer == t; }),
                live_.end());
  }

  Result<int> Perform() override {
    int ended = 0;
    if (clock_ != nullptr && round_trip.count() > 0 && !live_.empty()) clock_->Advance(round_trip);
    // OnDone may start new transfers: take the ones that run now.
    std::vector<Live> now;
    now.swap(live_);
    std::vector<Live> keep;
    for (std::size_t i = 0; i < now.size(); ++i) {
      Live& l = now[i];
      if (l.paused) {
        keep.push_back(std::move(l));
        continue;
      }
      TransferEnd end;
      bool done = true;
      while (l.pos < l.body.size()) {
        const std::size_t n = std::min(chunk, l.body.size() - l.pos);
        const HttpTransfer::Body b = l.transfer->OnBody(l.body.data() + l.pos, n);
        if (b == HttpTransfer::Body::kPause) {
          l.paused = true;
          done = false;
          break;
        }
        if (b == HttpTransfer::Body::kStop) {
          end.ok = false;
          end.error = "Failed writing received data to disk/application";
          break;
        }
        l.pos += n;
      }
      if (!done) {
        keep.push_back(std::move(l));
        continue;
      }
      if (end.ok && l.reset) {
        end.ok = false;
        end.error = "Connection reset by peer";
        end.no_answer = l.transfer->head.status == 0;
      }
      end.http_status = l.transfer->head.status;
      if (end.http_status > 0) end.answer_wait = l.from_cdn ? cdn_answer_wait : hub_answer_wait;
      ++ended;
      l.transfer->OnDone(end);
    }
    keep.insert(keep.end(), std::make_move_iterator(live_.begin()), std::make_move_iterator(live_.end()));
    live_.swap(keep);
    return ended;
  }

  Status Wait(std::chrono::milliseconds timeout) override {
    if (woken_.exchange(false)) return Status::Ok();
    if (clock_ != nullptr) clock_->Advance(timeout);
    waited_ += timeout;
    return Status::Ok();
  }

  void Wake() override { woken_.store(true); }

  void SetStreamsPerConnection(int s) override { streams_set_.push_back(s); }
  // Every SetStreamsPerConnection, in order.
  const std::vector<int>& streams_set() const { return streams_set_; }
  // The answer wait (TransferEnd::answer_wait) reported for the hub's
  // answers and the CDN's; negative: not measured.
  std::chrono::microseconds hub_answer_wait{-1};
  std::chrono::microseconds cdn_answer_wait{-1};

  std::chrono::milliseconds waited() const { return waited_; }
  // The most transfers that were in flight at once.
  int max_live() const { return max_live_; }
  // With a FakeClock: each Perform that finds transfers in flight takes
  // this long, so every transfer costs about one round trip and throughput
  // grows with the transfers in flight (a path bound by its round trip).
  std::chrono::milliseconds round_trip{0};

 private:
  struct Live {
    HttpTransfer* transfer = nullptr;
    std::string body;
    std::size_t pos = 0;
    bool paused = false;
    bool reset = false;  // no answer: the transfer fails
    bool from_cdn = false;
  };

  void Head(HttpTransfer* t, long status, const std::vector<std::string>& headers) {
    t->head.AddLine("HTTP/1.1 " + std::to_string(status) + " X");
    for (const std::string& h : headers) t->head.AddLine(h);
  }

  void Answer(const HttpRequest& req, int call, Live* live) {
    HttpTransfer* t = live->transfer;
    if (auto f = faults_.find(call); f != faults_.end() && !f->second.reset_after) {
      if (f->second.status == 0) {
        live->reset = true;
      } else {
        Head(t, f->second.status, f->second.headers);
        live->body = f->second.body;
      }
      return;
    }
    if (auto c = canned.find(req.url); c != canned.end()) {
      std::vector<std::string> headers = c->second.headers;
      if (!c->second.no_length) headers.push_back("Content-Length: " + std::to_string(c->second.body.size()));
      Head(t, c->second.status, headers);
      if (!req.head_only) live->body = c->second.body;
      return;
    }
    const std::string* bytes = nullptr;
    bool on_hub = false;
    std::string path;
    if (req.url.rfind(resolve_prefix_, 0) == 0) {
      path = req.url.substr(resolve_prefix_.size());
      on_hub = true;
      if (auto it = regular_files.find(path); it != regular_files.end()) bytes = &it->second;
      if (auto it = lfs_files.find(path); it != lfs_files.end()) {
        if (req.head_only) {
          Head(t, 302,
               {"Location: " + cdn + path, "X-Linked-Size: " + std::to_string(it->second.size()),
                "X-Repo-Commit: " + commit_, "Content-Length: 0"});
          return;
        }
        bytes = &it->second;
      }
    } else if (req.url.rfind(cdn, 0) == 0) {
      path = req.url.substr(cdn.size());
      live->from_cdn = true;
      if (auto it = lfs_files.find(path); it != lfs_files.end()) bytes = &it->second;
    }
    if (bytes == nullptr) {
      Head(t, 404, {"X-Error-Code: EntryNotFound"});
      return;
    }
    std::vector<std::string> headers;
    if (on_hub) headers.push_back("X-Repo-Commit: " + commit_);
    if (req.head_only) {
      headers.push_back("Content-Length: " + std::to_string(bytes->size()));
      Head(t, 200, headers);
      return;
    }
    if (!req.has_range) {
      headers.push_back("Content-Length: " + std::to_string(bytes->size()));
      Head(t, 200, headers);
      live->body = *bytes;
      CutIfFaulted(call, live);
      return;
    }
    if (req.range_first >= bytes->size()) {
      headers.push_back("Content-Range: bytes */" + std::to_string(bytes->size()));
      Head(t, 416, headers);
      return;
    }
    const std::uint64_t last =
        req.range_to_end ? bytes->size() - 1 : std::min<std::uint64_t>(req.range_last, bytes->size() - 1);
    headers.push_back("Content-Range: bytes " + std::to_string(req.range_first) + "-" + std::to_string(last) +
                      "/" + std::to_string(bytes->size()));
    headers.push_back("Content-Length: " + std::to_string(last - req.range_first + 1));
    Head(t, 206, headers);
    live->body = bytes->substr(req.range_first, last - req.range_first + 1);
    CutIfFaulted(call, live);
  }

  // A fault with reset_after: the body ends there, and the connection is reset.
  void CutIfFaulted(int call, Live* live) {
    if (auto f = faults_.find(call); f != faults_.end() && *f->second.reset_after < live->body.size()) {
      live->body.resize(*f->second.reset_after);
      live->reset = true;
    }
  }

  const std::string resolve_prefix_;
  const std::string commit_;
  FakeClock* const clock_;
  std::map<int, Fault> faults_;
  std::vector<HttpRequest> calls_;
  std::vector<Clock::TimePoint> call_times_;
  std::vector<Live> live_;
  std::vector<int> streams_set_;
  std::atomic<bool> woken_{false};
  int max_live_ = 0;
  std::chrono::milliseconds waited_{0};
};

}  // namespace exlr8::testing
