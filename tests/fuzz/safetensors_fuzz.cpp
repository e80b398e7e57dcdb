// Fuzz target for the safetensors header reader (format/safetensors.h).
// The input is a whole file; it is parsed with its size known and unknown.
//
// Invariants: no crash, hang or sanitizer report; errors are Corruption or
// (size unknown, or too few bytes) NeedMore and name the file; an accepted
// header describes tensors that are sorted, disjoint, sized by shape x dtype,
// findable by name, free of padding entries and (size known) inside the
// file; parsing just the 8 + N byte prefix gives the same answer.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "format/dtype.h"
#include "format/safetensors.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

constexpr char kName[] = "fuzz.safetensors";

void CheckHeader(const exlr8::SafetensorsHeader& h, std::optional<std::uint64_t> file_size) {
  EXLR8_FUZZ_CHECK(h.json_length() <= exlr8::kMaxSafetensorsHeaderBytes);
  EXLR8_FUZZ_CHECK(h.data_start() == 8 + h.json_length());
  std::uint64_t prev_end = 0;
  for (const exlr8::TensorInfo& t : h.tensors()) {
    EXLR8_FUZZ_CHECK(!t.name.empty());
    EXLR8_FUZZ_CHECK(!exlr8::IsPaddingName(t.name));
    EXLR8_FUZZ_CHECK(h.Find(t.name) == &t);
    EXLR8_FUZZ_CHECK(t.shape.size() <= exlr8::kMaxTensorRank);
    EXLR8_FUZZ_CHECK(t.begin <= t.end);
    EXLR8_FUZZ_CHECK(t.begin >= prev_end);
    EXLR8_FUZZ_CHECK(t.end <= h.data_end());
    EXLR8_FUZZ_CHECK(t.byte_size() == t.num_elements() * exlr8::DTypeSize(t.dtype));
    if (file_size) EXLR8_FUZZ_CHECK(h.data_start() + t.end <= *file_size);
    prev_end = t.end;
  }
  if (file_size) EXLR8_FUZZ_CHECK(h.data_end() <= *file_size - h.data_start());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);

  for (const std::optional<std::uint64_t> file_size : {std::optional<std::uint64_t>(size),
                                                       std::optional<std::uint64_t>()}) {
    exlr8::Result<exlr8::SafetensorsHeader> r = exlr8::ParseSafetensorsHeader(bytes, file_size, kName);
    if (r.ok()) {
      CheckHeader(*r, file_size);
    } else {
      const exlr8::StatusCode code = r.status().code();
      EXLR8_FUZZ_CHECK(code == exlr8::StatusCode::kCorruption ||
                       (code == exlr8::StatusCode::kNeedMore && !file_size));
      EXLR8_FUZZ_CHECK(r.status().message().rfind(kName, 0) == 0);
    }

    // The prefix the reader asks for is all it needs.
    exlr8::Result<std::uint64_t> need =
        exlr8::SafetensorsHeaderSize(bytes.first(size < 8 ? size : 8), file_size, kName);
    if (need.ok() && *need <= size) {
      exlr8::Result<exlr8::SafetensorsHeader> p =
          exlr8::ParseSafetensorsHeader(bytes.first(static_cast<std::size_t>(*need)), file_size, kName);
      EXLR8_FUZZ_CHECK(p.ok() == r.ok());
      if (!p.ok()) EXLR8_FUZZ_CHECK(p.status().message() == r.status().message());
      if (p.ok()) EXLR8_FUZZ_CHECK(p->tensors().size() == r->tensors().size());
    } else if (need.ok()) {
      EXLR8_FUZZ_CHECK(!file_size);  // a known size bounds N
      EXLR8_FUZZ_CHECK(r.status().code() == exlr8::StatusCode::kNeedMore);
    }
  }
  return 0;
}
