#include "client/lease/lease_v2_framing.h"

#include <algorithm>
#include <charconv>

namespace exlr8 {

namespace {

// A bounded, printable quote of bytes from another process.
std::string QuoteLine(std::string_view s) {
  constexpr std::size_t kMax = 64;
  std::string out = "\"";
  for (char c : s.substr(0, kMax)) out += (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') ? c : '?';
  out += s.size() > kMax ? "\"..." : "\"";
  return out;
}

}  // namespace

std::size_t LeaseV2FdCount(const LeaseDescriptionV2& d) {
  std::size_t n = 1;  // the tables
  for (const LeaseAllocation& a : d.allocations) n += a.is_fd() ? 1 : 0;
  return n;
}

Status LeaseLineReader::Append(std::string_view bytes) {
  const auto too_long = [&] {
    failed_ = true;
    return CorruptionError("lease socket: a line is longer than " + std::to_string(max_line_) + " bytes");
  };
  if (failed_) return too_long();
  // Every line is bounded as it arrives, whole or not, before it is kept.
  std::string_view rest = bytes;
  while (!rest.empty()) {
    const std::size_t nl = rest.find('\n');
    const std::size_t run = nl == std::string_view::npos ? rest.size() : nl;
    if (run > max_line_ - std::min(max_line_, current_)) return too_long();
    current_ = nl == std::string_view::npos ? current_ + run : 0;
    rest.remove_prefix(nl == std::string_view::npos ? run : nl + 1);
  }
  buffer_.append(bytes);
  return Status::Ok();
}

std::optional<std::string> LeaseLineReader::NextLine() {
  const std::size_t nl = buffer_.find('\n', start_);
  if (nl == std::string::npos) return std::nullopt;
  std::string line = buffer_.substr(start_, nl - start_);
  start_ = nl + 1;
  if (start_ == buffer_.size()) {
    buffer_.clear();
    start_ = 0;
  }
  return line;
}

Result<LeaseDescriptionV2> ParseLeaseV2Opening(std::string_view line, std::size_t fds_received,
                                               std::string_view source) {
  const std::string from = source.empty() ? std::string() : " from " + std::string(source);
  // A v1 holder's description starts so (description.h writes "version"
  // first); it ends the stream instead of a line and sends no descriptors.
  for (std::string_view v1 : {std::string_view(R"({"version":1,)"), std::string_view(R"({"version":1})")}) {
    if (line.starts_with(v1))
      return FailedPreconditionError("lease description" + from +
                                     ": the holder speaks lease protocol v1 (CUDA IPC handles), not v2");
  }
  if (line.size() > kMaxLeaseDescriptionV2Bytes)
    return CorruptionError("lease description" + from + ": " + std::to_string(line.size()) +
                           " bytes, more than " + std::to_string(kMaxLeaseDescriptionV2Bytes));
  EXLR8_ASSIGN_OR_RETURN(LeaseDescriptionV2 d, ParseLeaseDescriptionV2(line, source));
  const std::size_t want = LeaseV2FdCount(d);
  if (fds_received != want)
    return CorruptionError("lease description" + from + ": names " + std::to_string(want) +
                           " file descriptors (" + std::to_string(want - 1) +
                           " allocations with handle \"fd\" and the tables) but " +
                           std::to_string(fds_received) + " came with it");
  return d;
}

Result<LeaseRelease> ParseLeaseHolderLine(std::string_view line) {
  constexpr std::string_view kPrefix = R"({"type":"release","deadline_s":)";
  const auto bad = [&](const std::string& why) {
    return CorruptionError("lease socket: holder line " + QuoteLine(line) + ": " + why);
  };
  if (!line.starts_with(kPrefix)) return bad(std::string("not ") + std::string(kPrefix) + "D}");
  std::string_view num = line.substr(kPrefix.size());
  if (!num.ends_with('}')) return bad("does not end with '}' after deadline_s");
  num.remove_suffix(1);
  if (num.empty() || num.size() > 4 || (num.size() > 1 && num[0] == '0'))
    return bad("deadline_s is not a decimal in [0, " + std::to_string(kMaxLeaseReleaseDeadlineS) + "]");
  std::uint32_t d = 0;
  const auto [end, ec] = std::from_chars(num.data(), num.data() + num.size(), d);
  if (ec != std::errc() || end != num.data() + num.size() || d > kMaxLeaseReleaseDeadlineS)
    return bad("deadline_s is not a decimal in [0, " + std::to_string(kMaxLeaseReleaseDeadlineS) + "]");
  return LeaseRelease{d};
}

std::string WriteLeaseReleaseLine(std::uint32_t deadline_s) {
  return R"({"type":"release","deadline_s":)" + std::to_string(deadline_s) + "}";
}

}  // namespace exlr8
