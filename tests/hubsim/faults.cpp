#include "tests/hubsim/faults.h"

#include <boost/json.hpp>

#include <algorithm>
#include <array>
#include <iterator>

namespace exlr8::hubsim {
namespace {

namespace json = boost::json;

std::uint64_t SplitMix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

constexpr std::array<std::string_view, kFaultKindCount> kNames = {
    "drop",       "corrupt",             "http500",     "http503",         "http429",
    "ignore_range", "wrong_content_range", "body_longer", "throttle",        "hostile_listing",
    "absurd_size"};
static_assert(kNames.size() == kFaultKindCount);

Result<double> GetNumber(const json::value& v, std::string_view key) {
  if (v.is_double()) return v.get_double();
  if (v.is_int64()) return static_cast<double>(v.get_int64());
  if (v.is_uint64()) return static_cast<double>(v.get_uint64());
  return InvalidArgumentError("faults: key '" + std::string(key) + "' must be a number");
}

Result<double> GetProbability(const json::value& v, std::string_view key) {
  EXLR8_ASSIGN_OR_RETURN(double p, GetNumber(v, key));
  if (!(p >= 0.0 && p <= 1.0)) {
    return InvalidArgumentError("faults: key '" + std::string(key) + "' = " + std::to_string(p) +
                                ", expected a probability in [0, 1]");
  }
  return p;
}

Result<std::uint64_t> GetU64(const json::value& v, std::string_view key) {
  if (v.is_uint64()) return v.get_uint64();
  if (v.is_int64() && v.get_int64() >= 0) return static_cast<std::uint64_t>(v.get_int64());
  return InvalidArgumentError("faults: key '" + std::string(key) + "' must be a non-negative integer");
}

}  // namespace

std::string_view FaultKindName(FaultKind kind) { return kNames[static_cast<std::size_t>(kind)]; }

Result<FaultConfig> ParseFaultConfigJson(std::string_view text) {
  boost::system::error_code ec;
  json::value root = json::parse(json::string_view(text.data(), text.size()), ec);
  if (ec) return InvalidArgumentError("faults: body is not JSON: " + ec.message());
  if (!root.is_object()) return InvalidArgumentError("faults: body must be a JSON object");
  FaultConfig c;
  for (const auto& kv : root.get_object()) {
    const std::string key(kv.key());
    const json::value& v = kv.value();
    if (key == "seed") {
      EXLR8_ASSIGN_OR_RETURN(c.seed, GetU64(v, key));
    } else if (key == "drop") {
      EXLR8_ASSIGN_OR_RETURN(c.drop, GetProbability(v, key));
    } else if (key == "corrupt") {
      EXLR8_ASSIGN_OR_RETURN(c.corrupt, GetProbability(v, key));
    } else if (key == "http500") {
      EXLR8_ASSIGN_OR_RETURN(c.http500, GetProbability(v, key));
    } else if (key == "http503") {
      EXLR8_ASSIGN_OR_RETURN(c.http503, GetProbability(v, key));
    } else if (key == "http429") {
      EXLR8_ASSIGN_OR_RETURN(c.http429, GetProbability(v, key));
    } else if (key == "retry_after_s") {
      EXLR8_ASSIGN_OR_RETURN(std::uint64_t s, GetU64(v, key));
      if (s > 86400) return InvalidArgumentError("faults: retry_after_s > 86400");
      c.retry_after_s = static_cast<std::uint32_t>(s);
    } else if (key == "ignore_range") {
      EXLR8_ASSIGN_OR_RETURN(c.ignore_range, GetProbability(v, key));
    } else if (key == "throttle_bps") {
      EXLR8_ASSIGN_OR_RETURN(c.throttle_bps, GetU64(v, key));
    } else if (key == "wrong_content_range") {
      EXLR8_ASSIGN_OR_RETURN(c.wrong_content_range, GetProbability(v, key));
    } else if (key == "body_longer") {
      EXLR8_ASSIGN_OR_RETURN(c.body_longer, GetProbability(v, key));
    } else if (key == "hostile_listing" || key == "absurd_sizes") {
      if (!v.is_bool()) return InvalidArgumentError("faults: key '" + key + "' must be a boolean");
      (key == "hostile_listing" ? c.hostile_listing : c.absurd_sizes) = v.get_bool();
    } else if (key == "hosts") {
      const json::string* s = v.if_string();
      if (s == nullptr || (*s != "hub" && *s != "cdn" && *s != "both")) {
        return InvalidArgumentError("faults: key 'hosts' must be \"hub\", \"cdn\" or \"both\"");
      }
      c.on_hub = *s != "cdn";
      c.on_cdn = *s != "hub";
    } else if (key == "match") {
      const json::string* s = v.if_string();
      if (s == nullptr) return InvalidArgumentError("faults: key 'match' must be a string");
      c.match = std::string(s->data(), s->size());
    } else if (key == "max_faults") {
      if (!v.is_int64() && !v.is_uint64()) return InvalidArgumentError("faults: key 'max_faults' must be an integer");
      c.max_faults = v.is_int64() ? v.get_int64() : static_cast<std::int64_t>(v.get_uint64() >> 1);
    } else if (key == "every") {
      EXLR8_ASSIGN_OR_RETURN(std::uint64_t n, GetU64(v, key));
      if (n < 1 || n > UINT32_MAX) return InvalidArgumentError("faults: key 'every' must be in [1, 2^32)");
      c.every = static_cast<std::uint32_t>(n);
    } else if (key == "url_ttl_s" || key == "expire_urls_now") {
      // Server actions carried in the same request; handled by the server.
    } else {
      return InvalidArgumentError("faults: unknown key '" + key + "'");
    }
  }
  return c;
}

std::string FaultConfigToJson(const FaultConfig& c) {
  json::object o;
  o["seed"] = c.seed;
  o["drop"] = c.drop;
  o["corrupt"] = c.corrupt;
  o["http500"] = c.http500;
  o["http503"] = c.http503;
  o["http429"] = c.http429;
  o["retry_after_s"] = c.retry_after_s;
  o["ignore_range"] = c.ignore_range;
  o["throttle_bps"] = c.throttle_bps;
  o["wrong_content_range"] = c.wrong_content_range;
  o["body_longer"] = c.body_longer;
  o["hostile_listing"] = c.hostile_listing;
  o["absurd_sizes"] = c.absurd_sizes;
  o["hosts"] = c.on_hub && c.on_cdn ? "both" : (c.on_hub ? "hub" : "cdn");
  o["match"] = c.match;
  o["max_faults"] = c.max_faults;
  o["every"] = c.every;
  return json::serialize(o);
}

void FaultPlan::Set(FaultConfig config) {
  std::lock_guard lock(mu_);
  config_ = std::move(config);
  sequence_ = 0;
  std::fill(std::begin(applied_), std::end(applied_), 0);
}

FaultConfig FaultPlan::Get() const {
  std::lock_guard lock(mu_);
  return config_;
}

bool FaultPlan::Applies(Host host, std::string_view target) const {
  std::lock_guard lock(mu_);
  if (host == Host::kHub ? !config_.on_hub : !config_.on_cdn) return false;
  return config_.match.empty() || target.find(config_.match) != std::string_view::npos;
}

std::uint64_t FaultPlan::NextLocked() {
  const std::uint64_t n = sequence_++;
  return SplitMix64(config_.seed ^ SplitMix64(n * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull));
}

bool FaultPlan::Decide(FaultKind kind, Host host, std::string_view target) {
  const bool applies = Applies(host, target);
  std::lock_guard lock(mu_);
  const std::uint64_t r = NextLocked() ^ SplitMix64(static_cast<std::uint64_t>(kind) + 1);
  double p = 0;
  switch (kind) {
    case FaultKind::kDrop: p = config_.drop; break;
    case FaultKind::kCorrupt: p = config_.corrupt; break;
    case FaultKind::kHttp500: p = config_.http500; break;
    case FaultKind::kHttp503: p = config_.http503; break;
    case FaultKind::kHttp429: p = config_.http429; break;
    case FaultKind::kIgnoreRange: p = config_.ignore_range; break;
    case FaultKind::kWrongContentRange: p = config_.wrong_content_range; break;
    case FaultKind::kBodyLonger: p = config_.body_longer; break;
    default: p = 0; break;
  }
  if (!applies || p <= 0) return false;
  if (++applied_[static_cast<std::size_t>(kind)] % std::max<std::uint32_t>(config_.every, 1) != 0) return false;
  std::uint64_t total = 0;
  for (auto n : counts_) total += n;
  if (config_.max_faults >= 0 && total >= static_cast<std::uint64_t>(config_.max_faults)) return false;
  // 53 random bits -> [0, 1).
  const double u = static_cast<double>(r >> 11) * (1.0 / 9007199254740992.0);
  if (u >= p) return false;
  ++counts_[static_cast<std::size_t>(kind)];
  return true;
}

std::uint64_t FaultPlan::Pick(std::uint64_t bound) {
  std::lock_guard lock(mu_);
  return NextLocked() % bound;
}

void FaultPlan::Count(FaultKind kind) {
  std::lock_guard lock(mu_);
  ++counts_[static_cast<std::size_t>(kind)];
}

std::uint64_t FaultPlan::injected(FaultKind kind) const {
  std::lock_guard lock(mu_);
  return counts_[static_cast<std::size_t>(kind)];
}

std::uint64_t FaultPlan::injected_total() const {
  std::lock_guard lock(mu_);
  std::uint64_t total = 0;
  for (auto n : counts_) total += n;
  return total;
}

void FaultPlan::ResetCounters() {
  std::lock_guard lock(mu_);
  for (auto& n : counts_) n = 0;
  sequence_ = 0;
}

}  // namespace exlr8::hubsim
