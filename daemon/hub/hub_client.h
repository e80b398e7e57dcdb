// HubClient: the Hugging Face Hub protocol as huggingface_hub speaks it, for
// one repo pinned to one commit.
//
// Open() resolves the caller's revision (branch, tag, "refs/pr/1" or a
// commit) to a commit sha ONCE; every later request names that commit, so a
// push to the branch mid-pull cannot mix two versions of a release.
//
//   GET  {endpoint}/api/{type}s/{repo}/revision/{rev}           -> "sha"
//   GET  {endpoint}/api/{type}s/{repo}/tree/{commit}?recursive=true
//        (pages follow `Link: <...>; rel="next"`)               -> file list
//   HEAD {endpoint}/{repo}/resolve/{commit}/{path}              -> 200 (file is
//        served by the hub itself) or 30x with Location (signed CDN URL,
//        valid about an hour). Relative redirects (renamed repo,
//        /api/resolve-cache) are followed on the hub; absolute ones are read
//        and returned, never followed.
//
// The token (explicit, a token file, HF_TOKEN, or $HF_HOME/token) is sent as
// `Authorization: Bearer` only to the endpoint's origin (scheme+host+port):
// never to a CDN or a Link/Location on another host, never into a message.
//
// Errors (all requests): 401/403 PermissionDenied (with a hint, never the
// token); 404 NotFound naming RepoNotFound/RevisionNotFound/EntryNotFound;
// 429 and 5xx are retried (Retry-After / RateLimit t= honoured, bounded),
// then Unavailable; transport failures retried, then IOError; malformed or
// hostile JSON, bad paths, sizes > 2^50, bad sha256 -> Corruption naming the
// field.
//
// Pieces: HubClient owns the repo's identity (endpoint, repo, pinned commit,
// the URLs built from them) and what the answers mean; HubRequester
// (hub_requester.h) owns the transports under the requests, the retries and
// the Clock their waits are measured on; hub_environment.cpp reads the
// token, the CA bundle and HF_HUB_OFFLINE.
//
// Thread rules: after Open(), all const methods may be called from any
// thread concurrently (each request has a transport to itself; counters are
// atomic). The RangeFetcher calls ResolveUrl/InterpretResolve/http_settings
// from its own thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/base/clock.h"
#include "daemon/hub/http_common.h"
#include "daemon/hub/hub_protocol.h"  // HubFile
#include "format/status.h"

namespace exlr8 {

class HttpTransport;
class HubRequester;

struct HubOptions {
  // Base URL. Empty: $HF_ENDPOINT, else "https://huggingface.co".
  std::string endpoint;
  // Token, in order: `token` if set; else `token_file` if set (it must be
  // a readable regular file); else $HF_TOKEN (then the legacy
  // $HUGGING_FACE_HUB_TOKEN); else $HF_TOKEN_PATH; else $HF_HOME/token
  // ($HF_HOME defaults to $XDG_CACHE_HOME/huggingface or
  // ~/.cache/huggingface). A missing default file means anonymous. Set
  // `token_from_environment` false to use only `token`/`token_file`.
  std::optional<std::string> token;
  std::string token_file;
  bool token_from_environment = true;
  // "model" or "dataset".
  std::string repo_type = "model";
  // Explicit proxy URL (e.g. "http://proxy:3128"); empty: the environment
  // (HTTPS_PROXY/https_proxy, HTTP_PROXY/http_proxy, ALL_PROXY, NO_PROXY)
  // unless use_env_proxy is false.
  std::string proxy;
  bool use_env_proxy = true;
  // CA certificates (PEM) that HTTPS hubs, mirrors and CDNs are verified
  // against: `ca_bundle` if set, else $CURL_CA_BUNDLE, else
  // $REQUESTS_CA_BUNDLE, else $SSL_CERT_FILE (the variables curl, Python
  // requests and huggingface_hub honour), else libcurl's default store. A
  // file that cannot be read is InvalidArgument naming it and where it came
  // from. Verification itself is never turned off.
  std::string ca_bundle;
  // Debug mode: every request and answer line on stderr, never the token
  // (HttpSettings::debug). Also on when HubDebugFromEnvironment().
  bool debug = false;

  // Retries of API/resolve/whole-file requests on transport errors, 5xx and
  // 429: at most max_attempts tries, exponential backoff from retry_base
  // with jitter; a server-requested wait longer than max_throttle_wait fails
  // the request as Unavailable instead of sleeping.
  int max_attempts = 5;
  std::chrono::milliseconds retry_base{500};
  std::chrono::milliseconds max_throttle_wait{std::chrono::minutes(5)};
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(10)};
  // Open's resolve of the revision alone: at most this many tries, each
  // connection given at most this long (0: max_attempts, connect_timeout).
  // For a caller that has somewhere else to turn when the hub cannot be
  // asked (PullJob: a rank its cache holds), and would rather know soon.
  int resolve_max_attempts = 0;
  std::chrono::milliseconds resolve_connect_timeout{0};
  // A transfer slower than stall_bytes_per_second for stall_timeout is
  // abandoned (then retried, resuming). libcurl averages the speed over the
  // last few seconds, so detection takes up to ~5 s more.
  std::chrono::seconds stall_timeout{30};
  long stall_bytes_per_second = 1024;
  // Signed CDN URLs are reused for this long after resolving (the Hub signs
  // them for about an hour), or until the CDN answers 403.
  std::chrono::seconds signed_url_ttl{std::chrono::minutes(50)};
  // Largest JSON answer accepted (per page).
  std::size_t max_json_bytes = 64u << 20;
  // Longest one API answer (revision, tree page, resolve) may take, however
  // steadily it trickles: a server sending 2 kB/s stays above the stall
  // limit and would otherwise hold a pull for hours.
  std::chrono::seconds api_timeout{std::chrono::minutes(5)};
  // When set and true, every request of the client stops within about a
  // second (its transfer aborted, its retry wait cut short) with Cancelled:
  // PullJob::Cancel (a signal, DELETE /v1/jobs/ID) reaches the API calls
  // too, not only the range fetcher. REQUIRES: outlives the client.
  const std::atomic<bool>* cancel = nullptr;
  // The time retry waits and URL expiry are measured in; null = Clock::Real().
  // REQUIRES: outlives the client.
  Clock* clock = nullptr;
  // What carries the client's requests (http_transport.h), one at a time;
  // null = the client's own CurlTransports. The RangeFetcher does not use
  // it (RangeFetcherOptions::transport). REQUIRES: outlives the client.
  HttpTransport* transport = nullptr;
};

// Where the bytes of one file are, as answered by /resolve/.
struct ResolvedFile {
  std::string url;                                // hub URL (200) or the signed CDN URL (30x)
  bool on_hub = false;                            // true: url is on the hub origin (token is sent)
  std::optional<std::uint64_t> size;              // X-Linked-Size, else Content-Length
  std::string etag;                               // X-Linked-Etag, else ETag (quotes kept)
  std::chrono::steady_clock::time_point expires;  // reuse the url until then
};

// Counters, readable from any thread (relaxed snapshot).
struct HubClientStats {
  std::uint64_t api_requests = 0;  // revision/tree pages
  std::uint64_t resolves = 0;      // /resolve/ requests (incl. relative hops)
  std::uint64_t whole_file_gets = 0;
  std::uint64_t retries = 0;
  std::uint64_t rate_limited = 0;  // 429 answers
};

// What a failed Open() says of the hub itself, beyond its Status: whether
// the hub told what the revision is now, for a caller that may fall back to
// what it resolved to before (PullJob). Judged on the last attempt.
enum class HubOutage : std::uint8_t {
  // The hub answered, and the answer stands: no (401/403, 404 with
  // RepoNotFound/RevisionNotFound, another 4xx), an answer that makes no
  // sense (Corruption), one cut short; or the failure is local (options,
  // token file, cancel).
  kNone,
  // No answer: DNS, connection refused or timed out, the TLS handshake
  // failed, a proxy that could not connect, a connection closed before any
  // answer (IsNoAnswerCurlError). A certificate that does not verify is not
  // this: someone answered who is not trusted.
  kUnreachable,
  // The hub (or a gateway in front of it) answered "not now" on every
  // attempt: 5xx or 429, or a wait past max_throttle_wait.
  kNotNow,
};

class HubClient {
 public:
  // Reads the token, validates `repo` ("owner/name") and resolves `revision`
  // (URL-encoded whole, so refs/pr/1 -> refs%2Fpr%2F1) to a commit.
  // Errors: InvalidArgument (bad repo id, endpoint, token file unreadable,
  // token with spaces/control chars), NotFound, PermissionDenied,
  // Unavailable, IOError, Corruption (answer without a 40-hex "sha").
  // `outage`, when not null, is set to what an error says of the hub
  // (kNone on success).
  static Result<std::unique_ptr<HubClient>> Open(HubOptions options, std::string repo, std::string revision,
                                                 HubOutage* outage = nullptr);

  ~HubClient();
  HubClient(const HubClient&) = delete;
  HubClient& operator=(const HubClient&) = delete;

  const std::string& endpoint() const { return endpoint_; }
  const std::string& repo() const { return repo_; }
  const std::string& revision() const { return revision_; }
  // The pinned commit (40 lowercase hex).
  const std::string& commit() const { return commit_; }
  bool has_token() const { return !settings_.token.empty(); }
  const HubOptions& options() const { return options_; }

  // All files of the commit (directories omitted), in listing order. Follows
  // tree pages; a next link on another origin, a repeated page, a duplicate
  // path or any invalid entry is Corruption.
  Result<std::vector<HubFile>> ListFiles() const;

  // `{endpoint}/{repo}/resolve/{commit}/{path}` with each path segment
  // percent-encoded. REQUIRES: ValidateHubPath(path).ok().
  std::string ResolveUrl(std::string_view path) const;

  // Blocking HEAD of ResolveUrl(path) with retries: where the bytes are.
  // Counted in stats().resolves.
  Result<ResolvedFile> ResolveFile(std::string_view path) const;

  // Streams the whole file to `sink` in order (each byte exactly once, even
  // across retries, which resume with a Range). Goes through ResolveFile.
  // ResourceExhausted if the file is larger than max_bytes (checked against
  // the announced size before any byte, and while streaming). A non-OK from
  // `sink` stops the transfer and is returned unchanged.
  Status FetchWholeFile(std::string_view path, std::uint64_t max_bytes,
                        const std::function<Status(std::span<const std::byte>)>& sink) const;
  // Convenience: the whole file in memory.
  Result<std::string> FetchWholeFileToString(std::string_view path, std::uint64_t max_bytes) const;

  HubClientStats stats() const;

  // ---- used by RangeFetcher (same library) ----

  // Connection settings incl. the token. Do not copy the token elsewhere.
  const HttpSettings& http_settings() const { return settings_; }

  // What a /resolve/ answer means, for the HEAD sent to `request_url` about
  // `path`. Exactly one of: `resolved` set; `follow` set (a relative
  // redirect to request next, on the hub); or `status` not OK.
  struct ResolveStep {
    std::optional<ResolvedFile> resolved;
    std::optional<std::string> follow;
    Status status;
    bool retryable = false;                         // status is a transient failure (5xx/429/408)
    std::optional<std::chrono::milliseconds> wait;  // server-requested wait
  };
  ResolveStep InterpretResolve(std::string_view path, const std::string& request_url,
                               const ResponseHead& head) const;
  // The same on the caller's Clock: the expiry counted from `now`, a
  // Retry-After date from `wall_now`.
  ResolveStep InterpretResolve(std::string_view path, const std::string& request_url,
                               const ResponseHead& head, std::chrono::steady_clock::time_point now,
                               std::chrono::system_clock::time_point wall_now) const;

  // Counts a resolve / 429 / retry done by the fetcher on this client's behalf.
  void CountResolve() const { resolves_.fetch_add(1, std::memory_order_relaxed); }
  void CountRateLimited() const;

  // "org/repo@abc1234" plus "file 'path'" for messages.
  std::string DescribeFile(std::string_view path) const;

 private:
  HubClient() = default;

  Result<std::string> ResolveCommit(HubOutage* outage);

  HubOptions options_;
  std::string endpoint_;  // without trailing '/'
  std::string repo_;
  std::string revision_;
  std::string commit_;
  std::string api_base_;      // {endpoint}/api/{type}s/{repo}
  std::string resolve_base_;  // {endpoint}/{prefix}{repo}/resolve/{commit}/
  HttpSettings settings_;
  // Never null after Open; its requests read settings_.
  std::unique_ptr<HubRequester> requester_;

  mutable std::atomic<std::uint64_t> api_requests_{0};
  mutable std::atomic<std::uint64_t> resolves_{0};
  mutable std::atomic<std::uint64_t> whole_file_gets_{0};
};

// The hub endpoint HubOptions selects: options.endpoint, else HF_ENDPOINT,
// else https://huggingface.co (not yet checked or normalised).
std::string ChooseHubEndpoint(const HubOptions& options);

// The token HubOptions selects (see HubOptions), or "" when none. Errors:
// InvalidArgument when an explicitly named file is unreadable or the token
// has whitespace/control characters inside (messages never show it).
Result<std::string> LoadHubToken(const HubOptions& options);

// Whether the environment variable `name` is set to a true value as
// huggingface_hub reads its flags: 1, ON, YES or TRUE, in any case.
bool HfEnvironmentFlag(const char* name);

// HfEnvironmentFlag("HF_HUB_OFFLINE"): offline mode asked for.
bool HubOfflineFromEnvironment();

// Whether HF_DEBUG (as huggingface_hub reads it) or EXLR8_DEBUG asks for the
// debug mode: 1, ON, YES or TRUE, in any case.
bool HubDebugFromEnvironment();

// The CA bundle HubOptions selects (see HubOptions::ca_bundle), or "" for
// libcurl's default store. InvalidArgument when the chosen file cannot be
// read, naming it and its source (the option or the variable).
Result<std::string> ChooseCaBundle(const HubOptions& options);

}  // namespace exlr8
