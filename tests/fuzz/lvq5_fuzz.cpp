// Fuzz target for the LVQ5 reader and decoders (format/lvq5/). The input is
// a whole LVQ5 file: `exlr8 verify` and the daemon's pull run exactly these
// calls on files from a hub.
//
// Invariants: no crash, hang, sanitizer report or unbounded allocation;
// every error is Corruption naming the file and a byte offset; an accepted
// file's parts tile it (records, raw tensors, blobs back to back from byte
// 32 to its end), each record's ranges lie inside the file, and the
// decoders hand out exactly the values the index promises.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "format/lvq5/decode.h"
#include "format/lvq5/index.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

constexpr char kName[] = "fuzz.lvq5.bin";
// Values decoded per part: the decoders' checks are per value, and a large
// part would spend the fuzzer's time on arithmetic.
constexpr std::uint64_t kMaxDecodedValues = 1 << 16;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace exlr8::lvq5;
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  exlr8::SpanByteSource src(bytes, kName);
  auto ix = ReadIndex(src);
  if (!ix.ok()) {
    EXLR8_FUZZ_CHECK(ix.status().code() == exlr8::StatusCode::kCorruption);
    EXLR8_FUZZ_CHECK(ix.status().message().find(kName) != std::string::npos);
    EXLR8_FUZZ_CHECK(ix.status().message().find(" at byte ") != std::string::npos);
    return 0;
  }
  EXLR8_FUZZ_CHECK(ix->size == size);
  std::uint64_t at = kHeaderSize;
  for (const auto& m : ix->matrices) {
    EXLR8_FUZZ_CHECK(m.offset == at && m.end > m.offset && m.end <= size);
    at = m.end;
    std::uint64_t n = 0;
    if (m.kind == Kind::kTetra) {
      EXLR8_FUZZ_CHECK(m.codes_offset + m.codes_length == m.end);
      EXLR8_FUZZ_CHECK(m.codes_length == 6ull * m.d_out * (m.d_in / 24));
      if (std::uint64_t{m.d_out} * m.d_in > kMaxDecodedValues) continue;
      EXLR8_FUZZ_CHECK(DecodeTetraCoords(src, m, [&](std::span<const std::int8_t> v) {
                         n += v.size();
                         for (auto y : v) EXLR8_FUZZ_CHECK(y >= -10 && y <= 10);
                         return exlr8::Status::Ok();
                       }).ok());
      EXLR8_FUZZ_CHECK(n == 24ull * m.d_out * m.nblocks);
      n = 0;
    } else {
      EXLR8_FUZZ_CHECK(m.payload_offset + m.payload_length == m.end);
      if (std::uint64_t{m.d_out} * m.d_in > kMaxDecodedValues) continue;
    }
    EXLR8_FUZZ_CHECK(DecodeMatrix(src, m, [&](std::span<const float> v) {
                       n += v.size();
                       return exlr8::Status::Ok();
                     }).ok());
    EXLR8_FUZZ_CHECK(n == std::uint64_t{m.d_out} * m.d_in);
  }
  EXLR8_FUZZ_CHECK(ix->raw_offset == at);
  at += 4;
  for (const auto& t : ix->raw) {
    EXLR8_FUZZ_CHECK(t.offset == at && t.end <= size);
    at = t.end;
    if (t.count > kMaxDecodedValues) continue;
    std::uint64_t n = 0;
    EXLR8_FUZZ_CHECK(DecodeRaw(src, t, [&](std::span<const float> v) {
                       n += v.size();
                       return exlr8::Status::Ok();
                     }).ok());
    EXLR8_FUZZ_CHECK(n == t.count);
  }
  EXLR8_FUZZ_CHECK(ix->blobs_offset == at);
  at += 4;
  for (const auto& b : ix->blobs) {
    EXLR8_FUZZ_CHECK(b.offset == at && b.data_offset + b.length == b.end && b.end <= size);
    at = b.end;
  }
  EXLR8_FUZZ_CHECK(at == size);
  return 0;
}
