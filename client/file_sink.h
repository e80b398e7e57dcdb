// DirectoryReleaseSink: the file-system ReleaseSink (format/release_writer.h).
//
// Writes each file under a root directory, creating parent directories as
// needed. A file is written to "<path>.tmp.<pid>" and renamed into place, so
// an interrupted run never leaves a half-written file under its final name
// (the temporary is removed on failure). Sparse files are created with
// ftruncate() to their full size and only their extents pwrite()n, so the
// holes take no disk space on file systems that support sparse files.
//
// No fsync by default (synthetic releases are reproducible from the seed);
// set `sync` to fsync each file before the rename.
//
// Errors: InvalidArgument for a bad relative path (empty, absolute, a "." or
// ".." component, an empty component, a NUL byte) or bad extents; IOError
// naming the path and errno text for any failing system call;
// ResourceExhausted for ENOSPC/EDQUOT.
//
// Thread rules: one writer at a time per sink (no internal locking).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "format/release_writer.h"
#include "format/status.h"

namespace exlr8 {

class DirectoryReleaseSink final : public ReleaseSink {
 public:
  // `root` need not exist yet; it is created on the first write.
  explicit DirectoryReleaseSink(std::string root, bool sync = false);

  Status WriteFile(std::string_view rel_path, std::span<const std::byte> bytes) override;
  Status WriteSparseFile(std::string_view rel_path, std::span<const SparseExtent> extents,
                         std::uint64_t total_size) override;

  const std::string& root() const { return root_; }

 private:
  // Checks `rel_path`, creates its parent directories, returns root/rel_path.
  Result<std::string> Prepare(std::string_view rel_path) const;
  Status WriteExtents(std::string_view rel_path, std::span<const SparseExtent> extents,
                      std::uint64_t total_size) const;

  std::string root_;
  bool sync_;
};

// Whether `rel_path` is a clean relative path (see above). Exposed for tests.
Status CheckRelativePath(std::string_view rel_path);

}  // namespace exlr8
