// Fuzz target for the expert index reader (format/expert_index.h). The input
// is a whole index file.
//
// Invariants: no crash, hang, sanitizer report or unbounded allocation;
// errors are Corruption and name the file; an accepted index has consistent
// geometry, every half has length 16*K*hidden, checksum tails lie inside the
// file, and reading a half's vectors gives finite values or a Corruption
// naming the file.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>

#include "format/expert_index.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  exlr8::SpanByteSource src(bytes, "fuzz.index.safetensors");
  auto ix = exlr8::ExpertIndex::Read(src, 3);
  if (!ix.ok()) {
    EXLR8_FUZZ_CHECK(ix.status().code() == exlr8::StatusCode::kCorruption);
    EXLR8_FUZZ_CHECK(ix.status().message().find("fuzz.index.safetensors") != std::string::npos);
    return 0;
  }
  EXLR8_FUZZ_CHECK(ix->hidden() > 0 && ix->hidden() % 128 == 0);
  EXLR8_FUZZ_CHECK(ix->experts() > 0 && ix->halves_per_expert() > 0);
  EXLR8_FUZZ_CHECK(!ix->widths().empty());
  for (bool shared : {false, true}) {
    for (int k : shared ? ix->shared_widths() : ix->widths()) {
      const int e = shared ? exlr8::kSharedExpert : static_cast<int>(ix->experts() - 1);
      for (exlr8::Proj p : {exlr8::Proj::kGate, exlr8::Proj::kDown}) {
        const std::uint32_t h = ix->halves_per_expert() - 1;
        auto he = ix->Half(e, p, h, k);
        EXLR8_FUZZ_CHECK(he.ok());
        EXLR8_FUZZ_CHECK(he->length == 16ull * static_cast<std::uint64_t>(k) * ix->hidden());
        for (const exlr8::ByteRun& r : ix->ChecksumTail(e, p, h, k)) EXLR8_FUZZ_CHECK(r.end() <= size);
        std::vector<float> u, v;
        exlr8::Status s = ix->LoadHalfVectors(src, e, p, h, k, &u, &v);
        if (s.ok()) {
          EXLR8_FUZZ_CHECK(u.size() * v.size() == 128ull * ix->hidden());
          for (float x : u) EXLR8_FUZZ_CHECK(std::isfinite(x));
          for (float x : v) EXLR8_FUZZ_CHECK(std::isfinite(x));
        } else {
          EXLR8_FUZZ_CHECK(s.code() == exlr8::StatusCode::kCorruption);
          EXLR8_FUZZ_CHECK(s.message().find("fuzz.index.safetensors") != std::string::npos);
        }
      }
    }
  }
  return 0;
}
