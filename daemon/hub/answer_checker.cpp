#include "daemon/hub/answer_checker.h"

#include <algorithm>
#include <utility>

#include "daemon/hub/hub_protocol.h"
#include "format/json.h"

namespace exlr8 {

AnswerChecker::AnswerChecker(const RangeExpectation& want)
    : first_(want.offset + want.delivered),
      last_(want.offset + want.length - 1),
      request_length_(want.length),
      delivered_before_(want.delivered),
      file_size_(want.file_size),
      on_hub_(want.on_hub),
      presumed_url_(want.presumed_url),
      pinned_commit_(want.pinned_commit),
      token_sent_(want.token_sent),
      token_(want.token) {}

AnswerChecker::Head AnswerChecker::Bad(Status error) {
  bad_answer_ = true;
  error_ = std::move(error);
  return Head::kBad;
}

AnswerChecker::Head AnswerChecker::CheckHead(const ResponseHead& head) {
  head_checked_ = true;
  status_ = head.status;
  content_length_ = head.content_length;
  Head kind = Head::kErrorBody;
  if (head.status == 206) {
    auto cr = ParseContentRange(head.content_range);
    if (!cr || cr->first != first_ || cr->last != last_) {
      return Bad(CorruptionError("answered Content-Range '" + QuoteServerText(head.content_range, token_) +
                                 "' for bytes=" + std::to_string(first_) + "-" + std::to_string(last_)));
    }
    if (cr->total && file_size_ && *cr->total != *file_size_) {
      return Bad(CorruptionError("answered Content-Range '" + QuoteServerText(head.content_range, token_) +
                                 "' for a file of " + std::to_string(*file_size_) + " bytes"));
    }
    if (head.content_length && *head.content_length > last_ - first_ + 1) overlong_ = true;
    kind = Head::kRange;
  } else if (head.status == 200) {
    skip_left_ = first_;  // the body starts at byte 0 of the file
    kind = Head::kWholeFile;
  } else {
    discarding_ = true;
    return Head::kErrorBody;
  }
  // Ranges are asked for with Accept-Encoding: identity; a compressed
  // body's bytes are not the file's, and the message names the encoding.
  if (!head.content_encoding.empty() && head.content_encoding != "identity") {
    return Bad(CorruptionError("answered Content-Encoding '" + QuoteServerText(head.content_encoding, token_) +
                               "' to a request for identity (uncompressed) bytes"));
  }
  // The hub names the commit it answered for; the URL pins ours, so a
  // different one is a broken hub or mirror (HubClient::InterpretResolve
  // checks the same on the HEAD path).
  if (on_hub_ && !head.x_repo_commit.empty() && head.x_repo_commit != pinned_commit_) {
    return Bad(CorruptionError("hub answered for commit '" + QuoteServerText(head.x_repo_commit, token_) +
                               "', pinned " + std::string(pinned_commit_)));
  }
  return kind;
}

AnswerChecker::Slice AnswerChecker::Plan(std::size_t n) const {
  Slice s;
  if (skip_left_ > 0) {
    s.skip = static_cast<std::size_t>(std::min<std::uint64_t>(skip_left_, n));
    if (s.skip == n) return s;
  }
  const std::uint64_t remaining = last_ - first_ + 1 - taken_;
  s.take = static_cast<std::size_t>(std::min<std::uint64_t>(remaining, n - s.skip));
  s.beyond = n - s.skip - s.take;
  if (s.beyond > 0) {
    // Bytes past the range: a 206 body longer than asked, or the rest of a
    // whole-file 200. Cut the transfer here.
    s.cut = true;
  } else if (taken_ + s.take == last_ - first_ + 1) {
    // The range is whole. Unless this is the body's announced end, cut a
    // 200, an announced-overlong 206, or a 206 without Content-Length (whose
    // end nothing else tells: a server holding the connection open would
    // cost the stall timeout per range).
    const bool body_done = content_length_ && body_bytes_ >= *content_length_;
    const bool unsized_206 = status_ == 206 && !content_length_;
    if (!body_done && (status_ == 200 || overlong_ || unsized_206)) s.cut = true;
  }
  return s;
}

void AnswerChecker::Accept(const Slice& slice) {
  skip_left_ -= std::min<std::uint64_t>(skip_left_, slice.skip);
  taken_ += slice.take;
  if (slice.beyond > 0 && status_ == 206) overlong_ = true;
}

AnswerVerdict AnswerChecker::Finish(const ResponseHead& head, const TransferEnd& end, std::string_view what,
                                    std::chrono::system_clock::time_point now) const {
  const long status = head.status;
  AnswerVerdict v;
  if (complete() && (status == 200 || status == 206)) return v;  // kComplete
  if (bad_answer_) {
    v.kind = AnswerVerdict::Kind::kRetry;
    v.status = error_;
    v.bad_answer = true;
    return v;
  }
  if (status == 0 && !end.ok && end.permanent) {  // e.g. a certificate: no try will pass
    v.kind = AnswerVerdict::Kind::kFail;
    v.status = IOError(std::string(what) + ": " + end.error);
    return v;
  }
  if (status == 200 || status == 206 || status == 0) {
    v.kind = AnswerVerdict::Kind::kRetry;
    v.bad_answer = end.ok;  // the server ended the body early
    const std::string msg = end.ok ? std::string("short body") : end.error;
    v.status = IOError(msg + " after " + std::to_string(delivered_before_ + taken_) + " of " +
                       std::to_string(request_length_) + " bytes");
    return v;
  }
  if (IsRedirectStatus(status) && presumed_url_) {
    // The listing made the file look like one the hub serves itself, but
    // the hub redirects: resolve it the usual way (HEAD) and try again.
    v.kind = AnswerVerdict::Kind::kReresolve;
    v.status = IOError("hub answered " + std::to_string(status) + " for a file its listing says it serves");
    return v;
  }
  if ((status == 403 || status == 401) && !on_hub_) {
    // The signed URL expired or was revoked: resolve again.
    v.kind = AnswerVerdict::Kind::kReresolve;
    v.status = PermissionDeniedError("CDN answered " + std::to_string(status));
    return v;
  }
  v.status = HttpError(status, head, what, token_sent_, token_);
  if (status == 429 || status == 503) {
    v.kind = AnswerVerdict::Kind::kThrottled;
    v.wait = ThrottleWait(head, now);
    return v;
  }
  v.kind = IsRetryableHttp(status) ? AnswerVerdict::Kind::kRetry : AnswerVerdict::Kind::kFail;
  return v;
}

}  // namespace exlr8
