// End-to-end tests of the hub simulator over real loopback sockets, with
// libcurl as the client: listings and paging, resolve -> 302 -> CDN ranges,
// signatures, tokens, every fault mode, and the exlr8-hubsim process.
#include <curl/curl.h>
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <boost/json.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/hubsim/hubsim.h"
#include "tests/support/files.h"

namespace exlr8::hubsim {
namespace {

namespace json = boost::json;
namespace fs = std::filesystem;

const std::string kFixture = std::string(EXLR8_SHARED_DIR) + "/fixtures/exlr8-tiny";
constexpr const char* kRepo = "exlr8/tiny";
constexpr const char* kSmall = "config.json";
constexpr const char* kLfs = "experts/exlr8-layer-003.k2.safetensors";

struct HttpResult {
  CURLcode code = CURLE_OK;
  long status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  std::string Header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? std::string() : it->second;
  }
};

std::size_t OnBody(char* p, std::size_t size, std::size_t n, void* user) {
  static_cast<std::string*>(user)->append(p, size * n);
  return size * n;
}

std::size_t OnHeader(char* p, std::size_t size, std::size_t n, void* user) {
  std::string line(p, size * n);
  const std::size_t colon = line.find(':');
  if (colon != std::string::npos) {
    std::string name = line.substr(0, colon);
    for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::string value = line.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ')) value.erase(0, 1);
    while (!value.empty() && (value.back() == '\r' || value.back() == '\n')) value.pop_back();
    (*static_cast<std::map<std::string, std::string>*>(user))[name] = value;
  }
  return size * n;
}

HttpResult Fetch(const std::string& url, const std::string& method = "GET",
                 const std::vector<std::string>& headers = {}, const std::string& body = "") {
  HttpResult r;
  CURL* curl = curl_easy_init();
  curl_slist* list = nullptr;
  for (const auto& h : headers) list = curl_slist_append(list, h.c_str());
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, list);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, OnBody);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &r.body);
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, OnHeader);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &r.headers);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT, 30L);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  if (method == "HEAD") curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
  if (method == "POST") {
    curl_easy_setopt(curl, CURLOPT_POST, 1L);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.c_str());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
  }
  r.code = curl_easy_perform(curl);
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &r.status);
  curl_slist_free_all(list);
  curl_easy_cleanup(curl);
  return r;
}

std::string Hex(const EVP_MD* md, const std::string& prefix, const std::string& data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, md, nullptr);
  EVP_DigestUpdate(ctx, prefix.data(), prefix.size());
  EVP_DigestUpdate(ctx, data.data(), data.size());
  EVP_DigestFinal_ex(ctx, out, &n);
  EVP_MD_CTX_free(ctx);
  std::string s;
  for (unsigned i = 0; i < n; ++i) {
    char b[3];
    std::snprintf(b, sizeof b, "%02x", out[i]);
    s += b;
  }
  return s;
}

std::string GitOid(const std::string& data) {
  return Hex(EVP_sha1(), "blob " + std::to_string(data.size()) + std::string(1, '\0'), data);
}

// Every file of the fixture, repo-relative.
std::set<std::string> FixtureFiles() {
  std::set<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(kFixture)) {
    if (e.is_regular_file()) out.insert(fs::relative(e.path(), kFixture).generic_string());
  }
  return out;
}

json::value Json(const HttpResult& r) { return json::parse(r.body); }

class HubSimTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { curl_global_init(CURL_GLOBAL_DEFAULT); }

  void StartSim(HubSimOptions options = {}) {
    options.repos = {{kRepo, kFixture}};
    if (options.tree_page_size == 50) options.tree_page_size = 5;
    options.threads = 2;
    auto sim = HubSim::Start(std::move(options));
    ASSERT_TRUE(sim.ok()) << sim.status().message();
    sim_ = std::move(sim).value();
  }
  void SetUp() override { StartSim(); }

  std::string Hub(const std::string& path) const { return sim_->hub_url() + path; }
  std::string ResolveUrl(const std::string& file, const std::string& rev = "main") const {
    return Hub(std::string("/") + kRepo + "/resolve/" + rev + "/" + file);
  }
  // HEAD on /resolve/ of an LFS file; returns the signed CDN URL.
  std::string SignedUrl(const std::string& file = kLfs) const {
    const HttpResult r = Fetch(ResolveUrl(file), "HEAD");
    EXPECT_EQ(r.status, 302);
    return r.Header("location");
  }
  json::object Stats() const { return Json(Fetch(Hub("/_sim/stats"))).as_object(); }
  std::uint64_t FaultCount(const char* kind) const {
    return Stats()["faults"].as_object()[kind].to_number<std::uint64_t>();
  }

  std::unique_ptr<HubSim> sim_;
};

TEST_F(HubSimTest, ModelInfoListsSiblingsWithGitAndLfsOids) {
  const HttpResult r = Fetch(Hub(std::string("/api/models/") + kRepo + "/revision/main?blobs=true"));
  ASSERT_EQ(r.status, 200) << r.body;
  const json::object info = Json(r).as_object();
  EXPECT_EQ(info.at("id").as_string(), kRepo);
  EXPECT_EQ(info.at("sha").as_string(), sim_->commit(kRepo));
  EXPECT_EQ(sim_->commit(kRepo).size(), 40u);
  std::set<std::string> names;
  for (const auto& s : info.at("siblings").as_array()) {
    const json::object& o = s.as_object();
    const std::string name(o.at("rfilename").as_string());
    names.insert(name);
    const std::string bytes = testing::ReadFileText(kFixture + "/" + name);
    EXPECT_EQ(o.at("size").to_number<std::uint64_t>(), bytes.size()) << name;
    if (name.ends_with(".safetensors")) {
      const json::object& lfs = o.at("lfs").as_object();
      EXPECT_EQ(lfs.at("sha256").as_string(), Hex(EVP_sha256(), "", bytes)) << name;
      EXPECT_EQ(lfs.at("size").to_number<std::uint64_t>(), bytes.size());
      EXPECT_GT(lfs.at("pointerSize").to_number<std::uint64_t>(), 100u);
    } else {
      EXPECT_FALSE(o.contains("lfs")) << name;
      EXPECT_EQ(o.at("blobId").as_string(), GitOid(bytes)) << name;
    }
  }
  EXPECT_EQ(names, FixtureFiles());

  // The commit id is accepted as a revision; others are RevisionNotFound.
  EXPECT_EQ(Fetch(Hub(std::string("/api/models/") + kRepo + "/revision/" + sim_->commit(kRepo))).status, 200);
  const HttpResult bad_rev = Fetch(Hub(std::string("/api/models/") + kRepo + "/revision/v2"));
  EXPECT_EQ(bad_rev.status, 404);
  EXPECT_EQ(bad_rev.Header("x-error-code"), "RevisionNotFound");
  const HttpResult no_repo = Fetch(Hub("/api/models/exlr8/nope"));
  EXPECT_EQ(no_repo.status, 401);
  EXPECT_EQ(no_repo.Header("x-error-code"), "RepoNotFound");
}

TEST_F(HubSimTest, CommitIsStableAcrossRestarts) {
  const std::string first = sim_->commit(kRepo);
  sim_.reset();
  StartSim();
  EXPECT_EQ(sim_->commit(kRepo), first);
}

TEST_F(HubSimTest, RecursiveTreePagesThroughLinkHeaders) {
  std::string url = Hub(std::string("/api/models/") + kRepo + "/tree/main?recursive=true");
  std::set<std::string> files, dirs;
  int pages = 0;
  while (!url.empty()) {
    const HttpResult r = Fetch(url);
    ASSERT_EQ(r.status, 200) << r.body;
    ASSERT_LT(++pages, 20);
    const json::array page = Json(r).as_array();
    EXPECT_LE(page.size(), 5u);
    for (const auto& e : page) {
      const json::object& o = e.as_object();
      const std::string path(o.at("path").as_string());
      EXPECT_EQ(o.at("oid").as_string().size(), 40u);
      if (o.at("type").as_string() == "directory") {
        dirs.insert(path);
      } else {
        files.insert(path);
        if (path.ends_with(".safetensors")) {
          EXPECT_EQ(o.at("lfs").as_object().at("oid").as_string().size(), 64u);
        }
      }
    }
    url.clear();
    const std::string link = r.Header("link");
    if (!link.empty()) {
      ASSERT_EQ(link.front(), '<');
      ASSERT_NE(link.find(">; rel=\"next\""), std::string::npos) << link;
      url = link.substr(1, link.find('>') - 1);
    }
  }
  EXPECT_EQ(files, FixtureFiles());
  EXPECT_EQ(dirs, (std::set<std::string>{"dense", "experts", "manifests"}));
  EXPECT_EQ(pages, static_cast<int>((files.size() + dirs.size() + 4) / 5));

  // Non-recursive root: config.json and the three directories.
  const HttpResult root = Fetch(Hub(std::string("/api/models/") + kRepo + "/tree/main?limit=100"));
  ASSERT_EQ(root.status, 200);
  EXPECT_EQ(Json(root).as_array().size(), 4u);
  EXPECT_TRUE(root.Header("link").empty());
  // A sub-directory, percent-encoded as huggingface_hub sends it.
  const HttpResult sub = Fetch(Hub(std::string("/api/models/") + kRepo + "/tree/main/experts?limit=100"));
  ASSERT_EQ(sub.status, 200);
  EXPECT_EQ(Json(sub).as_array().size(), 8u);
  const HttpResult missing = Fetch(Hub(std::string("/api/models/") + kRepo + "/tree/main/nope"));
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(missing.Header("x-error-code"), "EntryNotFound");
}

TEST_F(HubSimTest, RegularFileIsServedByTheHubWithRanges) {
  const std::string bytes = testing::ReadFileText(kFixture + "/" + kSmall);
  const HttpResult head = Fetch(ResolveUrl(kSmall), "HEAD");
  EXPECT_EQ(head.status, 200);
  EXPECT_EQ(head.Header("x-repo-commit"), sim_->commit(kRepo));
  EXPECT_EQ(head.Header("etag"), "\"" + GitOid(bytes) + "\"");
  EXPECT_EQ(head.Header("content-length"), std::to_string(bytes.size()));
  EXPECT_TRUE(head.Header("x-linked-etag").empty());

  const HttpResult get = Fetch(ResolveUrl(kSmall));
  EXPECT_EQ(get.status, 200);
  EXPECT_EQ(get.body, bytes);
  const HttpResult part = Fetch(ResolveUrl(kSmall, sim_->commit(kRepo)), "GET", {"Range: bytes=10-19"});
  EXPECT_EQ(part.status, 206);
  EXPECT_EQ(part.body, bytes.substr(10, 10));
  EXPECT_EQ(part.Header("content-range"), "bytes 10-19/" + std::to_string(bytes.size()));

  const HttpResult missing = Fetch(ResolveUrl("nope.json"), "HEAD");
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(missing.Header("x-error-code"), "EntryNotFound");
  EXPECT_EQ(missing.Header("x-repo-commit"), sim_->commit(kRepo));
  const HttpResult bad_rev = Fetch(ResolveUrl(kSmall, "v9"), "HEAD");
  EXPECT_EQ(bad_rev.status, 404);
  EXPECT_EQ(bad_rev.Header("x-error-code"), "RevisionNotFound");
}

TEST_F(HubSimTest, LfsFileRedirectsToSignedCdnUrlServingRanges) {
  const std::string bytes = testing::ReadFileText(kFixture + "/" + kLfs);
  const std::string sha = Hex(EVP_sha256(), "", bytes);
  const HttpResult head = Fetch(ResolveUrl(kLfs), "HEAD");
  ASSERT_EQ(head.status, 302);
  EXPECT_EQ(head.Header("x-repo-commit"), sim_->commit(kRepo));
  EXPECT_EQ(head.Header("x-linked-etag"), "\"" + sha + "\"");
  EXPECT_EQ(head.Header("x-linked-size"), std::to_string(bytes.size()));
  const std::string url = head.Header("location");
  ASSERT_EQ(url.rfind(sim_->cdn_url() + "/" + kRepo + "/" + sim_->commit(kRepo) + "/" + kLfs + "?expires=", 0), 0u)
      << url;
  EXPECT_NE(url.find("&sig="), std::string::npos);
  EXPECT_EQ(sim_->cdn_url().rfind("http://127.0.0.2:", 0), 0u);

  const HttpResult part = Fetch(url, "GET", {"Range: bytes=1000-1999"});
  EXPECT_EQ(part.status, 206);
  EXPECT_EQ(part.Header("content-range"), "bytes 1000-1999/" + std::to_string(bytes.size()));
  EXPECT_EQ(part.Header("accept-ranges"), "bytes");
  EXPECT_EQ(part.body, bytes.substr(1000, 1000));
  const HttpResult tail = Fetch(url, "GET", {"Range: bytes=-7"});
  EXPECT_EQ(tail.status, 206);
  EXPECT_EQ(tail.body, bytes.substr(bytes.size() - 7));
  const HttpResult whole = Fetch(url);
  EXPECT_EQ(whole.status, 200);
  EXPECT_TRUE(whole.body == bytes);
  const HttpResult cdn_head = Fetch(url, "HEAD");
  EXPECT_EQ(cdn_head.status, 200);
  EXPECT_EQ(cdn_head.Header("content-length"), std::to_string(bytes.size()));
  EXPECT_EQ(cdn_head.Header("etag"), "\"" + sha + "\"");

  // The GET on /resolve/ redirects the same way.
  EXPECT_EQ(Fetch(ResolveUrl(kLfs)).status, 302);
  EXPECT_EQ(Stats()["resolve"].to_number<int>(), 2);
}

TEST_F(HubSimTest, FileGetsCountTheAnswersCarryingEachFilesBytes) {
  EXPECT_EQ(Fetch(ResolveUrl(kSmall)).status, 200);
  EXPECT_EQ(Fetch(ResolveUrl(kSmall), "GET", {"Range: bytes=0-9"}).status, 206);
  EXPECT_EQ(Fetch(ResolveUrl(kSmall), "HEAD").status, 200);  // no bytes: not counted
  const std::string url = SignedUrl();                       // a 302: not counted
  EXPECT_EQ(Fetch(url, "GET", {"Range: bytes=0-99"}).status, 206);
  json::object files = Stats()["file_gets"].as_object();
  EXPECT_EQ(files.size(), 2u);
  EXPECT_EQ(files[kSmall].to_number<int>(), 2);
  EXPECT_EQ(files[kLfs].to_number<int>(), 1);
  sim_->Reset();
  EXPECT_TRUE(Stats()["file_gets"].as_object().empty());
}

TEST_F(HubSimTest, CdnBaseRedirectsLfsFilesUnsignedAndKeepsRegularFilesOnTheHub) {
  HubSimOptions options;
  options.cdn_base = "http://127.0.0.2:8080/rel";
  StartSim(options);
  const std::string bytes = testing::ReadFileText(kFixture + "/" + kLfs);
  const HttpResult head = Fetch(ResolveUrl(kLfs), "HEAD");
  ASSERT_EQ(head.status, 302);
  EXPECT_EQ(head.Header("location"), std::string("http://127.0.0.2:8080/rel/") + kLfs);
  EXPECT_EQ(head.Header("x-linked-etag"), "\"" + Hex(EVP_sha256(), "", bytes) + "\"");
  EXPECT_EQ(head.Header("x-linked-size"), std::to_string(bytes.size()));
  EXPECT_EQ(head.Header("x-repo-commit"), sim_->commit(kRepo));
  // Regular files are still served by the hub itself.
  const HttpResult small = Fetch(ResolveUrl(kSmall));
  EXPECT_EQ(small.status, 200);
  EXPECT_EQ(small.body, testing::ReadFileText(kFixture + "/" + kSmall));
  const json::object stats = Stats();
  EXPECT_EQ(stats.at("resolve").to_number<int>(), 2);
  EXPECT_EQ(stats.at("signed_urls_issued").to_number<int>(), 0);
}

TEST_F(HubSimTest, UnhashedGlobListsAStandInSha256AndStillServesTheBytes) {
  const std::string commit_hashed = sim_->commit(kRepo);
  HubSimOptions options;
  options.unhashed_glob = "experts/*.k2.safetensors";
  StartSim(options);
  EXPECT_NE(sim_->commit(kRepo), commit_hashed);  // the listed sha256 differs, so the commit does
  const HttpResult r = Fetch(Hub(std::string("/api/models/") + kRepo));
  ASSERT_EQ(r.status, 200);
  int stand_ins = 0, hashed = 0;
  const json::value info = Json(r);
  for (const auto& s : info.as_object().at("siblings").as_array()) {
    const json::object& o = s.as_object();
    const std::string name(o.at("rfilename").as_string());
    if (!o.contains("lfs")) continue;
    const std::string bytes = testing::ReadFileText(kFixture + "/" + name);
    const std::string listed(o.at("lfs").as_object().at("sha256").as_string());
    EXPECT_EQ(listed.size(), 64u);
    EXPECT_EQ(o.at("size").to_number<std::uint64_t>(), bytes.size()) << name;
    if (name.find(".k2.") != std::string::npos && name.starts_with("experts/")) {
      EXPECT_NE(listed, Hex(EVP_sha256(), "", bytes)) << name;
      ++stand_ins;
    } else {
      EXPECT_EQ(listed, Hex(EVP_sha256(), "", bytes)) << name;
      ++hashed;
    }
  }
  EXPECT_GE(stand_ins, 1);
  EXPECT_GE(hashed, 1);
  // The bytes themselves are served as before.
  const std::string bytes = testing::ReadFileText(kFixture + "/" + kLfs);
  const HttpResult part = Fetch(SignedUrl(), "GET", {"Range: bytes=10-99"});
  EXPECT_EQ(part.status, 206);
  EXPECT_EQ(part.body, bytes.substr(10, 90));
}

TEST_F(HubSimTest, UnsatisfiableAndMultiRangesGet416) {
  const std::string url = SignedUrl();
  const std::string size = std::to_string(fs::file_size(kFixture + "/" + kLfs));
  const HttpResult past = Fetch(url, "GET", {"Range: bytes=" + size + "-"});
  EXPECT_EQ(past.status, 416);
  EXPECT_EQ(past.Header("content-range"), "bytes */" + size);
  const HttpResult multi = Fetch(url, "GET", {"Range: bytes=0-1,5-6"});
  EXPECT_EQ(multi.status, 416);
  EXPECT_EQ(multi.Header("x-error-code"), "MultiRangeNotSupported");
  // Bad syntax is ignored (RFC 9110): whole file.
  EXPECT_EQ(Fetch(url, "GET", {"Range: bytes=9-1"}).status, 200);
}

TEST_F(HubSimTest, ForgedSignaturesAreRejected) {
  const std::string url = SignedUrl();
  std::string forged = url;
  forged[forged.size() - 1] = forged.back() == '0' ? '1' : '0';
  const HttpResult r = Fetch(forged);
  EXPECT_EQ(r.status, 403);
  EXPECT_EQ(r.Header("x-error-code"), "SignatureInvalid");
  // The same query on another file.
  std::string other = url;
  other.replace(other.find("k2.safetensors"), 14, "k3.safetensors");
  EXPECT_EQ(Fetch(other).Header("x-error-code"), "SignatureInvalid");
  // A later expiry with the old signature.
  std::string later = url;
  const std::size_t e = later.find("expires=") + 8;
  later[e] = later[e] == '9' ? '8' : static_cast<char>(later[e] + 1);
  EXPECT_EQ(Fetch(later).status, 403);
  EXPECT_EQ(Fetch(url.substr(0, url.find('?'))).status, 403);
}

TEST_F(HubSimTest, SignedUrlsExpireByTimeAndOnDemand) {
  sim_->SetUrlTtl(0);
  const std::string short_lived = SignedUrl();
  sim_->SetUrlTtl(3600);
  const std::string url = SignedUrl();
  EXPECT_EQ(Fetch(url, "GET", {"Range: bytes=0-9"}).status, 206);
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  const HttpResult old = Fetch(short_lived, "GET", {"Range: bytes=0-9"});
  EXPECT_EQ(old.status, 403);
  EXPECT_EQ(old.Header("x-error-code"), "SignatureExpired");

  // Through the control endpoint: everything issued so far dies at once.
  const HttpResult post = Fetch(Hub("/_sim/faults"), "POST", {"Content-Type: application/json"},
                                R"({"expire_urls_now": true})");
  ASSERT_EQ(post.status, 200) << post.body;
  const HttpResult dead = Fetch(url, "GET", {"Range: bytes=0-9"});
  EXPECT_EQ(dead.status, 403);
  EXPECT_EQ(dead.Header("x-error-code"), "SignatureExpired");
  // Re-resolving gives a working URL.
  EXPECT_EQ(Fetch(SignedUrl(), "GET", {"Range: bytes=0-9"}).status, 206);
}

TEST_F(HubSimTest, TokenIsRequiredOnTheHubAndNeverReachesTheCdn) {
  sim_.reset();
  HubSimOptions options;
  options.token = "hf_secret";
  StartSim(options);
  const HttpResult none = Fetch(ResolveUrl(kLfs), "HEAD");
  EXPECT_EQ(none.status, 401);
  EXPECT_EQ(none.Header("x-error-code"), "RepoNotFound");
  const HttpResult wrong = Fetch(ResolveUrl(kLfs), "HEAD", {"Authorization: Bearer hf_wrong"});
  EXPECT_EQ(wrong.status, 401);
  EXPECT_EQ(wrong.Header("x-error-message"), "Invalid credentials in Authorization header");
  EXPECT_EQ(Fetch(Hub(std::string("/api/models/") + kRepo)).status, 401);

  const HttpResult ok = Fetch(ResolveUrl(kLfs), "HEAD", {"Authorization: Bearer hf_secret"});
  ASSERT_EQ(ok.status, 302);
  const HttpResult cdn = Fetch(ok.Header("location"), "GET", {"Range: bytes=0-99"});
  EXPECT_EQ(cdn.status, 206);
  json::object stats = Stats();
  EXPECT_EQ(stats["hub"].as_object()["with_authorization"].to_number<int>(), 2);
  EXPECT_EQ(stats["cdn"].as_object()["with_authorization"].to_number<int>(), 0);
  EXPECT_EQ(stats["cdn"].as_object()["requests"].to_number<int>(), 1);

  // The counter does see a token sent to the CDN (so the check above can fail).
  Fetch(ok.Header("location"), "HEAD", {"Authorization: Bearer hf_secret"});
  EXPECT_EQ(Stats()["cdn"].as_object()["with_authorization"].to_number<int>(), 1);
}

TEST_F(HubSimTest, ErrorStatusFaultsCarryHubHeaders) {
  FaultConfig f;
  f.http500 = 1.0;
  f.max_faults = 1;
  sim_->SetFaults(f);
  EXPECT_EQ(Fetch(ResolveUrl(kSmall), "HEAD").status, 500);
  EXPECT_EQ(Fetch(ResolveUrl(kSmall), "HEAD").status, 200);  // budget spent
  EXPECT_EQ(FaultCount("http500"), 1u);

  // 503 only on the CDN.
  f = FaultConfig{};
  f.http503 = 1.0;
  f.on_hub = false;
  sim_->SetFaults(f);
  const std::string url = SignedUrl();
  EXPECT_EQ(Fetch(url, "GET", {"Range: bytes=0-9"}).status, 503);
  EXPECT_EQ(FaultCount("http503"), 1u);

  // 429 with the Hub's rate-limit headers, set through the control endpoint.
  const HttpResult post = Fetch(Hub("/_sim/faults"), "POST", {}, R"({"http429":1.0,"retry_after_s":7})");
  ASSERT_EQ(post.status, 200) << post.body;
  const HttpResult limited = Fetch(Hub(std::string("/api/models/") + kRepo));
  EXPECT_EQ(limited.status, 429);
  EXPECT_EQ(limited.Header("retry-after"), "7");
  EXPECT_EQ(limited.Header("ratelimit"), "\"api\";r=0;t=7");
  EXPECT_EQ(FaultCount("http429"), 1u);
  // Control requests are never faulted; reset restores the start config.
  EXPECT_EQ(Fetch(Hub("/_sim/reset"), "POST").status, 200);
  EXPECT_EQ(Fetch(Hub(std::string("/api/models/") + kRepo)).status, 200);
  EXPECT_EQ(FaultCount("total"), 0u);
  const HttpResult bad = Fetch(Hub("/_sim/faults"), "POST", {}, R"({"drop":2})");
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.Header("x-error-message").find("drop"), std::string::npos);
}

TEST_F(HubSimTest, FaultDecisionsAreDeterministicPerSeed) {
  auto pattern = [&](std::uint64_t seed) {
    FaultConfig f;
    f.seed = seed;
    f.http500 = 0.5;
    sim_->SetFaults(f);
    std::string s;
    for (int i = 0; i < 24; ++i) s += Fetch(ResolveUrl(kSmall), "HEAD").status == 500 ? 'x' : '.';
    return s;
  };
  const std::string a = pattern(9);
  EXPECT_EQ(a, pattern(9));
  EXPECT_NE(a.find('x'), std::string::npos);
  EXPECT_NE(a.find('.'), std::string::npos);
  EXPECT_NE(a, pattern(10));
}

TEST_F(HubSimTest, DropCutsTheBodyMidway) {
  FaultConfig f;
  f.drop = 1.0;
  sim_->SetFaults(f);
  const HttpResult r = Fetch(SignedUrl(), "GET", {"Range: bytes=0-99999"});
  EXPECT_EQ(r.code, CURLE_PARTIAL_FILE);
  EXPECT_EQ(r.body.size(), 50000u);
  EXPECT_EQ(FaultCount("drop"), 1u);
}

TEST_F(HubSimTest, CorruptFlipsExactlyOneByte) {
  const std::string bytes = testing::ReadFileText(kFixture + "/" + kLfs).substr(0, 100000);
  FaultConfig f;
  f.corrupt = 1.0;
  sim_->SetFaults(f);
  const HttpResult r = Fetch(SignedUrl(), "GET", {"Range: bytes=0-99999"});
  EXPECT_EQ(r.status, 206);
  ASSERT_EQ(r.body.size(), bytes.size());
  int diffs = 0;
  for (std::size_t i = 0; i < bytes.size(); ++i) diffs += bytes[i] != r.body[i];
  EXPECT_EQ(diffs, 1);
  EXPECT_EQ(FaultCount("corrupt"), 1u);
}

TEST_F(HubSimTest, IgnoreRangeAnswers200WithTheWholeFile) {
  FaultConfig f;
  f.ignore_range = 1.0;
  sim_->SetFaults(f);
  const HttpResult r = Fetch(SignedUrl(), "GET", {"Range: bytes=0-9"});
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body.size(), fs::file_size(kFixture + "/" + kLfs));
  EXPECT_TRUE(r.Header("content-range").empty());
}

TEST_F(HubSimTest, WrongContentRangeAndLongerBody) {
  FaultConfig f;
  f.wrong_content_range = 1.0;
  sim_->SetFaults(f);
  const std::string size = std::to_string(fs::file_size(kFixture + "/" + kLfs));
  const HttpResult wrong = Fetch(SignedUrl(), "GET", {"Range: bytes=100-199"});
  EXPECT_EQ(wrong.status, 206);
  EXPECT_EQ(wrong.Header("content-range"), "bytes 101-200/" + size);
  EXPECT_EQ(wrong.body.size(), 100u);

  f = FaultConfig{};
  f.body_longer = 1.0;
  sim_->SetFaults(f);
  const HttpResult longer = Fetch(SignedUrl(), "GET", {"Range: bytes=100-199"});
  EXPECT_EQ(longer.status, 206);
  EXPECT_EQ(longer.Header("content-range"), "bytes 100-199/" + size);
  EXPECT_EQ(longer.body.size(), 100u + 4096u);
  EXPECT_EQ(FaultCount("body_longer"), 1u);
}

TEST_F(HubSimTest, ThrottleSlowsTheBody) {
  FaultConfig f;
  f.throttle_bps = 128 * 1024;
  sim_->SetFaults(f);
  const std::string url = SignedUrl();
  const auto t0 = std::chrono::steady_clock::now();
  const HttpResult r = Fetch(url, "GET", {"Range: bytes=0-65535"});
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.status, 206);
  EXPECT_EQ(r.body.size(), 65536u);
  EXPECT_GE(s, 0.4);
  EXPECT_LT(s, 5.0);
  EXPECT_EQ(FaultCount("throttle"), 1u);
}

TEST_F(HubSimTest, HostileListingAndAbsurdSizes) {
  FaultConfig f;
  f.hostile_listing = true;
  f.absurd_sizes = true;
  sim_->SetFaults(f);
  const HttpResult tree = Fetch(Hub(std::string("/api/models/") + kRepo + "/tree/main?recursive=true&limit=1000"));
  ASSERT_EQ(tree.status, 200);
  std::set<std::string> paths;
  const json::value listing = Json(tree);
  for (const auto& e : listing.as_array()) {
    const json::object& o = e.as_object();
    paths.insert(std::string(o.at("path").as_string()));
    if (o.at("type").as_string() == "file" && o.at("path").as_string().starts_with("experts/")) {
      EXPECT_EQ(o.at("size").to_number<std::uint64_t>(), kAbsurdSize);
    }
  }
  EXPECT_TRUE(paths.count("../x"));
  EXPECT_TRUE(paths.count("/etc/passwd"));
  const HttpResult info = Fetch(Hub(std::string("/api/models/") + kRepo));
  EXPECT_NE(info.body.find("\"rfilename\":\"../x\""), std::string::npos);
  EXPECT_EQ(Fetch(ResolveUrl(kLfs), "HEAD").Header("x-linked-size"), std::to_string(kAbsurdSize));
  EXPECT_EQ(Fetch(ResolveUrl("../x"), "HEAD").status, 404);
  EXPECT_GE(FaultCount("hostile_listing"), 2u);
}

TEST_F(HubSimTest, ConcurrentRangeReadsOverKeepAlive) {
  const std::string bytes = testing::ReadFileText(kFixture + "/" + kLfs);
  const std::string url = SignedUrl();
  std::atomic<int> good{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      CURL* curl = curl_easy_init();  // one handle: requests reuse the connection
      for (int i = 0; i < 6; ++i) {
        const std::size_t first = static_cast<std::size_t>((t * 6 + i) * 30011) % (bytes.size() - 5000);
        std::string body;
        const std::string range = std::to_string(first) + "-" + std::to_string(first + 4999);
        curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
        curl_easy_setopt(curl, CURLOPT_RANGE, range.c_str());
        curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, OnBody);
        curl_easy_setopt(curl, CURLOPT_WRITEDATA, &body);
        curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
        long status = 0;
        if (curl_easy_perform(curl) == CURLE_OK && curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status) == CURLE_OK &&
            status == 206 && body == bytes.substr(first, 5000)) {
          ++good;
        }
      }
      curl_easy_cleanup(curl);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(good.load(), 48);
  EXPECT_EQ(Stats()["cdn"].as_object()["bytes_served"].to_number<int>(), 48 * 5000);
}

TEST(HubSimProcess, PrintsPortsServesAndStopsOnSigterm) {
  const std::string port_file = ::testing::TempDir() + "/hubsim_ports_" + std::to_string(::getpid());
  std::remove(port_file.c_str());
  const std::string bin = std::string(EXLR8_BIN_DIR) + "/exlr8-hubsim";
  const std::string repo_arg = std::string(kRepo) + "=" + kFixture;
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::execl(bin.c_str(), bin.c_str(), "--repo", repo_arg.c_str(), "--port-file", port_file.c_str(), "--seed", "3",
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  std::string line;
  for (int i = 0; i < 200 && line.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
    std::ifstream in(port_file);
    std::getline(in, line);
  }
  ASSERT_EQ(line.rfind("hub=http://127.0.0.1:", 0), 0u) << line;
  const std::size_t cdn = line.find(" cdn=http://127.0.0.2:");
  ASSERT_NE(cdn, std::string::npos) << line;
  const std::string hub = line.substr(4, cdn - 4);
  const HttpResult r = Fetch(hub + "/api/models/" + kRepo + "/revision/main");
  EXPECT_EQ(r.status, 200);
  EXPECT_NE(r.body.find("\"siblings\""), std::string::npos);
  ::kill(pid, SIGTERM);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  std::remove(port_file.c_str());
}

TEST(HubSimStart, RejectsBadOptions) {
  HubSimOptions o;
  EXPECT_EQ(HubSim::Start(o).status().code(), StatusCode::kInvalidArgument);
  o.repos = {{"bad id!", kFixture}};
  EXPECT_EQ(HubSim::Start(o).status().code(), StatusCode::kInvalidArgument);
  o.repos = {{"a/b", "/nonexistent/dir"}};
  EXPECT_EQ(HubSim::Start(o).status().code(), StatusCode::kNotFound);
  o.repos = {{"a/b", kFixture}, {"a/b", kFixture}};
  EXPECT_EQ(HubSim::Start(o).status().code(), StatusCode::kInvalidArgument);
  for (const char* bad : {"127.0.0.2:8080", "http://127.0.0.2:8080/", "http://h/?x", "ftp://h"}) {
    o.repos = {{"a/b", kFixture}};
    o.cdn_base = bad;
    EXPECT_EQ(HubSim::Start(o).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace exlr8::hubsim
