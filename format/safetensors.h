// Reader for the safetensors container (spec section 3).
//
//   offset 0     : N, LE u64, byte length of the JSON header
//   offset 8     : N bytes of UTF-8 JSON, may end in ASCII spaces
//   offset 8 + N : data section; tensor data_offsets are relative to it
//
// Incremental use (remote files): call SafetensorsHeaderSize() on the first
// 8 bytes to learn how many bytes the header needs (8 + N, checked against
// the cap and the file size), fetch that many, then ParseSafetensorsHeader().
// Both only look at the bytes they are given.
//
// Validation (spec 3.4), each failure a Corruption naming the file, the
// tensor or field, and the byte offset within the file:
//   - file size >= 8, N <= file size - 8, N <= kMaxSafetensorsHeaderBytes
//   - header is UTF-8 JSON, an object, no duplicate keys, trailing spaces ok
//   - __metadata__ is an object of string values
//   - each tensor: known dtype, shape of non-negative integers, two integer
//     data_offsets 0 <= begin <= end <= data size; end - begin equals
//     product(shape) * dtype size (overflow-checked)
//   - tensors do not overlap; names unique, non-empty; at most
//     kMaxSafetensorsTensors entries
//   - "__pad.*" entries are validated like others but hidden from tensors()
//     (their bytes are filler, never data)
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <string_view>
#include <vector>

#include "format/dtype.h"
#include "format/status.h"

namespace exlr8 {

inline constexpr std::uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;
inline constexpr std::size_t kMaxSafetensorsTensors = 1'000'000;
inline constexpr std::size_t kMaxTensorRank = 8;

struct TensorInfo {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<std::uint64_t> shape;
  std::uint64_t begin = 0;  // relative to the data start
  std::uint64_t end = 0;

  std::uint64_t byte_size() const { return end - begin; }
  std::uint64_t num_elements() const;  // product of shape (1 for rank 0)
};

class SafetensorsHeader {
 public:
  // N, the JSON length.
  std::uint64_t json_length() const { return json_length_; }
  // 8 + N: absolute offset of the data section.
  std::uint64_t data_start() const { return 8 + json_length_; }
  // Tensors in order of their begin offset, padding entries excluded.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  // Number of "__pad." entries seen.
  std::size_t padding_entries() const { return padding_entries_; }
  // Largest `end` over all entries (padding included): bytes of data used.
  std::uint64_t data_end() const { return data_end_; }
  // The tensor named `name`, or nullptr.
  const TensorInfo* Find(std::string_view name) const;
  // Absolute file offset of a tensor's first byte.
  std::uint64_t AbsoluteOffset(const TensorInfo& t) const { return data_start() + t.begin; }
  const std::map<std::string, std::string, std::less<>>& metadata() const { return metadata_; }

 private:
  friend Result<SafetensorsHeader> ParseSafetensorsHeader(std::span<const std::byte>,
                                                          std::optional<std::uint64_t>,
                                                          std::string_view);
  std::uint64_t json_length_ = 0;
  std::vector<TensorInfo> tensors_;
  // Hashed, not ordered: headers hold thousands of names with long common
  // prefixes, and ordered inserts were a large part of parsing one.
  struct NameHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, std::size_t, NameHash, std::equal_to<>> by_name_;
  std::map<std::string, std::string, std::less<>> metadata_;
  std::size_t padding_entries_ = 0;
  std::uint64_t data_end_ = 0;
};

// From the first bytes of a file, the number of bytes ParseSafetensorsHeader
// needs (8 + N). NeedMore if fewer than 8 bytes are given. `file_size`, if
// known, bounds N. `file_name` is used in error messages.
Result<std::uint64_t> SafetensorsHeaderSize(std::span<const std::byte> first_bytes,
                                            std::optional<std::uint64_t> file_size,
                                            std::string_view file_name);

// Parses and validates the header. `bytes` is a prefix of the file of at
// least 8 + N bytes (more is fine and ignored); NeedMore if shorter.
// If `file_size` is known, every tensor must lie inside the file; if not
// (a stream of unknown length) only internal consistency is checked.
Result<SafetensorsHeader> ParseSafetensorsHeader(std::span<const std::byte> bytes,
                                                 std::optional<std::uint64_t> file_size,
                                                 std::string_view file_name);

// "[4,3,16,2]": a shape as error messages print it.
std::string ShapeToString(const std::vector<std::uint64_t>& shape);

// Whether a tensor name is a padding entry.
inline bool IsPaddingName(std::string_view name) { return name.starts_with("__pad."); }

}  // namespace exlr8
