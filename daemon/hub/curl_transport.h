// CurlTransport: HttpTransport over libcurl's multi interface, the
// daemon's driver under RangeFetcher and (one per request lent) HubClient.
//
// Two multi handles, each a connection pool: bulk transfers
// (HttpRequest::bulk) in one, everything else in the other; one reusable
// easy handle per transfer slot. HTTP/2 is multiplexed where the server
// offers it over TLS, connections are kept alive, and each pool is sized
// for the fetcher's transfers plus its resolves (see Configure for the
// per-host bound).
//
// Thread rules: as HttpTransport (Wake from any thread; the rest on the
// thread that drives it).
#pragma once

#include <memory>

#include "daemon/hub/http_common.h"
#include "daemon/hub/http_transport.h"

namespace exlr8 {

class CurlTransport final : public HttpTransport {
 public:
  struct Options {
    int max_transfers = 16;             // at once; the fetcher's max_parallel
    int extra_connections = 4;          // room in the pool beside them (resolves to the hub)
    int h2_streams_per_connection = 4;  // RangeFetcherOptions::h2_streams_per_connection
  };
  // REQUIRES: `settings` outlives the transport.
  CurlTransport(const HttpSettings& settings, Options options);
  ~CurlTransport() override;
  CurlTransport(const CurlTransport&) = delete;
  CurlTransport& operator=(const CurlTransport&) = delete;

  void Start(const HttpRequest& req, HttpTransfer* t) override;
  void Resume(HttpTransfer* t) override;
  void Abandon(HttpTransfer* t) override;
  Result<int> Perform() override;
  Status Wait(std::chrono::milliseconds timeout) override;
  void Wake() override;
  // Holds the HTTP/2 connections per host to ceil(n / streams per
  // connection) (n clamped to 1..max_transfers), while that bound applies.
  void SetTransferLimit(int n) override;
  // Sets CURLMOPT_MAX_CONCURRENT_STREAMS (libcurl reads it each time it
  // looks for a connection to reuse) and the host bound with it.
  void SetStreamsPerConnection(int s) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace exlr8
