// Unit tests of AnswerChecker (daemon/hub/answer_checker.h): heads, bodies
// and transfer ends in, verdicts out; no server, no clock.
#include "daemon/hub/answer_checker.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

namespace exlr8 {
namespace {

constexpr std::string_view kCommit = "0123456789abcdef0123456789abcdef01234567";
// The wall time every answer is judged at: Tue, 14 Nov 2023 22:13:20 GMT.
const std::chrono::system_clock::time_point kNow{std::chrono::seconds(1'700'000'000)};

RangeExpectation Want(std::uint64_t offset, std::uint64_t length, std::uint64_t delivered = 0) {
  RangeExpectation w;
  w.offset = offset;
  w.length = length;
  w.delivered = delivered;
  w.pinned_commit = kCommit;
  return w;
}

ResponseHead Head(const std::vector<std::string>& lines) {
  ResponseHead h;
  for (const std::string& l : lines) h.AddLine(l);
  return h;
}

// Feeds `chunks` the way RangeFetcher does; returns the bytes taken and
// whether the last chunk cut the transfer.
struct Fed {
  std::uint64_t taken = 0, skipped = 0, beyond = 0;
  bool cut = false;
};
Fed Feed(AnswerChecker& c, const std::vector<std::size_t>& chunks) {
  Fed f;
  for (std::size_t n : chunks) {
    c.CountBody(n);
    const AnswerChecker::Slice s = c.Plan(n);
    EXPECT_EQ(s.skip + s.take + s.beyond, n);
    c.Accept(s);
    f.taken += s.take;
    f.skipped += s.skip;
    f.beyond += s.beyond;
    if (s.cut) {
      f.cut = true;
      break;
    }
  }
  return f;
}

TEST(AnswerCheckerTest, AsksForTheRestAfterEarlierTries) {
  AnswerChecker c(Want(1000, 100, 40));
  EXPECT_EQ(c.first(), 1040u);
  EXPECT_EQ(c.last(), 1099u);
  EXPECT_EQ(c.next_offset(), 1040u);
}

TEST(AnswerCheckerTest, ExactRangeAnswerCompletes) {
  AnswerChecker c(Want(100, 50));
  const ResponseHead h =
      Head({"HTTP/1.1 206 Partial Content", "Content-Range: bytes 100-149/1000", "Content-Length: 50"});
  EXPECT_EQ(c.CheckHead(h), AnswerChecker::Head::kRange);
  const Fed f = Feed(c, {20, 30});
  EXPECT_EQ(f.taken, 50u);
  EXPECT_FALSE(f.cut);  // the body's announced end: nothing to cut
  EXPECT_TRUE(c.complete());
  EXPECT_EQ(c.Finish(h, {}, "r", kNow).kind, AnswerVerdict::Kind::kComplete);
}

TEST(AnswerCheckerTest, WrongContentRangeIsABadAnswerNamingTheHeaderAndValue) {
  AnswerChecker c(Want(100, 50));
  const ResponseHead h = Head({"HTTP/1.1 206 Partial Content", "Content-Range: bytes 0-49/1000"});
  EXPECT_EQ(c.CheckHead(h), AnswerChecker::Head::kBad);
  EXPECT_TRUE(c.bad_answer());
  const AnswerVerdict v = c.Finish(h, {false, false, "write error"}, "r", kNow);
  EXPECT_EQ(v.kind, AnswerVerdict::Kind::kRetry);
  EXPECT_TRUE(v.bad_answer);
  EXPECT_EQ(v.status.code(), StatusCode::kCorruption);
  EXPECT_NE(v.status.message().find("Content-Range 'bytes 0-49/1000'"), std::string::npos)
      << v.status.ToString();
  EXPECT_NE(v.status.message().find("bytes=100-149"), std::string::npos) << v.status.ToString();
}

TEST(AnswerCheckerTest, ContentRangeTotalMustBeTheResolvedSize) {
  RangeExpectation w = Want(0, 10);
  w.file_size = 500;
  AnswerChecker c(w);
  EXPECT_EQ(c.CheckHead(Head({"HTTP/1.1 206 x", "Content-Range: bytes 0-9/501"})), AnswerChecker::Head::kBad);
  EXPECT_NE(c.error().message().find("for a file of 500 bytes"), std::string::npos) << c.error().ToString();
  AnswerChecker unknown_total(w);
  EXPECT_EQ(unknown_total.CheckHead(Head({"HTTP/1.1 206 x", "Content-Range: bytes 0-9/*"})),
            AnswerChecker::Head::kRange);
}

TEST(AnswerCheckerTest, CompressedBodyIsABadAnswerNamingTheEncoding) {
  AnswerChecker c(Want(0, 10));
  EXPECT_EQ(c.CheckHead(Head({"HTTP/1.1 206 x", "Content-Range: bytes 0-9/10", "Content-Encoding: gzip"})),
            AnswerChecker::Head::kBad);
  EXPECT_NE(c.error().message().find("Content-Encoding 'gzip'"), std::string::npos) << c.error().ToString();
  AnswerChecker identity(Want(0, 10));
  EXPECT_EQ(identity.CheckHead(
                Head({"HTTP/1.1 206 x", "Content-Range: bytes 0-9/10", "Content-Encoding: identity"})),
            AnswerChecker::Head::kRange);
}

TEST(AnswerCheckerTest, HubAnsweringForAnotherCommitIsABadAnswer) {
  RangeExpectation w = Want(0, 10);
  w.on_hub = true;
  AnswerChecker c(w);
  EXPECT_EQ(c.CheckHead(Head({"HTTP/1.1 200 OK", "X-Repo-Commit: ffff"})), AnswerChecker::Head::kBad);
  EXPECT_NE(c.error().message().find("commit 'ffff', pinned " + std::string(kCommit)), std::string::npos);
  // A CDN's X-Repo-Commit is not the hub's word: not checked.
  AnswerChecker cdn(Want(0, 10));
  EXPECT_EQ(cdn.CheckHead(Head({"HTTP/1.1 200 OK", "X-Repo-Commit: ffff"})), AnswerChecker::Head::kWholeFile);
  AnswerChecker same(w);
  EXPECT_EQ(same.CheckHead(Head({"HTTP/1.1 200 OK", "X-Repo-Commit: " + std::string(kCommit)})),
            AnswerChecker::Head::kWholeFile);
}

TEST(AnswerCheckerTest, WholeFileAnswerSkipsToTheRangeAndCutsAfterIt) {
  AnswerChecker c(Want(100, 50));
  const ResponseHead h = Head({"HTTP/1.1 200 OK", "Content-Length: 1000"});
  EXPECT_EQ(c.CheckHead(h), AnswerChecker::Head::kWholeFile);
  const Fed f = Feed(c, {60, 60, 60, 60});
  EXPECT_EQ(f.skipped, 100u);
  EXPECT_EQ(f.taken, 50u);
  EXPECT_EQ(f.beyond, 30u);  // the third chunk ends 30 bytes past the range
  EXPECT_TRUE(f.cut);
  EXPECT_FALSE(c.overlong());  // a 200 is not an overlong 206
  EXPECT_EQ(c.Finish(h, {false, false, "cut"}, "r", kNow).kind, AnswerVerdict::Kind::kComplete);
}

TEST(AnswerCheckerTest, WholeFileAnswerEndingExactlyAtTheRangeIsCut) {
  AnswerChecker c(Want(0, 50));
  ASSERT_EQ(c.CheckHead(Head({"HTTP/1.1 200 OK", "Content-Length: 1000"})), AnswerChecker::Head::kWholeFile);
  const Fed f = Feed(c, {50});
  EXPECT_TRUE(f.cut);
  EXPECT_EQ(f.taken, 50u);
}

TEST(AnswerCheckerTest, OverlongBodyIsCutAtTheRangesEnd) {
  AnswerChecker c(Want(0, 50));
  ASSERT_EQ(c.CheckHead(Head({"HTTP/1.1 206 x", "Content-Range: bytes 0-49/100"})),
            AnswerChecker::Head::kRange);
  const Fed f = Feed(c, {40, 40});
  EXPECT_EQ(f.taken, 50u);
  EXPECT_EQ(f.beyond, 30u);
  EXPECT_TRUE(f.cut);
  EXPECT_TRUE(c.overlong());
}

TEST(AnswerCheckerTest, AnnouncedOverlongOrUnsizedBodyIsCutOnceTheRangeIsWhole) {
  AnswerChecker announced(Want(0, 50));
  ASSERT_EQ(
      announced.CheckHead(Head({"HTTP/1.1 206 x", "Content-Range: bytes 0-49/100", "Content-Length: 80"})),
      AnswerChecker::Head::kRange);
  EXPECT_TRUE(announced.overlong());
  EXPECT_TRUE(Feed(announced, {50}).cut);
  // No Content-Length: nothing but the range says where the body ends.
  AnswerChecker unsized(Want(0, 50));
  ASSERT_EQ(unsized.CheckHead(Head({"HTTP/1.1 206 x", "Content-Range: bytes 0-49/100"})),
            AnswerChecker::Head::kRange);
  EXPECT_TRUE(Feed(unsized, {50}).cut);
  EXPECT_FALSE(unsized.overlong());
}

TEST(AnswerCheckerTest, ShortBodyIsRetriedAsABadAnswerCountingEveryTry) {
  AnswerChecker c(Want(0, 100, 30));  // 30 bytes came in an earlier try
  const ResponseHead h = Head({"HTTP/1.1 206 x", "Content-Range: bytes 30-99/100", "Content-Length: 70"});
  ASSERT_EQ(c.CheckHead(h), AnswerChecker::Head::kRange);
  Feed(c, {20});
  const AnswerVerdict clean_end = c.Finish(h, {}, "r", kNow);
  EXPECT_EQ(clean_end.kind, AnswerVerdict::Kind::kRetry);
  EXPECT_TRUE(clean_end.bad_answer);
  EXPECT_EQ(clean_end.status.message(), "short body after 50 of 100 bytes");
  const AnswerVerdict reset = c.Finish(h, {false, false, "Connection reset"}, "r", kNow);
  EXPECT_EQ(reset.kind, AnswerVerdict::Kind::kRetry);
  EXPECT_FALSE(reset.bad_answer);  // the network's fault, not the server's answer
  EXPECT_EQ(reset.status.message(), "Connection reset after 50 of 100 bytes");
}

TEST(AnswerCheckerTest, NoAnswerIsRetriedUnlessNoTryCanPass) {
  AnswerChecker c(Want(0, 10));
  const ResponseHead none;
  EXPECT_EQ(c.Finish(none, {false, false, "Couldn't connect"}, "r", kNow).kind, AnswerVerdict::Kind::kRetry);
  const AnswerVerdict cert = c.Finish(none, {false, true, "SSL peer certificate"}, "L1 gate", kNow);
  EXPECT_EQ(cert.kind, AnswerVerdict::Kind::kFail);
  EXPECT_EQ(cert.status.code(), StatusCode::kIOError);
  EXPECT_EQ(cert.status.message(), "L1 gate: SSL peer certificate");
}

TEST(AnswerCheckerTest, ErrorBodyIsDiscardedUpToItsBound) {
  AnswerChecker c(Want(0, 10));
  ASSERT_EQ(c.CheckHead(Head({"HTTP/1.1 404 Not Found"})), AnswerChecker::Head::kErrorBody);
  EXPECT_TRUE(c.discarding());
  c.CountBody(kMaxErrorBody);
  EXPECT_FALSE(c.error_body_too_long());
  c.CountBody(1);
  EXPECT_TRUE(c.error_body_too_long());
}

TEST(AnswerCheckerTest, CdnRefusalAsksForAReresolveButTheHubsDoesNot) {
  AnswerChecker cdn(Want(0, 10));
  const AnswerVerdict v = cdn.Finish(Head({"HTTP/1.1 403 Forbidden"}), {}, "r", kNow);
  EXPECT_EQ(v.kind, AnswerVerdict::Kind::kReresolve);
  EXPECT_EQ(v.status.message(), "CDN answered 403");
  EXPECT_EQ(cdn.Finish(Head({"HTTP/1.1 401 x"}), {}, "r", kNow).kind, AnswerVerdict::Kind::kReresolve);
  RangeExpectation w = Want(0, 10);
  w.on_hub = true;
  AnswerChecker hub(w);
  const AnswerVerdict denied = hub.Finish(Head({"HTTP/1.1 403 Forbidden"}), {}, "r", kNow);
  EXPECT_EQ(denied.kind, AnswerVerdict::Kind::kFail);
  EXPECT_EQ(denied.status.code(), StatusCode::kPermissionDenied);
}

TEST(AnswerCheckerTest, RedirectReresolvesOnlyAPresumedHubUrl) {
  RangeExpectation w = Want(0, 10);
  w.on_hub = true;
  w.presumed_url = true;
  AnswerChecker presumed(w);
  EXPECT_EQ(presumed.Finish(Head({"HTTP/1.1 302 Found", "Location: http://cdn/x"}), {}, "r", kNow).kind,
            AnswerVerdict::Kind::kReresolve);
  w.presumed_url = false;
  AnswerChecker resolved(w);
  EXPECT_EQ(resolved.Finish(Head({"HTTP/1.1 302 Found", "Location: http://cdn/x"}), {}, "r", kNow).kind,
            AnswerVerdict::Kind::kFail);
}

TEST(AnswerCheckerTest, ThrottleCarriesTheServersWait) {
  AnswerChecker c(Want(0, 10));
  const AnswerVerdict v = c.Finish(Head({"HTTP/1.1 429 Too Many Requests", "Retry-After: 7"}), {}, "r", kNow);
  EXPECT_EQ(v.kind, AnswerVerdict::Kind::kThrottled);
  ASSERT_TRUE(v.wait.has_value());
  EXPECT_EQ(*v.wait, std::chrono::seconds(7));
  EXPECT_EQ(v.status.code(), StatusCode::kUnavailable);
  const AnswerVerdict busy = c.Finish(Head({"HTTP/1.1 503 x"}), {}, "r", kNow);
  EXPECT_EQ(busy.kind, AnswerVerdict::Kind::kThrottled);
  EXPECT_FALSE(busy.wait.has_value());  // the scheduler's backoff decides
}

// A Retry-After given as a date is counted from the time the caller gives,
// not from the machine's clock.
TEST(AnswerCheckerTest, ARetryAfterDateIsCountedFromTheGivenTime) {
  AnswerChecker c(Want(0, 10));
  const AnswerVerdict v =
      c.Finish(Head({"HTTP/1.1 503 x", "Retry-After: Tue, 14 Nov 2023 22:14:05 GMT"}), {}, "r", kNow);
  EXPECT_EQ(v.kind, AnswerVerdict::Kind::kThrottled);
  ASSERT_TRUE(v.wait.has_value());
  EXPECT_EQ(*v.wait, std::chrono::seconds(45));
}

TEST(AnswerCheckerTest, ServerErrorsRetryAndClientErrorsFail) {
  AnswerChecker c(Want(0, 10));
  EXPECT_EQ(c.Finish(Head({"HTTP/1.1 500 x"}), {}, "r", kNow).kind, AnswerVerdict::Kind::kRetry);
  EXPECT_EQ(c.Finish(Head({"HTTP/1.1 408 x"}), {}, "r", kNow).kind, AnswerVerdict::Kind::kRetry);
  const AnswerVerdict missing =
      c.Finish(Head({"HTTP/1.1 404 x", "X-Error-Code: EntryNotFound"}), {}, "L2 up", kNow);
  EXPECT_EQ(missing.kind, AnswerVerdict::Kind::kFail);
  EXPECT_EQ(missing.status.code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status.message().find("L2 up"), std::string::npos) << missing.status.ToString();
  // The listing promised bytes the server does not have.
  EXPECT_EQ(c.Finish(Head({"HTTP/1.1 416 x"}), {}, "r", kNow).status.code(), StatusCode::kCorruption);
}

TEST(AnswerCheckerTest, TokenEchoedByTheHubNeverReachesTheMessage) {
  RangeExpectation w = Want(0, 10);
  w.on_hub = true;
  w.token_sent = true;
  w.token = "hf_secret_token_value";
  AnswerChecker c(w);
  const AnswerVerdict v =
      c.Finish(Head({"HTTP/1.1 400 x", "X-Error-Message: bad header Bearer hf_secret_token_value"}), {}, "r", kNow);
  EXPECT_EQ(v.kind, AnswerVerdict::Kind::kFail);
  EXPECT_EQ(v.status.message().find("hf_secret_token_value"), std::string::npos) << v.status.ToString();
}

// Every header an answer check quotes is redacted, not only the error ones.
TEST(AnswerCheckerTest, TokenEchoedInAQuotedHeaderNeverReachesTheMessage) {
  RangeExpectation w = Want(0, 10);
  w.on_hub = true;
  w.token_sent = true;
  w.token = "hf_secret_token_value";
  for (const std::string& line : {std::string("Content-Range: bytes hf_secret_token_value"),
                                  std::string("Content-Encoding: hf_secret_token_value"),
                                  std::string("X-Repo-Commit: hf_secret_token_value")}) {
    AnswerChecker c(w);
    const std::string status = line.starts_with("Content-Range") ? "HTTP/1.1 206 x" : "HTTP/1.1 200 OK";
    EXPECT_EQ(c.CheckHead(Head({status, line})), AnswerChecker::Head::kBad) << line;
    EXPECT_EQ(c.error().message().find("hf_secret_token_value"), std::string::npos) << c.error().ToString();
    EXPECT_NE(c.error().message().find("[token]"), std::string::npos) << c.error().ToString();
  }
}

}  // namespace
}  // namespace exlr8
