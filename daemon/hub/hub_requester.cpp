#include "daemon/hub/hub_requester.h"

#include <algorithm>
#include <random>
#include <utility>

#include "daemon/hub/curl_transport.h"
#include "daemon/hub/hub_client.h"  // HubOutage
#include "format/json.h"

namespace exlr8 {
namespace {

using std::chrono::milliseconds;

// Idle transports kept for later requests (each holds its connections).
constexpr std::size_t kMaxIdleTransports = 8;
// How often a blocked exchange or retry wait looks at the cancel flag.
constexpr milliseconds kCancelPoll{100};

milliseconds Backoff(milliseconds base, int attempt) {
  thread_local std::minstd_rand rng(std::random_device{}());
  const int shift = std::min(attempt, 10);
  const auto cap = std::min<std::int64_t>(base.count() << shift, 60'000);
  // Half fixed, half jitter.
  std::uniform_int_distribution<std::int64_t> jitter(0, std::max<std::int64_t>(cap / 2, 1));
  return milliseconds(cap / 2 + jitter(rng));
}

// The receiving end of one blocking exchange: keeps the body (up to a
// bound) and how the transfer ended.
class BodyTransfer final : public HttpTransfer {
 public:
  explicit BodyTransfer(std::size_t max_body) : max_(max_body) {}
  Body OnBody(const char* data, std::size_t n) override {
    if (body.size() + n > max_) {
      overflow = true;
      return Body::kStop;
    }
    body.append(data, n);
    return Body::kContinue;
  }
  void OnDone(const TransferEnd&) override {}

  std::string body;
  bool overflow = false;

 private:
  const std::size_t max_;
};

}  // namespace

// A pooled transport for one exchange: taken from the idle list (or made),
// given back after.
class HubRequester::Lease {
 public:
  explicit Lease(const HubRequester& r) : r_(r) {
    {
      MutexLock lock(&r_.pool_mu_);
      if (!r_.idle_.empty()) {
        own_ = std::move(r_.idle_.back());
        r_.idle_.pop_back();
      }
    }
    if (own_ == nullptr) {
      CurlTransport::Options o;
      o.max_transfers = 1;  // one exchange at a time; the pool holds the rest
      own_ = std::make_unique<CurlTransport>(r_.settings_, o);
    }
  }
  ~Lease() {
    MutexLock lock(&r_.pool_mu_);
    if (r_.idle_.size() < kMaxIdleTransports) r_.idle_.push_back(std::move(own_));
  }
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;
  HttpTransport& operator*() const { return *own_; }

 private:
  const HubRequester& r_;
  std::unique_ptr<HttpTransport> own_;
};

HubRequester::HubRequester(const HttpSettings& settings, Options options)
    : settings_(settings),
      options_(std::move(options)),
      clock_(options_.clock != nullptr ? options_.clock : &Clock::Real()) {}

HubRequester::~HubRequester() = default;

Result<TransferEnd> HubRequester::Exchange(const HttpRequest& req, HttpTransfer* t,
                                           std::string_view what) const {
  if (options_.transport != nullptr) {
    MutexLock lock(&injected_mu_);
    return Drive(*options_.transport, req, t, what);
  }
  Lease lease(*this);
  return Drive(*lease, req, t, what);
}

Result<TransferEnd> HubRequester::Drive(HttpTransport& transport, const HttpRequest& req, HttpTransfer* t,
                                        std::string_view what) const {
  // Sees the transfer's end for the loop below; hands everything on to `t`.
  struct Watch final : HttpTransfer {
    HttpTransfer* inner = nullptr;
    bool head_given = false;
    bool done = false;
    TransferEnd end;
    void GiveHead() {
      if (head_given) return;
      head_given = true;
      inner->head = head;
      inner->multiplexed = multiplexed;
    }
    Body OnBody(const char* p, std::size_t n) override {
      GiveHead();
      return inner->OnBody(p, n);
    }
    void OnDone(const TransferEnd& e) override {
      GiveHead();
      end = e;
      done = true;
      inner->OnDone(e);
    }
  } watch;
  watch.inner = t;
  if (cancelled()) return CancelledError(std::string(what) + ": cancelled");
  transport.Start(req, &watch);
  while (true) {
    const Result<int> ended = transport.Perform();
    if (!ended.ok()) {
      if (!watch.done) transport.Abandon(&watch);
      return ended.status();
    }
    if (watch.done) return watch.end;
    if (cancelled()) {
      transport.Abandon(&watch);
      return CancelledError(std::string(what) + ": cancelled");
    }
    if (Status s = transport.Wait(kCancelPoll); !s.ok()) {
      transport.Abandon(&watch);
      return s;
    }
  }
}

bool HubRequester::WaitBeforeRetry(std::optional<milliseconds> wait, int attempt) const {
  retries_.fetch_add(1, std::memory_order_relaxed);
  const Clock::TimePoint until = clock_->Deadline(wait ? *wait : Backoff(options_.retry_base, attempt - 1));
  while (clock_->Now() < until) {
    if (cancelled()) return false;
    clock_->SleepUntil(std::min(until, clock_->Deadline(kCancelPoll)));
  }
  return !cancelled();
}

Result<HubRequester::Response> HubRequester::Request(const std::string& url, bool head, std::size_t max_body,
                                                     std::string_view what, bool json, HubOutage* outage,
                                                     std::optional<Tries> tries) const {
  const int max_attempts = tries ? tries->max_attempts : options_.max_attempts;
  HubOutage last_outage = HubOutage::kNone;  // what last_error says of the server
  auto said = [&](HubOutage o) {
    if (outage != nullptr) *outage = o;
  };
  said(HubOutage::kNone);
  HttpRequest req;
  req.url = url;
  req.head_only = head;
  req.timeout = options_.api_timeout;
  if (tries) req.connect_timeout = tries->connect_timeout;
  Status last_error;
  for (int attempt = 1;; ++attempt) {
    BodyTransfer t(max_body);
    EXLR8_ASSIGN_OR_RETURN(const TransferEnd end, Exchange(req, &t, what));
    Response r;
    r.head = t.head;
    r.body = std::move(t.body);
    const long status = end.http_status;
    r.head.status = status;
    if (t.overflow) {
      // No hub answers an API call this large: the server is broken or
      // hostile (Corruption, exit 3), not the local disk full (exit 6).
      return CorruptionError(std::string(what) + ": answer larger than " + std::to_string(max_body) +
                             " bytes, more than any hub API answer holds");
    }
    std::optional<milliseconds> wait;
    if (!end.ok) {
      last_error = IOError(std::string(what) + ": " + end.error);
      if (end.permanent) return last_error;
      last_outage = end.no_answer ? HubOutage::kUnreachable : HubOutage::kNone;
    } else if (IsRetryableHttp(status)) {
      if (status == 429) CountRateLimited();
      last_error = HttpError(status, r.head, what, settings_.ShouldSendToken(url), settings_.token);
      // 408 is the server timing our request out: an answer like any 4xx.
      last_outage = status == 408 ? HubOutage::kNone : HubOutage::kNotNow;
      wait = ThrottleWait(r.head, clock_->WallNow());
      if (wait && *wait > options_.max_throttle_wait) {
        said(last_outage);
        return UnavailableError(last_error.message() + WaitPastCap(*wait, options_.max_throttle_wait));
      }
    } else if (json && status == 200 && !r.head.content_length && !ParseJson(r.body).ok()) {
      // A JSON answer with no length, ended by a close: a connection cut
      // mid-answer looks just like its end, and is not corruption (exit 3).
      // Retried as the transport error it most likely is; a
      // length-delimited answer that does not parse stays Corruption.
      last_error = IOError(std::string(what) + ": answer with no Content-Length ended before its JSON did");
      last_outage = HubOutage::kNone;
    } else {
      return r;
    }
    if (attempt >= max_attempts) {
      said(last_outage);
      return Status(last_error.code(),
                    last_error.message() + " (after " + std::to_string(attempt) + " attempts)");
    }
    if (!WaitBeforeRetry(wait, attempt)) return CancelledError(std::string(what) + ": cancelled");
  }
}

}  // namespace exlr8
