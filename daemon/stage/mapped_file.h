// A read-only memory mapping of a cache data file: the halves of a rank are
// checked and uploaded from the page cache directly, so staging needs no
// host memory of its own however large the rank (a GLM-5.3 rank at TP 4 is
// ~75 GB). The kernel reads the file in as the pages are touched and may
// drop them again under pressure.
//
// A sparse file's holes read as zeros through a mapping: callers read only
// ranges the cache records as verified (Cache::Covers), and check their
// checksums anyway. Cache files never shrink (they are created at their
// remote size and evicted by unlinking, which leaves a mapping intact), so
// no access past the end can fault.
#pragma once

#include <cstddef>
#include <filesystem>
#include <memory>
#include <span>

#include "format/status.h"

namespace exlr8 {

class MappedFile {
 public:
  // Maps `path` (no symlink followed) read-only. Corruption if its size is
  // not `expected_size`; NotFound / IOError from the OS otherwise.
  static Result<std::unique_ptr<MappedFile>> Open(const std::filesystem::path& path, std::uint64_t expected_size);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const std::byte> bytes() const { return {data_, size_}; }

 private:
  MappedFile(const std::byte* data, std::size_t size) : data_(data), size_(size) {}
  const std::byte* data_;
  std::size_t size_;
};

}  // namespace exlr8
