// Fuzz target for what exlr8d parses from a hub's answers
// (daemon/hub/hub_protocol.h): tree pages, the Content-Range, Link,
// Retry-After and RateLimit headers, Location URLs, origins (which decide
// where the token goes) and repo paths (which become cache paths).
//
// The whole input is parsed as a tree page; its first line (up to '\n') as
// each header value, URL and path, the rest as a Location against it.
//
// Invariants: no crash, hang or sanitizer report; a page's files have paths
// ValidateHubPath accepts, in-range sizes, unique paths and lowercase LFS
// digests, and a refused page is Corruption naming it; a parsed
// Content-Range is ordered and round-trips; a decimal round-trips; waits are
// never negative; an origin is canonical (lowercase scheme and host,
// explicit port) and is its own origin, and libcurl connects for a URL
// where it connects for the URL's origin; a redacted URL keeps no
// query or fragment; an accepted path has no empty, "." or ".." segment, no
// leading '/', no backslash and no control byte; percent-encoding keeps only
// unreserved bytes (and '/' when asked) and decodes back.
#include <curl/curl.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_set>

#include "daemon/hub/hub_protocol.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using exlr8::StatusCode;

bool IsLowerHex(std::string_view s) {
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

void CheckTreePage(std::string_view body) {
  std::unordered_set<std::string> seen;
  auto files = exlr8::ParseTreePage(body, "fuzz page", seen);
  if (!files.ok()) {
    EXLR8_FUZZ_CHECK(files.status().code() == StatusCode::kCorruption);
    EXLR8_FUZZ_CHECK(files.status().message().rfind("fuzz page", 0) == 0);
    return;
  }
  EXLR8_FUZZ_CHECK(seen.size() == files->size());
  for (const exlr8::HubFile& f : *files) {
    EXLR8_FUZZ_CHECK(exlr8::ValidateHubPath(f.path).ok());
    EXLR8_FUZZ_CHECK(seen.contains(f.path));
    EXLR8_FUZZ_CHECK(f.size <= exlr8::kMaxHubFileSize);
    EXLR8_FUZZ_CHECK(f.blob_id.size() <= 128);
    EXLR8_FUZZ_CHECK(f.lfs_sha256.empty() || (f.lfs_sha256.size() == 64 && IsLowerHex(f.lfs_sha256)));
  }
  // A second page listing the same files is refused as duplicates.
  if (!files->empty()) EXLR8_FUZZ_CHECK(!exlr8::ParseTreePage(body, "fuzz page", seen).ok());
}

void CheckHeaders(std::string_view v) {
  if (auto cr = exlr8::ParseContentRange(v)) {
    EXLR8_FUZZ_CHECK(cr->first <= cr->last);
    if (cr->total) EXLR8_FUZZ_CHECK(cr->last < *cr->total);
    const std::string again = "bytes " + std::to_string(cr->first) + "-" + std::to_string(cr->last) + "/" +
                              (cr->total ? std::to_string(*cr->total) : "*");
    auto back = exlr8::ParseContentRange(again);
    EXLR8_FUZZ_CHECK(back && back->first == cr->first && back->last == cr->last && back->total == cr->total);
  }
  if (auto d = exlr8::ParseDecimalU64(v)) {
    std::string_view digits = v;
    while (digits.size() > 1 && digits.front() == '0') digits.remove_prefix(1);
    EXLR8_FUZZ_CHECK(std::to_string(*d) == digits);
  }
  (void)exlr8::ParseNextLink(v);
  if (auto w = exlr8::ParseRetryAfter(v, std::chrono::system_clock::time_point(std::chrono::seconds(1'700'000'000))))
    EXLR8_FUZZ_CHECK(w->count() >= 0);
  if (auto t = exlr8::ParseRateLimitReset(v)) EXLR8_FUZZ_CHECK(t->count() >= 0);
}

// Where libcurl would connect for `url`, as an origin, or "" when it does
// not parse it as an http(s) URL.
std::string CurlOrigin(const std::string& url) {
  std::unique_ptr<CURLU, decltype(&curl_url_cleanup)> h(curl_url(), &curl_url_cleanup);
  if (!h || curl_url_set(h.get(), CURLUPART_URL, url.c_str(), 0) != CURLUE_OK) return "";
  auto part = [&](CURLUPart which, unsigned flags) -> std::string {
    char* out = nullptr;
    if (curl_url_get(h.get(), which, &out, flags) != CURLUE_OK || out == nullptr) return "";
    std::string s(out);
    curl_free(out);
    return s;
  };
  const std::string scheme = part(CURLUPART_SCHEME, 0);
  if (scheme != "http" && scheme != "https") return "";
  std::string host = part(CURLUPART_HOST, 0);
  for (char& c : host) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const std::string port = part(CURLUPART_PORT, CURLU_DEFAULT_PORT);
  if (host.empty() || port.empty()) return "";
  return scheme + "://" + host + ":" + port;
}

void CheckUrls(std::string_view first, std::string_view rest) {
  if (auto o = exlr8::UrlOrigin(first)) {
    EXLR8_FUZZ_CHECK(o->rfind("http://", 0) == 0 || o->rfind("https://", 0) == 0);
    EXLR8_FUZZ_CHECK(exlr8::UrlOrigin(*o) == o);
    for (char c : *o) EXLR8_FUZZ_CHECK(!(c >= 'A' && c <= 'Z'));
  }
  const std::string url(first);
  if (url.find('\0') == std::string::npos) {
    // The token goes where UrlOrigin matches the hub's origin, so two URLs
    // of one UrlOrigin must reach one place: libcurl connects for the URL
    // where it connects for its origin. (libcurl writes some hosts its own
    // way, "0" as "0.0.0.0", hence the comparison through libcurl; and
    // UrlOrigin refusing a URL libcurl would take, such as "https:/h", is
    // safe: such a URL is never the hub's.)
    const std::string curl = CurlOrigin(url);
    if (const auto o = exlr8::UrlOrigin(first); o && !curl.empty()) EXLR8_FUZZ_CHECK(CurlOrigin(*o) == curl);
    const std::string loc(rest);
    if (loc.find('\0') == std::string::npos) {
      if (auto abs = exlr8::ResolveLocation(first, rest)) EXLR8_FUZZ_CHECK(!abs->empty());
    }
  }
  const std::string red = exlr8::RedactUrl(first);
  EXLR8_FUZZ_CHECK(red.find_first_of("?#") == std::string::npos);
  EXLR8_FUZZ_CHECK(first.substr(0, red.size()) == red);
}

void CheckPath(std::string_view p) {
  exlr8::Status s = exlr8::ValidateHubPath(p);
  if (!s.ok()) {
    EXLR8_FUZZ_CHECK(s.code() == StatusCode::kCorruption);
    return;
  }
  EXLR8_FUZZ_CHECK(!p.empty() && p.size() <= exlr8::kMaxHubPathBytes && p.front() != '/');
  for (unsigned char c : p) EXLR8_FUZZ_CHECK(c >= 0x20 && c != 0x7f && c != '\\');
  std::size_t start = 0;
  while (true) {
    const std::size_t slash = p.find('/', start);
    const std::string_view seg = p.substr(start, slash == std::string_view::npos ? slash : slash - start);
    EXLR8_FUZZ_CHECK(!seg.empty() && seg != "." && seg != "..");
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

void CheckPercentEncode(std::string_view s) {
  for (bool keep_slash : {false, true}) {
    const std::string e = exlr8::PercentEncode(s, keep_slash);
    std::string decoded;
    for (std::size_t i = 0; i < e.size(); ++i) {
      const unsigned char c = static_cast<unsigned char>(e[i]);
      if (c == '%') {
        EXLR8_FUZZ_CHECK(i + 2 < e.size());
        const int hi = HexValue(e[i + 1]), lo = HexValue(e[i + 2]);
        EXLR8_FUZZ_CHECK(hi >= 0 && lo >= 0);
        decoded += static_cast<char>(hi * 16 + lo);
        i += 2;
        continue;
      }
      const bool unreserved = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                              c == '-' || c == '.' || c == '_' || c == '~';
      EXLR8_FUZZ_CHECK(unreserved || (keep_slash && c == '/'));
      decoded += static_cast<char>(c);
    }
    EXLR8_FUZZ_CHECK(decoded == s);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  CheckTreePage(in);
  const std::size_t nl = in.find('\n');
  const std::string_view first = in.substr(0, nl);
  const std::string_view rest = nl == std::string_view::npos ? std::string_view() : in.substr(nl + 1);
  CheckHeaders(first);
  CheckUrls(first, rest);
  CheckPath(first);
  CheckPercentEncode(first);
  return 0;
}
