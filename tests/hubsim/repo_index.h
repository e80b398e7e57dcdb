// RepoIndex: one release directory seen as a Hugging Face model repo at a
// single commit.
//
// Build() walks the directory once, opens every regular file read-only and
// hashes it, the way the Hub would have stored it:
//   - LFS files (*.safetensors, *.bin and the other extensions of the Hub's
//     default .gitattributes, and any file >= lfs_threshold bytes):
//     sha256 of the content, a git-lfs pointer
//       "version https://git-lfs.github.com/spec/v1\noid sha256:<hex>\nsize <n>\n"
//     whose length is pointer_size, and git_oid = git blob SHA-1 of that
//     pointer (what the Hub reports as blobId / tree oid for LFS files).
//   - regular files: git_oid = SHA-1 of "blob <size>\0" + content.
// The commit id is SHA-1 over the sorted "path\0size\0oid\n" lines (oid =
// sha256 for LFS, git_oid otherwise), so it changes with any content change
// and is stable across restarts.
//
// Paths are repo-relative with '/' separators. Symlinks and non-regular
// files are skipped, as is any ".git" directory.
//
// Thread rules: immutable after Build(); every const method may be called
// from any thread. The file descriptors stay open for the index's lifetime
// and are read with pread(), which needs no lock.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "format/status.h"

namespace exlr8::hubsim {

inline constexpr std::uint64_t kDefaultLfsThreshold = 10ull * 1000 * 1000;  // 10 MB

struct RepoFile {
  std::string path;          // repo-relative, e.g. "experts/exlr8-layer-003.k2.safetensors"
  std::uint64_t size = 0;
  bool lfs = false;
  std::string git_oid;       // 40 hex
  std::string sha256;        // 64 hex; LFS only
  std::uint64_t pointer_size = 0;  // LFS only
  int fd = -1;               // owned by the RepoIndex
  // sha256 is a stand-in, sha256("exlr8-hubsim unhashed\n<path>\n<size>\n<mtime>"),
  // not of the content (Build's unhashed_glob): for benchmarks on sparse
  // releases whose clients never verify these files whole.
  bool unhashed = false;
};

struct RepoDir {
  std::string path;     // e.g. "experts"; never "" (the root is not listed)
  std::string tree_oid; // 40 hex, SHA-1 of the sorted child names and oids
};

class RepoIndex {
 public:
  // Errors: InvalidArgument (bad repo id), NotFound (dir missing or not a
  // directory), IOError (open/read failed).
  // REQUIRES: repo_id is "name" or "org/name" of [A-Za-z0-9._-].
  // LFS files whose path matches `unhashed_glob` (fnmatch, '*' also matches
  // '/'; empty: none) are not read: see RepoFile::unhashed.
  static Result<std::unique_ptr<RepoIndex>> Build(std::string repo_id, const std::string& dir,
                                                  std::uint64_t lfs_threshold = kDefaultLfsThreshold,
                                                  const std::string& unhashed_glob = "");
  ~RepoIndex();
  RepoIndex(const RepoIndex&) = delete;
  RepoIndex& operator=(const RepoIndex&) = delete;

  const std::string& id() const { return id_; }
  const std::string& commit() const { return commit_; }
  const std::string& dir() const { return dir_; }
  // Sorted by path.
  const std::vector<RepoFile>& files() const { return files_; }
  // Every directory that holds a file (at any depth), sorted by path.
  const std::vector<RepoDir>& dirs() const { return dirs_; }
  std::uint64_t total_size() const { return total_size_; }

  // nullptr when `path` is not a file of the repo (exact match only: no
  // normalisation, so "../x" or "/etc/passwd" never match).
  const RepoFile* FindFile(std::string_view path) const;
  bool IsDir(std::string_view path) const;

  // True when `rev` names this repo's only commit: "main", the 40-hex commit
  // id, or "refs/heads/main".
  bool MatchesRevision(std::string_view rev) const;

 private:
  RepoIndex() = default;
  std::string id_;
  std::string dir_;
  std::string commit_;
  std::vector<RepoFile> files_;
  std::vector<RepoDir> dirs_;
  std::uint64_t total_size_ = 0;
};

// True for "name" or "org/name" with each part 1..96 chars of [A-Za-z0-9._-],
// not "." or "..".
bool IsValidRepoId(std::string_view id);

}  // namespace exlr8::hubsim
