#include "daemon/hub/hub_protocol.h"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <ctime>
#include <memory>

namespace exlr8 {
namespace {

constexpr std::int64_t kMaxRetryAfterSeconds = 86400 * 365;  // waits are capped at a year

bool IsUnreserved(unsigned char c) {
  return std::isalnum(c) != 0 || c == '-' || c == '.' || c == '_' || c == '~';
}

bool IsHex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n')) {
    s.remove_suffix(1);
  }
  return s;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Splits `s` at `sep` (not inside double quotes) and calls f on each trimmed part.
template <typename F>
void SplitUnquoted(std::string_view s, char sep, F&& f) {
  bool quoted = false;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= s.size(); ++i) {
    if (i < s.size() && s[i] == '"') quoted = !quoted;
    if (i == s.size() || (s[i] == sep && !quoted)) {
      f(Trim(s.substr(start, i - start)));
      start = i + 1;
    }
  }
}

}  // namespace

std::string PercentEncode(std::string_view s, bool keep_slash) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (IsUnreserved(c) || (keep_slash && c == '/')) {
      out.push_back(ch);
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

Status ValidateHubRepoId(std::string_view repo) {
  auto bad = [&](std::string_view why) {
    return InvalidArgumentError("repo id '" + EscapeForMessage(repo) + "': " + std::string(why));
  };
  if (repo.empty()) return bad("empty");
  const std::size_t slash = repo.find('/');
  if (slash != std::string_view::npos && repo.find('/', slash + 1) != std::string_view::npos) {
    return bad("more than one '/'");
  }
  for (std::string_view part : {repo.substr(0, std::min(slash, repo.size())),
                                slash == std::string_view::npos ? std::string_view("x") : repo.substr(slash + 1)}) {
    if (part.empty() || part.size() > 96) return bad("each part must have 1..96 characters");
    if (part == "." || part == "..") return bad("'.' and '..' are not names");
    for (char c : part) {
      if (!(std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '-' || c == '_' || c == '.')) {
        return bad("allowed characters are A-Z a-z 0-9 - _ .");
      }
    }
  }
  return Status::Ok();
}

Status ValidateHubPath(std::string_view path) {
  auto bad = [&](std::string_view why) {
    return CorruptionError("hub file path '" + EscapeForMessage(path, 256) + "': " + std::string(why));
  };
  if (path.empty()) return bad("empty");
  if (path.size() > kMaxHubPathBytes) return bad("longer than 4096 bytes");
  if (path.front() == '/') return bad("absolute path");
  for (char ch : path) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f) return bad("control character");
    if (c == '\\') return bad("backslash");
  }
  std::size_t start = 0;
  while (start <= path.size()) {
    std::size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    const std::string_view seg = path.substr(start, end - start);
    if (seg.empty()) return bad("empty path segment");
    if (seg == "." || seg == "..") return bad("'.' or '..' segment");
    start = end + 1;
  }
  return Status::Ok();
}

bool IsCommitSha(std::string_view s) {
  return s.size() == 40 && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

bool IsSha256Hex(std::string_view s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), IsHex);
}

Result<std::vector<HubFile>> ParseTreePage(std::string_view body, std::string_view what,
                                           std::unordered_set<std::string>& seen_paths) {
  const std::string page_what(what);
  auto json = ParseJson(body);
  if (!json.ok()) return json.status().WithContext(page_what);
  if (!json->is_array()) return CorruptionError(page_what + ": expected a JSON array");
  std::vector<HubFile> files;
  const auto& items = json->as_array();
  for (std::size_t i = 0; i < items.size(); ++i) {
    const JsonValue& item = items[i];
    const std::string where = page_what + " entry " + std::to_string(i);
    if (!item.is_object()) return CorruptionError(where + ": not an object");
    const JsonValue* type = item.Find("type");
    const JsonValue* path = item.Find("path");
    if (type == nullptr || !type->is_string()) return CorruptionError(where + ": missing \"type\"");
    if (path == nullptr || !path->is_string()) return CorruptionError(where + ": missing \"path\"");
    EXLR8_RETURN_IF_ERROR(ValidateHubPath(path->as_string()).WithContext(where));
    if (type->as_string() != "file") continue;  // directories, submodules
    const std::string file_where = where + " ('" + EscapeForMessage(path->as_string()) + "')";
    HubFile f;
    f.path = path->as_string();
    const JsonValue* size = item.Find("size");
    const auto size_v = (size != nullptr && size->is_number()) ? size->as_uint64() : std::nullopt;
    if (!size_v || *size_v > kMaxHubFileSize) {
      return CorruptionError(file_where + ": \"size\" missing or not an integer in [0, 2^50]");
    }
    f.size = *size_v;
    if (const JsonValue* oid = item.Find("oid"); oid != nullptr) {
      if (!oid->is_string() || oid->as_string().size() > 128) {
        return CorruptionError(file_where + ": \"oid\" is not a short string");
      }
      f.blob_id = oid->as_string();
    }
    if (const JsonValue* lfs = item.Find("lfs"); lfs != nullptr && !lfs->is_null()) {
      const JsonValue* sha = lfs->is_object() ? lfs->Find("oid") : nullptr;
      if (sha == nullptr) sha = lfs->is_object() ? lfs->Find("sha256") : nullptr;
      if (sha == nullptr || !sha->is_string() || !IsSha256Hex(sha->as_string())) {
        return CorruptionError(file_where + ": \"lfs.oid\" is not 64 hex digits");
      }
      f.lfs_sha256 = sha->as_string();
      for (char& c : f.lfs_sha256) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (const JsonValue* lsize = lfs->Find("size"); lsize != nullptr) {
        const auto lv = lsize->is_number() ? lsize->as_uint64() : std::nullopt;
        if (!lv || *lv != f.size) {
          return CorruptionError(file_where + ": \"lfs.size\" differs from \"size\" " + std::to_string(f.size));
        }
      }
    }
    if (!seen_paths.insert(f.path).second) return CorruptionError(file_where + ": duplicate path");
    files.push_back(std::move(f));
  }
  return files;
}

std::optional<std::string> ParseNextLink(std::string_view link_header) {
  std::optional<std::string> next;
  SplitUnquoted(link_header, ',', [&](std::string_view link) {
    if (next || link.empty() || link.front() != '<') return;
    const std::size_t close = link.find('>');
    if (close == std::string_view::npos) return;
    const std::string_view url = link.substr(1, close - 1);
    bool is_next = false;
    SplitUnquoted(link.substr(close + 1), ';', [&](std::string_view param) {
      const std::size_t eq = param.find('=');
      if (eq == std::string_view::npos) return;
      if (Lower(Trim(param.substr(0, eq))) != "rel") return;
      std::string_view v = Trim(param.substr(eq + 1));
      if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
      // rel may hold several space-separated relation types.
      std::size_t p = 0;
      while (p <= v.size()) {
        std::size_t e = v.find(' ', p);
        if (e == std::string_view::npos) e = v.size();
        if (Lower(v.substr(p, e - p)) == "next") is_next = true;
        p = e + 1;
      }
    });
    if (is_next) next = std::string(url);
  });
  return next;
}

std::optional<std::uint64_t> ParseDecimalU64(std::string_view s) {
  if (s.empty() || s.size() > 20) return std::nullopt;
  std::uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    const std::uint64_t d = static_cast<std::uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) return std::nullopt;
    v = v * 10 + d;
  }
  return v;
}

std::optional<std::chrono::seconds> ParseRetryAfter(std::string_view value,
                                                    std::chrono::system_clock::time_point now) {
  value = Trim(value);
  if (auto secs = ParseDecimalU64(value)) {
    return std::chrono::seconds(static_cast<std::int64_t>(std::min<std::uint64_t>(*secs, kMaxRetryAfterSeconds)));
  }
  // IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT".
  std::tm tm{};
  const std::string text(value);
  const char* end = strptime(text.c_str(), "%a, %d %b %Y %H:%M:%S GMT", &tm);
  if (end == nullptr || *end != '\0') return std::nullopt;
  const std::time_t when = timegm(&tm);
  if (when == static_cast<std::time_t>(-1)) return std::nullopt;
  // In seconds, as time_t: a date centuries away (year 9194, say) would
  // overflow the clock's nanoseconds. Capped like delta-seconds.
  const std::int64_t delta = static_cast<std::int64_t>(when) - static_cast<std::int64_t>(
                                                                   std::chrono::system_clock::to_time_t(now));
  return std::chrono::seconds(std::clamp<std::int64_t>(delta, 0, kMaxRetryAfterSeconds));
}

std::optional<std::chrono::seconds> ParseRateLimitReset(std::string_view value) {
  std::optional<std::uint64_t> best_exhausted;
  std::optional<std::uint64_t> best_any;
  // Policies are separated by ',', parameters by ';'.
  SplitUnquoted(value, ',', [&](std::string_view item) {
    std::optional<std::uint64_t> r;
    std::optional<std::uint64_t> t;
    SplitUnquoted(item, ';', [&](std::string_view param) {
      const std::size_t eq = param.find('=');
      if (eq == std::string_view::npos) return;
      const std::string key = Lower(Trim(param.substr(0, eq)));
      const auto v = ParseDecimalU64(Trim(param.substr(eq + 1)));
      if (key == "r" || key == "remaining") r = v;
      if (key == "t" || key == "reset") t = v;
    });
    if (!t) return;
    best_any = std::max(best_any.value_or(0), *t);
    if (r && *r == 0) best_exhausted = std::max(best_exhausted.value_or(0), *t);
  });
  const auto pick = best_exhausted ? best_exhausted : best_any;
  if (!pick) return std::nullopt;
  return std::chrono::seconds(static_cast<std::int64_t>(std::min<std::uint64_t>(*pick, 86400 * 365)));
}

std::optional<ContentRange> ParseContentRange(std::string_view value) {
  value = Trim(value);
  if (value.size() < 6 || Lower(value.substr(0, 6)) != "bytes ") return std::nullopt;
  value.remove_prefix(6);
  value = Trim(value);
  const std::size_t dash = value.find('-');
  const std::size_t slash = value.find('/');
  if (dash == std::string_view::npos || slash == std::string_view::npos || slash < dash) return std::nullopt;
  ContentRange cr;
  auto first = ParseDecimalU64(value.substr(0, dash));
  auto last = ParseDecimalU64(value.substr(dash + 1, slash - dash - 1));
  if (!first || !last || *last < *first) return std::nullopt;
  cr.first = *first;
  cr.last = *last;
  const std::string_view total = value.substr(slash + 1);
  if (total != "*") {
    auto t = ParseDecimalU64(total);
    if (!t || *t <= cr.last) return std::nullopt;
    cr.total = t;
  }
  return cr;
}

std::optional<std::string> UrlOrigin(std::string_view url) {
  const std::size_t colon = url.find("://");
  if (colon == std::string_view::npos) return std::nullopt;
  const std::string scheme = Lower(url.substr(0, colon));
  if (scheme != "http" && scheme != "https") return std::nullopt;
  std::string_view rest = url.substr(colon + 3);
  rest = rest.substr(0, std::min(rest.size(), rest.find_first_of("/?#")));
  if (const std::size_t at = rest.rfind('@'); at != std::string_view::npos) rest.remove_prefix(at + 1);
  if (rest.empty()) return std::nullopt;
  std::string host;
  std::string_view port;
  if (rest.front() == '[') {
    const std::size_t close = rest.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    host = Lower(rest.substr(0, close + 1));
    std::string_view after = rest.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return std::nullopt;
      port = after.substr(1);
    }
  } else {
    const std::size_t c = rest.find(':');
    host = Lower(rest.substr(0, c));
    if (c != std::string_view::npos) port = rest.substr(c + 1);
  }
  if (host.empty()) return std::nullopt;
  std::string port_text(port.empty() ? (scheme == "https" ? "443" : "80") : port);
  const auto p = ParseDecimalU64(port_text);
  if (!p || *p > 65535) return std::nullopt;
  return scheme + "://" + host + ":" + std::to_string(*p);
}

std::optional<std::string> ResolveLocation(std::string_view base_url, std::string_view location) {
  std::unique_ptr<CURLU, decltype(&curl_url_cleanup)> h(curl_url(), &curl_url_cleanup);
  if (!h) return std::nullopt;
  const std::string base(base_url);
  const std::string loc(Trim(location));
  if (loc.empty()) return std::nullopt;
  if (curl_url_set(h.get(), CURLUPART_URL, base.c_str(), 0) != CURLUE_OK) return std::nullopt;
  if (curl_url_set(h.get(), CURLUPART_URL, loc.c_str(), 0) != CURLUE_OK) return std::nullopt;
  char* out = nullptr;
  if (curl_url_get(h.get(), CURLUPART_URL, &out, 0) != CURLUE_OK || out == nullptr) return std::nullopt;
  std::string result(out);
  curl_free(out);
  return result;
}

std::string RedactUrl(std::string_view url) {
  return std::string(url.substr(0, std::min(url.size(), url.find_first_of("?#"))));
}

}  // namespace exlr8
