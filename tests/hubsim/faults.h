// Fault injection of the hub simulator: what may go wrong, and the seeded,
// deterministic decision of whether it goes wrong for a given request.
//
// Each probability is in [0, 1]. A decision for request number n (counted
// per FaultPlan, in the order requests are decided) and fault kind k is
//   splitmix64(seed ^ k-salt ^ n * golden) / 2^64 < p
// so one seed always gives the same sequence of decisions for the same
// sequence of requests. With concurrent clients the interleaving (and hence
// which request gets which decision) follows the arrival order.
//
// Where each fault applies (hosts selects hub, cdn or both; `match`, when not
// empty, restricts faults to request targets containing that substring):
//   http500 / http503 / http429   any hub API or resolve request, any CDN
//                                 request (never /_sim/ control requests)
//   drop, corrupt, ignore_range,  responses that carry file bytes: GET
//   wrong_content_range,          /resolve/ of a regular file on the hub,
//   body_longer, throttle_bps     GET on the CDN
//   hostile_listing, absurd_sizes tree / model-info listings (and
//                                 X-Linked-Size / HEAD Content-Length for
//                                 absurd_sizes)
// max_faults (>= 0) caps the total number injected; -1 is unlimited. Useful
// for "fail once, then succeed" tests. every (>= 1) lets a kind hit only
// each every-th request it applies to (the every-th, 2 every-th, ...): with
// p = 1, every = 2 gives "good, bad, good, bad" for tests of what a client
// makes of alternating answers.
//
// JSON form (POST /_sim/faults, and FaultConfigToJson): every key optional,
// absent keys take the defaults below (the POST replaces the whole config):
//   {"seed":1,"drop":0,"corrupt":0,"http500":0,"http503":0,"http429":0,
//    "retry_after_s":1,"ignore_range":0,"throttle_bps":0,
//    "wrong_content_range":0,"body_longer":0,"hostile_listing":false,
//    "absurd_sizes":false,"hosts":"both","match":"","max_faults":-1,
//    "every":1}
//
// Thread rules: FaultConfig is a value. FaultPlan is internally locked; all
// methods may be called from any thread.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

#include "format/status.h"

namespace exlr8::hubsim {

enum class Host : std::uint8_t { kHub = 0, kCdn = 1 };

enum class FaultKind : std::uint8_t {
  kDrop = 0,            // close the connection after about half the body
  kCorrupt,             // flip one byte of the body
  kHttp500,
  kHttp503,
  kHttp429,             // with Retry-After and RateLimit headers
  kIgnoreRange,         // 200 with the whole file instead of 206
  kWrongContentRange,   // 206 whose Content-Range names other bytes
  kBodyLonger,          // 206 with more bytes than asked (then close)
  kThrottle,            // counted when a throttled body is served
  kHostileListing,      // counted per listing that carried bad names
  kAbsurdSize,          // counted per response that carried absurd sizes
};
inline constexpr int kFaultKindCount = 11;
std::string_view FaultKindName(FaultKind kind);

struct FaultConfig {
  std::uint64_t seed = 1;
  double drop = 0;
  double corrupt = 0;
  double http500 = 0;
  double http503 = 0;
  double http429 = 0;
  std::uint32_t retry_after_s = 1;
  double ignore_range = 0;
  std::uint64_t throttle_bps = 0;  // 0: full speed
  double wrong_content_range = 0;
  double body_longer = 0;
  bool hostile_listing = false;
  bool absurd_sizes = false;
  bool on_hub = true;
  bool on_cdn = true;
  std::string match;
  std::int64_t max_faults = -1;
  std::uint32_t every = 1;
};

// Errors: InvalidArgument naming the key (bad JSON, wrong type, probability
// outside [0,1], unknown "hosts" value, unknown key).
Result<FaultConfig> ParseFaultConfigJson(std::string_view json);
std::string FaultConfigToJson(const FaultConfig& config);

// The sizes reported when absurd_sizes is on: 2^63 - 1.
inline constexpr std::uint64_t kAbsurdSize = 0x7fffffffffffffffull;

class FaultPlan {
 public:
  explicit FaultPlan(FaultConfig config) : config_(std::move(config)) {}

  // Replaces the config and restarts the decision sequence.
  void Set(FaultConfig config);
  FaultConfig Get() const;

  // True when fault `kind` should hit this request. Consumes one decision
  // (even when the probability is 0, so that sequences stay aligned).
  // Counts the injected fault when true.
  bool Decide(FaultKind kind, Host host, std::string_view target);
  // A deterministic value in [0, bound) for where a fault lands (which byte
  // to flip). REQUIRES: bound > 0.
  std::uint64_t Pick(std::uint64_t bound);
  // Counts a fault that is not probabilistic (throttle, hostile listing).
  void Count(FaultKind kind);

  std::uint64_t injected(FaultKind kind) const;
  std::uint64_t injected_total() const;
  void ResetCounters();

  // Whether faults apply to this host and target at all.
  bool Applies(Host host, std::string_view target) const;

 private:
  std::uint64_t NextLocked();
  mutable std::mutex mu_;
  FaultConfig config_;           // guarded by mu_
  std::uint64_t sequence_ = 0;   // guarded by mu_
  std::uint64_t counts_[kFaultKindCount] = {};  // guarded by mu_
  std::uint64_t applied_[kFaultKindCount] = {};  // decisions that applied, per kind; guarded by mu_
};

}  // namespace exlr8::hubsim
