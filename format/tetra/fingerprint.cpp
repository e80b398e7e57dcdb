// The map fingerprint (TETRA-LVQ5.md 2.6): FNV-1a-64 over the domain tag,
// the dimensions, the octads, the rank rows, the trellis columns and the
// decodes of 66 probe words. It names the word -> point map; it is the value
// LVQ5 headers carry at bytes 16..23.
#include <cstdint>
#include <string_view>

#include "format/tetra/tables.h"
#include "format/tetra/word.h"

namespace exlr8::tetra {

namespace {

class Fnv1a64 {
 public:
  void Bytes(const void* data, std::size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < n; ++i) {
      h_ ^= p[i];
      h_ *= 0x100000001b3ULL;
    }
  }
  void U64(std::uint64_t v) {
    unsigned char b[8];
    for (int i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>(v >> (8 * i));
    Bytes(b, 8);
  }
  void I32(std::int32_t v) {
    const auto u = static_cast<std::uint32_t>(v);
    unsigned char b[4];
    for (int i = 0; i < 4; ++i) b[i] = static_cast<unsigned char>(u >> (8 * i));
    Bytes(b, 4);
  }
  std::uint64_t value() const { return h_; }

 private:
  std::uint64_t h_ = 0xcbf29ce484222325ULL;
};

// The SplitMix64 output finalizer.
std::uint64_t SplitMix64Mix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

std::uint64_t MapFingerprint(const Tables& t, std::string_view domain) {
  Fnv1a64 h;
  h.Bytes(domain.data(), domain.size());
  h.U64(kDim);
  h.U64(kWordBits);
  h.U64(kLabelBits);
  h.U64(t.n0);
  for (std::uint32_t o : t.octads) h.U64(o);
  h.U64(t.rows.size());
  for (std::uint32_t row : t.rows) h.U64(row);
  h.U64(t.columns.size());
  for (std::uint32_t c : t.columns) h.U64(c);
  auto probe = [&](std::uint64_t w) {
    h.U64(w);
    std::int8_t y[kDim];
    DecodeCoords(t, w, y);
    for (std::int8_t v : y) h.I32(v);
  };
  probe(0);
  probe(kLabelMask);
  for (std::uint64_t k = 0; k < 64; ++k) probe(SplitMix64Mix(1 + k) & kLabelMask);
  return h.value();
}

}  // namespace exlr8::tetra
