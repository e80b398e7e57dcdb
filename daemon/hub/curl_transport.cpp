#include "daemon/hub/curl_transport.h"

#include <curl/curl.h>

#include <sys/select.h>

#include <algorithm>
#include <string>
#include <unordered_map>
#include <vector>

namespace exlr8 {

struct CurlTransport::Impl {
  // One easy handle, reused by the transfers that take its slot.
  struct Slot {
    Impl* impl = nullptr;
    CURL* easy = nullptr;
    HttpTransfer* transfer = nullptr;  // null: free
    std::string url;
    bool head_only = false;  // for the debug log
    char errbuf[CURL_ERROR_SIZE] = {0};
    bool version_known = false;
    CURLM* owner = nullptr;  // the pool it runs in: multi or bulk_multi
  };

  Impl(const HttpSettings& s, Options o) : settings(s), opts(o) {
    EnsureCurlGlobalInit();
    multi = curl_multi_init();
    Configure(multi);
    host_connections_capped = WantedConnections() < opts.max_transfers;
    ApplyHostBound();
    plain_headers = curl_slist_append(nullptr, "Accept-Encoding: identity");
    hub_headers = curl_slist_append(nullptr, "Accept-Encoding: identity");
    if (!settings.token.empty()) {
      const std::string auth = "Authorization: Bearer " + settings.token;
      hub_headers = curl_slist_append(hub_headers, auth.c_str());
    }
  }

  void Configure(CURLM* m) {
    curl_multi_setopt(m, CURLMOPT_PIPELINING, static_cast<long>(CURLPIPE_MULTIPLEX));
    // Resolves go to the hub, another host than the CDN: the pool has room
    // for their connections beside one per transfer slot. Were both held
    // to max_transfers, each resolve would close a CDN connection that the
    // next range sets up again, a TCP and TLS handshake over a real path
    // (measured: 25 CDN connections for 16 slots over the relay).
    const long pool = static_cast<long>(opts.max_transfers + opts.extra_connections);
    curl_multi_setopt(m, CURLMOPT_MAX_TOTAL_CONNECTIONS, pool);
    curl_multi_setopt(m, CURLMOPT_MAXCONNECTS, pool);
    // A connection whose streams are all busy is passed over, so libcurl
    // opens another (up to the host bound below) instead of waiting.
    curl_multi_setopt(m, CURLMOPT_MAX_CONCURRENT_STREAMS, static_cast<long>(streams));
    // That alone does not hold the connections to max_transfers / streams:
    // libcurl 7.88 (Debian 12) attaches every transfer that starts while a
    // new connection is still connecting to it, past the stream cap, and
    // each transfer that later finds the overfull ones full opens yet
    // another (measured: 45-49 connections for 64 transfers at 16 streams
    // each; 8.5 keeps to the cap). So the host bound is the connection
    // count asked for, while every answer is HTTP/2. An HTTP/1.x answer
    // needs a connection per transfer: the bound then goes back to
    // max_transfers for the rest of the transport's life (one setting for
    // all hosts; see NoteHttpVersion).
  }

  ~Impl() {
    for (std::unique_ptr<Slot>& s : slots) {
      if (s->transfer != nullptr) curl_multi_remove_handle(s->owner, s->easy);
      curl_easy_cleanup(s->easy);
    }
    curl_multi_cleanup(multi);
    if (bulk_multi != nullptr) curl_multi_cleanup(bulk_multi);
    curl_slist_free_all(plain_headers);
    curl_slist_free_all(hub_headers);
  }

  Slot* FreeSlot() {
    for (std::unique_ptr<Slot>& s : slots)
      if (s->transfer == nullptr) return s.get();
    slots.push_back(std::make_unique<Slot>());
    Slot* s = slots.back().get();
    s->impl = this;
    s->easy = curl_easy_init();
    return s;
  }

  static std::size_t WriteCallback(char* p, std::size_t size, std::size_t nmemb, void* ud) {
    auto* s = static_cast<Slot*>(ud);
    HttpTransfer* t = s->transfer;
    if (!s->version_known) {
      long version = 0;
      curl_easy_getinfo(s->easy, CURLINFO_HTTP_VERSION, &version);
      t->multiplexed = version >= CURL_HTTP_VERSION_2_0;
      s->version_known = true;
    }
    const std::size_t n = size * nmemb;
    switch (t->OnBody(p, n)) {
      case HttpTransfer::Body::kContinue:
        return n;
      case HttpTransfer::Body::kPause:
        return CURL_WRITEFUNC_PAUSE;
      case HttpTransfer::Body::kStop:
        break;
    }
    return 0;
  }

  // HTTP/2 connections per host for the transfers now allowed.
  int WantedConnections() const {
    return (transfer_limit + streams - 1) / streams;
  }
  void ApplyHostBound() {
    curl_multi_setopt(multi, CURLMOPT_MAX_HOST_CONNECTIONS,
                      static_cast<long>(host_connections_capped ? WantedConnections() : opts.max_transfers));
  }
  // The bulk pool, made on first use (most transports never need one: the
  // hub client's, a pull of small files).
  CURLM* BulkMulti() {
    if (bulk_multi == nullptr) {
      bulk_multi = curl_multi_init();
      Configure(bulk_multi);
      // A bulk transfer fills a connection's window by itself: one each, so
      // that two large files never split one connection's throughput.
      curl_multi_setopt(bulk_multi, CURLMOPT_MAX_CONCURRENT_STREAMS, 1L);
      curl_multi_setopt(bulk_multi, CURLMOPT_MAX_HOST_CONNECTIONS, static_cast<long>(opts.max_transfers));
    }
    return bulk_multi;
  }

  void SetStreams(int s) {
    streams = s;
    curl_multi_setopt(multi, CURLMOPT_MAX_CONCURRENT_STREAMS, static_cast<long>(streams));
  }

  // Lifts the per-host connection bound (see Configure) once any
  // answer came over HTTP/1.x, where a connection carries one transfer.
  void NoteHttpVersion(CURL* easy) {
    if (!host_connections_capped) return;
    long version = 0;
    if (curl_easy_getinfo(easy, CURLINFO_HTTP_VERSION, &version) != CURLE_OK || version == 0)
      return;  // no answer
    if (version >= CURL_HTTP_VERSION_2_0) return;
    host_connections_capped = false;
    curl_multi_setopt(multi, CURLMOPT_MAX_HOST_CONNECTIONS, static_cast<long>(opts.max_transfers));
  }

  // The bulk pool's sockets and timer, for the poll of the other pool: its
  // sockets as extra descriptors, and `*timeout` cut to its next timer.
  // curl_multi_fdset leaves out descriptors past FD_SETSIZE (a server may
  // hold thousands): a bulk transfer's connected socket is then watched
  // for reading through CURLINFO_ACTIVESOCKET, and the wait is cut to
  // kBulkPollCap while bulk transfers run, for what neither reports (a
  // connection still being set up there).
  std::vector<curl_waitfd> BulkWaitFds(std::chrono::milliseconds* timeout) {
    std::vector<curl_waitfd> fds;
    if (bulk_live == 0) return fds;
    *timeout = std::min(*timeout, kBulkPollCap);
    long next = -1;
    if (curl_multi_timeout(bulk_multi, &next) == CURLM_OK && next >= 0)
      *timeout = std::min(*timeout, std::chrono::milliseconds(next));
    fd_set r, w, e;
    FD_ZERO(&r);
    FD_ZERO(&w);
    FD_ZERO(&e);
    int max_fd = -1;
    if (curl_multi_fdset(bulk_multi, &r, &w, &e, &max_fd) != CURLM_OK) max_fd = -1;
    for (int fd = 0; fd <= max_fd; ++fd) {
      short events = 0;
      if (FD_ISSET(fd, &r)) events |= CURL_WAIT_POLLIN;
      if (FD_ISSET(fd, &w)) events |= CURL_WAIT_POLLOUT;
      if (FD_ISSET(fd, &e)) events |= CURL_WAIT_POLLPRI;
      if (events != 0) fds.push_back(curl_waitfd{fd, events, 0});
    }
    for (const auto& [transfer, slot] : running) {
      curl_socket_t fd = CURL_SOCKET_BAD;
      if (slot->owner != bulk_multi ||
          curl_easy_getinfo(slot->easy, CURLINFO_ACTIVESOCKET, &fd) != CURLE_OK || fd == CURL_SOCKET_BAD ||
          fd < FD_SETSIZE)
        continue;
      fds.push_back(curl_waitfd{fd, CURL_WAIT_POLLIN, 0});
    }
    // Nothing to watch yet (the names still resolving): look again soon.
    if (fds.empty()) *timeout = std::min(*timeout, std::chrono::milliseconds(10));
    return fds;
  }
  static constexpr std::chrono::milliseconds kBulkPollCap{100};

  // Ends the transfers of pool `m` that libcurl finished; returns how many.
  int Drain(CURLM* m) {
    int left = 0;
    int done = 0;
    while (CURLMsg* msg = curl_multi_info_read(m, &left)) {
      if (msg->msg != CURLMSG_DONE) continue;
      ++done;
      Impl::Slot* s = nullptr;
      curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, reinterpret_cast<char**>(&s));
      const CURLcode rc = msg->data.result;
      NoteHttpVersion(msg->easy_handle);
      curl_multi_remove_handle(m, msg->easy_handle);
      if (m == bulk_multi) --bulk_live;
      HttpTransfer* t = s->transfer;
      s->transfer = nullptr;
      running.erase(t);
      TransferEnd end;
      end.ok = rc == CURLE_OK;
      curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, &end.http_status);
      if (end.http_status > 0) {
        curl_off_t sent = 0, first_byte = 0;
        if (curl_easy_getinfo(msg->easy_handle, CURLINFO_PRETRANSFER_TIME_T, &sent) == CURLE_OK &&
            curl_easy_getinfo(msg->easy_handle, CURLINFO_STARTTRANSFER_TIME_T, &first_byte) == CURLE_OK &&
            first_byte >= sent && first_byte > 0)
          end.answer_wait = std::chrono::microseconds(first_byte - sent);
      }
      if (!end.ok) {
        end.permanent = IsPermanentCurlError(rc);
        end.error = DescribeCurlError(rc, s->errbuf, ProxyOf(settings, s->url));
        long connect_status = 0;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_HTTP_CONNECTCODE, &connect_status);
        end.no_answer = IsNoAnswerCurlError(rc, end.http_status, connect_status);
      }
      if (settings.debug) {
        long version = 0;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_HTTP_VERSION, &version);
        DebugLogAnswer(s->head_only, s->url, version, end.http_status, t->head.location, end.error);
      }
      t->OnDone(end);  // may Start another transfer, in this slot too
    }
    return done;
  }

  const HttpSettings& settings;
  const Options opts;
  // Two connection pools to the same servers: bulk transfers
  // (HttpRequest::bulk) run in their own, one per connection, so that no
  // small answer queues behind their bytes in a shared connection. A
  // libcurl pool is its multi handle; Wait polls `multi` with
  // bulk_multi's sockets as extra ones.
  CURLM* multi = nullptr;
  CURLM* bulk_multi = nullptr;
  int bulk_live = 0;  // transfers running in bulk_multi
  curl_slist* plain_headers = nullptr;  // Accept-Encoding: identity
  curl_slist* hub_headers = nullptr;    // ... + Authorization (hub origin only)
  std::vector<std::unique_ptr<Slot>> slots;
  std::unordered_map<HttpTransfer*, Slot*> running;
  // CURLMOPT_MAX_HOST_CONNECTIONS is below max_transfers (HTTP/2 streams
  // capped per connection, and no HTTP/1.x answer seen yet).
  bool host_connections_capped = false;
  // What the owner keeps in flight at most now (SetTransferLimit).
  int transfer_limit = opts.max_transfers;
  // HTTP/2 streams per connection now (SetStreamsPerConnection).
  int streams = std::max(1, opts.h2_streams_per_connection);
};

CurlTransport::CurlTransport(const HttpSettings& settings, Options options)
    : impl_(std::make_unique<Impl>(settings, options)) {}

CurlTransport::~CurlTransport() = default;

void CurlTransport::SetTransferLimit(int n) {
  const int limit = std::clamp(n, 1, std::max(1, impl_->opts.max_transfers));
  if (limit == impl_->transfer_limit) return;
  impl_->transfer_limit = limit;
  if (impl_->host_connections_capped) impl_->ApplyHostBound();
}

void CurlTransport::SetStreamsPerConnection(int s) {
  const int streams = std::clamp(s, 1, std::max(1, impl_->opts.max_transfers));
  if (streams == impl_->streams) return;
  impl_->SetStreams(streams);
  // Capped only while every answer was HTTP/2: decided once, at the start,
  // from the streams then; a later change moves the bound, never lifts it.
  if (impl_->host_connections_capped) impl_->ApplyHostBound();
}

void CurlTransport::Start(const HttpRequest& req, HttpTransfer* t) {
  Impl::Slot* s = impl_->FreeSlot();
  s->transfer = t;
  s->url = req.url;
  s->head_only = req.head_only;
  s->errbuf[0] = '\0';
  s->version_known = false;
  t->head.Reset();
  t->multiplexed = false;
  CURL* easy = s->easy;
  ApplyCommonOptions(easy, impl_->settings, s->url);
  curl_easy_setopt(easy, CURLOPT_PRIVATE, s);
  curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, s->errbuf);
  curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, &CurlHeaderCallback);
  curl_easy_setopt(easy, CURLOPT_HEADERDATA, &t->head);
  curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, &Impl::WriteCallback);
  curl_easy_setopt(easy, CURLOPT_WRITEDATA, s);
  if (req.head_only) curl_easy_setopt(easy, CURLOPT_NOBODY, 1L);
  if (req.has_range) {
    const std::string range = std::to_string(req.range_first) + "-" +
                              (req.range_to_end ? std::string() : std::to_string(req.range_last));
    curl_easy_setopt(easy, CURLOPT_RANGE, range.c_str());  // copied by libcurl
  }
  if (req.connect_timeout.count() > 0)
    curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(req.connect_timeout.count()));
  if (req.timeout.count() > 0)
    curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, static_cast<long>(req.timeout.count()));
  const bool token = impl_->settings.ShouldSendToken(s->url);
  curl_easy_setopt(easy, CURLOPT_HTTPHEADER, token ? impl_->hub_headers : impl_->plain_headers);
  if (impl_->settings.debug) {
    std::string range;
    if (req.has_range)
      range = std::to_string(req.range_first) + "-" +
              (req.range_to_end ? std::string() : std::to_string(req.range_last));
    DebugLogRequest(req.head_only, s->url, range, token && !impl_->settings.token.empty());
  }
  impl_->running[t] = s;
  // Bulk only while every answer was HTTP/2: over HTTP/1.x each connection
  // carries one transfer anyway, and a second pool would only hold more.
  const bool bulk = req.bulk && impl_->host_connections_capped;
  s->owner = bulk ? impl_->BulkMulti() : impl_->multi;
  if (bulk) {
    ++impl_->bulk_live;
    // Not onto a bulk connection still being set up (libcurl 7.88 attaches
    // a waiting transfer to it past the one-stream cap): a connection of its own.
    curl_easy_setopt(easy, CURLOPT_PIPEWAIT, 0L);
  }
  curl_multi_add_handle(s->owner, easy);
}

void CurlTransport::Resume(HttpTransfer* t) {
  auto it = impl_->running.find(t);
  if (it != impl_->running.end()) curl_easy_pause(it->second->easy, CURLPAUSE_CONT);
}

void CurlTransport::Abandon(HttpTransfer* t) {
  auto it = impl_->running.find(t);
  if (it == impl_->running.end()) return;
  curl_multi_remove_handle(it->second->owner, it->second->easy);
  if (it->second->owner != impl_->multi) --impl_->bulk_live;
  it->second->transfer = nullptr;
  impl_->running.erase(it);
}

Result<int> CurlTransport::Perform() {
  int done = 0;
  for (CURLM* m : {impl_->multi, impl_->bulk_multi}) {
    if (m != impl_->multi && impl_->bulk_live == 0) continue;
    int still_running = 0;
    const CURLMcode mc = curl_multi_perform(m, &still_running);
    if (mc != CURLM_OK) return InternalError(std::string("curl_multi_perform: ") + curl_multi_strerror(mc));
    done += impl_->Drain(m);
  }
  return done;
}

Status CurlTransport::Wait(std::chrono::milliseconds timeout) {
  std::vector<curl_waitfd> extra = impl_->BulkWaitFds(&timeout);
  const CURLMcode pc = curl_multi_poll(impl_->multi, extra.data(), static_cast<unsigned>(extra.size()),
                                       static_cast<int>(timeout.count()), nullptr);
  if (pc != CURLM_OK) return InternalError(std::string("curl_multi_poll: ") + curl_multi_strerror(pc));
  return Status::Ok();
}

void CurlTransport::Wake() { curl_multi_wakeup(impl_->multi); }

}  // namespace exlr8
