// XXH64 (seed 0) checksums of spec section 5, usable incrementally.
//
// A half's digest covers its trellis bytes, then its 128-element vector
// slice, then its block-vector row, all as stored bytes (spec 5.3). Bytes may
// arrive in pieces of any size: Update() them in order, then Digest().
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace exlr8 {

class Xxh64 {
 public:
  Xxh64();
  ~Xxh64();
  Xxh64(const Xxh64& other);
  Xxh64& operator=(const Xxh64& other);
  Xxh64(Xxh64&&) noexcept;
  Xxh64& operator=(Xxh64&&) noexcept;

  void Update(std::span<const std::byte> bytes);
  // The digest of everything Update()d so far; the state stays usable.
  std::uint64_t Digest() const;
  void Reset();

  // One-shot.
  static std::uint64_t Hash(std::span<const std::byte> bytes);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// 16 lowercase hex digits, zero-padded (the plan's JSON form).
std::string Hex64(std::uint64_t v);

}  // namespace exlr8
