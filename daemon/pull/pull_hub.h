// Who answers a pull's questions about the release: the hub, or, when the
// hub cannot be reached, the cache alone (PullJob::Run's hub outages).
// Stateless: each call owns only its locals; a PullJob calls it on its
// Run() thread.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>

#include "daemon/cache/cache.h"
#include "daemon/hub/hub_client.h"
#include "daemon/pull/pull_job.h"
#include "format/status.h"

namespace exlr8 {

struct PullHub {
  // Open when the hub answered; null when the pull is served from the cache.
  std::unique_ptr<HubClient> hub;
  // Why the hub was not asked (then served from the cache): the network
  // error of resolving the revision.
  std::optional<Status> hub_error;
};

// Resolves the revision on the hub. When the cache knows the revision, the
// first resolve tries less (kProbeAttempts, kProbeConnectTimeout in
// pull_hub.cpp); if the hub cannot be reached (HubOutage) and the cache
// holds the rank complete at the commit the revision last resolved to, the
// result has no hub and carries hub_error. Otherwise the usual tries
// follow, and their error says what the cache lacks. A hub that answers
// no (401/403/404) is never worked around. `cancel` also ends the API calls
// (and their waits). REQUIRES: `cancel` outlives the HubClient.
Result<PullHub> OpenPullHub(Cache& cache, const PullOptions& opt, std::atomic<bool>* cancel);

// What the cache lacks of the rank at the commit the revision last resolved
// to, for a message; "" when it holds the rank complete.
Result<std::string> CachedRankLacks(Cache& cache, const PullOptions& opt);

}  // namespace exlr8
