// Unit tests of the Host and Origin rules of the REST API
// (daemon/api/request_authority.h); the end-to-end refusals are in
// tests/daemon/serve_test.cpp.
#include "daemon/api/request_authority.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace exlr8 {
namespace {

using Split = std::optional<std::pair<std::string_view, unsigned>>;

TEST(RequestAuthorityTest, SplitsNamesPortsAndBracketedAddresses) {
  EXPECT_EQ(SplitAuthority("127.0.0.1:8080"), Split(std::make_pair("127.0.0.1", 8080u)));
  EXPECT_EQ(SplitAuthority("localhost"), Split(std::make_pair("localhost", 0u)));
  EXPECT_EQ(SplitAuthority("[::1]:80"), Split(std::make_pair("::1", 80u)));
  EXPECT_EQ(SplitAuthority("[::1]"), Split(std::make_pair("::1", 0u)));
  EXPECT_EQ(SplitAuthority("node:65535"), Split(std::make_pair("node", 65535u)));
}

TEST(RequestAuthorityTest, RefusesMalformedAuthorities) {
  for (const char* bad : {"::1", "host:", "host:0", "host:65536", "host:12a", "host:-1", "[::1", "[::1]x",
                          "[::1]:", "a:b:c"}) {
    EXPECT_EQ(SplitAuthority(bad), std::nullopt) << bad;
  }
}

TEST(RequestAuthorityTest, AllowsLoopbackLiteralsLocalhostAndTheOperatorsNames) {
  const std::vector<std::string> none;
  for (const char* ok : {"127.0.0.1", "127.5.6.7", "::1", "::ffff:127.0.0.1", "localhost", "LocalHost"})
    EXPECT_TRUE(HostNameAllowed(ok, none)) << ok;
  for (const char* refused : {"", "10.0.0.1", "::ffff:10.0.0.1", "0.0.0.0", "attacker.example",
                              "localhost.attacker.example", "127.0.0.1.attacker.example"})
    EXPECT_FALSE(HostNameAllowed(refused, none)) << refused;
  const std::vector<std::string> allowed = {"Node7.example"};
  EXPECT_TRUE(HostNameAllowed("node7.EXAMPLE", allowed));
  EXPECT_FALSE(HostNameAllowed("node8.example", allowed));
}

TEST(RequestAuthorityTest, FieldValuesLoseOptionalWhiteSpaceAndCase) {
  EXPECT_EQ(TrimFieldValue(" \tBearer x \t"), "Bearer x");
  EXPECT_EQ(TrimFieldValue(""), "");
  EXPECT_EQ(AsciiLower("Cross-Site"), "cross-site");
}

}  // namespace
}  // namespace exlr8
