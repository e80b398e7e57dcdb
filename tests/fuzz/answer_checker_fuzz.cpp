// Fuzz target for the range fetcher's answer checks
// (daemon/hub/answer_checker.h): what a server says to one range GET.
//
// Input, as text:
//   line 1: OFFSET LENGTH DELIVERED SIZE FLAGS   (SIZE "-" = unknown;
//           FLAGS letters: h = sent to the hub, p = presumed hub URL,
//           t = token sent; "-" = none)
//   then response header lines (a status line starts each response), up to
//   an empty line;
//   then the body: decimal chunk sizes separated by spaces, and optionally
//   "end=fail" or "end=perm" (the transport failed, for good).
//
// Invariants: no crash, hang or sanitizer report; a bad head is Corruption
// naming the header; every chunk splits into skip + take + beyond; the bytes
// taken never pass the range and start at its first byte; bytes past the
// range cut the transfer; a complete verdict only for a whole range under
// 200/206; a throttle only for 429/503, its wait never negative; a failure
// or retry always carries a non-OK status; the token is never in a message.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "daemon/hub/answer_checker.h"
#include "daemon/hub/hub_protocol.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

constexpr std::string_view kToken = "hf_FuzzTokenNeverShown";
constexpr std::string_view kCommit = "0123456789abcdef0123456789abcdef01234567";

std::string_view NextLine(std::string_view& in) {
  const std::size_t nl = in.find('\n');
  std::string_view line = in.substr(0, nl);
  in = nl == std::string_view::npos ? std::string_view() : in.substr(nl + 1);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return line;
}

std::string_view NextWord(std::string_view& in) {
  while (!in.empty() && in.front() == ' ') in.remove_prefix(1);
  const std::size_t sp = in.find(' ');
  std::string_view w = in.substr(0, sp);
  in = sp == std::string_view::npos ? std::string_view() : in.substr(sp);
  return w;
}

bool Number(std::string_view w, std::uint64_t* out) {
  auto v = exlr8::ParseDecimalU64(w);
  if (!v) return false;
  *out = *v;
  return true;
}

void CheckMessage(const exlr8::Status& s) { EXLR8_FUZZ_CHECK(s.message().find(kToken) == std::string::npos); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  std::string_view first = NextLine(in);
  exlr8::RangeExpectation want;
  std::uint64_t file_size = 0;
  if (!Number(NextWord(first), &want.offset) || !Number(NextWord(first), &want.length) ||
      !Number(NextWord(first), &want.delivered))
    return 0;
  const std::string_view size_word = NextWord(first);
  if (size_word != "-") {
    if (!Number(size_word, &file_size)) return 0;
    want.file_size = file_size;
  }
  // RangeFetcher's own bounds on what it asks for.
  if (want.length == 0 || want.delivered >= want.length || want.offset > exlr8::kMaxHubFileSize ||
      want.length > exlr8::kMaxHubFileSize - want.offset)
    return 0;
  const std::string_view flags = NextWord(first);
  want.on_hub = flags.find('h') != std::string_view::npos;
  want.presumed_url = flags.find('p') != std::string_view::npos;
  want.token_sent = flags.find('t') != std::string_view::npos;
  want.token = kToken;
  want.pinned_commit = kCommit;

  exlr8::ResponseHead head;
  while (!in.empty()) {
    const std::string_view line = NextLine(in);
    if (line.empty()) break;
    head.AddLine(line);
  }

  exlr8::AnswerChecker checker(want);
  EXLR8_FUZZ_CHECK(checker.first() == want.offset + want.delivered);
  EXLR8_FUZZ_CHECK(checker.last() == want.offset + want.length - 1);
  const std::uint64_t range_len = checker.last() - checker.first() + 1;
  exlr8::TransferEnd end;
  bool head_checked = false;
  bool cut = false;
  std::uint64_t taken = 0;
  int chunks = 0;
  while (!in.empty() && !cut && chunks < 4096) {
    const std::string_view w = NextWord(in);
    if (w.empty()) break;
    if (w == "end=fail" || w == "end=perm") {
      end.ok = false;
      end.permanent = w == "end=perm";
      end.error = "transport failed";
      break;
    }
    std::uint64_t n = 0;
    if (!Number(w, &n) || n == 0 || n > (1u << 20)) continue;
    ++chunks;
    checker.CountBody(n);
    if (!head_checked) {
      head_checked = true;
      const auto kind = checker.CheckHead(head);
      EXLR8_FUZZ_CHECK(checker.head_checked());
      if (kind == exlr8::AnswerChecker::Head::kBad) {
        EXLR8_FUZZ_CHECK(checker.bad_answer());
        EXLR8_FUZZ_CHECK(checker.error().code() == exlr8::StatusCode::kCorruption);
        const std::string& m = checker.error().message();
        EXLR8_FUZZ_CHECK(m.find("Content-Range") != std::string::npos ||
                         m.find("Content-Encoding") != std::string::npos ||
                         m.find("commit") != std::string::npos);
        CheckMessage(checker.error());
        break;
      }
      EXLR8_FUZZ_CHECK((kind == exlr8::AnswerChecker::Head::kErrorBody) == checker.discarding());
      EXLR8_FUZZ_CHECK(kind != exlr8::AnswerChecker::Head::kRange || head.status == 206);
      EXLR8_FUZZ_CHECK(kind != exlr8::AnswerChecker::Head::kWholeFile || head.status == 200);
    }
    if (checker.discarding()) {
      if (checker.error_body_too_long()) cut = true;
      continue;
    }
    const exlr8::AnswerChecker::Slice s = checker.Plan(n);
    EXLR8_FUZZ_CHECK(s.skip + s.take + s.beyond == n);
    EXLR8_FUZZ_CHECK(s.beyond == 0 || s.cut);
    EXLR8_FUZZ_CHECK(checker.next_offset() == checker.first() + taken);
    checker.Accept(s);
    taken += s.take;
    EXLR8_FUZZ_CHECK(taken <= range_len);
    EXLR8_FUZZ_CHECK(checker.complete() == (taken == range_len));
    if (s.beyond > 0) EXLR8_FUZZ_CHECK(checker.complete());
    cut = s.cut;
  }

  const exlr8::AnswerVerdict v = checker.Finish(head, end, "fuzz range",
                                                std::chrono::system_clock::time_point(std::chrono::seconds(1'700'000'000)));
  CheckMessage(v.status);
  using Kind = exlr8::AnswerVerdict::Kind;
  if (v.kind == Kind::kComplete) {
    EXLR8_FUZZ_CHECK(checker.complete() && (head.status == 200 || head.status == 206));
    EXLR8_FUZZ_CHECK(!checker.bad_answer());
  } else {
    EXLR8_FUZZ_CHECK(!v.status.ok());
  }
  if (v.kind == Kind::kThrottled) {
    EXLR8_FUZZ_CHECK(head.status == 429 || head.status == 503);
    EXLR8_FUZZ_CHECK(!v.wait || v.wait->count() >= 0);
  }
  if (v.kind == Kind::kReresolve) EXLR8_FUZZ_CHECK(want.presumed_url || !want.on_hub);
  if (v.bad_answer) EXLR8_FUZZ_CHECK(v.kind == Kind::kRetry);
  return 0;
}
