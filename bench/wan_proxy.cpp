// wan_proxy: a TCP relay that makes a loopback path look like a long one,
// for benchmarks on machines without `tc ... netem` (neither machine this
// project is measured on has the sch_netem module).
//
// Every connection accepted on LISTEN is relayed to UPSTREAM, byte for byte
// (TLS and HTTP/2 pass through untouched), with, in each direction:
//
//   --delay D    every byte is delivered D after it was received: the
//                round trip of a request through the relay is 2·D more.
//   --window W   at most W bytes of one connection in flight (received and
//                not yet "acknowledged", which happens D after delivery),
//                so one connection moves at most W / (2·D): the cap that a
//                TCP congestion window puts on one connection of a long
//                path. A model, not TCP: no slow start, no loss; the
//                window is what loss and buffers would leave of it.
//   --rate R     all connections together move at most R bytes/s (a
//                token bucket per direction): the path's bottleneck link.
//
// What it does not model: loss and retransmission, slow start, reordering.
// It is enough to see what a request's round trip and a per-connection cap
// cost a pull (how many transfers in flight, how many connections), which
// is what bench/h2_pull_bench.sh measures with it.
//
//   wan_proxy --listen HOST:PORT --upstream HOST:PORT [--delay 20ms]
//             [--window 16M] [--rate 0] [--port-file FILE]
//
// PORT 0 picks a free port; --port-file gets "PORT\n" once listening.
// Blocking sockets, two threads per connection: a bench tool for a few
// dozen connections, not a server.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "wan_proxy: %s\n", what.c_str());
  std::exit(2);
}

struct Endpoint {
  sockaddr_in addr{};
};

Endpoint ParseEndpoint(const std::string& s, const char* flag) {
  const auto colon = s.rfind(':');
  if (colon == std::string::npos) Die(std::string(flag) + " wants HOST:PORT, got '" + s + "'");
  Endpoint e;
  e.addr.sin_family = AF_INET;
  if (::inet_pton(AF_INET, s.substr(0, colon).c_str(), &e.addr.sin_addr) != 1)
    Die(std::string(flag) + ": '" + s.substr(0, colon) + "' is not an IPv4 address");
  char* end = nullptr;
  const long port = std::strtol(s.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || port < 0 || port > 65535) Die(std::string(flag) + ": bad port in '" + s + "'");
  e.addr.sin_port = htons(static_cast<std::uint16_t>(port));
  return e;
}

// "20ms", "1.5s", "500us", "0".
Clock::duration ParseDuration(const std::string& s) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  const std::string unit = end;
  double seconds = 0;
  if (unit == "s") seconds = v;
  else if (unit == "ms") seconds = v / 1e3;
  else if (unit == "us") seconds = v / 1e6;
  else if (unit.empty() && v == 0) seconds = 0;
  else Die("--delay wants a duration like 20ms, got '" + s + "'");
  if (!(seconds >= 0 && seconds < 60)) Die("--delay out of range: '" + s + "'");
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// "64M", "512K", "1G", "4096".
std::uint64_t ParseBytes(const std::string& s, const char* flag) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  const std::string unit = end;
  double mult = 1;
  if (unit == "K") mult = 1 << 10;
  else if (unit == "M") mult = 1 << 20;
  else if (unit == "G") mult = 1 << 30;
  else if (!unit.empty()) Die(std::string(flag) + " wants bytes like 64M, got '" + s + "'");
  if (!(v >= 0 && v * mult < 1e15)) Die(std::string(flag) + " out of range: '" + s + "'");
  return static_cast<std::uint64_t>(v * mult);
}

// Shared by every connection's pipes of one direction. Take() charges the
// bytes and sleeps off any debt, so the direction's total stays at `rate`
// (with a burst of 10 ms of it).
class TokenBucket {
 public:
  explicit TokenBucket(std::uint64_t rate) : rate_(static_cast<double>(rate)) {}
  void Take(std::size_t n) {
    if (rate_ <= 0) return;
    Clock::time_point ready;
    {
      std::lock_guard<std::mutex> lock(mu_);
      const auto now = Clock::now();
      // The bucket is a time: when everything charged so far has drained.
      const auto burst = std::chrono::milliseconds(10);
      if (drained_ < now - burst) drained_ = now - burst;
      drained_ += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(n / rate_));
      ready = drained_;
    }
    std::this_thread::sleep_until(ready);
  }

 private:
  const double rate_;
  std::mutex mu_;
  Clock::time_point drained_{};
};

struct Settings {
  Clock::duration delay{};
  std::uint64_t window = 16u << 20;  // also what one direction may buffer
  std::uint64_t rate = 0;
};

// One direction of one connection: a reader thread receives from `from` and
// queues each chunk with its due time; a writer thread delivers it to `to`
// when due. The window is freed a delay after each delivery.
class Pipe {
 public:
  Pipe(int from, int to, const Settings& s, TokenBucket& bucket) : from_(from), to_(to), s_(s), bucket_(bucket) {}

  void ReadLoop() {
    std::vector<std::byte> buf(64 << 10);
    while (true) {
      std::size_t room;
      {
        std::unique_lock<std::mutex> lock(mu_);
        while (true) {
          ReleaseAcked(Clock::now());
          if (stop_ || inflight_ < s_.window) break;
          if (acks_.empty()) cv_.wait(lock);
          else cv_.wait_until(lock, acks_.front().first);
        }
        if (stop_) return;
        room = std::min<std::uint64_t>(buf.size(), s_.window - inflight_);
      }
      const ssize_t n = ::recv(from_, buf.data(), room, 0);
      std::lock_guard<std::mutex> lock(mu_);
      if (n <= 0) {  // end of stream or error: the writer passes it on
        queue_.push_back(Chunk{Clock::now() + s_.delay, {}});
        cv_.notify_all();
        return;
      }
      inflight_ += static_cast<std::uint64_t>(n);
      queue_.push_back(Chunk{Clock::now() + s_.delay, std::vector<std::byte>(buf.begin(), buf.begin() + n)});
      cv_.notify_all();
    }
  }

  // Returns when the stream ended (or the other side failed).
  void WriteLoop() {
    while (true) {
      Chunk c;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (stop_) return;
        c = std::move(queue_.front());
        queue_.pop_front();
      }
      std::this_thread::sleep_until(c.due);
      if (c.bytes.empty()) {
        ::shutdown(to_, SHUT_WR);  // the peer sees the end, a delay late
        return;
      }
      bucket_.Take(c.bytes.size());
      for (std::size_t done = 0; done < c.bytes.size();) {
        const ssize_t n = ::send(to_, c.bytes.data() + done, c.bytes.size() - done, MSG_NOSIGNAL);
        if (n <= 0) return;
        done += static_cast<std::size_t>(n);
      }
      std::lock_guard<std::mutex> lock(mu_);
      acks_.emplace_back(Clock::now() + s_.delay, c.bytes.size());
      cv_.notify_all();
    }
  }

  void Stop() {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    cv_.notify_all();
  }

 private:
  struct Chunk {
    Clock::time_point due;
    std::vector<std::byte> bytes;  // empty: the end of the stream
  };
  void ReleaseAcked(Clock::time_point now) {
    while (!acks_.empty() && acks_.front().first <= now) {
      inflight_ -= acks_.front().second;
      acks_.pop_front();
    }
  }

  const int from_, to_;
  const Settings& s_;
  TokenBucket& bucket_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Chunk> queue_;
  std::deque<std::pair<Clock::time_point, std::size_t>> acks_;
  std::uint64_t inflight_ = 0;
  bool stop_ = false;
};

void SetNoDelay(int fd) {
  const int one = 1;
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// Relays one accepted connection until both directions ended; owns both fds.
void Relay(int client, const Endpoint& upstream, const Settings& s, TokenBucket& down, TokenBucket& up) {
  const int server = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (server < 0 ||
      ::connect(server, reinterpret_cast<const sockaddr*>(&upstream.addr), sizeof upstream.addr) != 0) {
    std::fprintf(stderr, "wan_proxy: connect upstream: %s\n", std::strerror(errno));
    if (server >= 0) ::close(server);
    ::close(client);
    return;
  }
  SetNoDelay(client);
  SetNoDelay(server);
  Pipe to_server(client, server, s, up), to_client(server, client, s, down);
  std::thread r1([&] { to_server.ReadLoop(); });
  std::thread r2([&] { to_client.ReadLoop(); });
  std::thread w1([&] { to_server.WriteLoop(); });
  // In HTTP the connection is over once the server's direction ended (or
  // its delivery failed): shutting both sockets wakes every thread blocked
  // in recv or send, and Stop every one waiting on its queue.
  to_client.WriteLoop();
  ::shutdown(client, SHUT_RDWR);
  ::shutdown(server, SHUT_RDWR);
  to_server.Stop();
  to_client.Stop();
  w1.join();
  r1.join();
  r2.join();
  ::close(client);
  ::close(server);
}

}  // namespace

int main(int argc, char** argv) {
  std::string listen_at, upstream_at, port_file;
  Settings s;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) Die(a + " needs a value");
      return argv[++i];
    };
    if (a == "--listen") listen_at = value();
    else if (a == "--upstream") upstream_at = value();
    else if (a == "--delay") s.delay = ParseDuration(value());
    else if (a == "--window") s.window = ParseBytes(value(), "--window");
    else if (a == "--rate") s.rate = ParseBytes(value(), "--rate");
    else if (a == "--port-file") port_file = value();
    else Die("unknown argument '" + a + "' (see the comment at the top of bench/wan_proxy.cpp)");
  }
  if (listen_at.empty() || upstream_at.empty()) Die("--listen and --upstream are required");
  if (s.window < (64 << 10)) Die("--window below 64K would stall a 64 KiB read");
  ::signal(SIGPIPE, SIG_IGN);
  const Endpoint listen_ep = ParseEndpoint(listen_at, "--listen");
  const Endpoint upstream = ParseEndpoint(upstream_at, "--upstream");

  const int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  (void)::setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (lfd < 0 || ::bind(lfd, reinterpret_cast<const sockaddr*>(&listen_ep.addr), sizeof listen_ep.addr) != 0 ||
      ::listen(lfd, 128) != 0)
    Die("listen on " + listen_at + ": " + std::strerror(errno));
  sockaddr_in bound{};
  socklen_t len = sizeof bound;
  ::getsockname(lfd, reinterpret_cast<sockaddr*>(&bound), &len);
  if (!port_file.empty()) {
    const std::string tmp = port_file + ".tmp";
    std::ofstream(tmp) << ntohs(bound.sin_port) << "\n";
    std::rename(tmp.c_str(), port_file.c_str());
  }
  std::fprintf(stderr, "wan_proxy: %s -> %s, delay %.3f ms each way, window %llu B, rate %llu B/s\n",
               listen_at.c_str(), upstream_at.c_str(),
               std::chrono::duration<double, std::milli>(s.delay).count(),
               static_cast<unsigned long long>(s.window), static_cast<unsigned long long>(s.rate));

  TokenBucket down(s.rate), up(s.rate);
  while (true) {
    const int c = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      Die(std::string("accept: ") + std::strerror(errno));
    }
    std::thread([c, &upstream, &s, &down, &up] { Relay(c, upstream, s, down, up); }).detach();
  }
}
