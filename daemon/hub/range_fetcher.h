// RangeFetcher: many byte ranges of a pinned hub repo, fetched in parallel
// over an HttpTransport (libcurl's multi interface unless the options name
// another), delivered in order to a consumer.
//
// Shape of a pull:
//
//   PullEngine engine(...);            // implements RangeConsumer
//   RangeFetcher fetcher(hub, opts);   // hub: an open HubClient
//   Status s = fetcher.Run(engine);    // blocks; callbacks on this thread
//
// Requests are PULLED lazily from the consumer (NextRequest) whenever there
// is room, so 230,000 requests cost no memory until they start: the fetcher
// holds at most `max_parallel + max_queued` live requests.
//
// Per file, the fetcher resolves `{endpoint}/{repo}/resolve/{commit}/{path}`
// once (HEAD, no automatic redirects), then sends every range of that file
// to the answered URL (the signed CDN URL for LFS files, the hub URL for
// regular files). Files the caller names with ExpectServedByHub (regular git
// files, by the listing) skip the HEAD: their ranges go to /resolve/
// directly, so they cost one /resolve/ request, not two; a redirect there
// falls back to a HEAD. It re-resolves when the URL's lifetime (HubOptions::
// signed_url_ttl) is over or when the CDN answers 403; re-resolves are
// counted and bounded per file. The bearer token goes to the hub origin only.
//
// Every transfer asks for one range, `Range: bytes=a-b`, with
// `Accept-Encoding: identity`, and checks the answer:
//  - 206 must carry `Content-Range: bytes a-b/...` exactly as asked; anything
//    else is a bad answer (retried, counted in bad_answers);
//  - 200 means the server ignored Range: the bytes before `a` are skipped and
//    the transfer is cut as soon as the range is complete (counted in
//    ignored_range);
//  - a body longer than asked is cut at the range's end (counted in
//    overlong_bodies); a short body, a reset or a stall (low-speed limit) is
//    retried and RESUMES from the first byte not yet delivered;
//  - 403 from a CDN -> re-resolve and retry; 401/403 from the hub ->
//    PermissionDenied; 404 -> NotFound; 416 -> Corruption (not retried);
//  - 429/503 wait as Retry-After / RateLimit `t=` say (else backoff);
//    408/5xx and transport errors back off exponentially with jitter.
// After `max_attempts` failed tries of one range it fails with a message
// naming the request's label, file, range and last error.
//
// Performance: OnData gets the transport's receive buffer directly (no copy); the
// per-byte work is the consumer's. Connections are reused (keep-alive; HTTP/2
// multiplexing where the server offers it over TLS).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "daemon/base/clock.h"
#include "daemon/hub/hub_client.h"
#include "daemon/hub/rate_limiter.h"
#include "format/status.h"

namespace exlr8 {

class HttpTransport;

// One range to fetch. Small; the fetcher copies it when it starts.
struct RangeRequest {
  std::string path;         // repo file path (validated by the fetcher)
  std::uint64_t offset = 0; // absolute byte offset in the file
  std::uint64_t length = 0; // > 0
  std::uint64_t id = 0;     // opaque to the fetcher; passed back in callbacks
  // Human label for messages, e.g. "L40 e7 gate h3 K3". May be empty.
  std::string label;
  // 0-3: requests of higher priority start first, also ahead of requests
  // pulled earlier that still wait for a transfer slot (up to max_queued
  // are pulled ahead), so a late urgent request does not queue behind them.
  std::uint8_t priority = 0;
};

// What the consumer says when a range has arrived completely.
struct RangeVerdict {
  enum class Kind : std::uint8_t { kAccept, kRefetch, kFail, kPending };
  Kind kind = Kind::kAccept;
  Status status;  // kRefetch: why (optional); kFail: the error

  static RangeVerdict Accept() { return {}; }
  // E.g. checksum mismatch: the fetcher calls OnReset(id) and fetches the
  // whole range again from scratch (bounded by max_refetches; then the
  // request fails with Corruption naming the label and this reason).
  static RangeVerdict Refetch(Status why = Status::Ok()) { return {Kind::kRefetch, std::move(why)}; }
  // The request ends failed with `error` (reported through OnFailed).
  static RangeVerdict Fail(Status error) { return {Kind::kFail, std::move(error)}; }
  // The consumer verifies on another thread and hands the real verdict to
  // RangeFetcher::Deliver later. The request keeps its place among the
  // live requests (so Run does not end before it) but not a transfer slot.
  static RangeVerdict Pending() { return {Kind::kPending, Status::Ok()}; }
};

// Implemented by the pull engine. All calls come from the thread inside
// RangeFetcher::Run, one at a time; none of them may call back into the
// fetcher except Cancel().
//
// Life of a request: NextRequest hands it over; then OnData zero or more
// times (bytes in order, contiguous, each byte of [offset, offset+length)
// exactly once per try — never twice, even across resumed retries); then
// OnComplete once all bytes were delivered. A Refetch verdict is followed by
// OnReset and a new try from `offset`. Every request ends with exactly one
// of: an Accept verdict (returned by OnComplete or delivered later), or
// OnFailed. A request whose verdict is pending when the run is cancelled
// keeps it: Run waits for it before returning; Accept stands, Refetch ends
// the request with OnFailed (Cancelled).
class RangeConsumer {
 public:
  virtual ~RangeConsumer() = default;

  // Fills `*out` with the next request and returns true, or returns false
  // when there are none now. Unless MayHaveMore() then says otherwise, there
  // are no more: NextRequest is not called again in this Run.
  virtual bool NextRequest(RangeRequest* out) = 0;

  // Asked after NextRequest returned false: true if requests may still come
  // (work submitted while the run goes on). The fetcher then keeps running,
  // asks again on its next turn, and its owner calls RangeFetcher::Wake()
  // when there is new work, so it is picked up at once.
  virtual bool MayHaveMore() { return false; }

  // Asked before each OnData of a transfer that has its connection to
  // itself (HTTP/1.1): false holds the transfer back (libcurl stops reading
  // its socket, so TCP slows the sender) and the same bytes are offered
  // again a little later. For a consumer whose queue is full, so that one
  // busy request does not stall every other transfer. Never asked for a
  // multiplexed (HTTP/2) transfer, whose stream cannot be held without
  // holding its whole connection: OnData may block instead.
  virtual bool ReadyFor(std::uint64_t /*id*/, std::size_t /*bytes*/) { return true; }

  // `bytes` are the file's bytes at [offset, offset + bytes.size()), valid
  // only during the call. A non-OK return fails the request (OnFailed gets
  // that status; no retry) — e.g. a disk write error.
  virtual Status OnData(std::uint64_t id, std::uint64_t offset, std::span<const std::byte> bytes) = 0;

  // All `length` bytes were delivered: verify and decide.
  virtual RangeVerdict OnComplete(std::uint64_t id) = 0;

  // Forget what was delivered for `id`; delivery restarts at its offset.
  virtual void OnReset(std::uint64_t id) = 0;

  // The request failed for good. `status` names the label, file and range.
  // Codes: NotFound, PermissionDenied, InvalidArgument (bad request), Corruption (416),
  // Corruption (bad answers or refetches exhausted), Unavailable/IOError
  // (retries exhausted), Cancelled, or the consumer's own status.
  virtual void OnFailed(std::uint64_t id, const Status& status) = 0;
};

// HTTP/2 streams per connection unless told otherwise: the default 16
// transfers go over 4 connections per host.
inline constexpr int kDefaultH2StreamsPerConnection = 4;

struct RangeFetcherOptions {
  // Transfers in flight at once (ranges and resolves together). Open
  // connections: at most this plus max_parallel_resolves (room for the
  // hub's beside the CDN's). With `adaptive`, the ceiling of the limit.
  int max_parallel = 16;
  // The limit on transfers in flight follows a ConcurrencyController
  // (concurrency_controller.h): it starts at adaptive_initial, grows while
  // the throughput grows, and backs off on 429/503, transport errors and
  // consumers that can take no more, between adaptive_floor and
  // max_parallel. False: always max_parallel.
  // It starts at 64: on the paths of docs/BENCHMARKS.md ("Transfers in
  // flight that adapt") 64 was never far from the best fixed count, and a
  // short pull has little time to climb from 16.
  bool adaptive = false;
  int adaptive_initial = 64;
  int adaptive_floor = 4;
  // Streams one HTTP/2 connection carries at most; a transfer that finds
  // every connection to its host full opens another, so the transfers
  // spread over ceil(max_parallel / this) connections per host, never more
  // (the bound on connections per host is that many, as long as every
  // answer came over HTTP/2). 0 = max_parallel: all transfers multiplexed
  // on one connection. The default spreads them because one TCP
  // connection's window caps what a long, lossy path delivers, however
  // many streams share it: through a relay capping each connection
  // (bench/h2_pull_bench.sh PROXY=on), 4 connections were 1.1-2.8x faster
  // than one, and at most 4% slower where nothing capped them
  // (docs/BENCHMARKS.md, "Over a long path"). HTTP/1.1 uses one connection
  // per transfer whatever this says; its first answer lifts that bound
  // back to max_parallel, for every host of the fetcher.
  int h2_streams_per_connection = kDefaultH2StreamsPerConnection;
  // When true (an adaptive pull given no --h2-streams), the streams per
  // connection follow the path (connection_spread.h):
  // h2_streams_per_connection on a long one, short_path_h2_streams where
  // answers come back within short_path_wait.
  bool h2_streams_by_path = false;
  int short_path_h2_streams = 16;
  std::chrono::microseconds short_path_wait{2000};
  // Ranges of at least this many bytes are bulk transfers
  // (HttpRequest::bulk: connections of their own, so that the other
  // requests never queue behind their bytes); 0: none. Not where
  // h2_streams_by_path found the path short.
  std::uint64_t bulk_range_bytes = 4u << 20;
  // Concurrent /resolve/ requests (the Hub rate-limits them).
  int max_parallel_resolves = 4;
  // Requests pulled ahead of free transfer slots (waiting for a resolve or
  // a retry).
  int max_queued = 64;
  // Tries per range before it fails (a resume counts as a try).
  int max_attempts = 8;
  // Refetch verdicts per request before it fails as Corruption.
  int max_refetches = 2;
  // Re-resolves of one file (403 or expiry) per Run before its requests fail.
  int max_reresolves_per_file = 8;
  // 429/503 answers per request tolerated (they do not use up attempts).
  int max_throttled = 32;
  // Backoff: base * 2^(try-1), capped, half of it random jitter.
  std::chrono::milliseconds retry_base{200};
  std::chrono::milliseconds retry_cap{std::chrono::seconds(20)};
  // A server-requested wait above this fails the request instead.
  std::chrono::milliseconds max_throttle_wait{std::chrono::minutes(5)};
  // 0 = unlimited; else the total receive rate over all transfers, bytes/s.
  std::uint64_t max_bytes_per_second = 0;
  // A rate shared with other fetchers (rate_limiter.h): when set, it limits
  // this fetcher instead of max_bytes_per_second.
  std::shared_ptr<RateLimiter> shared_rate;
  // If true, the first failed request cancels the rest (they fail with
  // Cancelled) and Run returns that failure.
  bool stop_on_failure = false;
  // The time that backoff, Retry-After waits, URL expiry and the rate limit
  // are measured in; null = Clock::Real(). REQUIRES: outlives the fetcher.
  Clock* clock = nullptr;
  // What carries the requests (http_transport.h); null = the fetcher's own
  // CurlTransport. REQUIRES: outlives the fetcher, serves no other one.
  HttpTransport* transport = nullptr;
};

// Progress counters, cumulative over the fetcher's life.
struct FetchCounters {
  std::uint64_t requests_started = 0;  // requests taken from NextRequest
  std::uint64_t requests_done = 0;     // accepted
  std::uint64_t requests_failed = 0;
  std::uint64_t transfers = 0;         // range GETs sent (incl. retries)
  std::uint64_t retries = 0;           // range tries after the first
  std::uint64_t resumes = 0;           // retries that kept delivered bytes
  std::uint64_t bytes_received = 0;    // bytes delivered to OnData
  std::uint64_t bytes_discarded = 0;   // skipped (200) or cut (too long)
  std::uint64_t resolves = 0;          // hub /resolve/ requests: HEADs (incl. hops)
                                       // and range GETs of files the hub serves
  std::uint64_t reresolves = 0;        // resolves after the first, per file
  std::uint64_t rate_limited = 0;      // 429 answers
  std::uint64_t unavailable = 0;       // 5xx answers
  std::uint64_t ignored_range = 0;     // 200 instead of 206
  std::uint64_t bad_answers = 0;       // wrong Content-Range, short bodies
  std::uint64_t overlong_bodies = 0;
  std::uint64_t refetches = 0;         // Refetch verdicts acted on
  std::uint64_t active_transfers = 0;  // now
  // Transfers allowed in flight now (the adaptive limit, or max_parallel),
  // the highest it reached, and how often it backed off (adaptive only).
  std::uint64_t concurrency_limit = 0;
  std::uint64_t concurrency_peak = 0;
  std::uint64_t concurrency_backoffs = 0;
  // HTTP/2 streams one connection carries now (h2_streams_per_connection,
  // or what the path chose with h2_streams_by_path).
  std::uint64_t h2_streams = 0;
};

class RangeFetcher {
 public:
  // REQUIRES: `hub` outlives the fetcher.
  RangeFetcher(const HubClient& hub, RangeFetcherOptions options = {});
  ~RangeFetcher();
  RangeFetcher(const RangeFetcher&) = delete;
  RangeFetcher& operator=(const RangeFetcher&) = delete;

  // Fetches every request the consumer hands out; returns when all ended or
  // on cancel. Returns OK if every request was accepted; Cancelled after
  // Cancel() or `*cancel` became true (live requests get OnFailed with
  // Cancelled; no further NextRequest); else the first failure's status,
  // with the number of failed requests appended. Internal/IOError if libcurl
  // itself fails. Resolved URLs are kept between Runs.
  // REQUIRES: not called concurrently with itself.
  Status Run(RangeConsumer& consumer, const std::atomic<bool>* cancel = nullptr);

  // Thread-safe: makes Run stop soon (wakes its poll); every open request
  // ends Cancelled ("fetch cancelled"), and so does Run.
  void Cancel();

  // Thread-safe: makes Run stop soon because a consumer met a failure no
  // other request can get past (a full disk, a refused token, a certificate
  // that does not verify). Every request still open ends with `reason`
  // (its code, "stopped after another request failed: <its message>"), and
  // so does Run, so whoever reads any of them learns the cause instead of
  // "fetch cancelled". The first reason wins; a Cancel (or the run's cancel
  // flag) already made when Run stops wins over it: the caller asked first.
  void Abort(const Status& reason);

  // The hub's listing says `path` is a regular git file of `size` bytes,
  // which the hub serves itself: its ranges go straight to its /resolve/
  // URL (with the token) instead of after a HEAD there. If the hub answers
  // a redirect instead, the file is resolved as any other. Ignored for a
  // file already resolved. REQUIRES: not during Run.
  void ExpectServedByHub(const std::string& path, std::uint64_t size);

  // Thread-safe: makes Run ask the consumer for requests again now (see
  // RangeConsumer::MayHaveMore).
  void Wake();

  // Thread-safe: the verdict for request `id`, whose OnComplete returned
  // Pending in the current Run; Run acts on it as if OnComplete had
  // returned it (OnReset and OnFailed then come from Run's thread). Every
  // Pending must be followed by one Deliver, even after a cancel (Run waits
  // for it). A verdict that is still Pending is a programming error (the
  // request fails as Internal).
  void Deliver(std::uint64_t id, RangeVerdict verdict);

  // Thread-safe snapshot.
  FetchCounters counters() const;

  // The clock the fetcher measures and waits by (RangeFetcherOptions::clock,
  // or the real one), for what runs beside it on the same time line.
  Clock& clock() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace exlr8
