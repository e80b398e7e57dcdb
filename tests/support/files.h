// Whole-file reads for tests, in the two shapes tests compare with: text
// (std::string, every byte kept) and bytes. A file that cannot be read
// reads as empty; the test's comparison then says what was expected.
#pragma once

#include <cstddef>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace exlr8::testing {

inline std::string ReadFileText(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline std::vector<std::byte> ReadFileBytes(const std::filesystem::path& path) {
  const std::string text = ReadFileText(path);
  std::vector<std::byte> out(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) out[i] = static_cast<std::byte>(text[i]);
  return out;
}

}  // namespace exlr8::testing
