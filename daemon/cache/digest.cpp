#include "daemon/cache/digest.h"

#include <openssl/evp.h>

#include <cstdio>

namespace exlr8 {

struct StreamDigest::Rep {
  Kind kind;
  std::uint64_t size;
  EVP_MD_CTX* ctx = nullptr;
  ~Rep() { EVP_MD_CTX_free(ctx); }
  bool Init() {
    if (EVP_DigestInit_ex(ctx, kind == Kind::kSha256 ? EVP_sha256() : EVP_sha1(), nullptr) != 1) return false;
    if (kind == Kind::kGitBlobSha1) {
      const std::string head = "blob " + std::to_string(size) + std::string(1, '\0');
      return EVP_DigestUpdate(ctx, head.data(), head.size()) == 1;
    }
    return true;
  }
};

Result<StreamDigest> StreamDigest::Create(Kind kind, std::uint64_t size) {
  StreamDigest d;
  d.rep_ = std::make_unique<Rep>();
  d.rep_->kind = kind;
  d.rep_->size = size;
  d.rep_->ctx = EVP_MD_CTX_new();
  if (!d.rep_->ctx || !d.rep_->Init()) return InternalError("OpenSSL digest initialisation failed");
  return d;
}

StreamDigest::~StreamDigest() = default;
StreamDigest::StreamDigest(StreamDigest&&) noexcept = default;
StreamDigest& StreamDigest::operator=(StreamDigest&&) noexcept = default;

void StreamDigest::Update(std::span<const std::byte> bytes) {
  if (!bytes.empty()) EVP_DigestUpdate(rep_->ctx, bytes.data(), bytes.size());
}

std::string StreamDigest::FinishHex() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(rep_->ctx, md, &n);
  std::string hex;
  hex.reserve(2 * n);
  char buf[3];
  for (unsigned int i = 0; i < n; ++i) {
    std::snprintf(buf, sizeof buf, "%02x", md[i]);
    hex += buf;
  }
  rep_->Init();
  return hex;
}

void StreamDigest::Reset() { rep_->Init(); }

}  // namespace exlr8
