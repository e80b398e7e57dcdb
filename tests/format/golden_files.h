// Test helpers for the decoder tests: whole-file reads of the shared
// fixtures, SHA-256 digests, and tensor lookup in a loaded safetensors file.
#pragma once

#include <openssl/evp.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <span>
#include <string>
#include <vector>

#include "format/safetensors.h"
#include "tests/support/files.h"

namespace exlr8::testing {

inline std::string SharedPath(const std::string& rel) { return std::string(EXLR8_SHARED_DIR) + "/" + rel; }

// The whole file, or an empty vector if it cannot be read.
inline std::vector<std::byte> ReadWholeFile(const std::string& path) { return ReadFileBytes(path); }

inline std::string Sha256Hex(const void* data, std::size_t n) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data, n, md, &len, EVP_sha256(), nullptr);
  std::string hex;
  char buf[3];
  for (unsigned i = 0; i < len; ++i) {
    std::snprintf(buf, sizeof buf, "%02x", md[i]);
    hex += buf;
  }
  return hex;
}

template <typename T>
std::string Sha256Hex(const std::vector<T>& v) {
  return Sha256Hex(v.data(), v.size() * sizeof(T));
}

// A safetensors file held in memory with its parsed header.
struct LoadedFile {
  std::string path;
  std::vector<std::byte> bytes;
  SafetensorsHeader header;

  // Stored bytes of tensor `name`; empty if absent.
  std::span<const std::byte> Tensor(const std::string& name) const {
    const TensorInfo* t = header.Find(name);
    if (t == nullptr) return {};
    return std::span<const std::byte>(bytes).subspan(header.AbsoluteOffset(*t), t->byte_size());
  }
  // An F32 tensor as floats (LE host).
  std::vector<float> F32(const std::string& name) const {
    auto b = Tensor(name);
    std::vector<float> out(b.size() / 4);
    if (!out.empty()) std::memcpy(out.data(), b.data(), out.size() * 4);
    return out;
  }
};

// Loads and parses; `ok` false (and `error` set) on failure.
inline Result<LoadedFile> LoadSafetensors(const std::string& path) {
  LoadedFile f;
  f.path = path;
  f.bytes = ReadWholeFile(path);
  if (f.bytes.empty()) return IOError("cannot read " + path);
  EXLR8_ASSIGN_OR_RETURN(f.header, ParseSafetensorsHeader(f.bytes, f.bytes.size(), path));
  return f;
}

}  // namespace exlr8::testing
