#include "daemon/hub/http_common.h"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "daemon/hub/hub_protocol.h"
#include "format/json.h"

namespace exlr8 {
namespace {

// Host part of an absolute URL, lowercase, without brackets or port.
std::string UrlHost(std::string_view url) {
  auto origin = UrlOrigin(url);
  if (!origin) return "";
  std::string_view o = *origin;
  o.remove_prefix(o.find("://") + 3);
  o = o.substr(0, o.rfind(':'));
  if (!o.empty() && o.front() == '[') o = o.substr(1, o.size() - 2);
  return std::string(o);
}

bool NoProxyMatches(std::string_view host, std::string_view no_proxy) {
  std::size_t p = 0;
  while (p <= no_proxy.size()) {
    std::size_t e = no_proxy.find(',', p);
    if (e == std::string_view::npos) e = no_proxy.size();
    std::string_view entry = TrimHeaderSpace(no_proxy.substr(p, e - p));
    p = e + 1;
    if (entry.empty()) continue;
    if (entry == "*") return true;
    // Drop a ":port" suffix (not for IPv6 literals).
    if (entry.front() != '[' && std::count(entry.begin(), entry.end(), ':') == 1) {
      entry = entry.substr(0, entry.find(':'));
    }
    if (entry.front() == '[' && entry.back() == ']') entry = entry.substr(1, entry.size() - 2);
    if (entry.front() == '.') entry.remove_prefix(1);
    if (EqualsIgnoreCase(host, entry)) return true;
    if (host.size() > entry.size() && host[host.size() - entry.size() - 1] == '.' &&
        EqualsIgnoreCase(host.substr(host.size() - entry.size()), entry)) {
      return true;
    }
  }
  return false;
}

}  // namespace

void EnsureCurlGlobalInit() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

const std::string& HubUserAgent() {
  static const std::string ua = [] {
    const curl_version_info_data* info = curl_version_info(CURLVERSION_NOW);
    return std::string("exlr8d/0.1 (+libcurl/") + (info != nullptr ? info->version : "unknown") + ")";
  }();
  return ua;
}

bool HttpSettings::ShouldSendToken(std::string_view url) const {
  if (token.empty()) return false;
  auto origin = UrlOrigin(url);
  return origin && *origin == hub_origin;
}

std::string ProxyForUrl(std::string_view url, const std::string& explicit_proxy, bool use_env,
                        const std::function<const char*(const char*)>& getenv_fn) {
  auto env = [&](const char* lower, const char* upper) -> std::string {
    const char* v = getenv_fn(lower);
    if (v == nullptr || *v == '\0') v = getenv_fn(upper);
    return v != nullptr ? std::string(v) : std::string();
  };
  std::string proxy = explicit_proxy;
  if (proxy.empty() && use_env) {
    const bool https = url.size() >= 8 && EqualsIgnoreCase(url.substr(0, 8), "https://");
    proxy = https ? env("https_proxy", "HTTPS_PROXY") : env("http_proxy", "HTTP_PROXY");
    if (proxy.empty()) proxy = env("all_proxy", "ALL_PROXY");
  }
  if (proxy.empty()) return "";
  const std::string no_proxy = env("no_proxy", "NO_PROXY");
  if (!no_proxy.empty() && NoProxyMatches(UrlHost(url), no_proxy)) return "";
  return proxy;
}

std::string UrlForLog(std::string_view url) {
  std::string out(url.substr(0, url.find('#')));
  const std::size_t scheme = out.find("://");
  const std::size_t host = scheme == std::string::npos ? 0 : scheme + 3;
  const std::size_t path = out.find_first_of("/?", host);
  const std::size_t at = out.rfind('@', path == std::string::npos ? out.size() : path);
  if (at != std::string::npos && at >= host) out.erase(host, at + 1 - host);
  const std::size_t q = out.find('?');
  if (q == std::string::npos) return out;
  std::string query = out.substr(q + 1);
  out.resize(q + 1);
  std::size_t start = 0;
  while (start <= query.size()) {
    std::size_t end = query.find('&', start);
    if (end == std::string::npos) end = query.size();
    const std::string_view param = std::string_view(query).substr(start, end - start);
    if (start > 0) out += '&';
    const std::size_t eq = param.find('=');
    out += param.substr(0, eq);
    if (eq != std::string_view::npos) out += "=...";
    start = end + 1;
  }
  return out;
}

namespace {

const char* MethodName(bool head_only) { return head_only ? "HEAD" : "GET"; }

void WriteDebugLine(const std::string& line) {
  // One write: lines of concurrent transfers do not interleave.
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

}  // namespace

void DebugLogRequest(bool head_only, std::string_view url, std::string_view range, bool token_sent) {
  std::string line = "exlr8d debug: > " + std::string(MethodName(head_only)) + " " + UrlForLog(url);
  if (!range.empty()) line += " Range: bytes=" + std::string(range);
  if (token_sent) line += " (token sent)";
  WriteDebugLine(line + "\n");
}

void DebugLogAnswer(bool head_only, std::string_view url, long http_version, long status,
                    std::string_view location, std::string_view error) {
  std::string version = "HTTP/?";
  if (http_version == CURL_HTTP_VERSION_1_0) version = "HTTP/1.0";
  if (http_version == CURL_HTTP_VERSION_1_1) version = "HTTP/1.1";
  if (http_version == CURL_HTTP_VERSION_2_0) version = "HTTP/2";
  if (http_version == CURL_HTTP_VERSION_3) version = "HTTP/3";
  std::string line = "exlr8d debug: < ";
  if (status > 0)
    line += version + " " + std::to_string(status);
  else
    line += "no answer";
  if (!location.empty()) line += " Location: " + UrlForLog(location);
  if (!error.empty()) line += " (" + std::string(error) + ")";
  line += " for " + std::string(MethodName(head_only)) + " " + UrlForLog(url);
  WriteDebugLine(line + "\n");
}

void ApplyCommonOptions(CURL* easy, const HttpSettings& s, const std::string& url) {
  curl_easy_reset(easy);
  curl_easy_setopt(easy, CURLOPT_URL, url.c_str());
  curl_easy_setopt(easy, CURLOPT_USERAGENT, HubUserAgent().c_str());
  // Redirects are read, never followed: the CDN must not get the token, and
  // the fetcher needs the Location to reuse it for every range.
  curl_easy_setopt(easy, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, s.connect_timeout_ms);
  curl_easy_setopt(easy, CURLOPT_LOW_SPEED_LIMIT, s.low_speed_limit);
  curl_easy_setopt(easy, CURLOPT_LOW_SPEED_TIME, s.low_speed_time_s);
  curl_easy_setopt(easy, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(easy, CURLOPT_BUFFERSIZE, s.buffer_size);
  curl_easy_setopt(easy, CURLOPT_HTTP_VERSION, static_cast<long>(CURL_HTTP_VERSION_2TLS));
  if (url.size() >= 8 && EqualsIgnoreCase(std::string_view(url).substr(0, 8), "https://")) {
    // Wait for a multiplexable HTTP/2 connection rather than opening more.
    curl_easy_setopt(easy, CURLOPT_PIPEWAIT, 1L);
  }
  const std::string proxy = ProxyForUrl(url, s.explicit_proxy, s.use_env_proxy, [](const char* n) {
    return std::getenv(n);
  });
  // An empty string disables libcurl's own environment lookup, so the choice
  // above is the only one.
  curl_easy_setopt(easy, CURLOPT_PROXY, proxy.c_str());
  if (!s.ca_bundle.empty()) curl_easy_setopt(easy, CURLOPT_CAINFO, s.ca_bundle.c_str());
}

bool IsPermanentCurlError(int curl_code) {
  switch (static_cast<CURLcode>(curl_code)) {
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
    case CURLE_SSL_ISSUER_ERROR:
      return true;
    default:
      return false;
  }
}

bool IsNoAnswerCurlError(int curl_code, long http_status, long proxy_connect_status) {
  if (http_status != 0) return false;
  if (proxy_connect_status >= 400 && proxy_connect_status < 500) return false;
  switch (static_cast<CURLcode>(curl_code)) {
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SSL_CONNECT_ERROR:  // the handshake failed; a certificate that does not verify is another code
    case CURLE_GOT_NOTHING:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_PROXY:
      return true;
    default:
      return false;
  }
}

std::string ProxyOf(const HttpSettings& settings, std::string_view url) {
  return ProxyForUrl(url, settings.explicit_proxy, settings.use_env_proxy, [](const char* n) { return std::getenv(n); });
}

std::string DescribeCurlError(int curl_code, const char* errbuf, std::string_view proxy) {
  const auto code = static_cast<CURLcode>(curl_code);
  std::string msg = curl_easy_strerror(code);
  if (errbuf != nullptr && errbuf[0] != '\0') msg += std::string(" (") + errbuf + ")";
  const bool connecting = code == CURLE_COULDNT_CONNECT || code == CURLE_COULDNT_RESOLVE_PROXY ||
                          code == CURLE_OPERATION_TIMEDOUT || code == CURLE_RECV_ERROR ||
                          code == CURLE_SEND_ERROR || code == CURLE_GOT_NOTHING || code == CURLE_PROXY;
  if (connecting && !proxy.empty()) {
    // scheme://user:password@host:port -> scheme://host:port
    std::string shown(proxy);
    const std::size_t scheme = shown.find("://");
    const std::size_t from = scheme == std::string::npos ? 0 : scheme + 3;
    const std::size_t at = shown.find('@', from);
    if (at != std::string::npos && shown.find('/', from) > at) shown.erase(from, at + 1 - from);
    msg += "; through the proxy " + EscapeForMessage(shown, 200) +
           " (--proxy, HTTPS_PROXY/HTTP_PROXY, NO_PROXY): check that it is up";
  }
  // libcurl before 8.6 reports a response header line over its 100 kB limit
  // as "Out of memory", with nothing in the error buffer: say it may be the
  // server's answer, not the node running out of memory.
  if (code == CURLE_OUT_OF_MEMORY && (errbuf == nullptr || errbuf[0] == '\0'))
    msg += " (libcurl also says this of a response header line over 100 kB: the server's answer)";
  if (code == CURLE_PEER_FAILED_VERIFICATION || code == CURLE_SSL_ISSUER_ERROR)
    msg += "; if the server's certificate comes from a private CA, name its PEM file with --ca-bundle "
           "(or CURL_CA_BUNDLE, REQUESTS_CA_BUNDLE, SSL_CERT_FILE)";
  return msg;
}

std::size_t CurlHeaderCallback(char* buffer, std::size_t size, std::size_t nitems, void* userdata) {
  const std::size_t n = size * nitems;
  static_cast<ResponseHead*>(userdata)->AddLine(std::string_view(buffer, n));
  return n;
}

}  // namespace exlr8
