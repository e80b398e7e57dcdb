// ByteSource over a local file (pread). Thread-compatible: ReadAt may be
// called concurrently (pread has no shared file position).
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "format/byte_source.h"
#include "format/status.h"

namespace exlr8 {

class FileByteSource final : public ByteSource {
 public:
  // Opens `path` read-only. `display_name` (e.g. the release-relative path)
  // is what errors show; defaults to the path.
  static Result<std::unique_ptr<FileByteSource>> Open(const std::filesystem::path& path,
                                                      std::string display_name = {});
  ~FileByteSource() override;
  FileByteSource(const FileByteSource&) = delete;
  FileByteSource& operator=(const FileByteSource&) = delete;

  std::uint64_t size() const override { return size_; }
  Status ReadAt(std::uint64_t offset, std::span<std::byte> dst) const override;
  const std::string& name() const override { return name_; }

 private:
  FileByteSource(int fd, std::uint64_t size, std::string name) : fd_(fd), size_(size), name_(std::move(name)) {}
  int fd_;
  std::uint64_t size_;
  std::string name_;
};

// Reads a whole file into memory, at most `max_bytes` (ResourceExhausted
// above that).
Result<std::string> ReadWholeFile(const std::filesystem::path& path, std::uint64_t max_bytes);

}  // namespace exlr8
