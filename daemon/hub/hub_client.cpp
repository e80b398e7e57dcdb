// HubClient: the repo's identity and what the hub's answers mean; the
// requests themselves go through HubRequester (hub_requester.h), the
// token and CA bundle come from hub_environment.cpp.
#include "daemon/hub/hub_client.h"

#include <algorithm>
#include <cstdlib>
#include <set>
#include <unordered_set>

#include "daemon/hub/hub_protocol.h"
#include "daemon/hub/hub_requester.h"
#include "format/json.h"

namespace exlr8 {
namespace {

using std::chrono::milliseconds;
using Response = HubRequester::Response;

}  // namespace

HubClient::~HubClient() = default;

Result<std::unique_ptr<HubClient>> HubClient::Open(HubOptions options, std::string repo, std::string revision,
                                                   HubOutage* outage) {
  if (outage != nullptr) *outage = HubOutage::kNone;
  std::unique_ptr<HubClient> c(new HubClient());
  EXLR8_RETURN_IF_ERROR(ValidateHubRepoId(repo));
  if (revision.empty()) return InvalidArgumentError("empty revision for " + repo);
  if (options.repo_type != "model" && options.repo_type != "dataset") {
    return InvalidArgumentError("repo type '" + EscapeForMessage(options.repo_type) +
                                "': expected 'model' or 'dataset'");
  }
  std::string endpoint = ChooseHubEndpoint(options);
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
  c->settings_.debug = options.debug || HubDebugFromEnvironment();
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
  HubRequester::Options ro;
  ro.max_attempts = c->options_.max_attempts;
  ro.retry_base = c->options_.retry_base;
  ro.max_throttle_wait = c->options_.max_throttle_wait;
  ro.api_timeout = std::chrono::duration_cast<milliseconds>(c->options_.api_timeout);
  ro.cancel = c->options_.cancel;
  ro.clock = c->options_.clock;
  ro.transport = c->options_.transport;
  c->requester_ = std::make_unique<HubRequester>(c->settings_, ro);
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
  s.retries = requester_->retries();
  s.rate_limited = requester_->rate_limited();
  return s;
}

void HubClient::CountRateLimited() const { requester_->CountRateLimited(); }

Result<std::string> HubClient::ResolveCommit(HubOutage* outage) {
  const std::string url = api_base_ + "/revision/" + PercentEncode(revision_, /*keep_slash=*/false);
  const std::string what = "revision '" + EscapeForMessage(revision_) + "' of " + repo_;
  api_requests_.fetch_add(1, std::memory_order_relaxed);
  HubRequester::Tries tries{options_.max_attempts, milliseconds(0)};
  if (options_.resolve_max_attempts > 0) tries.max_attempts = options_.resolve_max_attempts;
  if (options_.resolve_connect_timeout.count() > 0) tries.connect_timeout = options_.resolve_connect_timeout;
  EXLR8_ASSIGN_OR_RETURN(Response r, requester_->Request(url, false, options_.max_json_bytes, what,
                                                         /*json=*/true, outage, tries));
  if (r.head.status != 200) {
    Status error = HttpError(r.head.status, r.head, what, settings_.ShouldSendToken(url), settings_.token);
    // A hub names what it did not find (X-Error-Code); a 404 without it is
    // most likely another server, or --endpoint with a path: the message
    // names the URL asked.
    if (r.head.status == 404 && r.head.x_error_code.empty())
      error = Status(error.code(),
                     error.message() + "; " + EscapeForMessage(url, 300) +
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
    EXLR8_ASSIGN_OR_RETURN(
        Response r, requester_->Request(url, false, options_.max_json_bytes, page_what, /*json=*/true));
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
  return InterpretResolve(path, request_url, head, requester_->clock().Now(), requester_->clock().WallNow());
}

HubClient::ResolveStep HubClient::InterpretResolve(std::string_view path, const std::string& request_url,
                                                   const ResponseHead& head,
                                                   std::chrono::steady_clock::time_point now,
                                                   std::chrono::system_clock::time_point wall_now) const {
  ResolveStep step;
  const std::string what = DescribeFile(path);
  if (!head.x_repo_commit.empty() && head.x_repo_commit != commit_) {
    step.status = CorruptionError(what + ": hub answered for commit '" +
                                  EscapeForMessage(head.x_repo_commit) + "', pinned " + commit_);
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
  step.wait = ThrottleWait(head, wall_now);
  return step;
}

Result<ResolvedFile> HubClient::ResolveFile(std::string_view path) const {
  EXLR8_RETURN_IF_ERROR(ValidateHubPath(path));
  std::string url = ResolveUrl(path);
  const std::string what = DescribeFile(path);
  for (int hop = 0; hop < 6; ++hop) {
    resolves_.fetch_add(1, std::memory_order_relaxed);
    EXLR8_ASSIGN_OR_RETURN(Response r, requester_->Request(url, /*head=*/true, 0, what));
    ResolveStep step = InterpretResolve(path, url, r.head);
    if (step.resolved) return std::move(*step.resolved);
    if (!step.follow) return step.status;
    url = *step.follow;
  }
  return IOError(what + ": too many redirects on the hub");
}

namespace {

// The receiving end of one try of FetchWholeFile: hands each byte of the
// file to the sink exactly once over all tries (a resumed try's 206 must
// start where the last stopped; a 200 after a resume starts over, and the
// bytes already given are dropped).
class WholeFileTransfer final : public HttpTransfer {
 public:
  WholeFileTransfer(const std::function<Status(std::span<const std::byte>)>& sink, std::uint64_t max_bytes)
      : sink_(sink), max_bytes_(max_bytes) {}

  // Before each try.
  void Reset() {
    checked_ = false;
    skip_ = 0;
    error = Status::Ok();
    retry_error = false;
  }

  Body OnBody(const char* p, std::size_t len) override {
    if (!checked_) {
      checked_ = true;
      if (head.status == 200) {
        skip_ = delivered;  // the server restarted from byte 0
      } else if (head.status == 206) {
        auto cr = ParseContentRange(head.content_range);
        if (!cr || cr->first != delivered) {
          error = CorruptionError("resumed download answered Content-Range '" +
                                  EscapeForMessage(head.content_range) + "', expected start " +
                                  std::to_string(delivered));
          retry_error = true;
          return Body::kStop;
        }
      } else {
        return Body::kContinue;  // error body: ignored, status handled after
      }
    }
    if (head.status != 200 && head.status != 206) return Body::kContinue;
    std::size_t off = 0;
    if (skip_ > 0) {
      const std::uint64_t drop = std::min<std::uint64_t>(skip_, len);
      skip_ -= drop;
      off = static_cast<std::size_t>(drop);
    }
    if (off == len) return Body::kContinue;
    if (delivered + (len - off) > max_bytes_) {
      error =
          ResourceExhaustedError("file is larger than the limit of " + std::to_string(max_bytes_) + " bytes");
      return Body::kStop;
    }
    Status s = sink_(std::span<const std::byte>(reinterpret_cast<const std::byte*>(p + off), len - off));
    if (!s.ok()) {
      error = std::move(s);
      return Body::kStop;
    }
    delivered += len - off;
    return Body::kContinue;
  }
  void OnDone(const TransferEnd&) override {}

  std::uint64_t delivered = 0;  // bytes given to the sink, over all tries
  Status error;                 // set when OnBody stopped the transfer
  bool retry_error = false;     // ... for a reason another try may mend

 private:
  const std::function<Status(std::span<const std::byte>)>& sink_;
  const std::uint64_t max_bytes_;
  bool checked_ = false;
  std::uint64_t skip_ = 0;  // bytes of this answer to drop (a 200 after a resume)
};

}  // namespace

Status HubClient::FetchWholeFile(std::string_view path, std::uint64_t max_bytes,
                                 const std::function<Status(std::span<const std::byte>)>& sink) const {
  const std::string what = DescribeFile(path);
  EXLR8_ASSIGN_OR_RETURN(ResolvedFile where, ResolveFile(path));
  if (where.size && *where.size > max_bytes) {
    return ResourceExhaustedError(what + ": size " + std::to_string(*where.size) + " exceeds the limit of " +
                                  std::to_string(max_bytes) + " bytes");
  }
  WholeFileTransfer t(sink, max_bytes);
  Status last_error;
  int reresolves = 0;
  for (int attempt = 1;; ++attempt) {
    t.Reset();
    HttpRequest req;
    req.url = where.url;
    if (t.delivered > 0) {
      req.has_range = true;
      req.range_to_end = true;
      req.range_first = t.delivered;
    }
    if (requester_->cancelled()) return CancelledError(what + ": cancelled");
    whole_file_gets_.fetch_add(1, std::memory_order_relaxed);
    EXLR8_ASSIGN_OR_RETURN(const TransferEnd end, requester_->Exchange(req, &t, what));
    const long status = end.http_status;
    t.head.status = status;
    std::optional<milliseconds> wait;
    if (!t.error.ok() && !t.retry_error) {
      // Sink failures come back unchanged; size overflow gets the file name.
      if (t.error.code() == StatusCode::kResourceExhausted) return t.error.WithContext(what);
      return t.error;
    }
    if (!t.error.ok()) {
      last_error = t.error.WithContext(what);
    } else if (!end.ok) {
      last_error = IOError(what + ": " + end.error);
      if (end.permanent) return last_error;
    } else if (status == 200 || status == 206) {
      if (where.size && t.delivered != *where.size) {
        last_error = IOError(what + ": got " + std::to_string(t.delivered) + " bytes, expected " +
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
      if (status == 429) requester_->CountRateLimited();
      last_error = HttpError(status, t.head, what, settings_.ShouldSendToken(where.url), settings_.token);
      wait = ThrottleWait(t.head, requester_->clock().WallNow());
      if (wait && *wait > options_.max_throttle_wait) return last_error;
    } else {
      return HttpError(status, t.head, what, settings_.ShouldSendToken(where.url), settings_.token);
    }
    if (attempt >= options_.max_attempts) {
      return Status(last_error.code(),
                    last_error.message() + " (after " + std::to_string(attempt) + " attempts)");
    }
    if (!requester_->WaitBeforeRetry(wait, attempt)) return CancelledError(what + ": cancelled");
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
