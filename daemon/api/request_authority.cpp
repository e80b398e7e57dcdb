#include "daemon/api/request_authority.h"

#include <algorithm>
#include <boost/asio/ip/address.hpp>
#include <boost/system/error_code.hpp>
#include <cctype>
#include <charconv>

namespace exlr8 {

namespace net = boost::asio;

std::string AsciiLower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view TrimFieldValue(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool HostNameAllowed(std::string_view name, const std::vector<std::string>& allowed) {
  if (name.empty()) return false;
  boost::system::error_code ec;
  const auto ip = net::ip::make_address(std::string(name), ec);
  if (!ec) {
    if (ip.is_v6() && ip.to_v6().is_v4_mapped())
      return net::ip::make_address_v4(net::ip::v4_mapped, ip.to_v6()).is_loopback();
    return ip.is_loopback();
  }
  const std::string lower = AsciiLower(name);
  if (lower == "localhost") return true;
  return std::any_of(allowed.begin(), allowed.end(), [&](const std::string& a) { return AsciiLower(a) == lower; });
}

std::optional<std::pair<std::string_view, unsigned>> SplitAuthority(std::string_view authority) {
  std::string_view name = authority, port;
  if (!authority.empty() && authority.front() == '[') {
    const auto close = authority.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    name = authority.substr(1, close - 1);
    const std::string_view rest = authority.substr(close + 1);
    if (!rest.empty() && rest.front() != ':') return std::nullopt;
    if (!rest.empty()) port = rest.substr(1);
    if (rest == ":") return std::nullopt;
  } else if (const auto colon = authority.find(':'); colon != std::string_view::npos) {
    name = authority.substr(0, colon);
    port = authority.substr(colon + 1);
    if (port.empty() || port.find(':') != std::string_view::npos) return std::nullopt;  // bare IPv6
  }
  unsigned number = 0;
  if (!port.empty()) {
    const auto [end, err] = std::from_chars(port.data(), port.data() + port.size(), number);
    if (err != std::errc() || end != port.data() + port.size() || number == 0 || number > 65535)
      return std::nullopt;
  }
  return std::make_pair(name, number);
}

}  // namespace exlr8
