// UTF-8 as JSON and the node's messages need it (RFC 3629: no overlong
// forms, no surrogates, nothing above U+10FFFF). Pure; any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace exlr8 {

// The length of the valid UTF-8 sequence starting at p (a lead byte of
// 0x80 or more), or 0 if it is invalid or runs past `end`.
std::size_t Utf8SequenceLength(const unsigned char* p, const unsigned char* end);

// Appends code point `cp` (REQUIRES: at most U+10FFFF, not a surrogate)
// as UTF-8.
void AppendUtf8(std::string& out, std::uint32_t cp);

// Whether `s` is valid UTF-8, as every JSON string must be.
bool IsValidUtf8(std::string_view s);

}  // namespace exlr8
