// Writer for the safetensors container (spec section 3), the inverse of
// format/safetensors.h. Pure: it computes a layout and produces bytes; the
// caller decides where they go (see format/release_writer.h, ReleaseSink).
//
// Produced layout:
//
//   offset 0      : N, LE u64
//   offset 8      : N bytes of JSON: {"__metadata__": {...}, "<name>": {"dtype": ..,
//                   "shape": [..], "data_offsets": [begin, end]}, ...} padded with
//                   ASCII spaces so that 8 + N is a multiple of
//                   max(8, alignment) (the data start is aligned)
//   offset 8 + N  : tensor data in the order the tensors were added; a tensor
//                   marked `aligned` starts at a multiple of `alignment`
//                   (relative and therefore also absolute, since the data
//                   start is aligned); gaps are covered by "__pad.<n>" U8
//                   entries (n = 0, 1, ... per file) so the data section has
//                   no holes, as upstream safetensors requires
//
// Two ways to use it:
//   - SafetensorsBuilder: add tensor descriptions (no bytes), call Layout(),
//     and fill the bytes yourself at the placed offsets. This is how the
//     release writer lays out multi-gigabyte width files, or writes only
//     their header plus the total size (sparse "index-only" files).
//   - SerializeSafetensors(): tensors with their bytes -> the whole file.
//
// Thread rules: none (plain values; no shared state).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "format/dtype.h"
#include "format/status.h"

namespace exlr8 {

struct SafetensorsWriteOptions {
  // Byte alignment of every tensor added with aligned = true. Must be a
  // power of two (1 = no alignment). The data start is aligned to
  // max(8, alignment).
  std::uint64_t alignment = 1;
  // Bytes of `__pad.` filler at the start of the data section, before the
  // first tensor: where fillers sit is the writer's choice (spec U-1), so
  // readers must not assume the first tensor starts the data.
  std::uint64_t leading_padding = 0;
  // `__metadata__` entries, emitted in this order. Keys must be unique.
  std::vector<std::pair<std::string, std::string>> metadata;
};

// One tensor as placed by Layout().
struct PlacedTensor {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<std::uint64_t> shape;
  std::uint64_t begin = 0;  // relative to the data start
  std::uint64_t end = 0;
  std::uint64_t absolute_offset = 0;  // data_start + begin

  std::uint64_t byte_size() const { return end - begin; }
};

struct SafetensorsLayout {
  // The first data_start bytes of the file: 8-byte length + padded JSON.
  std::vector<std::byte> head;
  std::uint64_t data_start = 0;  // == head.size()
  std::uint64_t file_size = 0;   // data_start + end of the last entry
  // Real tensors in the order they were added (padding entries excluded).
  std::vector<PlacedTensor> tensors;
  std::size_t padding_entries = 0;
};

// Collects tensor descriptions and computes their placement.
class SafetensorsBuilder {
 public:
  explicit SafetensorsBuilder(SafetensorsWriteOptions options = {});

  // Adds a tensor description. `aligned`: start this tensor at a multiple of
  // options.alignment. Returns InvalidArgument (naming the tensor) for an
  // empty name, a name starting with "__pad." or equal to "__metadata__", a
  // duplicate name, rank > 8, or a byte size that overflows uint64.
  Status Add(std::string name, DType dtype, std::vector<std::uint64_t> shape, bool aligned = true);

  std::size_t size() const { return tensors_.size(); }

  // Computes offsets, padding entries and the header bytes. InvalidArgument
  // if the alignment is not a power of two or the metadata has duplicate
  // keys; ResourceExhausted if the header would exceed
  // kMaxSafetensorsHeaderBytes or the data size overflows.
  Result<SafetensorsLayout> Layout() const;

 private:
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<std::uint64_t> shape;
    std::uint64_t bytes;
    bool aligned;
  };
  SafetensorsWriteOptions options_;
  std::vector<Entry> tensors_;
  std::unordered_set<std::string> names_;  // for duplicate detection
};

// A tensor with its bytes, for SerializeSafetensors().
struct TensorBytes {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<std::uint64_t> shape;
  std::vector<std::byte> bytes;  // exactly product(shape) * DTypeSize(dtype)
  bool aligned = true;
};

// The whole file. InvalidArgument (naming the tensor, expected vs actual
// size) if a tensor's bytes do not match its shape and dtype, plus the
// errors of Add() and Layout().
Result<std::vector<std::byte>> SerializeSafetensors(std::span<const TensorBytes> tensors,
                                                    const SafetensorsWriteOptions& options = {});

}  // namespace exlr8
