// Fuzz target for ParseJson (format/json.h).
//
// Invariants: no crash, hang or sanitizer report on any input; errors are
// Corruption with "at byte N: " and N within the input; an accepted document
// dumps to text that parses back to the same dump; a document accepted under
// tight limits is accepted, identically, under the default ones.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "format/json.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using exlr8::JsonValue;

void CheckOffsets(const JsonValue& v, std::size_t size, int depth) {
  EXLR8_FUZZ_CHECK(v.offset() < size);
  EXLR8_FUZZ_CHECK(depth <= 65);
  for (const JsonValue& item : v.as_array()) CheckOffsets(item, size, depth + 1);
  for (const auto& [key, item] : v.as_object()) {
    EXLR8_FUZZ_CHECK(v.Find(key) == &item);  // keys are unique
    CheckOffsets(item, size, depth + 1);
  }
}

void CheckError(const exlr8::Status& s, std::size_t size) {
  EXLR8_FUZZ_CHECK(s.code() == exlr8::StatusCode::kCorruption);
  const std::string& m = s.message();
  EXLR8_FUZZ_CHECK(m.rfind("at byte ", 0) == 0);
  std::size_t offset = 0;
  std::size_t i = 8;
  for (; i < m.size() && m[i] >= '0' && m[i] <= '9'; ++i) offset = offset * 10 + static_cast<std::size_t>(m[i] - '0');
  EXLR8_FUZZ_CHECK(i > 8 && i < m.size() && m[i] == ':');
  EXLR8_FUZZ_CHECK(offset <= size);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  exlr8::Result<JsonValue> full = exlr8::ParseJson(text);
  std::string dump;
  if (full.ok()) {
    CheckOffsets(*full, size, 0);
    dump = full->Dump();
    exlr8::Result<JsonValue> again = exlr8::ParseJson(dump);
    EXLR8_FUZZ_CHECK(again.ok());
    EXLR8_FUZZ_CHECK(again->Dump() == dump);
    EXLR8_FUZZ_CHECK(again->type() == full->type());
  } else {
    CheckError(full.status(), size);
  }

  exlr8::JsonLimits tight;
  tight.max_depth = 3;
  tight.max_elements = 32;
  tight.max_string_bytes = 8;
  exlr8::Result<JsonValue> small = exlr8::ParseJson(text, tight);
  if (small.ok()) {
    EXLR8_FUZZ_CHECK(full.ok());
    EXLR8_FUZZ_CHECK(small->Dump() == dump);
  } else {
    CheckError(small.status(), size);
  }

  // Offsets shift with the base.
  exlr8::Result<JsonValue> shifted = exlr8::ParseJsonAt(text, 1000, tight);
  EXLR8_FUZZ_CHECK(shifted.ok() == small.ok());
  if (shifted.ok()) EXLR8_FUZZ_CHECK(shifted->offset() == small->offset() + 1000);
  return 0;
}
