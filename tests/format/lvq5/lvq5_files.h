// Shared by the LVQ5 tests: the fixture, a small written file with one part
// of every kind, and byte patching.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "format/lvq5/writer.h"

namespace exlr8::lvq5::testing {

inline std::filesystem::path FixtureDir() {
  return std::filesystem::path(EXLR8_SHARED_DIR) / "fixtures" / "lvq5-tiny";
}

inline std::vector<std::byte> ReadBytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(chars.size());
  for (std::size_t i = 0; i < chars.size(); ++i) out[i] = static_cast<std::byte>(chars[i]);
  return out;
}

// One Tetra record with a tail (d_in 50: 2 blocks + 2 columns), one
// Int4G128, one f16 and one q4 raw tensor with a short last group, a blob.
inline FileSpec SmallSpec() {
  FileSpec s;
  s.tetra.push_back(RandomTetra("layers.0.q_proj.weight", 3, 50, 1));
  s.int4.push_back(RandomInt4G128("layers.0.v_proj.weight", 2, 256, 2));
  s.raw.push_back(RandomRawF16("layers.0.norm.weight", {5}, 3));
  s.raw.push_back(RandomRawQuant("embed.weight", {3, 10}, 4, 4, 4));
  s.blobs.push_back({"config.json", "{\"a\": 1}"});
  return s;
}

inline void PatchU32(std::vector<std::byte>& b, std::uint64_t at, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) b[at + i] = static_cast<std::byte>(v >> (8 * i));
}
inline void PatchU64(std::vector<std::byte>& b, std::uint64_t at, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) b[at + i] = static_cast<std::byte>(v >> (8 * i));
}
inline std::uint64_t GetU64(const std::vector<std::byte>& b, std::uint64_t at) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<std::uint64_t>(b[at + i]);
  return v;
}

}  // namespace exlr8::lvq5::testing
