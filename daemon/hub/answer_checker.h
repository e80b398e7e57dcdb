// AnswerChecker: judges one HTTP answer to one range GET, without I/O.
//
// Sans-I/O in the manner of Beast's parser: the caller says what it asked
// for (RangeExpectation), then feeds what came back (the response head, the
// sizes of the body chunks in order, how the transfer ended) and acts on
// what the checker says. It opens no socket, starts no thread and reads no
// clock, so every case is a unit test and a fuzz input
// (tests/fuzz/answer_checker_fuzz.cpp).
//
// The rules (RangeFetcher applies them to every range transfer):
//  - 206 must carry `Content-Range: bytes a-b/...` exactly as asked, and its
//    total, when both are known, must be the file's size: else a bad answer
//    (retried, counted in bad_answers), the header and its value named;
//  - 200 means the server ignored Range: the bytes before `a` are skipped and
//    the transfer is cut once the range is complete;
//  - any other status: the body is an error body, read up to kMaxErrorBody
//    bytes and discarded;
//  - a Content-Encoding other than identity, or (from the hub) an
//    X-Repo-Commit other than the pinned one, is a bad answer;
//  - a body longer than asked is cut at the range's end (overlong); a 206
//    without Content-Length, or one announced longer than asked, is cut as
//    soon as the range is whole, since nothing else says where it ends;
//  - the end of the transfer gives the verdict (Finish): complete, retry,
//    throttled (429/503: the server's wait, if it named one), re-resolve
//    (a CDN's 401/403, or a redirect where the hub was expected to serve the
//    bytes itself) or fail for good.
//
// Thread rules: one checker per transfer; not thread-safe, no shared state.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "daemon/hub/http_answer.h"
#include "format/status.h"

namespace exlr8 {

// An error body is read up to this many bytes (for its message), then cut.
inline constexpr std::size_t kMaxErrorBody = 64 * 1024;

// What one range try asked for, and what identifies the file.
struct RangeExpectation {
  std::uint64_t offset = 0;                // the request's first byte in the file
  std::uint64_t length = 0;                // the request's length; > 0
  std::uint64_t delivered = 0;             // bytes of the request delivered by earlier tries
                                           // (this try asks for the rest); < length
  std::optional<std::uint64_t> file_size;  // as the file's resolve answered
  bool on_hub = false;                     // sent to the hub (not a CDN)
  bool presumed_url = false;               // sent to the hub's /resolve/ URL without a HEAD
  // Checked against X-Repo-Commit when on_hub. The checker keeps this view
  // (and `token`'s): what they name must outlive it.
  std::string_view pinned_commit;
  // For HttpError: a token was sent, and the token itself (cut out of what
  // the server says; never copied into a message).
  bool token_sent = false;
  std::string_view token;
};

// How a transfer ended, as the transport saw it.
struct TransferEnd {
  bool ok = true;          // the transport finished the transfer (or we cut it)
  bool permanent = false;  // a failure no other try can mend (a certificate)
  std::string error;       // !ok: what failed, for messages
  // !ok: no answer came at all (the name did not resolve, the connection
  // was refused, reset or timed out before a status line, the proxy could
  // not connect): IsNoAnswerCurlError's judgement.
  bool no_answer = false;
  // The status of the answer as the transport counted it (0: none); unlike
  // the head's, never a proxy's CONNECT answer.
  long http_status = 0;
  // From the request sent to the first byte of its answer, as the transport
  // measured it: about one round trip plus the server's time. Negative:
  // unknown (no answer, or a transport that does not measure it).
  std::chrono::microseconds answer_wait{-1};
};

// What to do with a request after its transfer ended.
struct AnswerVerdict {
  enum class Kind : std::uint8_t {
    kComplete,   // every byte of the range arrived: hand it to the consumer
    kRetry,      // try again after a backoff; `status` says why
    kThrottled,  // 429/503: try again after `wait` (or a backoff); `status` says why
    kReresolve,  // resolve the file's URL again, then try again (no attempt used)
    kFail,       // fail the request with `status`
  };
  Kind kind = Kind::kComplete;
  Status status;
  std::optional<std::chrono::milliseconds> wait;  // kThrottled: the server's
  bool bad_answer = false;                        // kRetry: the server's answer was wrong (counted)
};

class AnswerChecker {
 public:
  // What the head says about the body that follows.
  enum class Head : std::uint8_t {
    kRange,      // 206 as asked: the body is the range
    kWholeFile,  // 200: the body is the whole file; the bytes before the range are skipped
    kErrorBody,  // neither: read (bounded) and discard
    kBad,        // a bad answer: cut the transfer (bad_answer(), error())
  };

  // What one body chunk of `n` bytes is: `skip` leading bytes before the
  // range, then `take` bytes of the range (at file offset next_offset()),
  // then `beyond` bytes past its end; `cut`: stop the transfer after it.
  struct Slice {
    std::size_t skip = 0;
    std::size_t take = 0;
    std::size_t beyond = 0;
    bool cut = false;
  };

  explicit AnswerChecker(const RangeExpectation& want);
  AnswerChecker() = default;

  // The first and last (inclusive) byte this try asks for: `Range: bytes=first-last`.
  std::uint64_t first() const { return first_; }
  std::uint64_t last() const { return last_; }

  // Judges the head; call once, before the first body chunk.
  Head CheckHead(const ResponseHead& head);
  bool head_checked() const { return head_checked_; }
  // True once the head says the body is an error body.
  bool discarding() const { return discarding_; }

  // Counts `n` more body bytes off the wire (error bodies too).
  void CountBody(std::size_t n) { body_bytes_ += n; }
  // An error body past kMaxErrorBody: cut the transfer.
  bool error_body_too_long() const { return discarding_ && body_bytes_ > kMaxErrorBody; }

  // What the next chunk of `n` bytes is. REQUIRES: CheckHead gave kRange or
  // kWholeFile, and CountBody(n) was called for it. Does not change the
  // checker: Accept(slice) does, once the range's bytes were delivered (a
  // consumer that fails them ends the request anyway).
  Slice Plan(std::size_t n) const;
  void Accept(const Slice& slice);

  // The file offset of the next range byte to deliver.
  std::uint64_t next_offset() const { return first_ + taken_; }
  // True when every byte of the range was taken this try.
  bool complete() const { return taken_ == last_ - first_ + 1; }

  bool bad_answer() const { return bad_answer_; }
  bool overlong() const { return overlong_; }
  const Status& error() const { return error_; }

  // The verdict once the transfer ended. `head` is the final response head
  // (status 0: no answer); `what` names the request in messages (label,
  // file, range).
  // `now`: the wall time (a Retry-After may be a date).
  AnswerVerdict Finish(const ResponseHead& head, const TransferEnd& end, std::string_view what,
                       std::chrono::system_clock::time_point now) const;

 private:
  Head Bad(Status error);

  std::uint64_t first_ = 0;
  std::uint64_t last_ = 0;  // inclusive
  std::uint64_t request_length_ = 0;
  std::uint64_t delivered_before_ = 0;
  std::optional<std::uint64_t> file_size_;
  bool on_hub_ = false;
  bool presumed_url_ = false;
  std::string_view pinned_commit_;
  bool token_sent_ = false;
  std::string_view token_;

  long status_ = 0;
  std::optional<std::uint64_t> content_length_;
  std::uint64_t skip_left_ = 0;   // 200: bytes before the range still to skip
  std::uint64_t body_bytes_ = 0;  // off the wire, this try
  std::uint64_t taken_ = 0;       // range bytes taken, this try
  bool head_checked_ = false;
  bool discarding_ = false;
  bool bad_answer_ = false;
  bool overlong_ = false;
  Status error_;
};

}  // namespace exlr8
