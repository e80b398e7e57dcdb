// HubSim: a Hugging Face Hub simulator (real HTTP/1.1 over loopback) for
// integration tests, benchmarks and the demo. Two listeners share one
// io_context run by a small thread pool:
//
//   hub  (default 127.0.0.1)  API + /resolve/, like huggingface.co
//   cdn  (default 127.0.0.2)  signed LFS blob URLs, like the Hub's CDN
//
// Wire contract (what a client must expect; docs in tests/hubsim/README.md):
//
//   GET  /api/models/{repo}[/revision/{rev}][?blobs=true]
//        200 JSON {"id","modelId","sha":commit,"private","gated":false,
//        "lastModified","usedStorage","siblings":[{"rfilename","size",
//        "blobId", "lfs":{"sha256","size","pointerSize"} (LFS only)}]}.
//        size/blobId/lfs are always present (blobs=true or not).
//   GET  /api/models/{repo}/tree/{rev}[/{path}][?recursive=true&limit=N&cursor=C]
//        200 JSON [{"type":"file","oid","size","path","lfs":{"oid":sha256,
//        "size","pointerSize"}}, {"type":"directory","oid","size":0,"path"}],
//        sorted by path; recursive listings include directories. At most
//        tree_page_size (or limit, <= 1000) entries per page; when more
//        remain: Link: <http://HOST/api/models/...?...&cursor=K>; rel="next".
//        {path} may be percent-encoded (huggingface_hub sends "a%2Fb").
//   HEAD|GET /{repo}/resolve/{rev}/{path}   (also /models/{repo}/resolve/...)
//        {rev} percent-encoded; "main", "refs/heads/main" or the commit id.
//        Regular file: 200 (206 with Range) with the bytes, ETag: "<git oid>",
//          X-Repo-Commit, Content-Length, Accept-Ranges: bytes.
//        LFS file: 302, Location: http://CDN/{repo}/{commit}/{path}?expires=E&sig=S
//          (or <cdn_base>/{path}, unsigned, when HubSimOptions::cdn_base is set),
//          ETag and X-Linked-Etag: "<sha256>", X-Linked-Size, X-Repo-Commit,
//          Content-Length: 0.
//   HEAD|GET CDN /{repo}/{commit}/{path}?expires=E&sig=S
//        403 X-Error-Code: SignatureExpired | SignatureInvalid; else 200 whole,
//        206 + Content-Range for one range, 416 + Content-Range: bytes */N for
//        an unsatisfiable or multi-range request. Never needs a token.
//   Errors carry X-Error-Code / X-Error-Message and a {"error": msg} body:
//        RepoNotFound 401 (no/invalid Authorization) or 404, RevisionNotFound
//        404, EntryNotFound 404 (with X-Repo-Commit). With a token configured,
//        a missing token gives 401 RepoNotFound "Invalid username or
//        password."; a wrong one 401 "Invalid credentials in Authorization
//        header" (no code), as huggingface.co does.
//   Control (hub only, never needs the token):
//        POST /_sim/faults  body = FaultConfig JSON (faults.h), plus optional
//                           "url_ttl_s": N and "expire_urls_now": true
//        GET  /_sim/faults  current FaultConfig JSON
//        GET  /_sim/stats   counters JSON (see StatsJson())
//        POST /_sim/reset   zero counters, faults back to the start config
//
// Ownership: Start() returns the owner; destroying it stops the listeners,
// closes connections and joins the threads. Thread rules: every public
// method may be called from any thread except from the server's own
// handlers; Stop() and the destructor must not run concurrently.
// Signals are the embedder's business (main.cpp blocks SIGINT/SIGTERM and
// calls Stop() from its sigwait loop).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "format/status.h"
#include "tests/hubsim/faults.h"

namespace exlr8::hubsim {

namespace detail {
struct HubSimRep;  // hubsim.cpp: listeners, threads, repos, counters
}  // namespace detail

struct RepoSpec {
  std::string id;   // "org/name"
  std::string dir;  // release directory
};

struct HubSimOptions {
  std::vector<RepoSpec> repos;
  std::string hub_address = "127.0.0.1";
  std::uint16_t hub_port = 0;  // 0: any free port
  std::string cdn_address = "127.0.0.2";
  std::uint16_t cdn_port = 0;
  std::string token;                  // non-empty: hub requires "Bearer <token>"
  std::uint32_t url_ttl_s = 3600;     // lifetime of signed CDN URLs
  std::uint32_t tree_page_size = 50;  // tree entries per page (1..1000)
  std::uint64_t lfs_threshold = 10ull * 1000 * 1000;
  int threads = 4;                    // io_context threads (1..64)
  std::uint32_t read_timeout_s = 30;  // per request read; also per body write
  // Non-empty ("http://127.0.0.2:8080", no trailing '/'): /resolve/ of an LFS
  // file answers 302 to "<cdn_base>/<path>" (path percent-encoded, slashes
  // literal, no signature or expiry) instead of a signed URL on our own CDN,
  // so an external server (nginx serving the release directory) carries the
  // bytes. Meant for one repo: every repo's files map onto the same base.
  // Our CDN listener still runs; CDN faults then do not apply.
  std::string cdn_base;
  // LFS files matching this glob (e.g. "experts/*.k?.safetensors") are not
  // hashed at start-up; they are listed with a stand-in sha256
  // (RepoFile::unhashed). Only for benchmarks on sparse --index-only
  // releases, whose width files are hundreds of GB of holes that no client
  // verifies whole.
  std::string unhashed_glob;
  FaultConfig faults;
};

class HubSim {
 public:
  // Indexes every repo (hashing its files), binds both listeners and starts
  // the threads. Errors: InvalidArgument (bad option, duplicate repo id),
  // NotFound (repo dir), IOError (hashing, bind or listen failed).
  static Result<std::unique_ptr<HubSim>> Start(HubSimOptions options);
  ~HubSim();
  HubSim(const HubSim&) = delete;
  HubSim& operator=(const HubSim&) = delete;

  // Idempotent. Closes listeners and open connections, joins the threads.
  void Stop();

  // "http://127.0.0.1:PORT" and "http://127.0.0.2:PORT", ports resolved.
  std::string hub_url() const;
  std::string cdn_url() const;
  std::uint16_t hub_port() const;
  std::uint16_t cdn_port() const;

  // Commit id of a served repo; "" when not served.
  std::string commit(std::string_view repo_id) const;

  void SetFaults(const FaultConfig& config);
  FaultConfig faults() const;
  // Every signed URL issued so far fails with 403 SignatureExpired.
  void ExpireSignedUrls();
  void SetUrlTtl(std::uint32_t seconds);

  // {"hub":{"requests","with_authorization","bytes_served","by_kind":{...},
  //         "by_status":{...}},
  //  "cdn":{...same...},
  //  "resolve": n, "signed_urls_issued": n,
  //  "file_gets":{"<repo path>": n, ...},
  //  "faults":{"drop":n,...,"total":n}}
  // file_gets counts the answers that carried a file's bytes (a hub resolve
  // of a regular file, a CDN GET), by repo path: which files a client
  // fetched, and how often. Repos served at once share its keys.
  // by_kind keys: hub "model_info","tree","resolve_head","resolve_get",
  // "control","other"; cdn "cdn_get","cdn_head","other".
  std::string StatsJson() const;
  // Zeroes counters and restores the fault config given at Start().
  void Reset();

 private:
  explicit HubSim(std::unique_ptr<detail::HubSimRep> rep);
  std::unique_ptr<detail::HubSimRep> rep_;
};

}  // namespace exlr8::hubsim
