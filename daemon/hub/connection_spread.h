// ConnectionSpread: how many HTTP/2 streams one connection carries when
// nobody said (no --h2-streams), judged by how far the server is.
//
// One TCP connection delivers at most its window per round trip, so on a
// long path the transfers must spread over several connections
// (`long_path_streams` each: RangeFetcherOptions::h2_streams_per_connection);
// on a short one a single connection outruns any window, and each extra
// connection only adds its TCP and TLS handshakes. A round trip under
// `short_path` (2 ms: even a 256 KiB window then carries 128 MB/s per
// connection) makes the path short, and `short_path_streams` streams share
// each connection (docs/BENCHMARKS.md, "Transfers in flight that adapt").
//
// The round trip is the shortest answer wait seen (TransferEnd::answer_wait:
// the request sent to the first byte back, never below one round trip),
// taken from range transfers (the file's host, usually a CDN) once any
// ended, and from the resolves to the hub before that: the resolves come
// first, so the first ranges already start spread as the hub's path says.
// Until an answer is measured the path counts as long, as it did before
// this existed. A short path also needs no bulk connections
// (HttpRequest::bulk): its connections drain megabytes in milliseconds, so
// nothing queues behind them long, and extra handshakes would cost more.
//
// Thread rules: not thread-safe; RangeFetcher::Run's thread alone calls it.
#pragma once

#include <chrono>

namespace exlr8 {

class ConnectionSpread {
 public:
  struct Options {
    int long_path_streams = 4;
    int short_path_streams = 16;
    std::chrono::microseconds short_path{2000};
  };
  explicit ConnectionSpread(Options o) : opts_(o) {}

  // A transfer's answer came after `wait` (negative: not measured, ignored);
  // `range`: a range transfer, else a resolve.
  void Answered(bool range, std::chrono::microseconds wait) {
    if (wait.count() < 0) return;
    std::chrono::microseconds& shortest = range ? range_wait_ : resolve_wait_;
    if (shortest.count() < 0 || wait < shortest) shortest = wait;
  }

  // The path is short by what is known now.
  bool short_path() const {
    const std::chrono::microseconds rtt = range_wait_.count() >= 0 ? range_wait_ : resolve_wait_;
    return rtt.count() >= 0 && rtt < opts_.short_path;
  }
  // Streams per connection for what is known now.
  int streams() const { return short_path() ? opts_.short_path_streams : opts_.long_path_streams; }

 private:
  Options opts_;
  std::chrono::microseconds range_wait_{-1};    // shortest over range transfers
  std::chrono::microseconds resolve_wait_{-1};  // shortest over resolves
};

}  // namespace exlr8
