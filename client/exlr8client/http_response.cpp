#include "client/exlr8client/http_response.h"

#include <algorithm>
#include <cctype>

namespace exlr8::rest {
namespace {

constexpr std::size_t kMaxChunkSizeLine = 1024;
constexpr std::size_t kMaxFields = 256;

// RFC 9110 tchar.
bool IsTokenChar(unsigned char c) {
  if (std::isalnum(c)) return true;
  switch (c) {
    case '!':
    case '#':
    case '$':
    case '%':
    case '&':
    case '\'':
    case '*':
    case '+':
    case '-':
    case '.':
    case '^':
    case '_':
    case '`':
    case '|':
    case '~':
      return true;
    default:
      return false;
  }
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view TrimOws(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// A character of a message, printable ("\x01" otherwise).
std::string Shown(unsigned char c) {
  if (c >= 0x20 && c < 0x7f) return std::string("'") + static_cast<char>(c) + "'";
  static const char kHex[] = "0123456789abcdef";
  return std::string("byte 0x") + kHex[c >> 4] + kHex[c & 15];
}

}  // namespace

const std::string* HttpResponse::Header(std::string_view lower_name) const {
  for (auto it = headers.rbegin(); it != headers.rend(); ++it)
    if (it->first == lower_name) return &it->second;
  return nullptr;
}

Status HttpResponseParser::Fail(Status s) {
  state_ = State::kFailed;
  error_ = s;
  line_.clear();
  line_.shrink_to_fit();
  return s;
}

Status HttpResponseParser::Error(const std::string& what) {
  return Fail(CorruptionError("HTTP answer byte " + std::to_string(line_start_) + ": " + what));
}

Status HttpResponseParser::TakeLine(std::string_view& data, std::size_t max, const char* what,
                                    bool* complete) {
  *complete = false;
  if (line_.empty()) line_start_ = offset_;
  const std::size_t nl = data.find('\n');
  const std::size_t take = nl == std::string_view::npos ? data.size() : nl + 1;
  if (line_.size() + take > max) {
    const bool header =
        state_ == State::kStatusLine || state_ == State::kFields || state_ == State::kTrailers;
    const std::string limit = std::to_string(header ? limits_.max_header_bytes : max);
    if (state_ == State::kChunkDataEnd) return Error("a chunk is longer than its size");
    return state_ == State::kChunkSize
               ? Error(std::string(what) + " is longer than " + limit + " bytes")
               : Fail(ResourceExhaustedError("HTTP answer byte " + std::to_string(line_start_) + ": " + what +
                                             " over the limit of " + limit + " bytes"));
  }
  line_.append(data.substr(0, take));
  data.remove_prefix(take);
  offset_ += take;
  if (nl == std::string_view::npos) return Status::Ok();
  if (line_.size() < 2 || line_[line_.size() - 2] != '\r')
    return Error(std::string(what) + " ends in a bare LF");
  line_.resize(line_.size() - 2);
  *complete = true;
  return Status::Ok();
}

Status HttpResponseParser::OnStatusLine() {
  // HTTP-version SP 3DIGIT SP reason-phrase (the reason may be empty).
  const std::string_view l = line_;
  if (l.size() < 12 || (l.substr(0, 9) != "HTTP/1.1 " && l.substr(0, 9) != "HTTP/1.0 "))
    return Error("not an HTTP/1.x status line: \"" + std::string(l.substr(0, 40)) + "\"");
  int status = 0;
  for (std::size_t i = 9; i < 12; ++i) {
    if (l[i] < '0' || l[i] > '9') return Error("the status code is not 3 digits");
    status = status * 10 + (l[i] - '0');
  }
  if (status < 100 || status > 599) return Error("status code " + std::to_string(status) + " out of range");
  if (l.size() > 12 && l[12] != ' ') return Error("no space after the status code");
  const std::string_view reason = l.size() > 13 ? l.substr(13) : std::string_view();
  for (unsigned char c : reason)
    if ((c < 0x20 && c != '\t') || c == 0x7f)
      return Error("a control character (" + Shown(c) + ") in the reason");
  if (status == 101) return Error("101 Switching Protocols, never asked for");
  response_.status = status;
  response_.reason = std::string(reason);
  state_ = State::kFields;
  return Status::Ok();
}

Status HttpResponseParser::OnField() {
  const std::string_view l = line_;
  if (l.front() == ' ' || l.front() == '\t') return Error("obsolete line folding");
  const std::size_t colon = l.find(':');
  if (colon == std::string_view::npos) return Error("a header field without ':'");
  if (colon == 0) return Error("a header field without a name");
  for (std::size_t i = 0; i < colon; ++i)
    if (!IsTokenChar(static_cast<unsigned char>(l[i])))
      return Error("a header field name with " + Shown(static_cast<unsigned char>(l[i])));
  const std::string_view value = TrimOws(l.substr(colon + 1));
  for (unsigned char c : value)
    if ((c < 0x20 && c != '\t') || c == 0x7f)
      return Error("a control character (" + Shown(c) + ") in header field " +
                   std::string(l.substr(0, colon)));
  if (++fields_ > kMaxFields) return Error("more than " + std::to_string(kMaxFields) + " header fields");
  if (state_ == State::kTrailers) return Status::Ok();  // trailers are read and dropped
  std::string name = Lower(l.substr(0, colon));
  if (name == "content-length") {
    if (value.empty() || value.size() > 19 ||
        !std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return Error("Content-Length \"" + std::string(value.substr(0, 40)) + "\" is not a number");
    const std::uint64_t n = std::stoull(std::string(value));
    if (have_length_ && n != length_) return Error("two different Content-Length values");
    have_length_ = true;
    length_ = n;
  } else if (name == "transfer-encoding") {
    if (Lower(value) != "chunked")
      return Error("Transfer-Encoding \"" + std::string(value.substr(0, 40)) + "\" (only chunked is read)");
    if (chunked_) return Error("Transfer-Encoding given twice");
    chunked_ = true;
  }
  response_.headers.emplace_back(std::move(name), std::string(value));
  return Status::Ok();
}

Status HttpResponseParser::OnFieldsEnd() {
  const int s = response_.status;
  if (s >= 100 && s < 200) {  // an interim answer: the real one follows
    if (have_length_ || chunked_) return Error("an interim " + std::to_string(s) + " answer with a body");
    response_.headers.clear();
    fields_ = 0;
    state_ = State::kStatusLine;
    return Status::Ok();
  }
  if (chunked_ && have_length_) return Error("both Content-Length and Transfer-Encoding: chunked");
  if (head_ || s == 204 || s == 304) {
    state_ = State::kDone;
    return Status::Ok();
  }
  if (chunked_) {
    state_ = State::kChunkSize;
    header_bytes_ = 0;
    fields_ = 0;
    return Status::Ok();
  }
  if (have_length_) {
    if (length_ > limits_.max_body_bytes)
      return Fail(ResourceExhaustedError("HTTP answer: a body of " + std::to_string(length_) +
                                         " bytes is over the limit of " +
                                         std::to_string(limits_.max_body_bytes) + " bytes"));
    response_.body.reserve(static_cast<std::size_t>(length_));
    remaining_ = length_;
    state_ = remaining_ == 0 ? State::kDone : State::kBodyLength;
    return Status::Ok();
  }
  state_ = State::kBodyToEnd;
  return Status::Ok();
}

Status HttpResponseParser::OnChunkSize() {
  // chunk-size [ chunk-ext ] ; the extensions are dropped.
  std::string_view l = line_;
  const std::size_t semi = l.find(';');
  const std::string_view hex = TrimOws(l.substr(0, semi));
  if (hex.empty()) return Error("a chunk size is missing");
  std::uint64_t n = 0;
  for (char c : hex) {
    const int d = c >= '0' && c <= '9'   ? c - '0'
                  : c >= 'a' && c <= 'f' ? c - 'a' + 10
                  : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                         : -1;
    if (d < 0) return Error("the chunk size \"" + std::string(hex.substr(0, 40)) + "\" is not hexadecimal");
    if (n > (UINT64_MAX >> 4)) return Error("the chunk size overflows");
    n = (n << 4) | static_cast<std::uint64_t>(d);
  }
  if (n > limits_.max_body_bytes - std::min<std::size_t>(response_.body.size(), limits_.max_body_bytes))
    return Fail(ResourceExhaustedError("HTTP answer byte " + std::to_string(line_start_) + ": a chunk of " +
                                       std::to_string(n) + " bytes takes the body over the limit of " +
                                       std::to_string(limits_.max_body_bytes) + " bytes"));
  if (n == 0) {
    state_ = State::kTrailers;
    header_bytes_ = 0;
    fields_ = 0;
  } else {
    remaining_ = n;
    state_ = State::kChunkData;
  }
  return Status::Ok();
}

Status HttpResponseParser::Feed(std::string_view data) {
  while (true) {
    switch (state_) {
      case State::kDone:
        return Status::Ok();
      case State::kFailed:
        return error_;
      case State::kBodyLength:
      case State::kChunkData: {
        if (data.empty()) return NeedMoreError("HTTP answer: more body");
        const std::size_t take = static_cast<std::size_t>(std::min<std::uint64_t>(remaining_, data.size()));
        response_.body.append(data.substr(0, take));
        data.remove_prefix(take);
        offset_ += take;
        remaining_ -= take;
        if (remaining_ == 0) state_ = state_ == State::kBodyLength ? State::kDone : State::kChunkDataEnd;
        continue;
      }
      case State::kBodyToEnd: {
        if (data.size() > limits_.max_body_bytes - response_.body.size())
          return Fail(ResourceExhaustedError("HTTP answer: the body is over the limit of " +
                                             std::to_string(limits_.max_body_bytes) + " bytes"));
        response_.body.append(data);
        offset_ += data.size();
        return NeedMoreError("HTTP answer: more body, to the end of the connection");
      }
      default:
        break;
    }
    if (data.empty()) return NeedMoreError("HTTP answer: more header");
    bool complete = false;
    Status s;
    switch (state_) {
      case State::kStatusLine:
      case State::kFields:
      case State::kTrailers: {
        const std::size_t room = limits_.max_header_bytes - std::min(header_bytes_, limits_.max_header_bytes);
        const std::size_t before = line_.size();
        const char* what = state_ == State::kTrailers ? "the trailer section" : "the header section";
        s = TakeLine(data, room + before, what, &complete);
        if (!s.ok()) return s;
        header_bytes_ += line_.size() + (complete ? 2 : 0) - before;
        if (!complete) continue;
        if (state_ == State::kStatusLine) {
          s = OnStatusLine();
        } else if (line_.empty()) {
          if (state_ == State::kTrailers) {
            state_ = State::kDone;
          } else {
            s = OnFieldsEnd();
          }
        } else {
          s = OnField();
        }
        break;
      }
      case State::kChunkSize:
        s = TakeLine(data, kMaxChunkSizeLine, "a chunk-size line", &complete);
        if (!s.ok() || !complete) break;
        s = OnChunkSize();
        break;
      case State::kChunkDataEnd:
        s = TakeLine(data, 2, "the CRLF after a chunk", &complete);
        if (s.ok() && complete && !line_.empty()) s = Error("a chunk is longer than its size");
        if (s.ok() && complete) state_ = State::kChunkSize;
        break;
      default:
        return Fail(InternalError("HTTP answer: the reader's state is lost"));
    }
    if (!s.ok()) return state_ == State::kFailed ? error_ : Fail(s);
    if (complete) line_.clear();
  }
}

Status HttpResponseParser::Finish() {
  switch (state_) {
    case State::kDone:
      return Status::Ok();
    case State::kFailed:
      return error_;
    case State::kBodyToEnd:
      state_ = State::kDone;
      return Status::Ok();
    case State::kStatusLine:
      return Fail(CorruptionError(offset_ == 0
                                      ? std::string("the server closed the connection without an answer")
                                      : "HTTP answer: the connection closed in the status line, after " +
                                            std::to_string(offset_) + " bytes"));
    case State::kFields:
      return Fail(CorruptionError("HTTP answer: the connection closed in the header section, after " +
                                  std::to_string(offset_) + " bytes"));
    case State::kBodyLength:
      return Fail(CorruptionError("HTTP answer: the connection closed in the body after " +
                                  std::to_string(length_ - remaining_) + " of " + std::to_string(length_) +
                                  " bytes"));
    default:
      return Fail(CorruptionError("HTTP answer: the connection closed in the chunked body after " +
                                  std::to_string(response_.body.size()) + " bytes"));
  }
}

}  // namespace exlr8::rest
