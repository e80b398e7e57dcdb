// The simulator's server: listeners, per-connection sessions, and the route
// handlers (plain functions from request to Reply).
#include "tests/hubsim/hubsim.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <cerrno>
#include <chrono>
#include <ctime>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "tests/hubsim/http_util.h"
#include "tests/hubsim/repo_index.h"
#include "tests/hubsim/url_signer.h"

namespace exlr8::hubsim {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
namespace json = boost::json;
using tcp = net::ip::tcp;
using Request = http::request<http::string_body>;
using Response = http::response<http::string_body>;

constexpr std::size_t kChunk = 256 * 1024;
constexpr std::size_t kBodyLimit = 64 * 1024;
constexpr std::size_t kHeaderLimit = 16 * 1024;
constexpr std::uint64_t kBodyLongerExtra = 4096;
constexpr std::string_view kServerName = "exlr8-hubsim";
constexpr std::string_view kLastModified = "2025-01-01T00:00:00.000Z";

// What a handler decided to send. File bytes are streamed by the session
// after the header, so a reply never holds a whole file in memory.
struct Reply {
  Response res;
  const RepoFile* file = nullptr;  // non-null: stream [offset, offset+length)
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  std::uint64_t extra = 0;         // body_longer: bytes sent past `length`
  bool head_only = false;
  std::optional<std::uint64_t> drop_after;  // close after this many body bytes
  std::optional<std::uint64_t> corrupt_at;  // body offset of the flipped byte
  std::uint64_t throttle_bps = 0;
  bool close_after = false;
  std::string kind = "other";               // stats bucket
};


struct Target {
  std::string_view path;   // raw (still percent-encoded)
  std::string_view query;
};

Target SplitTarget(std::string_view target) {
  const std::size_t q = target.find('?');
  if (q == std::string_view::npos) return {target, {}};
  return {target.substr(0, q), target.substr(q + 1)};
}

std::uint64_t NowUnix() { return static_cast<std::uint64_t>(std::time(nullptr)); }

}  // namespace

namespace detail {
struct HostCounters {
  std::uint64_t requests = 0;
  std::uint64_t with_auth = 0;
  std::uint64_t bytes = 0;
  std::map<std::string, std::uint64_t> by_kind;
  std::map<unsigned, std::uint64_t> by_status;
};
}  // namespace detail

struct detail::HubSimRep {
  HubSimOptions options;
  FaultConfig start_faults;
  std::vector<std::unique_ptr<RepoIndex>> repos;
  net::io_context ioc;
  tcp::acceptor hub_acceptor{ioc};
  tcp::acceptor cdn_acceptor{ioc};
  std::vector<std::thread> threads;
  std::uint16_t hub_port = 0;
  std::uint16_t cdn_port = 0;
  UrlSigner signer;
  FaultPlan faults{FaultConfig{}};
  std::atomic<std::uint32_t> url_ttl_s{3600};
  bool stopped = false;

  mutable std::mutex stats_mu;
  HostCounters host_stats[2];          // guarded by stats_mu
  std::uint64_t resolve_count = 0;     // guarded by stats_mu
  std::uint64_t signed_urls = 0;       // guarded by stats_mu
  // Answers carrying a file's bytes (hub or CDN), by repo path.
  std::map<std::string, std::uint64_t> file_gets;  // guarded by stats_mu

  void AddBytes(Host host, std::uint64_t n) {
    std::lock_guard lock(stats_mu);
    host_stats[static_cast<int>(host)].bytes += n;
  }

  std::string CdnBase() const {
    return "http://" + options.cdn_address + ":" + std::to_string(cdn_port);
  }

  // Matches the leading segments of a raw path against the served repos.
  // On success returns the repo and the number of segments it used.
  const RepoIndex* MatchRepo(const std::vector<std::string_view>& segs, std::size_t start,
                             std::size_t* used) const {
    for (const auto& r : repos) {
      const auto parts = SplitPath(r->id());
      if (segs.size() - start < parts.size()) continue;
      bool same = true;
      for (std::size_t i = 0; i < parts.size() && same; ++i) {
        const auto dec = PercentDecode(segs[start + i]);
        same = dec && *dec == parts[i];
      }
      if (same) {
        *used = parts.size();
        return r.get();
      }
    }
    return nullptr;
  }
};

namespace {

using Rep = detail::HubSimRep;

// ---- reply builders ----

Reply BaseReply(const Request& req, http::status status) {
  Reply r;
  r.res.result(status);
  r.res.version(req.version());
  r.res.keep_alive(req.keep_alive());
  r.res.set(http::field::server, kServerName);
  r.head_only = req.method() == http::verb::head;
  return r;
}

void SetBody(Reply& r, std::string body, std::string_view content_type) {
  r.res.set(http::field::content_type, content_type);
  r.res.body() = std::move(body);
  r.res.prepare_payload();
  if (r.head_only) r.res.body().clear();  // keep Content-Length, send no body
}

Reply JsonReply(const Request& req, const json::value& v) {
  Reply r = BaseReply(req, http::status::ok);
  SetBody(r, json::serialize(v), "application/json; charset=utf-8");
  return r;
}

Reply ErrorReply(const Request& req, http::status status, std::string_view code, const std::string& message) {
  Reply r = BaseReply(req, status);
  if (!code.empty()) r.res.set("X-Error-Code", code);
  r.res.set("X-Error-Message", message);
  json::object o;
  o["error"] = message;
  SetBody(r, json::serialize(o), "application/json; charset=utf-8");
  return r;
}

// 500/503/429 faults; nullopt when none hits.
std::optional<Reply> MaybeErrorFault(Rep& rep, Host host, const Request& req) {
  const std::string_view target(req.target().data(), req.target().size());
  if (rep.faults.Decide(FaultKind::kHttp500, host, target)) {
    return ErrorReply(req, http::status::internal_server_error, "", "Internal Error (simulated)");
  }
  if (rep.faults.Decide(FaultKind::kHttp503, host, target)) {
    return ErrorReply(req, http::status::service_unavailable, "", "Service Unavailable (simulated)");
  }
  if (rep.faults.Decide(FaultKind::kHttp429, host, target)) {
    Reply r = ErrorReply(req, http::status::too_many_requests, "", "Too Many Requests (simulated)");
    const std::string t = std::to_string(rep.faults.Get().retry_after_s);
    r.res.set(http::field::retry_after, t);
    r.res.set("RateLimit", "\"api\";r=0;t=" + t);
    r.res.set("RateLimit-Policy", "\"fixed window\";\"api\";q=500;w=300");
    return r;
  }
  return std::nullopt;
}

// Serves bytes of `f` honouring Range, with the body faults. `r` carries the
// headers already chosen by the caller (ETag, X-Repo-Commit, ...).
Reply FileReply(Rep& rep, Host host, const Request& req, const RepoFile& f, Reply r) {
  const std::string_view target(req.target().data(), req.target().size());
  r.res.set(http::field::accept_ranges, "bytes");
  r.res.set(http::field::content_type, "application/octet-stream");
  ByteRange range;
  if (auto it = req.find(http::field::range); it != req.end()) {
    range = ParseRangeHeader(std::string_view(it->value().data(), it->value().size()), f.size);
  }
  if (range.kind == ByteRange::Kind::kMulti || range.kind == ByteRange::Kind::kUnsatisfiable) {
    const bool multi = range.kind == ByteRange::Kind::kMulti;
    Reply e = ErrorReply(req, http::status::range_not_satisfiable,
                         multi ? "MultiRangeNotSupported" : "RangeNotSatisfiable",
                         f.path + (multi ? ": multiple ranges are not supported"
                                         : ": range not satisfiable for size " + std::to_string(f.size)));
    e.res.set(http::field::content_range, "bytes */" + std::to_string(f.size));
    e.kind = r.kind;
    return e;
  }
  const bool get = !r.head_only;
  if (get && range.kind == ByteRange::Kind::kSingle && rep.faults.Decide(FaultKind::kIgnoreRange, host, target)) {
    range.kind = ByteRange::Kind::kNone;
  }
  r.file = &f;
  if (range.kind == ByteRange::Kind::kSingle) {
    r.res.result(http::status::partial_content);
    r.offset = range.first;
    r.length = range.length();
    std::uint64_t shown_first = range.first;
    std::uint64_t shown_last = range.last;
    if (get && rep.faults.Decide(FaultKind::kWrongContentRange, host, target)) {
      if (shown_last + 1 < f.size) {
        ++shown_first;
        ++shown_last;
      } else if (shown_first > 0) {
        --shown_first;
        --shown_last;
      } else {
        shown_last = f.size;  // claims one byte more than the file has
      }
    }
    r.res.set(http::field::content_range, "bytes " + std::to_string(shown_first) + "-" +
                                              std::to_string(shown_last) + "/" + std::to_string(f.size));
    if (get && rep.faults.Decide(FaultKind::kBodyLonger, host, target)) {
      r.extra = kBodyLongerExtra;
      r.close_after = true;  // the stream is out of sync after this
    }
  } else {
    r.res.result(http::status::ok);
    r.offset = 0;
    r.length = f.size;
  }
  const std::uint64_t body = r.length + r.extra;
  if (get && body > 0) {
    if (rep.faults.Decide(FaultKind::kDrop, host, target)) r.drop_after = body / 2;
    if (rep.faults.Decide(FaultKind::kCorrupt, host, target)) r.corrupt_at = rep.faults.Pick(r.length ? r.length : 1);
    const FaultConfig cfg = rep.faults.Get();
    if (cfg.throttle_bps > 0 && rep.faults.Applies(host, target)) {
      r.throttle_bps = cfg.throttle_bps;
      rep.faults.Count(FaultKind::kThrottle);
    }
  }
  r.res.content_length(body);
  if (r.head_only && host == Host::kHub && rep.faults.Get().absurd_sizes) {
    r.res.content_length(kAbsurdSize);
    rep.faults.Count(FaultKind::kAbsurdSize);
  }
  return r;
}

// ---- hub routes ----

json::object LfsSiblingInfo(const RepoFile& f, std::uint64_t size) {
  json::object lfs;
  lfs["sha256"] = f.sha256;
  lfs["size"] = size;
  lfs["pointerSize"] = f.pointer_size;
  return lfs;
}

Reply ModelInfo(Rep& rep, const Request& req, const RepoIndex& repo) {
  const FaultConfig cfg = rep.faults.Get();
  const std::uint64_t absurd = cfg.absurd_sizes ? kAbsurdSize : 0;
  json::object o;
  o["_id"] = repo.commit().substr(0, 24);
  o["id"] = repo.id();
  o["modelId"] = repo.id();
  const std::size_t slash = repo.id().find('/');
  o["author"] = slash == std::string::npos ? std::string() : repo.id().substr(0, slash);
  o["sha"] = repo.commit();
  o["lastModified"] = kLastModified;
  o["createdAt"] = kLastModified;
  o["private"] = !rep.options.token.empty();
  o["gated"] = false;
  o["disabled"] = false;
  o["downloads"] = 0;
  o["likes"] = 0;
  o["tags"] = json::array();
  o["usedStorage"] = repo.total_size();
  json::array siblings;
  for (const auto& f : repo.files()) {
    json::object s;
    s["rfilename"] = f.path;
    const std::uint64_t size = absurd ? absurd : f.size;
    s["size"] = size;
    s["blobId"] = f.git_oid;
    if (f.lfs) s["lfs"] = LfsSiblingInfo(f, size);
    siblings.push_back(std::move(s));
  }
  if (cfg.hostile_listing) {
    for (const char* bad : {"../x", "/etc/passwd"}) {
      json::object s;
      s["rfilename"] = bad;
      s["size"] = 5;
      s["blobId"] = std::string(40, 'b');
      siblings.push_back(std::move(s));
    }
    rep.faults.Count(FaultKind::kHostileListing);
  }
  if (absurd) rep.faults.Count(FaultKind::kAbsurdSize);
  o["siblings"] = std::move(siblings);
  return JsonReply(req, o);
}

bool SafeHost(std::string_view h) {
  if (h.empty() || h.size() > 255) return false;
  return std::all_of(h.begin(), h.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == ':' ||
           c == '-' || c == '[' || c == ']';
  });
}

Reply Tree(Rep& rep, const Request& req, const RepoIndex& repo, const std::string& dir, std::string_view raw_path,
           std::string_view query) {
  const auto params = ParseQuery(query);
  const bool recursive = params.count("recursive") && IsTruthy(params.at("recursive"));
  std::uint64_t limit = rep.options.tree_page_size;
  if (auto it = params.find("limit"); it != params.end()) {
    const auto v = ParseU64(it->second);
    if (!v || *v == 0 || *v > 1000) {
      return ErrorReply(req, http::status::bad_request, "", "limit must be in [1, 1000], got '" + it->second + "'");
    }
    limit = *v;
  }
  std::uint64_t cursor = 0;
  if (auto it = params.find("cursor"); it != params.end()) {
    const auto v = ParseU64(it->second);
    if (!v) return ErrorReply(req, http::status::bad_request, "", "invalid cursor '" + it->second + "'");
    cursor = *v;
  }
  if (!dir.empty() && !repo.IsDir(dir)) {
    return ErrorReply(req, http::status::not_found, "EntryNotFound",
                      "path '" + dir + "' is not a directory of " + repo.id());
  }
  const FaultConfig cfg = rep.faults.Get();
  const std::string prefix = dir.empty() ? std::string() : dir + "/";
  auto in_scope = [&](const std::string& p) {
    if (p.size() <= prefix.size() || p.compare(0, prefix.size(), prefix) != 0) return false;
    return recursive || p.find('/', prefix.size()) == std::string::npos;
  };
  // (path, entry) pairs, merged and sorted by path.
  std::vector<std::pair<std::string, json::object>> entries;
  for (const auto& d : repo.dirs()) {
    if (!in_scope(d.path)) continue;
    json::object e;
    e["type"] = "directory";
    e["oid"] = d.tree_oid;
    e["size"] = 0;
    e["path"] = d.path;
    entries.emplace_back(d.path, std::move(e));
  }
  for (const auto& f : repo.files()) {
    if (!in_scope(f.path)) continue;
    const std::uint64_t size = cfg.absurd_sizes ? kAbsurdSize : f.size;
    json::object e;
    e["type"] = "file";
    e["oid"] = f.git_oid;
    e["size"] = size;
    e["path"] = f.path;
    if (f.lfs) {
      json::object lfs;
      lfs["oid"] = f.sha256;
      lfs["size"] = size;
      lfs["pointerSize"] = f.pointer_size;
      e["lfs"] = std::move(lfs);
    }
    entries.emplace_back(f.path, std::move(e));
  }
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  if (cfg.hostile_listing && dir.empty()) {
    for (const char* bad : {"../x", "/etc/passwd"}) {
      json::object e;
      e["type"] = "file";
      e["oid"] = std::string(40, 'b');
      e["size"] = 5;
      e["path"] = bad;
      entries.emplace_back(bad, std::move(e));
    }
    rep.faults.Count(FaultKind::kHostileListing);
  }
  if (cfg.absurd_sizes) rep.faults.Count(FaultKind::kAbsurdSize);
  json::array page;
  const std::uint64_t end = std::min<std::uint64_t>(entries.size(), cursor + limit);
  for (std::uint64_t i = cursor; i < end; ++i) page.push_back(std::move(entries[i].second));
  Reply r = JsonReply(req, page);
  if (end < entries.size()) {
    std::string host;
    if (auto it = req.find(http::field::host); it != req.end()) host = std::string(it->value());
    if (!SafeHost(host)) host = rep.options.hub_address + ":" + std::to_string(rep.hub_port);
    std::string next = "http://" + host + std::string(raw_path) + "?recursive=" + (recursive ? "true" : "false");
    if (auto it = params.find("expand"); it != params.end()) next += "&expand=" + PercentEncode(it->second, false);
    next += "&limit=" + std::to_string(limit) + "&cursor=" + std::to_string(end);
    r.res.set(http::field::link, "<" + next + ">; rel=\"next\"");
  }
  return r;
}

Reply Resolve(Rep& rep, const Request& req, const RepoIndex& repo, const std::string& rev, const std::string& path) {
  if (!repo.MatchesRevision(rev)) {
    return ErrorReply(req, http::status::not_found, "RevisionNotFound", "Invalid rev id: " + rev);
  }
  const RepoFile* f = repo.FindFile(path);
  if (f == nullptr) {
    Reply r = ErrorReply(req, http::status::not_found, "EntryNotFound",
                         path + " does not exist on \"" + rev + "\"");
    r.res.set("X-Repo-Commit", repo.commit());
    return r;
  }
  const FaultConfig cfg = rep.faults.Get();
  Reply r = BaseReply(req, http::status::ok);
  r.res.set("X-Repo-Commit", repo.commit());
  if (!f->lfs) {
    r.res.set(http::field::etag, "\"" + f->git_oid + "\"");
    return FileReply(rep, Host::kHub, req, *f, std::move(r));
  }
  std::string url;
  if (!rep.options.cdn_base.empty()) {
    url = rep.options.cdn_base + "/" + PercentEncode(f->path, true);
  } else {
    const std::uint64_t expires = NowUnix() + rep.url_ttl_s.load();
    const std::string resource = repo.id() + "/" + repo.commit() + "/" + f->path;
    url = rep.CdnBase() + "/" + PercentEncode(repo.id(), true) + "/" + repo.commit() + "/" +
          PercentEncode(f->path, true) + "?expires=" + std::to_string(expires) +
          "&sig=" + rep.signer.Sign(resource, expires);
    std::lock_guard lock(rep.stats_mu);
    ++rep.signed_urls;
  }
  r.res.result(http::status::found);
  r.res.set(http::field::location, url);
  r.res.set(http::field::etag, "\"" + f->sha256 + "\"");
  r.res.set("X-Linked-Etag", "\"" + f->sha256 + "\"");
  std::uint64_t size = f->size;
  if (cfg.absurd_sizes) {
    size = kAbsurdSize;
    rep.faults.Count(FaultKind::kAbsurdSize);
  }
  r.res.set("X-Linked-Size", std::to_string(size));
  r.res.content_length(0);
  return r;
}

Reply Control(Rep& rep, HubSim& sim, const Request& req, std::string_view path) {
  const bool get = req.method() == http::verb::get;
  const bool post = req.method() == http::verb::post;
  if (path == "/_sim/stats" && get) {
    Reply r = BaseReply(req, http::status::ok);
    SetBody(r, sim.StatsJson(), "application/json");
    return r;
  }
  if (path == "/_sim/faults" && get) {
    Reply r = BaseReply(req, http::status::ok);
    SetBody(r, FaultConfigToJson(rep.faults.Get()), "application/json");
    return r;
  }
  if (path == "/_sim/faults" && post) {
    auto config = ParseFaultConfigJson(req.body());
    if (!config.ok()) return ErrorReply(req, http::status::bad_request, "BadRequest", config.status().message());
    // Parse succeeded, so the body is a JSON object.
    const json::value root = json::parse(req.body());
    if (const json::value* ttl = root.as_object().if_contains("url_ttl_s")) {
      if (!ttl->is_int64() || ttl->get_int64() < 0 || ttl->get_int64() > 30 * 86400) {
        return ErrorReply(req, http::status::bad_request, "BadRequest", "url_ttl_s must be in [0, 2592000]");
      }
      rep.url_ttl_s = static_cast<std::uint32_t>(ttl->get_int64());
    }
    if (const json::value* ex = root.as_object().if_contains("expire_urls_now")) {
      if (ex->is_bool() && ex->get_bool()) rep.signer.RevokeAll();
    }
    rep.faults.Set(*config);
    Reply r = BaseReply(req, http::status::ok);
    SetBody(r, FaultConfigToJson(*config), "application/json");
    return r;
  }
  if (path == "/_sim/reset" && post) {
    sim.Reset();
    Reply r = BaseReply(req, http::status::ok);
    SetBody(r, "{}", "application/json");
    return r;
  }
  return ErrorReply(req, http::status::not_found, "", "no control endpoint " + std::string(path));
}

Reply HandleHub(Rep& rep, HubSim& sim, const Request& req) {
  const Target t = SplitTarget(std::string_view(req.target().data(), req.target().size()));
  if (t.path.substr(0, 6) == "/_sim/") {
    Reply r = Control(rep, sim, req, t.path);
    r.kind = "control";
    return r;
  }
  const auto segs = SplitPath(t.path.substr(t.path.empty() ? 0 : 1));
  const bool has_auth = req.find(http::field::authorization) != req.end();
  if (!rep.options.token.empty()) {
    if (!has_auth) {
      Reply r = ErrorReply(req, http::status::unauthorized, "RepoNotFound", "Invalid username or password.");
      return r;
    }
    if (req[http::field::authorization] != "Bearer " + rep.options.token) {
      return ErrorReply(req, http::status::unauthorized, "", "Invalid credentials in Authorization header");
    }
  }
  auto repo_not_found = [&](std::string_view what) {
    return ErrorReply(req, has_auth ? http::status::not_found : http::status::unauthorized, "RepoNotFound",
                      "Repository not found: " + std::string(what));
  };
  const bool read = req.method() == http::verb::get || req.method() == http::verb::head;

  // /api/models/{repo}[/revision/{rev} | /tree/{rev}[/{path}]]
  if (segs.size() >= 2 && segs[0] == "api" && segs[1] == "models") {
    std::size_t used = 0;
    const RepoIndex* repo = rep.MatchRepo(segs, 2, &used);
    if (repo == nullptr) return repo_not_found(t.path.substr(12));
    if (!read) return ErrorReply(req, http::status::method_not_allowed, "", "method not allowed");
    std::size_t i = 2 + used;
    if (i == segs.size() || (i + 2 == segs.size() && segs[i] == "revision")) {
      Reply r;
      if (auto fault = MaybeErrorFault(rep, Host::kHub, req)) {
        r = std::move(*fault);
      } else {
        const auto rev = i == segs.size() ? std::optional<std::string>("main") : PercentDecode(segs[i + 1]);
        if (!rev || !repo->MatchesRevision(*rev)) {
          r = ErrorReply(req, http::status::not_found, "RevisionNotFound",
                         "Invalid rev id: " + (rev ? *rev : std::string(segs[i + 1])));
        } else {
          r = ModelInfo(rep, req, *repo);
        }
      }
      r.kind = "model_info";
      return r;
    }
    if (i + 2 <= segs.size() && segs[i] == "tree") {
      Reply r;
      if (auto fault = MaybeErrorFault(rep, Host::kHub, req)) {
        r = std::move(*fault);
      } else {
        const auto rev = PercentDecode(segs[i + 1]);
        std::string raw_rest;
        for (std::size_t k = i + 2; k < segs.size(); ++k) {
          if (!raw_rest.empty()) raw_rest += '/';
          raw_rest += segs[k];
        }
        const auto dir = PercentDecode(raw_rest);
        if (!rev || !repo->MatchesRevision(*rev)) {
          r = ErrorReply(req, http::status::not_found, "RevisionNotFound",
                         "Invalid rev id: " + (rev ? *rev : std::string(segs[i + 1])));
        } else if (!dir) {
          r = ErrorReply(req, http::status::bad_request, "", "bad percent-encoding in tree path");
        } else {
          std::string d = *dir;
          while (!d.empty() && d.back() == '/') d.pop_back();
          r = Tree(rep, req, *repo, d, t.path, t.query);
        }
      }
      r.kind = "tree";
      return r;
    }
    return ErrorReply(req, http::status::not_found, "", "no such API route");
  }

  // [/models]/{repo}/resolve/{rev}/{path}
  std::size_t used = 0;
  std::size_t start = 0;
  const RepoIndex* repo = rep.MatchRepo(segs, 0, &used);
  if (repo == nullptr && !segs.empty() && segs[0] == "models") {
    start = 1;
    repo = rep.MatchRepo(segs, 1, &used);
  }
  const std::size_t i = start + used;
  const bool is_resolve = segs.size() >= i + 3 && segs[i] == "resolve";
  if (repo == nullptr) {
    if (segs.size() >= 4 && std::find(segs.begin(), segs.end(), "resolve") != segs.end()) {
      return repo_not_found(t.path);
    }
    return ErrorReply(req, http::status::not_found, "", "no such route");
  }
  if (!is_resolve) return ErrorReply(req, http::status::not_found, "", "no such route");
  Reply r;
  {
    std::lock_guard lock(rep.stats_mu);
    ++rep.resolve_count;
  }
  if (!read) {
    r = ErrorReply(req, http::status::method_not_allowed, "", "method not allowed");
  } else if (auto fault = MaybeErrorFault(rep, Host::kHub, req)) {
    r = std::move(*fault);
  } else {
    const auto rev = PercentDecode(segs[i + 1]);
    std::string raw_rest;
    for (std::size_t k = i + 2; k < segs.size(); ++k) {
      if (k > i + 2) raw_rest += '/';
      raw_rest += segs[k];
    }
    const auto path = PercentDecode(raw_rest);
    if (!rev || !path) {
      r = ErrorReply(req, http::status::bad_request, "", "bad percent-encoding in resolve URL");
    } else {
      r = Resolve(rep, req, *repo, *rev, *path);
    }
  }
  r.kind = req.method() == http::verb::head ? "resolve_head" : "resolve_get";
  return r;
}

// ---- CDN route: /{repo}/{commit}/{path}?expires=E&sig=S ----

Reply HandleCdn(Rep& rep, const Request& req) {
  const Target t = SplitTarget(std::string_view(req.target().data(), req.target().size()));
  const auto segs = SplitPath(t.path.substr(t.path.empty() ? 0 : 1));
  const bool head = req.method() == http::verb::head;
  Reply r;
  std::size_t used = 0;
  const RepoIndex* repo = rep.MatchRepo(segs, 0, &used);
  if (req.method() != http::verb::get && !head) {
    r = ErrorReply(req, http::status::method_not_allowed, "", "method not allowed");
  } else if (repo == nullptr || segs.size() < used + 2) {
    r = ErrorReply(req, http::status::not_found, "NoSuchKey", "no such object");
  } else if (auto fault = MaybeErrorFault(rep, Host::kCdn, req)) {
    r = std::move(*fault);
  } else {
    const std::string commit(segs[used]);
    std::string raw_rest;
    for (std::size_t k = used + 1; k < segs.size(); ++k) {
      if (k > used + 1) raw_rest += '/';
      raw_rest += segs[k];
    }
    const auto path = PercentDecode(raw_rest);
    const auto params = ParseQuery(t.query);
    // Plain values, not optional<>: GCC 12 -O2 warns maybe-uninitialized on the latter.
    std::uint64_t expires = 0;
    bool has_expires = false;
    if (auto it = params.find("expires"); it != params.end()) {
      const auto v = ParseU64(it->second);
      has_expires = v.has_value();
      expires = v.value_or(0);
    }
    const std::string sig = params.count("sig") ? params.at("sig") : std::string();
    if (!path || !has_expires || sig.empty()) {
      r = ErrorReply(req, http::status::forbidden, "SignatureInvalid", "missing or malformed expires/sig");
    } else {
      switch (rep.signer.Verify(repo->id() + "/" + commit + "/" + *path, expires, sig, NowUnix())) {
        case UrlSigner::Verdict::kBadSignature:
          r = ErrorReply(req, http::status::forbidden, "SignatureInvalid", "signature does not match");
          break;
        case UrlSigner::Verdict::kExpired:
          r = ErrorReply(req, http::status::forbidden, "SignatureExpired",
                         "signed URL expired at " + std::to_string(expires));
          break;
        case UrlSigner::Verdict::kOk: {
          const RepoFile* f = commit == repo->commit() ? repo->FindFile(*path) : nullptr;
          if (f == nullptr) {
            r = ErrorReply(req, http::status::not_found, "NoSuchKey", "no such object");
            break;
          }
          Reply base = BaseReply(req, http::status::ok);
          base.res.set(http::field::etag, "\"" + (f->lfs ? f->sha256 : f->git_oid) + "\"");
          const std::size_t slash = f->path.rfind('/');
          const std::string name = slash == std::string::npos ? f->path : f->path.substr(slash + 1);
          base.res.set(http::field::content_disposition,
                       "inline; filename*=UTF-8''" + PercentEncode(name, false) + "; filename=\"" +
                           PercentEncode(name, false) + "\";");
          base.res.set(http::field::cache_control, "public, max-age=604800, immutable");
          r = FileReply(rep, Host::kCdn, req, *f, std::move(base));
          break;
        }
      }
    }
  }
  r.kind = head ? "cdn_head" : "cdn_get";
  return r;
}

// ---- connection ----

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket&& socket, Rep* rep, HubSim* sim, Host host)
      : stream_(std::move(socket)), timer_(stream_.get_executor()), rep_(rep), sim_(sim), host_(host) {}

  void Run() {
    net::dispatch(stream_.get_executor(), beast::bind_front_handler(&Session::DoRead, shared_from_this()));
  }

 private:
  std::chrono::seconds Timeout() const { return std::chrono::seconds(rep_->options.read_timeout_s); }

  void DoRead() {
    parser_.emplace();
    parser_->header_limit(kHeaderLimit);
    parser_->body_limit(kBodyLimit);
    stream_.expires_after(Timeout());
    http::async_read(stream_, buffer_, *parser_, beast::bind_front_handler(&Session::OnRead, shared_from_this()));
  }

  void OnRead(beast::error_code ec, std::size_t) {
    if (ec == http::error::body_limit || ec == http::error::header_limit) {
      Request fake;
      fake.version(11);
      Reply r = ErrorReply(fake,
                           ec == http::error::body_limit ? http::status::payload_too_large
                                                         : http::status::request_header_fields_too_large,
                           "", "request too large");
      r.close_after = true;
      return Send(std::move(r), false);
    }
    if (ec) return Close();  // end_of_stream, timeout, reset: nothing to answer
    Request req = parser_->release();
    Reply reply = host_ == Host::kHub ? HandleHub(*rep_, *sim_, req) : HandleCdn(*rep_, req);
    Send(std::move(reply), req.find(http::field::authorization) != req.end());
  }

  void Send(Reply reply, bool had_auth) {
    reply_ = std::move(reply);
    {
      std::lock_guard lock(rep_->stats_mu);
      detail::HostCounters& c = rep_->host_stats[static_cast<int>(host_)];
      ++c.requests;
      if (had_auth) ++c.with_auth;
      ++c.by_kind[reply_.kind];
      ++c.by_status[reply_.res.result_int()];
      if (!reply_.head_only) c.bytes += reply_.res.body().size();
      if (reply_.file != nullptr && !reply_.head_only) ++rep_->file_gets[reply_.file->path];
    }
    keep_alive_ = reply_.res.keep_alive() && !reply_.close_after;
    reply_.res.keep_alive(keep_alive_);
    sent_ = 0;
    stream_.expires_after(Timeout());
    if (reply_.file == nullptr) {
      http::async_write(stream_, reply_.res,
                        [self = shared_from_this()](beast::error_code ec, std::size_t) {
                          if (ec) return self->Close();
                          self->Finish();
                        });
      return;
    }
    serializer_ = std::make_unique<http::response_serializer<http::string_body>>(reply_.res);
    http::async_write_header(stream_, *serializer_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
      if (ec) return self->Close();
      if (self->reply_.head_only) return self->Finish();
      self->DoFileChunk();
    });
  }

  void DoFileChunk() {
    const std::uint64_t total = reply_.length + reply_.extra;
    if (sent_ >= total) return Finish();
    std::uint64_t cap = kChunk;
    if (reply_.throttle_bps > 0) cap = std::clamp<std::uint64_t>(reply_.throttle_bps / 20, 1024, kChunk);
    std::uint64_t n = std::min(cap, total - sent_);
    if (reply_.drop_after) {
      if (sent_ >= *reply_.drop_after) return Close();
      n = std::min(n, *reply_.drop_after - sent_);
    }
    chunk_.resize(static_cast<std::size_t>(n));
    const RepoFile& f = *reply_.file;
    const std::uint64_t pos = reply_.offset + sent_;
    const std::uint64_t readable = pos < f.size ? std::min(n, f.size - pos) : 0;
    std::uint64_t got = 0;
    while (got < readable) {
      const ssize_t k = ::pread(f.fd, chunk_.data() + got, static_cast<std::size_t>(readable - got),
                                static_cast<off_t>(pos + got));
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) return Close();  // file changed under us: cut the body
      got += static_cast<std::uint64_t>(k);
    }
    std::fill(chunk_.begin() + static_cast<std::ptrdiff_t>(readable), chunk_.end(), 'X');
    if (reply_.corrupt_at && *reply_.corrupt_at >= sent_ && *reply_.corrupt_at < sent_ + n) {
      chunk_[static_cast<std::size_t>(*reply_.corrupt_at - sent_)] ^= 0x5a;
    }
    rep_->AddBytes(host_, n);
    stream_.expires_after(Timeout());
    net::async_write(stream_, net::buffer(chunk_), beast::bind_front_handler(&Session::OnFileChunk, shared_from_this()));
  }

  void OnFileChunk(beast::error_code ec, std::size_t n) {
    if (ec) return Close();
    sent_ += n;
    if (reply_.drop_after && sent_ >= *reply_.drop_after) return Close();
    if (reply_.throttle_bps == 0) return DoFileChunk();
    const auto wait = std::chrono::microseconds(n * 1000000ull / reply_.throttle_bps);
    timer_.expires_after(wait);
    timer_.async_wait([self = shared_from_this()](beast::error_code wec) {
      if (wec) return self->Close();
      self->DoFileChunk();
    });
  }

  void Finish() {
    serializer_.reset();
    if (!keep_alive_) {
      beast::error_code ec;
      stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
      return;
    }
    DoRead();
  }

  void Close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.socket().close(ec);
  }

  beast::tcp_stream stream_;
  net::steady_timer timer_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  Reply reply_;
  std::unique_ptr<http::response_serializer<http::string_body>> serializer_;
  std::vector<char> chunk_;
  std::uint64_t sent_ = 0;
  bool keep_alive_ = true;
  Rep* rep_;
  HubSim* sim_;
  Host host_;
};

void DoAccept(Rep* rep, HubSim* sim, tcp::acceptor* acceptor, Host host) {
  acceptor->async_accept(net::make_strand(rep->ioc), [=](beast::error_code ec, tcp::socket socket) {
    if (ec == net::error::operation_aborted || !acceptor->is_open()) return;
    if (!ec) {
      // A body goes out in several writes after its header; with Nagle's
      // algorithm on, each later small write waits for the client's delayed
      // ACK of the one before: 40 ms per range on a reused connection (as
      // nginx, the simulator now answers without that wait).
      beast::error_code ignored;
      socket.set_option(tcp::no_delay(true), ignored);
      std::make_shared<Session>(std::move(socket), rep, sim, host)->Run();
    }
    DoAccept(rep, sim, acceptor, host);
  });
}

Status Listen(tcp::acceptor& acceptor, const std::string& address, std::uint16_t port, std::string_view what,
              std::uint16_t* bound) {
  const std::string where = std::string(what) + " listener " + address + ":" + std::to_string(port);
  beast::error_code ec;
  const auto ip = net::ip::make_address(address, ec);
  if (ec) return InvalidArgumentError(where + ": bad address: " + ec.message());
  const tcp::endpoint ep(ip, port);
  acceptor.open(ep.protocol(), ec);
  if (!ec) acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(ep, ec);
  if (!ec) acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) return IOError(where + ": " + ec.message());
  *bound = acceptor.local_endpoint().port();
  return Status::Ok();
}

}  // namespace

HubSim::HubSim(std::unique_ptr<detail::HubSimRep> rep) : rep_(std::move(rep)) {}

HubSim::~HubSim() { Stop(); }

Result<std::unique_ptr<HubSim>> HubSim::Start(HubSimOptions options) {
  if (options.repos.empty()) return InvalidArgumentError("hubsim: no repo to serve (--repo ORG/NAME=DIR)");
  if (options.threads < 1 || options.threads > 64) return InvalidArgumentError("hubsim: threads must be in [1, 64]");
  if (options.tree_page_size < 1 || options.tree_page_size > 1000) {
    return InvalidArgumentError("hubsim: tree page size must be in [1, 1000]");
  }
  if (options.read_timeout_s < 1) return InvalidArgumentError("hubsim: read timeout must be >= 1 s");
  if (!options.cdn_base.empty()) {
    const std::string& b = options.cdn_base;
    const bool scheme = b.rfind("http://", 0) == 0 || b.rfind("https://", 0) == 0;
    const bool clean = b.find_first_of("?# \r\n") == std::string::npos && b.back() != '/';
    if (!scheme || !clean) {
      return InvalidArgumentError("hubsim: cdn base '" + b + "' must be an http(s) URL without '?', '#' or a trailing '/'");
    }
  }
  auto rep = std::make_unique<Rep>();
  for (const auto& spec : options.repos) {
    for (const auto& existing : rep->repos) {
      if (existing->id() == spec.id) return InvalidArgumentError("hubsim: repo '" + spec.id + "' given twice");
    }
    auto index = RepoIndex::Build(spec.id, spec.dir, options.lfs_threshold, options.unhashed_glob);
    if (!index.ok()) return index.status();
    rep->repos.push_back(std::move(index).value());
  }
  rep->start_faults = options.faults;
  rep->faults.Set(options.faults);
  rep->url_ttl_s = options.url_ttl_s;
  rep->options = std::move(options);
  EXLR8_RETURN_IF_ERROR(
      Listen(rep->hub_acceptor, rep->options.hub_address, rep->options.hub_port, "hub", &rep->hub_port));
  EXLR8_RETURN_IF_ERROR(
      Listen(rep->cdn_acceptor, rep->options.cdn_address, rep->options.cdn_port, "cdn", &rep->cdn_port));
  std::unique_ptr<HubSim> sim(new HubSim(std::move(rep)));
  Rep* r = sim->rep_.get();
  DoAccept(r, sim.get(), &r->hub_acceptor, Host::kHub);
  DoAccept(r, sim.get(), &r->cdn_acceptor, Host::kCdn);
  for (int i = 0; i < r->options.threads; ++i) {
    r->threads.emplace_back([r] { r->ioc.run(); });
  }
  return sim;
}

void HubSim::Stop() {
  if (!rep_ || rep_->stopped) return;
  rep_->stopped = true;
  rep_->ioc.stop();
  for (auto& t : rep_->threads) t.join();
  rep_->threads.clear();
  beast::error_code ec;
  rep_->hub_acceptor.close(ec);
  rep_->cdn_acceptor.close(ec);
}

std::string HubSim::hub_url() const {
  return "http://" + rep_->options.hub_address + ":" + std::to_string(rep_->hub_port);
}
std::string HubSim::cdn_url() const { return rep_->CdnBase(); }
std::uint16_t HubSim::hub_port() const { return rep_->hub_port; }
std::uint16_t HubSim::cdn_port() const { return rep_->cdn_port; }

std::string HubSim::commit(std::string_view repo_id) const {
  for (const auto& r : rep_->repos) {
    if (r->id() == repo_id) return r->commit();
  }
  return {};
}

void HubSim::SetFaults(const FaultConfig& config) { rep_->faults.Set(config); }
FaultConfig HubSim::faults() const { return rep_->faults.Get(); }
void HubSim::ExpireSignedUrls() { rep_->signer.RevokeAll(); }
void HubSim::SetUrlTtl(std::uint32_t seconds) { rep_->url_ttl_s = seconds; }

std::string HubSim::StatsJson() const {
  json::object o;
  {
    std::lock_guard lock(rep_->stats_mu);
    for (int h = 0; h < 2; ++h) {
      const detail::HostCounters& c = rep_->host_stats[h];
      json::object ho;
      ho["requests"] = c.requests;
      ho["with_authorization"] = c.with_auth;
      ho["bytes_served"] = c.bytes;
      json::object kinds;
      for (const auto& [k, n] : c.by_kind) kinds[k] = n;
      ho["by_kind"] = std::move(kinds);
      json::object statuses;
      for (const auto& [s, n] : c.by_status) statuses[std::to_string(s)] = n;
      ho["by_status"] = std::move(statuses);
      o[h == 0 ? "hub" : "cdn"] = std::move(ho);
    }
    o["resolve"] = rep_->resolve_count;
    o["signed_urls_issued"] = rep_->signed_urls;
    json::object files;
    for (const auto& [path, n] : rep_->file_gets) files[path] = n;
    o["file_gets"] = std::move(files);
  }
  json::object faults;
  for (int k = 0; k < kFaultKindCount; ++k) {
    const auto kind = static_cast<FaultKind>(k);
    faults[FaultKindName(kind)] = rep_->faults.injected(kind);
  }
  faults["total"] = rep_->faults.injected_total();
  o["faults"] = std::move(faults);
  return json::serialize(o);
}

void HubSim::Reset() {
  {
    std::lock_guard lock(rep_->stats_mu);
    rep_->host_stats[0] = detail::HostCounters{};
    rep_->host_stats[1] = detail::HostCounters{};
    rep_->resolve_count = 0;
    rep_->signed_urls = 0;
    rep_->file_gets.clear();
  }
  rep_->faults.Set(rep_->start_faults);
  rep_->faults.ResetCounters();
}

}  // namespace exlr8::hubsim
