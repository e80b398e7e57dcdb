// Helpers shared by the format tests.
#pragma once

#include <cstddef>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace exlr8::testing {

inline std::filesystem::path SharedDir() { return std::filesystem::path(EXLR8_SHARED_DIR); }
inline std::filesystem::path TinyRelease() { return SharedDir() / "fixtures" / "exlr8-tiny"; }
inline std::filesystem::path GoldenDir() { return SharedDir() / "fixtures" / "golden"; }

inline std::vector<std::byte> ReadBytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<char> c((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> b(c.size());
  for (size_t i = 0; i < c.size(); ++i) b[i] = static_cast<std::byte>(c[i]);
  return b;
}

inline std::string ReadText(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Replaces the first occurrence of `from` by `to` (same length) inside the
// bytes, to hand-build broken files from good ones. Returns false if absent.
inline bool PatchBytes(std::vector<std::byte>& bytes, const std::string& from, const std::string& to) {
  if (from.size() != to.size()) return false;
  std::string_view view(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  auto pos = view.find(from);
  if (pos == std::string_view::npos) return false;
  for (size_t i = 0; i < to.size(); ++i) bytes[pos + i] = static_cast<std::byte>(to[i]);
  return true;
}

}  // namespace exlr8::testing
