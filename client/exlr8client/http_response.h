// A strict, bounded reader of one HTTP/1.1 answer (RFC 9112), for
// libexlr8client's REST client (rest_client.h): the bytes come from a
// server, so nothing in them may crash the reader, make it allocate more
// than its limits or make it wait for ever (the caller bounds the time).
//
// Accepted: "HTTP/1.0" or "HTTP/1.1", a 3-digit status 100..599 (interim
// 1xx answers other than 101 are skipped), header fields "name: value"
// with CRLF line ends, a body framed by Content-Length, by
// "Transfer-Encoding: chunked" (extensions and trailers read and dropped)
// or, with neither, by the end of the connection (the client sends
// "Connection: close"). Refused, with an error naming the byte offset and
// what was wrong: bare LF line ends, obsolete line folding, control
// characters, a malformed or conflicting Content-Length, any other
// Transfer-Encoding, both framings at once, a header section over
// max_header_bytes, a body over max_body_bytes (checked before it is
// read: a Content-Length over it fails at once), a chunk-size line over
// 1 KiB, more than 256 header fields.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "format/status.h"

namespace exlr8::rest {

struct HttpLimits {
  std::size_t max_header_bytes = 64 * 1024;       // status line + fields (trailers counted apart, same bound)
  std::size_t max_body_bytes = 64 * 1024 * 1024;  // the decoded body
};

struct HttpResponse {
  int status = 0;
  std::string reason;
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased, in order
  std::string body;
  // The last field named `lower_name`, or nullptr.
  const std::string* Header(std::string_view lower_name) const;
};

class HttpResponseParser {
 public:
  // `head`: the answer to a HEAD request (never a body).
  explicit HttpResponseParser(HttpLimits limits = {}, bool head = false) : limits_(limits), head_(head) {}

  // Reads the next bytes of the connection. OK once the answer is complete
  // (bytes after it are ignored: the connection closes); NeedMore while it
  // is not; Corruption ("HTTP answer byte N: ...") or ResourceExhausted (a
  // limit) for an answer this reader refuses. After an error or
  // completion, further calls return the same.
  Status Feed(std::string_view data);
  // The connection ended: OK when the answer is complete (a body read to
  // the end of the connection completes here), else Corruption naming what
  // was cut short ("the connection closed in the body after 10 of 20 bytes").
  Status Finish();

  bool done() const { return state_ == State::kDone; }
  std::uint64_t offset() const { return offset_; }  // bytes consumed
  const HttpResponse& response() const { return response_; }
  HttpResponse Take() { return std::move(response_); }

 private:
  enum class State {
    kStatusLine,
    kFields,
    kBodyLength,
    kBodyToEnd,
    kChunkSize,
    kChunkData,
    kChunkDataEnd,
    kTrailers,
    kDone,
    kFailed
  };

  Status Fail(Status s);
  Status Error(const std::string& what);  // Corruption at the current line's first byte
  // Appends to line_ up to and including '\n'; true when a line is complete.
  Status TakeLine(std::string_view& data, std::size_t max, const char* what, bool* complete);
  Status OnStatusLine();
  Status OnField();
  Status OnFieldsEnd();
  Status OnChunkSize();

  HttpLimits limits_;
  bool head_;
  State state_ = State::kStatusLine;
  Status error_;
  HttpResponse response_;
  std::string line_;
  std::uint64_t offset_ = 0;      // bytes consumed in all
  std::uint64_t line_start_ = 0;  // offset of line_'s first byte
  std::size_t header_bytes_ = 0;  // of this answer's head (or the trailers)
  std::uint64_t remaining_ = 0;   // of the body (kBodyLength) or of the chunk (kChunkData)
  bool have_length_ = false;
  std::uint64_t length_ = 0;
  bool chunked_ = false;
  std::size_t fields_ = 0;
};

}  // namespace exlr8::rest
