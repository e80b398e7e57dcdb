// Streaming whole-file digests (OpenSSL EVP): SHA-256 for LFS files as the
// hub lists them, and git's blob SHA-1 ("blob <size>\0" + content) for
// regular files.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "format/status.h"

namespace exlr8 {

class StreamDigest {
 public:
  enum class Kind { kSha256, kGitBlobSha1 };
  // `size` is the file's size; git blob ids hash it first.
  static Result<StreamDigest> Create(Kind kind, std::uint64_t size);
  ~StreamDigest();
  StreamDigest(StreamDigest&&) noexcept;
  StreamDigest& operator=(StreamDigest&&) noexcept;

  void Update(std::span<const std::byte> bytes);
  // Lowercase hex digest of everything since Create or Reset; the state is
  // reset afterwards.
  std::string FinishHex();
  // Starts over (a refetch).
  void Reset();

 private:
  StreamDigest() = default;
  struct Rep;
  std::unique_ptr<Rep> rep_;
};

}  // namespace exlr8
