// UrlSigner: HMAC-SHA256 signatures for the simulator's CDN URLs.
//
// A signed URL names "<repo>/<commit>/<path>" and an expiry (UNIX seconds);
// sig = hex(HMAC-SHA256(key, "<repo>/<commit>/<path>\n<expires>")). The key is
// 32 random bytes from OpenSSL's RAND_bytes, new per process.
// RevokeAll() retires the current key (keeping it to recognise its
// signatures) and draws a new one: every URL issued so far then verifies as
// kExpired, which is how "expire all signed URLs now" is simulated.
//
// Thread rules: internally locked; all methods may be called from any thread.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace exlr8::hubsim {

class UrlSigner {
 public:
  enum class Verdict { kOk, kExpired, kBadSignature };

  UrlSigner();
  std::string Sign(std::string_view resource, std::uint64_t expires) const;
  // `now` is UNIX seconds. A URL past its expiry is kExpired even when its
  // signature is good; a URL signed by a retired key is kExpired too.
  Verdict Verify(std::string_view resource, std::uint64_t expires, std::string_view sig,
                 std::uint64_t now) const;
  void RevokeAll();

 private:
  static std::string Mac(const std::string& key, std::string_view resource, std::uint64_t expires);
  mutable std::mutex mu_;
  std::string key_;                   // guarded by mu_
  std::vector<std::string> retired_;  // guarded by mu_
};

}  // namespace exlr8::hubsim
