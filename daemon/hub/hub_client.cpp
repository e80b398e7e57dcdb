#include "daemon/hub/hub_client.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <thread>
#include <unordered_set>

#include "daemon/base/mutex.h"
#include "daemon/hub/hub_protocol.h"
#include "format/json.h"

namespace exlr8 {
namespace {

// libcurl's progress callback: a non-zero answer aborts the transfer
// (CURLE_ABORTED_BY_CALLBACK). Called about once a second, and on data.
int AbortIfCancelled(void* flag, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  const auto* cancel = static_cast<const std::atomic<bool>*>(flag);
  return cancel != nullptr && cancel->load(std::memory_order_relaxed) ? 1 : 0;
}

void WatchCancel(CURL* easy, const std::atomic<bool>* cancel) {
  if (cancel == nullptr) return;
  curl_easy_setopt(easy, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(easy, CURLOPT_XFERINFOFUNCTION, &AbortIfCancelled);
  curl_easy_setopt(easy, CURLOPT_XFERINFODATA, const_cast<std::atomic<bool>*>(cancel));
}

// Sleeps `d`, in slices, unless `cancel` turns true first; false then.
bool SleepUnlessCancelled(std::chrono::milliseconds d, const std::atomic<bool>* cancel) {
  const auto until = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < until) {
    if (cancel != nullptr && cancel->load(std::memory_order_relaxed)) return false;
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(
        std::chrono::milliseconds(50), until - std::chrono::steady_clock::now()));
  }
  return cancel == nullptr || !cancel->load(std::memory_order_relaxed);
}


using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

struct EasyDeleter {
  void operator()(CURL* h) const { curl_easy_cleanup(h); }
};
using EasyPtr = std::unique_ptr<CURL, EasyDeleter>;

// The handles a HubClient keeps between requests, with a lease that hands
// one out and takes it back. Why: an easy handle keeps its connections
// alive, so the revision, the tree pages, the resolves and the small files
// then share one connection to the hub instead of opening one (TCP and TLS
// handshakes: two or three round trips on a long path) for every request.
// A connection is never shared by two requests at once: each handle is used
// by one request at a time, on the thread that leased it.
constexpr std::size_t kMaxIdleEasyHandles = 8;

}  // namespace

struct HubClient::EasyPool {
  Mutex mu;
  std::vector<EasyPtr> idle EXLR8_GUARDED_BY(mu);
};

class HubClient::EasyLease {
 public:
  explicit EasyLease(EasyPool* pool) : pool_(pool) {
    {
      MutexLock lock(&pool_->mu);
      if (!pool_->idle.empty()) {
        easy_ = std::move(pool_->idle.back());
        pool_->idle.pop_back();
      }
    }
    if (!easy_) easy_.reset(curl_easy_init());
  }
  ~EasyLease() {
    if (!easy_) return;
    MutexLock lock(&pool_->mu);
    if (pool_->idle.size() < kMaxIdleEasyHandles) pool_->idle.push_back(std::move(easy_));
  }
  EasyLease(const EasyLease&) = delete;
  EasyLease& operator=(const EasyLease&) = delete;
  CURL* get() const { return easy_.get(); }
  explicit operator bool() const { return easy_ != nullptr; }

 private:
  EasyPool* pool_;
  EasyPtr easy_;
};

namespace {

struct SlistDeleter {
  void operator()(curl_slist* l) const { curl_slist_free_all(l); }
};
using SlistPtr = std::unique_ptr<curl_slist, SlistDeleter>;

const char* Env(const char* name) {
  const char* v = std::getenv(name);
  return (v != nullptr && *v != '\0') ? v : nullptr;
}

milliseconds Backoff(milliseconds base, int attempt) {
  thread_local std::minstd_rand rng(std::random_device{}());
  const int shift = std::min(attempt, 10);
  const auto cap = std::min<std::int64_t>(base.count() << shift, 60'000);
  // Half fixed, half jitter.
  std::uniform_int_distribution<std::int64_t> jitter(0, std::max<std::int64_t>(cap / 2, 1));
  return milliseconds(cap / 2 + jitter(rng));
}

// Headers for a request to `url`: identity encoding always, the bearer token
// only on the hub origin.
SlistPtr MakeHeaders(const HttpSettings& s, const std::string& url, const std::string& extra = "") {
  curl_slist* list = curl_slist_append(nullptr, "Accept-Encoding: identity");
  if (s.ShouldSendToken(url)) {
    const std::string auth = "Authorization: Bearer " + s.token;
    list = curl_slist_append(list, auth.c_str());
  }
  if (!extra.empty()) list = curl_slist_append(list, extra.c_str());
  return SlistPtr(list);
}

// A token file: a regular file of at most 4096 bytes. One named explicitly
// (`must_exist`) must be readable; at a default location a missing or
// unreadable file means no token. Anything else (a directory, a FIFO) is
// never read: reading it could throw and abort the process (and serve at
// every restart), or hang the pull.
Result<std::string> ReadTokenFile(const std::string& path, bool must_exist) {
  auto unreadable = [&](const std::string& why) -> Result<std::string> {
    if (!must_exist) return std::string();
    return InvalidArgumentError("token file '" + EscapeForMessage(path, 200) + "' cannot be read: " + why);
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return unreadable(std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) return unreadable(std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return unreadable("not a regular file");
  constexpr std::size_t kMaxTokenFile = 4096;
  std::string text(kMaxTokenFile + 1, '\0');
  std::size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return unreadable(std::strerror(errno));
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  if (got > kMaxTokenFile)
    return InvalidArgumentError("token file '" + EscapeForMessage(path, 200) + "' is larger than 4096 bytes");
  text.resize(got);
  return text;
}

}  // namespace

Result<std::string> LoadHubToken(const HubOptions& options) {
  std::string token;
  std::string source;
  // What the operator named on the command line wins over the environment:
  // --token-file over HF_TOKEN.
  if (options.token) {
    token = *options.token;
    source = "the token option";
  } else if (!options.token_file.empty()) {
    EXLR8_ASSIGN_OR_RETURN(token, ReadTokenFile(options.token_file, true));
    source = "token file '" + options.token_file + "'";
  } else if (const char* t = options.token_from_environment ? Env("HF_TOKEN") : nullptr) {
    token = t;
    source = "HF_TOKEN";
  } else if (const char* t2 = options.token_from_environment ? Env("HUGGING_FACE_HUB_TOKEN") : nullptr) {
    token = t2;
    source = "HUGGING_FACE_HUB_TOKEN";
  } else if (options.token_from_environment) {
    std::string path;
    if (const char* p = Env("HF_TOKEN_PATH")) {
      path = p;
    } else if (const char* home = Env("HF_HOME")) {
      path = std::string(home) + "/token";
    } else if (const char* xdg = Env("XDG_CACHE_HOME")) {
      path = std::string(xdg) + "/huggingface/token";
    } else if (const char* h = Env("HOME")) {
      path = std::string(h) + "/.cache/huggingface/token";
    }
    if (!path.empty()) {
      EXLR8_ASSIGN_OR_RETURN(token, ReadTokenFile(path, false));
      source = "token file '" + path + "'";
    }
  }
  // Trim surrounding whitespace (files end with a newline).
  const auto not_space = [](char c) { return std::isspace(static_cast<unsigned char>(c)) == 0; };
  token.erase(token.begin(), std::find_if(token.begin(), token.end(), not_space));
  token.erase(std::find_if(token.rbegin(), token.rend(), not_space).base(), token.end());
  for (char c : token) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u >= 0x7f) {
      return InvalidArgumentError("the Hugging Face token from " + source +
                                  " contains whitespace or non-printable characters");
    }
  }
  return token;
}

bool HubOfflineFromEnvironment() {
  const char* v = std::getenv("HF_HUB_OFFLINE");
  if (v == nullptr) return false;
  std::string upper(v);
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return upper == "1" || upper == "ON" || upper == "YES" || upper == "TRUE";
}

Result<std::string> ChooseCaBundle(const HubOptions& options) {
  std::string path = options.ca_bundle, source = "--ca-bundle";
  for (const char* var : {"CURL_CA_BUNDLE", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE"}) {
    if (!path.empty()) break;
    if (const char* v = Env(var)) path = v, source = var;
  }
  if (path.empty()) return path;
  std::ifstream in(path, std::ios::binary);
  if (!in) return InvalidArgumentError("CA bundle '" + path + "' (from " + source + ") cannot be read");
  return path;
}

struct HubClient::Response {
  ResponseHead head;
  std::string body;
};

HubClient::~HubClient() = default;

Result<std::unique_ptr<HubClient>> HubClient::Open(HubOptions options, std::string repo, std::string revision,
                                                   HubOutage* outage) {
  if (outage != nullptr) *outage = HubOutage::kNone;
  EnsureCurlGlobalInit();
  std::unique_ptr<HubClient> c(new HubClient());
  c->easy_pool_ = std::make_unique<EasyPool>();
  EXLR8_RETURN_IF_ERROR(ValidateHubRepoId(repo));
  if (revision.empty()) return InvalidArgumentError("empty revision for " + repo);
  if (options.repo_type != "model" && options.repo_type != "dataset") {
    return InvalidArgumentError("repo type '" + EscapeForMessage(options.repo_type) +
                                "': expected 'model' or 'dataset'");
  }
  std::string endpoint = options.endpoint;
  if (endpoint.empty()) {
    const char* env = Env("HF_ENDPOINT");
    endpoint = env != nullptr ? env : "https://huggingface.co";
  }
  while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
  auto origin = UrlOrigin(endpoint);
  if (!origin || endpoint.find_first_of("?#") != std::string::npos) {
    return InvalidArgumentError("hub endpoint '" + EscapeForMessage(endpoint) +
                                "' is not an http(s) URL without query");
  }
  EXLR8_ASSIGN_OR_RETURN(std::string token, LoadHubToken(options));
  EXLR8_ASSIGN_OR_RETURN(c->settings_.ca_bundle, ChooseCaBundle(options));

  c->settings_.hub_origin = *origin;
  c->settings_.token = std::move(token);
  c->settings_.explicit_proxy = options.proxy;
  c->settings_.use_env_proxy = options.use_env_proxy;
  c->settings_.connect_timeout_ms = static_cast<long>(options.connect_timeout.count());
  c->settings_.low_speed_limit = std::max(1L, options.stall_bytes_per_second);
  c->settings_.low_speed_time_s = static_cast<long>(std::max<std::int64_t>(options.stall_timeout.count(), 1));
  c->endpoint_ = endpoint;
  c->repo_ = std::move(repo);
  c->revision_ = std::move(revision);
  const std::string type_plural = options.repo_type + "s";
  const std::string prefix = options.repo_type == "model" ? "" : type_plural + "/";
  c->api_base_ = endpoint + "/api/" + type_plural + "/" + c->repo_;
  c->options_ = std::move(options);
  EXLR8_ASSIGN_OR_RETURN(c->commit_, c->ResolveCommit(outage));
  c->resolve_base_ = endpoint + "/" + prefix + c->repo_ + "/resolve/" + c->commit_ + "/";
  return c;
}

std::string HubClient::DescribeFile(std::string_view path) const {
  return repo_ + "@" + commit_.substr(0, 12) + " file '" + EscapeForMessage(path) + "'";
}

std::string HubClient::ResolveUrl(std::string_view path) const {
  return resolve_base_ + PercentEncode(path, /*keep_slash=*/true);
}

HubClientStats HubClient::stats() const {
  HubClientStats s;
  s.api_requests = api_requests_.load(std::memory_order_relaxed);
  s.resolves = resolves_.load(std::memory_order_relaxed);
  s.whole_file_gets = whole_file_gets_.load(std::memory_order_relaxed);
  s.retries = retries_.load(std::memory_order_relaxed);
  s.rate_limited = rate_limited_.load(std::memory_order_relaxed);
  return s;
}

Result<HubClient::Response> HubClient::Request(const std::string& url, bool head, std::size_t max_body,
                                               std::string_view what, bool json, HubOutage* outage,
                                               std::optional<Tries> tries) const {
  const int max_attempts = tries ? tries->max_attempts : options_.max_attempts;
  HubOutage last_outage = HubOutage::kNone;  // what last_error says of the server
  auto said = [&](HubOutage o) {
    if (outage != nullptr) *outage = o;
  };
  said(HubOutage::kNone);
  EasyLease easy(easy_pool_.get());
  if (!easy) return InternalError("curl_easy_init failed");
  struct BodySink {
    std::string* body;
    std::size_t max;
    bool overflow = false;
  };
  Status last_error;
  for (int attempt = 1;; ++attempt) {
    Response r;
    BodySink sink{&r.body, max_body};
    char errbuf[CURL_ERROR_SIZE] = {0};
    if (options_.cancel != nullptr && options_.cancel->load()) return CancelledError(std::string(what) + ": cancelled");
    ApplyCommonOptions(easy.get(), settings_, url);
    if (tries) curl_easy_setopt(easy.get(), CURLOPT_CONNECTTIMEOUT_MS, tries->connect_timeout_ms);
    WatchCancel(easy.get(), options_.cancel);
    curl_easy_setopt(easy.get(), CURLOPT_TIMEOUT_MS, static_cast<long>(options_.api_timeout.count() * 1000));
    SlistPtr headers = MakeHeaders(settings_, url);
    curl_easy_setopt(easy.get(), CURLOPT_HTTPHEADER, headers.get());
    curl_easy_setopt(easy.get(), CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(easy.get(), CURLOPT_HEADERFUNCTION, &CurlHeaderCallback);
    curl_easy_setopt(easy.get(), CURLOPT_HEADERDATA, &r.head);
    if (head) curl_easy_setopt(easy.get(), CURLOPT_NOBODY, 1L);
    curl_easy_setopt(easy.get(), CURLOPT_WRITEDATA, &sink);
    curl_easy_setopt(
        easy.get(), CURLOPT_WRITEFUNCTION, +[](char* p, std::size_t sz, std::size_t n, void* ud) -> std::size_t {
          auto* s = static_cast<BodySink*>(ud);
          const std::size_t len = sz * n;
          if (s->body->size() + len > s->max) {
            s->overflow = true;
            return 0;
          }
          s->body->append(p, len);
          return len;
        });
    const CURLcode rc = curl_easy_perform(easy.get());
    if (rc == CURLE_ABORTED_BY_CALLBACK) return CancelledError(std::string(what) + ": cancelled");
    long status = 0;
    curl_easy_getinfo(easy.get(), CURLINFO_RESPONSE_CODE, &status);
    r.head.status = status;
    if (sink.overflow) {
      // No hub answers an API call this large: the server is broken or
      // hostile (Corruption, exit 3), not the local disk full (exit 6).
      return CorruptionError(std::string(what) + ": answer larger than " + std::to_string(max_body) +
                             " bytes, more than any hub API answer holds");
    }
    std::optional<milliseconds> wait;
    if (rc != CURLE_OK) {
      last_error = IOError(std::string(what) + ": " + DescribeCurlError(rc, errbuf, ProxyOf(settings_, url)));
      if (IsPermanentCurlError(rc)) return last_error;
      long connect_status = 0;
      curl_easy_getinfo(easy.get(), CURLINFO_HTTP_CONNECTCODE, &connect_status);
      last_outage =
          IsNoAnswerCurlError(rc, status, connect_status) ? HubOutage::kUnreachable : HubOutage::kNone;
    } else if (IsRetryableHttp(status)) {
      if (status == 429) rate_limited_.fetch_add(1, std::memory_order_relaxed);
      last_error = HttpError(status, r.head, what, settings_.ShouldSendToken(url), settings_.token);
      // 408 is the server timing our request out: an answer like any 4xx.
      last_outage = status == 408 ? HubOutage::kNone : HubOutage::kNotNow;
      wait = ThrottleWait(r.head);
      if (wait && *wait > options_.max_throttle_wait) {
        said(last_outage);
        return UnavailableError(last_error.message() + WaitPastCap(*wait, options_.max_throttle_wait));
      }
    } else if (json && status == 200 && !r.head.content_length && !ParseJson(r.body).ok()) {
      // A JSON answer with no length, ended by a close: a connection cut
      // mid-answer looks just like its end, and is not corruption (exit 3).
      // Retried as the transport error it most likely is;
      // a length-delimited answer that does not parse stays Corruption.
      last_error = IOError(std::string(what) + ": answer with no Content-Length ended before its JSON did");
      last_outage = HubOutage::kNone;
    } else {
      return r;
    }
    if (attempt >= max_attempts) {
      said(last_outage);
      return Status(last_error.code(), last_error.message() + " (after " + std::to_string(attempt) + " attempts)");
    }
    retries_.fetch_add(1, std::memory_order_relaxed);
    if (!SleepUnlessCancelled(wait ? *wait : Backoff(options_.retry_base, attempt - 1), options_.cancel))
      return CancelledError(std::string(what) + ": cancelled");
  }
}

Result<std::string> HubClient::ResolveCommit(HubOutage* outage) {
  const std::string url = api_base_ + "/revision/" + PercentEncode(revision_, /*keep_slash=*/false);
  const std::string what = "revision '" + EscapeForMessage(revision_) + "' of " + repo_;
  api_requests_.fetch_add(1, std::memory_order_relaxed);
  Tries tries{options_.max_attempts, settings_.connect_timeout_ms};
  if (options_.resolve_max_attempts > 0) tries.max_attempts = options_.resolve_max_attempts;
  if (options_.resolve_connect_timeout.count() > 0)
    tries.connect_timeout_ms = static_cast<long>(options_.resolve_connect_timeout.count());
  EXLR8_ASSIGN_OR_RETURN(Response r,
                         Request(url, false, options_.max_json_bytes, what, /*json=*/true, outage, tries));
  if (r.head.status != 200) {
    Status error = HttpError(r.head.status, r.head, what, settings_.ShouldSendToken(url), settings_.token);
    // A hub names what it did not find (X-Error-Code); a 404 without it is
    // most likely another server, or --endpoint with a path (found by
    // review: "HTTP 404" alone did not say which URL).
    if (r.head.status == 404 && r.head.x_error_code.empty())
      error = Status(error.code(), error.message() + "; " + EscapeForMessage(url, 300) +
                                       " is no hub API route: is --endpoint (or HF_ENDPOINT) the hub's base URL?");
    return error;
  }
  auto json = ParseJson(r.body);
  if (!json.ok()) return json.status().WithContext(what + ": revision answer");
  const JsonValue* sha = json->is_object() ? json->Find("sha") : nullptr;
  if (sha == nullptr || !sha->is_string() || !IsCommitSha(sha->as_string())) {
    return CorruptionError(what + ": revision answer has no \"sha\" of 40 lowercase hex digits");
  }
  if (IsCommitSha(revision_) && sha->as_string() != revision_) {
    return CorruptionError(what + ": hub answered commit " + sha->as_string() + " for commit " + revision_);
  }
  return sha->as_string();
}

Result<std::vector<HubFile>> HubClient::ListFiles() const {
  std::vector<HubFile> files;
  std::unordered_set<std::string> seen_paths;
  std::set<std::string> seen_pages;
  std::string url = api_base_ + "/tree/" + commit_ + "?recursive=true";
  const std::string what = repo_ + "@" + commit_.substr(0, 12) + " file list";
  for (int page = 0;; ++page) {
    if (page >= 100'000 || !seen_pages.insert(url).second) {
      return CorruptionError(what + ": tree pages loop (page " + std::to_string(page) + ")");
    }
    const std::string page_what = what + " page " + std::to_string(page);
    api_requests_.fetch_add(1, std::memory_order_relaxed);
    EXLR8_ASSIGN_OR_RETURN(Response r, Request(url, false, options_.max_json_bytes, page_what, /*json=*/true));
    if (r.head.status != 200)
      return HttpError(r.head.status, r.head, page_what, settings_.ShouldSendToken(url), settings_.token);
    EXLR8_ASSIGN_OR_RETURN(std::vector<HubFile> page_files, ParseTreePage(r.body, page_what, seen_paths));
    for (HubFile& f : page_files) files.push_back(std::move(f));
    auto next = ParseNextLink(r.head.link);
    if (!next) break;
    auto abs = ResolveLocation(url, *next);
    auto origin = abs ? UrlOrigin(*abs) : std::nullopt;
    if (!origin || *origin != settings_.hub_origin) {
      return CorruptionError(page_what + ": next page link points outside the hub endpoint");
    }
    url = *abs;
  }
  return files;
}

HubClient::ResolveStep HubClient::InterpretResolve(std::string_view path, const std::string& request_url,
                                                   const ResponseHead& head) const {
  return InterpretResolve(path, request_url, head, Clock::now());
}

HubClient::ResolveStep HubClient::InterpretResolve(std::string_view path, const std::string& request_url,
                                                   const ResponseHead& head,
                                                   std::chrono::steady_clock::time_point now) const {
  ResolveStep step;
  const std::string what = DescribeFile(path);
  if (!head.x_repo_commit.empty() && head.x_repo_commit != commit_) {
    step.status = CorruptionError(what + ": hub answered for commit '" + EscapeForMessage(head.x_repo_commit) +
                                  "', pinned " + commit_);
    return step;
  }
  auto linked_size = [&]() -> std::optional<std::uint64_t> {
    if (!head.x_linked_size.empty()) return ParseDecimalU64(head.x_linked_size);
    return head.content_length;
  };
  if (head.status == 200) {
    ResolvedFile f;
    f.url = request_url;
    f.on_hub = UrlOrigin(request_url) == settings_.hub_origin;
    f.size = linked_size();
    f.etag = !head.x_linked_etag.empty() ? head.x_linked_etag : head.etag;
    f.expires = now + std::chrono::hours(24 * 365);
    step.resolved = std::move(f);
    return step;
  }
  if (IsRedirectStatus(head.status)) {
    auto target = ResolveLocation(request_url, head.location);
    auto origin = target ? UrlOrigin(*target) : std::nullopt;
    if (!origin) {
      step.status = CorruptionError(what + ": redirect without a usable http(s) Location");
      return step;
    }
    if (*origin == settings_.hub_origin) {
      step.follow = *target;
      return step;
    }
    ResolvedFile f;
    f.url = *target;
    f.on_hub = false;
    f.size = !head.x_linked_size.empty() ? ParseDecimalU64(head.x_linked_size) : std::nullopt;
    f.etag = head.x_linked_etag;
    f.expires = now + options_.signed_url_ttl;
    step.resolved = std::move(f);
    return step;
  }
  step.status = HttpError(head.status, head, what, settings_.ShouldSendToken(request_url), settings_.token);
  step.retryable = IsRetryableHttp(head.status);
  step.wait = ThrottleWait(head);
  return step;
}

Result<ResolvedFile> HubClient::ResolveFile(std::string_view path) const {
  EXLR8_RETURN_IF_ERROR(ValidateHubPath(path));
  std::string url = ResolveUrl(path);
  const std::string what = DescribeFile(path);
  for (int hop = 0; hop < 6; ++hop) {
    resolves_.fetch_add(1, std::memory_order_relaxed);
    EXLR8_ASSIGN_OR_RETURN(Response r, Request(url, /*head=*/true, 0, what));
    ResolveStep step = InterpretResolve(path, url, r.head);
    if (step.resolved) return std::move(*step.resolved);
    if (!step.follow) return step.status;
    url = *step.follow;
  }
  return IOError(what + ": too many redirects on the hub");
}

Status HubClient::FetchWholeFile(std::string_view path, std::uint64_t max_bytes,
                                 const std::function<Status(std::span<const std::byte>)>& sink) const {
  const std::string what = DescribeFile(path);
  EXLR8_ASSIGN_OR_RETURN(ResolvedFile where, ResolveFile(path));
  if (where.size && *where.size > max_bytes) {
    return ResourceExhaustedError(what + ": size " + std::to_string(*where.size) + " exceeds the limit of " +
                                  std::to_string(max_bytes) + " bytes");
  }
  EasyLease easy(easy_pool_.get());
  if (!easy) return InternalError("curl_easy_init failed");

  struct Ctx {
    const std::function<Status(std::span<const std::byte>)>* sink;
    ResponseHead head;
    std::uint64_t delivered = 0;  // bytes given to sink, over all attempts
    std::uint64_t skip = 0;       // bytes of this answer to drop (a 200 after a resume)
    std::uint64_t max_bytes = 0;
    bool checked = false;
    Status error;  // set when the write callback stops the transfer
    bool retry_error = false;
  };
  Ctx ctx;
  ctx.sink = &sink;
  ctx.max_bytes = max_bytes;
  Status last_error;
  int reresolves = 0;
  for (int attempt = 1;; ++attempt) {
    ctx.head.Reset();
    ctx.checked = false;
    ctx.skip = 0;
    ctx.error = Status::Ok();
    ctx.retry_error = false;
    char errbuf[CURL_ERROR_SIZE] = {0};
    if (options_.cancel != nullptr && options_.cancel->load()) return CancelledError(what + ": cancelled");
    ApplyCommonOptions(easy.get(), settings_, where.url);
    WatchCancel(easy.get(), options_.cancel);
    std::string range;
    if (ctx.delivered > 0) range = "Range: bytes=" + std::to_string(ctx.delivered) + "-";
    SlistPtr headers = MakeHeaders(settings_, where.url, range);
    curl_easy_setopt(easy.get(), CURLOPT_HTTPHEADER, headers.get());
    curl_easy_setopt(easy.get(), CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(easy.get(), CURLOPT_HEADERFUNCTION, &CurlHeaderCallback);
    curl_easy_setopt(easy.get(), CURLOPT_HEADERDATA, &ctx.head);
    curl_easy_setopt(easy.get(), CURLOPT_WRITEDATA, &ctx);
    curl_easy_setopt(
        easy.get(), CURLOPT_WRITEFUNCTION, +[](char* p, std::size_t sz, std::size_t n, void* ud) -> std::size_t {
          auto* c = static_cast<Ctx*>(ud);
          const std::size_t len = sz * n;
          if (!c->checked) {
            c->checked = true;
            if (c->head.status == 200) {
              c->skip = c->delivered;  // the server restarted from byte 0
            } else if (c->head.status == 206) {
              auto cr = ParseContentRange(c->head.content_range);
              if (!cr || cr->first != c->delivered) {
                c->error = CorruptionError("resumed download answered Content-Range '" +
                                           EscapeForMessage(c->head.content_range) + "', expected start " +
                                           std::to_string(c->delivered));
                c->retry_error = true;
                return 0;
              }
            } else {
              return len;  // error body: ignored, status handled after
            }
          }
          if (c->head.status != 200 && c->head.status != 206) return len;
          std::size_t off = 0;
          if (c->skip > 0) {
            const std::uint64_t drop = std::min<std::uint64_t>(c->skip, len);
            c->skip -= drop;
            off = static_cast<std::size_t>(drop);
          }
          if (off == len) return len;
          if (c->delivered + (len - off) > c->max_bytes) {
            c->error = ResourceExhaustedError("file is larger than the limit of " + std::to_string(c->max_bytes) +
                                              " bytes");
            return 0;
          }
          Status s = (*c->sink)(std::span<const std::byte>(reinterpret_cast<const std::byte*>(p + off), len - off));
          if (!s.ok()) {
            c->error = std::move(s);
            return 0;
          }
          c->delivered += len - off;
          return len;
        });
    whole_file_gets_.fetch_add(1, std::memory_order_relaxed);
    const CURLcode rc = curl_easy_perform(easy.get());
    if (rc == CURLE_ABORTED_BY_CALLBACK) return CancelledError(what + ": cancelled");
    long status = 0;
    curl_easy_getinfo(easy.get(), CURLINFO_RESPONSE_CODE, &status);
    ctx.head.status = status;
    std::optional<milliseconds> wait;
    if (!ctx.error.ok() && !ctx.retry_error) {
      // Sink failures come back unchanged; size overflow gets the file name.
      if (ctx.error.code() == StatusCode::kResourceExhausted && rc == CURLE_WRITE_ERROR) {
        return ctx.error.WithContext(what);
      }
      return ctx.error;
    }
    if (!ctx.error.ok()) {
      last_error = ctx.error.WithContext(what);
    } else if (rc != CURLE_OK) {
      last_error = IOError(what + ": " + DescribeCurlError(rc, errbuf, ProxyOf(settings_, where.url)));
      if (IsPermanentCurlError(rc)) return last_error;
    } else if (status == 200 || status == 206) {
      if (where.size && ctx.delivered != *where.size) {
        last_error = IOError(what + ": got " + std::to_string(ctx.delivered) + " bytes, expected " +
                             std::to_string(*where.size));
      } else {
        return Status::Ok();
      }
    } else if (status == 403 && !where.on_hub && reresolves < 3) {
      // The signed URL expired: resolve again (does not count as an attempt).
      ++reresolves;
      --attempt;
      EXLR8_ASSIGN_OR_RETURN(where, ResolveFile(path));
      continue;
    } else if (IsRetryableHttp(status)) {
      if (status == 429) rate_limited_.fetch_add(1, std::memory_order_relaxed);
      last_error = HttpError(status, ctx.head, what, settings_.ShouldSendToken(where.url), settings_.token);
      wait = ThrottleWait(ctx.head);
      if (wait && *wait > options_.max_throttle_wait) return last_error;
    } else {
      return HttpError(status, ctx.head, what, settings_.ShouldSendToken(where.url), settings_.token);
    }
    if (attempt >= options_.max_attempts) {
      return Status(last_error.code(), last_error.message() + " (after " + std::to_string(attempt) + " attempts)");
    }
    retries_.fetch_add(1, std::memory_order_relaxed);
    if (!SleepUnlessCancelled(wait ? *wait : Backoff(options_.retry_base, attempt - 1), options_.cancel))
      return CancelledError(what + ": cancelled");
  }
}

Result<std::string> HubClient::FetchWholeFileToString(std::string_view path, std::uint64_t max_bytes) const {
  std::string out;
  EXLR8_RETURN_IF_ERROR(FetchWholeFile(path, max_bytes, [&](std::span<const std::byte> b) {
    out.append(reinterpret_cast<const char*>(b.data()), b.size());
    return Status::Ok();
  }));
  return out;
}

}  // namespace exlr8
