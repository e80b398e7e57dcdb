#include "daemon/pull/pull_hub.h"

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "daemon/base/posix.h"
#include "daemon/cache/cached_rank.h"
#include "format/layout.h"
#include "format/manifest.h"

namespace exlr8 {

namespace {

// The first resolve of a revision the cache knows: at most this many tries,
// each connecting for at most this long, before the cache is asked whether
// it holds the rank. With the hub down that is about a second (refused) or
// 16 s (a host that never answers) instead of ~6 s or ~60 s; the
// extra tries bridge a blip (a reset, a restarting gateway) of about a
// second. A rank the cache cannot serve gets the usual tries after these.
constexpr int kProbeAttempts = 3;
constexpr std::chrono::milliseconds kProbeConnectTimeout{5000};

}  // namespace

Result<std::string> CachedRankLacks(Cache& cache, const PullOptions& opt) {
  if (opt.manifest.empty()) {  // the whole fileset
    EXLR8_ASSIGN_OR_RETURN(WholeFilesetStatus st, CheckWholeFilesetStatus(cache, opt.repo, opt.revision));
    if (st.complete()) return std::string();
    return "the whole fileset is not complete there (" + std::to_string(st.files_verified) + " of " +
           std::to_string(st.files) + " files verified): " + st.first_missing;
  }
  Result<RankStatus> st = CheckRankStatus(cache, opt.repo, opt.revision, opt.manifest, opt.tp, opt.rank);
  // A manifest the release does not have may be a local file, as for the
  // pull itself (and `exlr8d status`).
  std::error_code ec;
  if (!st.ok() && st.status().code() == StatusCode::kNotFound && opt.allow_local_manifest &&
      !IsManifestName(opt.manifest) && std::filesystem::is_regular_file(opt.manifest, ec)) {
    EXLR8_ASSIGN_OR_RETURN(std::string text, ReadSmallFile(opt.manifest, kMaxManifestBytes));
    st = CheckRankStatus(cache, opt.repo, opt.revision, opt.manifest, opt.tp, opt.rank, &text);
  }
  EXLR8_RETURN_IF_ERROR(st.status());
  if (st->complete()) return std::string();
  const auto of = [](std::uint64_t have, std::uint64_t all, const char* what) {
    return std::to_string(have) + " of " + std::to_string(all) + " " + what;
  };
  std::string lacks = "TP " + std::to_string(opt.tp) + " rank " + std::to_string(opt.rank) + " of manifest " +
                      opt.manifest + " is not complete there";
  if (st->planned)
    lacks += " (" + of(st->files_verified, st->files, "whole files") + ", " +
             of(st->headers_verified, st->headers, "headers") + ", " +
             of(st->halves_verified, st->halves, "halves") + " verified)";
  return lacks + ": " + st->first_missing;
}

Result<PullHub> OpenPullHub(Cache& cache, const PullOptions& opt, std::atomic<bool>* cancel) {
  PullHub out;
  HubOptions hub_options = opt.hub;
  hub_options.cancel = cancel;  // a cancel also ends the API calls (their waits too)
  const Result<std::string> cached = cache.LookupCommit(opt.repo, opt.revision);
  if (!cached.ok()) {  // nothing to serve without the hub
    EXLR8_ASSIGN_OR_RETURN(out.hub, HubClient::Open(hub_options, opt.repo, opt.revision));
    return out;
  }
  HubOptions probe = hub_options;  // the resolve tries less; the client, once open, as usual
  probe.resolve_max_attempts = std::min(probe.max_attempts, kProbeAttempts);
  probe.resolve_connect_timeout =
      std::min<std::chrono::milliseconds>(probe.connect_timeout, kProbeConnectTimeout);
  HubOutage outage = HubOutage::kNone;
  Result<std::unique_ptr<HubClient>> opened = HubClient::Open(probe, opt.repo, opt.revision, &outage);
  if (opened.ok()) {
    out.hub = std::move(opened).value();
    return out;
  }
  std::string note;  // why the cache cannot serve the rank instead
  if (outage != HubOutage::kNone) {
    Result<std::string> lacks = CachedRankLacks(cache, opt);
    if (lacks.ok() && lacks->empty()) {
      out.hub_error = opened.status();
      return out;
    }
    note =
        "not served from the cache: it holds commit " + *cached + " for " + opt.revision + ", but " +
        (lacks.ok() ? *lacks : "cannot tell whether it holds the rank (" + lacks.status().ToString() + ")");
  } else if (opened.status().code() != StatusCode::kIOError &&
             opened.status().code() != StatusCode::kUnavailable) {
    return opened.status();  // an answer another try would not change (401, 404, ...), or a cancel
  }
  // The hub is needed: the usual tries.
  opened = HubClient::Open(hub_options, opt.repo, opt.revision, &outage);
  if (!opened.ok()) {
    if (note.empty() || outage == HubOutage::kNone) return opened.status();
    return Status(opened.status().code(), opened.status().message() + "; " + note);
  }
  out.hub = std::move(opened).value();
  return out;
}

}  // namespace exlr8
