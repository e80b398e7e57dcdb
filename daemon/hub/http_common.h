// Internal: libcurl plumbing shared by HubClient and RangeFetcher (user
// agent, proxy choice, per-handle options, response header capture, what a
// libcurl error means). What an answer means is http_answer.h, which this
// includes. Not part of the public API of exlr8d::hub.
//
// Thread rules: everything here is either pure or acts on the CURL handle it
// is given; EnsureCurlGlobalInit() is safe from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "daemon/hub/http_answer.h"
#include "format/status.h"

typedef void CURL;  // NOLINT: matches <curl/curl.h>

namespace exlr8 {

// curl_global_init once per process (idempotent, thread-safe).
void EnsureCurlGlobalInit();

// "exlr8d/0.1 (+libcurl/7.88.1)".
const std::string& HubUserAgent();

// Connection settings common to all requests of one hub client. Holds the
// token: never copy it into messages; it is sent only where
// ShouldSendToken() allows.
struct HttpSettings {
  std::string hub_origin;      // UrlOrigin(endpoint)
  std::string token;           // empty: anonymous
  std::string explicit_proxy;  // "" = none given
  bool use_env_proxy = true;
  long connect_timeout_ms = 10'000;
  long low_speed_limit = 1;    // bytes/s ...
  long low_speed_time_s = 30;  // ... below which for this long = stalled
  // libcurl's receive buffer per transfer. 100 KiB like the curl tool:
  // measured on loopback (1 GiB as 2,731 ranges, 16 transfers), 512 KiB was
  // 2x slower than this (buffer churn per transfer, cache misses).
  long buffer_size = 100 * 1024;
  // PEM file of the CAs that HTTPS servers are verified against; empty:
  // libcurl's default store. Verification is never turned off.
  std::string ca_bundle;
  // Debug mode (--debug, HF_DEBUG, EXLR8_DEBUG): every request and answer
  // line on stderr (DebugLogRequest, DebugLogAnswer), never the token.
  bool debug = false;

  // True iff `url` is on the hub endpoint's origin (scheme, host, port).
  bool ShouldSendToken(std::string_view url) const;
};

// The proxy to use for `url`: the explicit proxy, else (if use_env) the
// scheme's variable (https_proxy/HTTPS_PROXY or http_proxy/HTTP_PROXY, both
// cases honoured like Python requests does; libcurl alone ignores
// HTTP_PROXY), else all_proxy/ALL_PROXY; "" when none or when the host
// matches no_proxy/NO_PROXY (comma list of hosts/domain suffixes, "*").
// `getenv` is injectable for tests.
std::string ProxyForUrl(std::string_view url, const std::string& explicit_proxy, bool use_env,
                        const std::function<const char*(const char*)>& getenv_fn);

// `url` as the debug log shows it: without user information, the query's
// values replaced by "..." (a CDN URL's query carries a signature that grants
// access while it lasts), the names kept.
std::string UrlForLog(std::string_view url);

// The debug log's lines, one write each to stderr: "exlr8d debug: > GET URL
// [Range: bytes=A-B] [(token sent)]" and "exlr8d debug: < HTTP/V STATUS
// [Location: URL] [error] for GET URL", URLs as UrlForLog shows them. The
// token itself is never written.
void DebugLogRequest(bool head_only, std::string_view url, std::string_view range, bool token_sent);
void DebugLogAnswer(bool head_only, std::string_view url, long http_version, long status,
                    std::string_view location, std::string_view error);

// Resets `easy` and sets what every request needs: URL, user agent, no
// automatic redirects, no signals, timeouts, proxy (as ProxyForUrl says),
// HTTP/2 over TLS where offered, keep-alive, the CA bundle.
void ApplyCommonOptions(CURL* easy, const HttpSettings& settings, const std::string& url);

// What a failed transfer says, from libcurl's code and error buffer; for a
// certificate the server's chain does not verify against, with what to do
// about it (a private CA: --ca-bundle). `proxy` (ProxyForUrl of the
// request's URL, "" for none): a connection that failed through it says so
// (its user and password left out), since libcurl names only an address.
std::string DescribeCurlError(int curl_code, const char* errbuf, std::string_view proxy = {});

// The settings' proxy for `url`, as ProxyForUrl picks it from the process's
// environment.
std::string ProxyOf(const HttpSettings& settings, std::string_view url);

// True for failures another attempt cannot mend (a certificate that does
// not verify, a CA file libcurl cannot use): the request fails at once
// instead of after every retry's backoff.
bool IsPermanentCurlError(int curl_code);

// True when a failed transfer got no answer from the server: its name did
// not resolve, the connection was refused, reset, closed or timed out
// before any answer (the TLS handshake included), or the proxy could not be
// reached or could not reach the server (CONNECT answered 5xx). Not so for
// a transfer that had an answer begun (`http_status`, CURLINFO_RESPONSE_CODE,
// non-zero), a proxy that refused (`proxy_connect_status`,
// CURLINFO_HTTP_CONNECTCODE, 4xx: 407 wants credentials), a certificate
// that does not verify (a server answered, one that is not trusted: a
// private CA or an interception to fix, IsPermanentCurlError), or a local
// failure (memory, a bad URL, a write callback).
bool IsNoAnswerCurlError(int curl_code, long http_status, long proxy_connect_status);


// libcurl header callback; `userdata` is a ResponseHead*.
std::size_t CurlHeaderCallback(char* buffer, std::size_t size, std::size_t nitems, void* userdata);


}  // namespace exlr8
