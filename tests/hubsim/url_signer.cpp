#include "tests/hubsim/url_signer.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <random>

#include "tests/hubsim/http_util.h"

namespace exlr8::hubsim {
namespace {

std::string NewKey() {
  std::string key(32, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(key.data()), static_cast<int>(key.size())) != 1) {
    // RAND_bytes only fails without an entropy source; random_device is the fallback.
    std::random_device rd;
    for (auto& c : key) c = static_cast<char>(rd());
  }
  return key;
}

}  // namespace

UrlSigner::UrlSigner() : key_(NewKey()) {}

std::string UrlSigner::Mac(const std::string& key, std::string_view resource, std::uint64_t expires) {
  std::string msg(resource);
  msg += '\n';
  msg += std::to_string(expires);
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(msg.data()),
       msg.size(), out, &n);
  return HexEncode(out, n);
}

std::string UrlSigner::Sign(std::string_view resource, std::uint64_t expires) const {
  std::lock_guard lock(mu_);
  return Mac(key_, resource, expires);
}

UrlSigner::Verdict UrlSigner::Verify(std::string_view resource, std::uint64_t expires, std::string_view sig,
                                     std::uint64_t now) const {
  auto same = [&](const std::string& mac) {
    return mac.size() == sig.size() && CRYPTO_memcmp(mac.data(), sig.data(), mac.size()) == 0;
  };
  std::lock_guard lock(mu_);
  if (same(Mac(key_, resource, expires))) return now > expires ? Verdict::kExpired : Verdict::kOk;
  for (const auto& k : retired_) {
    if (same(Mac(k, resource, expires))) return Verdict::kExpired;
  }
  return Verdict::kBadSignature;
}

void UrlSigner::RevokeAll() {
  std::lock_guard lock(mu_);
  retired_.push_back(key_);
  key_ = NewKey();
}

}  // namespace exlr8::hubsim
