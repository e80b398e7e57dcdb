// HttpTransport: the seam between RangeFetcher and the network.
//
// RangeFetcher and HubClient decide what to ask and judge the answers
// (AnswerChecker, FileResolver, TransferScheduler, HubRequester); a
// transport only carries requests: CurlTransport (curl_transport.h) over
// libcurl's multi interface in the daemon, an in-memory hub in unit tests
// (tests/daemon/hub/fake_transport.h).
//
// Model: the caller Starts transfers, then alternates Perform (move every
// transfer along without blocking; the transfers' callbacks run inside it)
// and Wait (block until the network has something, Wake is called, or the
// timeout passes). Every started transfer ends with exactly one OnDone,
// unless the caller Abandons it first.
//
// Thread rules: Wake may be called from any thread; everything else, and
// every callback, on the one thread that drives the transport.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "daemon/hub/answer_checker.h"
#include "daemon/hub/http_common.h"
#include "format/status.h"

namespace exlr8 {

struct HttpRequest {
  std::string url;
  bool head_only = false;  // HEAD (a resolve) instead of GET
  // `Range: bytes=range_first-range_last` when has_range.
  bool has_range = false;
  std::uint64_t range_first = 0;
  std::uint64_t range_last = 0;
  // With has_range: `Range: bytes=range_first-` (to the end), range_last unused.
  bool range_to_end = false;
  // Longest the connection may take to set up; 0: HttpSettings'.
  std::chrono::milliseconds connect_timeout{0};
  // Longest the whole transfer may take, however steadily it moves; 0: no
  // limit but the stall limit.
  std::chrono::milliseconds timeout{0};
  // A large download: it runs on connections that carry only bulk
  // transfers. A server writes an HTTP/2 answer into its connection's
  // buffers as fast as they take it, so a small answer on the same
  // connection queues behind megabytes of it: on a path whose connections
  // move a few MB/s, the planner's small requests waited seconds.
  bool bulk = false;
};

// One transfer's receiving end, implemented by the caller. The transport
// sends `Accept-Encoding: identity`, and the bearer token only to the hub's
// origin (HttpSettings::ShouldSendToken); it follows no redirect.
class HttpTransfer {
 public:
  enum class Body : std::uint8_t {
    kContinue,  // took the chunk
    kPause,     // did not take it: offer the same bytes again after Resume
    kStop,      // end the transfer now (OnDone follows, its `end.ok` false)
  };
  virtual ~HttpTransfer() = default;

  // Filled by the transport (the last response's status line and headers)
  // before the first OnBody and before OnDone.
  ResponseHead head;
  // Set by the transport before the first OnBody: the transfer shares its
  // connection with others (HTTP/2), so pausing it would stall them.
  bool multiplexed = false;

  virtual Body OnBody(const char* data, std::size_t n) = 0;
  // The transfer ended; `end.error` says how when it failed. For a transfer
  // the callback stopped, end.ok is false too: the caller knows why.
  virtual void OnDone(const TransferEnd& end) = 0;
};

class HttpTransport {
 public:
  virtual ~HttpTransport() = default;

  // Starts `req`. REQUIRES: `t` is not running, and outlives the transfer
  // (until its OnDone, or Abandon).
  virtual void Start(const HttpRequest& req, HttpTransfer* t) = 0;
  // Lets a transfer whose OnBody returned kPause go on.
  virtual void Resume(HttpTransfer* t) = 0;
  // Ends a running transfer without OnDone.
  virtual void Abandon(HttpTransfer* t) = 0;
  // Moves every transfer along without blocking; returns how many ended
  // (their OnDone ran). Internal when the transport itself fails.
  virtual Result<int> Perform() = 0;
  // Blocks until there may be work for Perform, Wake is called, or
  // `timeout` passes. Internal when the transport itself fails.
  virtual Status Wait(std::chrono::milliseconds timeout) = 0;
  // Thread-safe: ends a Wait now (or the next one at once).
  virtual void Wake() = 0;
  // The owner keeps at most `n` transfers in flight from now on (an
  // adaptive limit); a transport may size its connections by it. No-op by
  // default.
  virtual void SetTransferLimit(int /*n*/) {}
  // HTTP/2 streams one connection carries at most from now on (a transfer
  // that finds its host's connections full opens another); connections
  // already open keep theirs. No-op by default.
  virtual void SetStreamsPerConnection(int /*s*/) {}
};

}  // namespace exlr8
