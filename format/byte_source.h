// A bounded random-access reader: how format/ reads without doing I/O.
//
// format/ code that needs more than one contiguous span (an index file of
// which only some tensors matter) takes a ByteSource; daemon/ and client/
// implement it over files (pread) or the cache, tests over memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "format/status.h"

namespace exlr8 {

class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // Total size in bytes.
  virtual std::uint64_t size() const = 0;
  // Fills `dst` with bytes [offset, offset + dst.size()). Returns OutOfRange-
  // style Corruption if that runs past size(), IOError if the read fails.
  // May be called from one thread at a time unless the implementation says
  // otherwise.
  virtual Status ReadAt(std::uint64_t offset, std::span<std::byte> dst) const = 0;
  // A name for error messages (a path).
  virtual const std::string& name() const = 0;
};

// A ByteSource over memory the caller keeps alive.
class SpanByteSource final : public ByteSource {
 public:
  SpanByteSource(std::span<const std::byte> bytes, std::string name)
      : bytes_(bytes), name_(std::move(name)) {}
  std::uint64_t size() const override { return bytes_.size(); }
  Status ReadAt(std::uint64_t offset, std::span<std::byte> dst) const override {
    if (offset > bytes_.size() || dst.size() > bytes_.size() - offset)
      return CorruptionError(name_ + ": read of " + std::to_string(dst.size()) + " bytes at offset " +
                             std::to_string(offset) + " runs past the end (" +
                             std::to_string(bytes_.size()) + " bytes)");
    if (!dst.empty()) std::memcpy(dst.data(), bytes_.data() + offset, dst.size());
    return Status::Ok();
  }
  const std::string& name() const override { return name_; }

 private:
  std::span<const std::byte> bytes_;
  std::string name_;
};

}  // namespace exlr8
