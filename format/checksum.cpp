#include "format/checksum.h"

#define XXH_STATIC_LINKING_ONLY  // XXH64_state_t by value
#include <xxhash.h>

#include <cstdio>

namespace exlr8 {

struct Xxh64::State {
  XXH64_state_t s;
};

Xxh64::Xxh64() : state_(std::make_unique<State>()) { Reset(); }
Xxh64::~Xxh64() = default;
Xxh64::Xxh64(const Xxh64& other) : state_(std::make_unique<State>(*other.state_)) {}
Xxh64& Xxh64::operator=(const Xxh64& other) {
  if (this != &other) *state_ = *other.state_;
  return *this;
}
Xxh64::Xxh64(Xxh64&&) noexcept = default;
Xxh64& Xxh64::operator=(Xxh64&&) noexcept = default;

void Xxh64::Reset() { XXH64_reset(&state_->s, 0); }
void Xxh64::Update(std::span<const std::byte> bytes) {
  if (!bytes.empty()) XXH64_update(&state_->s, bytes.data(), bytes.size());
}
std::uint64_t Xxh64::Digest() const { return XXH64_digest(&state_->s); }
std::uint64_t Xxh64::Hash(std::span<const std::byte> bytes) {
  return XXH64(bytes.data(), bytes.size(), 0);
}

std::string Hex64(std::uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace exlr8
