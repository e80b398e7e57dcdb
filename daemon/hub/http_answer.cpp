#include "daemon/hub/http_answer.h"

#include <algorithm>
#include <cctype>

#include "daemon/hub/hub_protocol.h"
#include "format/json.h"

namespace exlr8 {

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

std::string_view TrimHeaderSpace(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n')) {
    s.remove_suffix(1);
  }
  return s;
}

void ResponseHead::AddLine(std::string_view line) {
  line = TrimHeaderSpace(line);
  if (line.size() >= 5 && line.substr(0, 5) == "HTTP/") {
    Reset();
    const std::size_t sp = line.find(' ');
    if (sp != std::string_view::npos) {
      auto code = ParseDecimalU64(line.substr(sp + 1, 3));
      if (code) status = static_cast<long>(*code);
    }
    return;
  }
  const std::size_t colon = line.find(':');
  if (colon == std::string_view::npos) return;
  const std::string_view name = TrimHeaderSpace(line.substr(0, colon));
  const std::string_view value = TrimHeaderSpace(line.substr(colon + 1));
  // Keep each at a sane size: these come from the network.
  auto set = [&](std::string& field) { field.assign(value.substr(0, 8192)); };
  switch (std::tolower(static_cast<unsigned char>(name.empty() ? ' ' : name.front()))) {
    case 'c':
      if (EqualsIgnoreCase(name, "content-range")) set(content_range);
      else if (EqualsIgnoreCase(name, "content-length")) content_length = ParseDecimalU64(value);
      else if (EqualsIgnoreCase(name, "content-encoding")) {
        set(content_encoding);
        for (char& c : content_encoding) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      }
      break;
    case 'e':
      if (EqualsIgnoreCase(name, "etag")) set(etag);
      break;
    case 'l':
      if (EqualsIgnoreCase(name, "location")) set(location);
      else if (EqualsIgnoreCase(name, "link")) {
        // Several Link headers are one comma-joined list.
        if (!link.empty()) link += ", ";
        link.append(value.substr(0, 8192));
      }
      break;
    case 'r':
      if (EqualsIgnoreCase(name, "retry-after")) set(retry_after);
      else if (EqualsIgnoreCase(name, "ratelimit")) set(ratelimit);
      break;
    case 'x':
      if (EqualsIgnoreCase(name, "x-error-code")) set(x_error_code);
      else if (EqualsIgnoreCase(name, "x-error-message")) set(x_error_message);
      else if (EqualsIgnoreCase(name, "x-repo-commit")) set(x_repo_commit);
      else if (EqualsIgnoreCase(name, "x-linked-size")) set(x_linked_size);
      else if (EqualsIgnoreCase(name, "x-linked-etag")) set(x_linked_etag);
      break;
    default:
      break;
  }
}

std::string WaitPastCap(std::chrono::milliseconds wait, std::chrono::milliseconds cap) {
  return "; server asks to wait " + std::to_string(wait.count() / 1000) + " s, more than the " +
         std::to_string(cap.count() / 1000) + " s allowed";
}

std::optional<std::chrono::milliseconds> ThrottleWait(const ResponseHead& head,
                                                      std::chrono::system_clock::time_point now) {
  if (!head.retry_after.empty()) {
    if (auto s = ParseRetryAfter(head.retry_after, now)) {
      return std::chrono::duration_cast<std::chrono::milliseconds>(*s);
    }
  }
  if (!head.ratelimit.empty()) {
    if (auto s = ParseRateLimitReset(head.ratelimit)) {
      return std::chrono::duration_cast<std::chrono::milliseconds>(*s);
    }
  }
  return std::nullopt;
}

bool IsRetryableHttp(long status) { return status == 408 || status == 429 || status >= 500; }

bool IsRedirectStatus(long status) {
  return status == 301 || status == 302 || status == 303 || status == 307 || status == 308;
}

std::string QuoteServerText(std::string_view text, std::string_view secret) {
  std::string shown(text);
  if (!secret.empty()) {
    for (std::size_t at = shown.find(secret); at != std::string::npos; at = shown.find(secret, at))
      shown.replace(at, secret.size(), "[token]");
  }
  return EscapeForMessage(shown);
}

Status HttpError(long status, const ResponseHead& head, std::string_view what, bool token_sent,
                 std::string_view secret) {
  std::string msg = std::string(what) + ": HTTP " + std::to_string(status);
  if (!head.x_error_code.empty()) msg += " (" + QuoteServerText(head.x_error_code, secret) + ")";
  if (!head.x_error_message.empty()) msg += ": " + QuoteServerText(head.x_error_message, secret);
  // The Hub answers 401 RepoNotFound for a repo that does not exist or that
  // this caller may not see (huggingface_hub: RepositoryNotFoundError).
  if (status == 401 && head.x_error_code == "RepoNotFound") {
    msg += token_sent ? "; repository not found, or the token has no access to it"
                      : "; repository not found, or it is private or gated and no token was sent (set HF_TOKEN)";
    return NotFoundError(std::move(msg));
  }
  if (status == 401 || status == 403) {
    msg += token_sent ? "; the Hugging Face token was rejected or lacks access to this repo (check HF_TOKEN "
                        "or the token file; gated repos need their terms accepted)"
                      : "; no Hugging Face token was sent: set HF_TOKEN or log in (hf auth login) "
                        "if the repo is private or gated";
    return PermissionDeniedError(std::move(msg));
  }
  if (status == 404) {
    if (head.x_error_code == "RepoNotFound") msg += "; repository not found (or private without a token)";
    else if (head.x_error_code == "RevisionNotFound") msg += "; revision not found";
    else if (head.x_error_code == "EntryNotFound") msg += "; file not found in this revision";
    return NotFoundError(std::move(msg));
  }
  // The server holds the file at another size than its listing says.
  if (status == 416) return CorruptionError(msg + "; range not satisfiable (the file is shorter than listed)");
  if (status == 429) return UnavailableError(msg + "; rate limited");
  if (status >= 500) return UnavailableError(std::move(msg));
  return IOError(std::move(msg));
}

}  // namespace exlr8
