// Pure helpers of the hub simulator: Range parsing, percent coding, queries,
// fault config JSON and the deterministic fault plan.
#include "tests/hubsim/http_util.h"

#include <gtest/gtest.h>

#include "tests/hubsim/faults.h"
#include "tests/hubsim/url_signer.h"

namespace exlr8::hubsim {
namespace {

using Kind = ByteRange::Kind;

TEST(ParseRangeHeader, SingleRangesAreClampedToTheFile) {
  ByteRange r = ParseRangeHeader("bytes=0-99", 1000);
  EXPECT_EQ(r.kind, Kind::kSingle);
  EXPECT_EQ(r.first, 0u);
  EXPECT_EQ(r.last, 99u);
  r = ParseRangeHeader("bytes=0-100000", 10);  // get_safetensors_metadata's probe
  EXPECT_EQ(r.kind, Kind::kSingle);
  EXPECT_EQ(r.last, 9u);
  r = ParseRangeHeader("bytes=990-", 1000);
  EXPECT_EQ(r.first, 990u);
  EXPECT_EQ(r.last, 999u);
  r = ParseRangeHeader("bytes=-10", 1000);
  EXPECT_EQ(r.first, 990u);
  EXPECT_EQ(r.length(), 10u);
  r = ParseRangeHeader("bytes=-5000", 1000);
  EXPECT_EQ(r.first, 0u);
  EXPECT_EQ(r.last, 999u);
}

TEST(ParseRangeHeader, UnsatisfiableAndMulti) {
  EXPECT_EQ(ParseRangeHeader("bytes=1000-", 1000).kind, Kind::kUnsatisfiable);
  EXPECT_EQ(ParseRangeHeader("bytes=5000-6000", 1000).kind, Kind::kUnsatisfiable);
  EXPECT_EQ(ParseRangeHeader("bytes=-0", 1000).kind, Kind::kUnsatisfiable);
  EXPECT_EQ(ParseRangeHeader("bytes=0-0", 0).kind, Kind::kUnsatisfiable);
  EXPECT_EQ(ParseRangeHeader("bytes=0-1,5-6", 1000).kind, Kind::kMulti);
}

TEST(ParseRangeHeader, BadSyntaxIsIgnored) {
  EXPECT_EQ(ParseRangeHeader("items=0-1", 1000).kind, Kind::kNone);
  EXPECT_EQ(ParseRangeHeader("bytes=5-1", 1000).kind, Kind::kNone);
  EXPECT_EQ(ParseRangeHeader("bytes=a-b", 1000).kind, Kind::kNone);
  EXPECT_EQ(ParseRangeHeader("bytes=99999999999999999999999-", 1000).kind, Kind::kNone);
  EXPECT_EQ(ParseRangeHeader("bytes=", 1000).kind, Kind::kNone);
}

TEST(PercentCoding, RoundTripAndErrors) {
  EXPECT_EQ(PercentEncode("a b/c%", true), "a%20b/c%25");
  EXPECT_EQ(PercentEncode("refs/pr/1", false), "refs%2Fpr%2F1");
  EXPECT_EQ(PercentDecode("refs%2Fpr%2F1").value(), "refs/pr/1");
  EXPECT_FALSE(PercentDecode("%4").has_value());
  EXPECT_FALSE(PercentDecode("%zz").has_value());
  EXPECT_FALSE(PercentDecode("a%00b").has_value());
}

TEST(ParseQuery, DecodesPairs) {
  auto q = ParseQuery("recursive=True&cursor=50&x=a%20b&flag");
  EXPECT_EQ(q["recursive"], "True");
  EXPECT_EQ(q["cursor"], "50");
  EXPECT_EQ(q["x"], "a b");
  EXPECT_EQ(q.count("flag"), 1u);
}

TEST(FaultConfigJson, ParsesAndRejectsByKey) {
  auto c = ParseFaultConfigJson(R"({"seed":7,"drop":0.5,"hosts":"cdn","max_faults":2,"throttle_bps":1000})");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->seed, 7u);
  EXPECT_DOUBLE_EQ(c->drop, 0.5);
  EXPECT_FALSE(c->on_hub);
  EXPECT_TRUE(c->on_cdn);
  EXPECT_EQ(c->max_faults, 2);
  auto round = ParseFaultConfigJson(FaultConfigToJson(*c));
  ASSERT_TRUE(round.ok());
  EXPECT_EQ(round->throttle_bps, 1000u);

  auto bad = ParseFaultConfigJson(R"({"drop":1.5})");
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("drop"), std::string::npos);
  EXPECT_EQ(ParseFaultConfigJson(R"({"dorp":0.1})").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseFaultConfigJson("[1]").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseFaultConfigJson("{").status().code(), StatusCode::kInvalidArgument);
}

TEST(FaultPlan, SameSeedSameDecisions) {
  FaultConfig c;
  c.seed = 42;
  c.corrupt = 0.3;
  auto run = [&](FaultConfig cfg) {
    FaultPlan plan(cfg);
    std::string bits;
    for (int i = 0; i < 200; ++i) bits += plan.Decide(FaultKind::kCorrupt, Host::kCdn, "/x") ? '1' : '0';
    return bits;
  };
  const std::string a = run(c);
  EXPECT_EQ(a, run(c));
  const auto ones = std::count(a.begin(), a.end(), '1');
  EXPECT_GT(ones, 30);  // ~60 expected
  EXPECT_LT(ones, 95);
  c.seed = 43;
  EXPECT_NE(a, run(c));
}

TEST(FaultPlan, HostsMatchAndCap) {
  FaultConfig c;
  c.http500 = 1.0;
  c.on_hub = false;
  c.match = "k2";
  c.max_faults = 2;
  FaultPlan plan(c);
  EXPECT_FALSE(plan.Decide(FaultKind::kHttp500, Host::kHub, "/a/k2"));
  EXPECT_FALSE(plan.Decide(FaultKind::kHttp500, Host::kCdn, "/a/k3"));
  EXPECT_TRUE(plan.Decide(FaultKind::kHttp500, Host::kCdn, "/a/k2"));
  EXPECT_TRUE(plan.Decide(FaultKind::kHttp500, Host::kCdn, "/a/k2"));
  EXPECT_FALSE(plan.Decide(FaultKind::kHttp500, Host::kCdn, "/a/k2"));  // capped
  EXPECT_EQ(plan.injected(FaultKind::kHttp500), 2u);
}

TEST(FaultPlan, EveryNthApplicableRequest) {
  FaultConfig c;
  c.corrupt = 1.0;
  c.match = "k3";
  c.every = 2;
  FaultPlan plan(c);
  std::string bits;
  for (int i = 0; i < 6; ++i) {
    EXPECT_FALSE(plan.Decide(FaultKind::kCorrupt, Host::kCdn, "/a/k2"));  // not counted: does not apply
    bits += plan.Decide(FaultKind::kCorrupt, Host::kCdn, "/a/k3") ? '1' : '0';
  }
  EXPECT_EQ(bits, "010101");
  auto parsed = ParseFaultConfigJson(FaultConfigToJson(c));
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ(parsed->every, 2u);
  EXPECT_FALSE(ParseFaultConfigJson(R"({"every":0})").ok());
}

TEST(UrlSigner, VerifiesExpiresAndRevokes) {
  UrlSigner s;
  const std::string sig = s.Sign("org/x/abc/f.safetensors", 1000);
  EXPECT_EQ(sig.size(), 64u);
  EXPECT_EQ(s.Verify("org/x/abc/f.safetensors", 1000, sig, 999), UrlSigner::Verdict::kOk);
  EXPECT_EQ(s.Verify("org/x/abc/f.safetensors", 1000, sig, 1001), UrlSigner::Verdict::kExpired);
  EXPECT_EQ(s.Verify("org/x/abc/g.safetensors", 1000, sig, 999), UrlSigner::Verdict::kBadSignature);
  EXPECT_EQ(s.Verify("org/x/abc/f.safetensors", 2000, sig, 999), UrlSigner::Verdict::kBadSignature);
  s.RevokeAll();
  EXPECT_EQ(s.Verify("org/x/abc/f.safetensors", 1000, sig, 999), UrlSigner::Verdict::kExpired);
  EXPECT_EQ(s.Verify("org/x/abc/f.safetensors", 1000, s.Sign("org/x/abc/f.safetensors", 1000), 999),
            UrlSigner::Verdict::kOk);
}

}  // namespace
}  // namespace exlr8::hubsim
