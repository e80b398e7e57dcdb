// HubRequester: HubClient's blocking requests over the HttpTransport seam,
// and the waits between their tries.
//
// What it owns: the transports the requests go over (a pool of one-slot
// CurlTransports, each keeping its connections alive between requests, so
// the revision, the tree pages, the resolves and the small files share a
// connection to the hub instead of a TCP and TLS handshake each; or one
// injected transport), the Clock the retry waits are measured on, and the
// retry counters. What it leaves to HubClient: what to ask and what an
// answer means.
//
// Retries (Request): transport failures (unless permanent), 408, 429 and
// 5xx are tried again, at most max_attempts times, after the server's
// Retry-After / RateLimit t= wait or else an exponential backoff from
// retry_base with jitter; a server wait above max_throttle_wait fails at
// once as Unavailable. The token goes where HttpSettings::ShouldSendToken
// allows (the transport's rule) and into no message.
//
// Thread rules: every method may be called from any thread at once. Each
// exchange has a transport to itself: a pooled one (`pool_mu_` guards the
// idle list), or the injected one, which serves one exchange at a time
// (`injected_mu_` is held for the exchange; the others wait for it).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/base/clock.h"
#include "daemon/base/mutex.h"
#include "daemon/hub/answer_checker.h"  // TransferEnd
#include "daemon/hub/http_common.h"
#include "daemon/hub/http_transport.h"
#include "format/status.h"

namespace exlr8 {

enum class HubOutage : std::uint8_t;

class HubRequester {
 public:
  struct Options {
    int max_attempts = 5;
    std::chrono::milliseconds retry_base{500};
    std::chrono::milliseconds max_throttle_wait{std::chrono::minutes(5)};
    // Longest one API answer may take (Request's transfers only).
    std::chrono::milliseconds api_timeout{std::chrono::minutes(5)};
    // When it turns true, an exchange is abandoned and a retry wait cut
    // short (within about 100 ms) with Cancelled.
    const std::atomic<bool>* cancel = nullptr;
    // Null: Clock::Real().
    Clock* clock = nullptr;
    // Null: the requester's own CurlTransports. REQUIRES: outlives the
    // requester.
    HttpTransport* transport = nullptr;
  };

  // A whole answer to a Request.
  struct Response {
    ResponseHead head;
    std::string body;
  };
  // Other limits than the options' for one Request (HubOptions' resolve_*).
  struct Tries {
    int max_attempts;
    std::chrono::milliseconds connect_timeout;  // 0: the settings'
  };

  // REQUIRES: `settings` outlives the requester.
  HubRequester(const HttpSettings& settings, Options options);
  ~HubRequester();
  HubRequester(const HubRequester&) = delete;
  HubRequester& operator=(const HubRequester&) = delete;

  Clock& clock() const { return *clock_; }
  bool cancelled() const {
    return options_.cancel != nullptr && options_.cancel->load(std::memory_order_relaxed);
  }

  // GET (or HEAD) of `url` with retries (see above); collects at most
  // `max_body` body bytes (more is Corruption: no hub API answer is that
  // large). `json`: a 200 answer is JSON, so one without a length that does
  // not parse was cut short (an IOError, retried). Any answer that is not
  // retried comes back as a Response, whatever its status. `outage`, when
  // not null, is set to what an error says of the server. `what` names the
  // request in messages.
  Result<Response> Request(const std::string& url, bool head, std::size_t max_body, std::string_view what,
                           bool json = false, HubOutage* outage = nullptr,
                           std::optional<Tries> tries = std::nullopt) const;

  // One transfer of `req` into `t`, blocking until its OnDone (returned:
  // how it ended, with end.http_status) or a cancel (Cancelled, `what`:
  // cancelled). Internal when the transport itself fails.
  Result<TransferEnd> Exchange(const HttpRequest& req, HttpTransfer* t, std::string_view what) const;

  // Before try `attempt` + 1: waits the server's `wait`, else the backoff,
  // and counts a retry. False when cancelled first.
  bool WaitBeforeRetry(std::optional<std::chrono::milliseconds> wait, int attempt) const;

  void CountRateLimited() const { rate_limited_.fetch_add(1, std::memory_order_relaxed); }
  std::uint64_t retries() const { return retries_.load(std::memory_order_relaxed); }
  std::uint64_t rate_limited() const { return rate_limited_.load(std::memory_order_relaxed); }

 private:
  class Lease;
  Result<TransferEnd> Drive(HttpTransport& transport, const HttpRequest& req, HttpTransfer* t,
                            std::string_view what) const;

  const HttpSettings& settings_;
  const Options options_;
  Clock* const clock_;
  // The injected transport: one exchange at a time holds `injected_mu_`.
  mutable Mutex injected_mu_;
  // Idle pooled transports, at most kMaxIdle; a lease takes one or makes one.
  mutable Mutex pool_mu_;
  mutable std::vector<std::unique_ptr<HttpTransport>> idle_ EXLR8_GUARDED_BY(pool_mu_);

  mutable std::atomic<std::uint64_t> retries_{0};
  mutable std::atomic<std::uint64_t> rate_limited_{0};
};

}  // namespace exlr8
