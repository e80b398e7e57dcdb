// What the REST API reads from a request's Host and Origin: an authority
// split into name and port, and whether a name is one this server answers
// to (the defence against DNS rebinding and cross-site requests,
// docs/OPERATIONS.md). Pure; any thread.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace exlr8 {

// ASCII lowercase of `s`.
std::string AsciiLower(std::string_view s);

// `s` without leading and trailing spaces and tabs (an HTTP field value's
// optional white space).
std::string_view TrimFieldValue(std::string_view s);

// A host name or IP literal (no port) a request may name: a loopback
// literal (127.0.0.0/8, ::1, either mapped into IPv6), "localhost", or one
// of `allowed`, without regard to case.
bool HostNameAllowed(std::string_view name, const std::vector<std::string>& allowed);

// "name", "name:port", "[v6]", "[v6]:port" -> name and port (0: none);
// nullopt when malformed (an empty or out-of-range port, a bare IPv6
// address, an unclosed bracket).
std::optional<std::pair<std::string_view, unsigned>> SplitAuthority(std::string_view authority);

}  // namespace exlr8
