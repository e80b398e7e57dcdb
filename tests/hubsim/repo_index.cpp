#include "tests/hubsim/repo_index.h"

#include <fcntl.h>
#include <fnmatch.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <thread>

#include "tests/hubsim/http_util.h"

namespace exlr8::hubsim {
namespace {

// The extensions the Hub's default .gitattributes stores in LFS (a repo
// created on huggingface.co starts with it), so that their tree entries
// carry the LFS sha256, as real model repos' do.
bool IsLfsByDefault(std::string_view path) {
  static constexpr std::string_view kExtensions[] = {
      ".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".onnx", ".msgpack", ".npy", ".npz", ".gguf"};
  for (std::string_view ext : kExtensions)
    if (path.size() >= ext.size() && path.substr(path.size() - ext.size()) == ext) return true;
  return false;
}

namespace fs = std::filesystem;

// RAII EVP digest context.
class Digest {
 public:
  explicit Digest(const EVP_MD* md) : ctx_(EVP_MD_CTX_new()) { EVP_DigestInit_ex(ctx_, md, nullptr); }
  ~Digest() { EVP_MD_CTX_free(ctx_); }
  Digest(const Digest&) = delete;
  Digest& operator=(const Digest&) = delete;
  void Update(const void* p, std::size_t n) { EVP_DigestUpdate(ctx_, p, n); }
  void Update(std::string_view s) { Update(s.data(), s.size()); }
  std::string HexFinal() {
    unsigned char out[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    EVP_DigestFinal_ex(ctx_, out, &n);
    return HexEncode(out, n);
  }

 private:
  EVP_MD_CTX* ctx_;
};

std::string GitBlobSha1(std::string_view content) {
  Digest d(EVP_sha1());
  d.Update("blob " + std::to_string(content.size()));
  d.Update("\0", 1);
  d.Update(content);
  return d.HexFinal();
}

// Hashes one file: sha256 (LFS) or git blob sha1 (regular). An unhashed
// file keeps its stand-in sha256 and gets only its pointer and oid.
Status HashFile(RepoFile& f) {
  constexpr std::size_t kChunk = 1 << 20;
  std::vector<unsigned char> buf(f.unhashed ? 0 : kChunk);
  Digest d(f.lfs ? EVP_sha256() : EVP_sha1());
  if (!f.lfs) {
    d.Update("blob " + std::to_string(f.size));
    d.Update("\0", 1);
  }
  std::uint64_t off = f.unhashed ? f.size : 0;
  while (off < f.size) {
    const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(kChunk, f.size - off));
    const ssize_t got = ::pread(f.fd, buf.data(), want, static_cast<off_t>(off));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      return IOError(f.path + ": read at byte " + std::to_string(off) + " failed: " +
                     (got < 0 ? std::strerror(errno) : "file shrank while hashing"));
    }
    d.Update(buf.data(), static_cast<std::size_t>(got));
    off += static_cast<std::uint64_t>(got);
  }
  if (f.lfs) {
    if (!f.unhashed) f.sha256 = d.HexFinal();
    const std::string pointer = "version https://git-lfs.github.com/spec/v1\noid sha256:" + f.sha256 +
                                "\nsize " + std::to_string(f.size) + "\n";
    f.pointer_size = pointer.size();
    f.git_oid = GitBlobSha1(pointer);
  } else {
    f.git_oid = d.HexFinal();
  }
  return Status::Ok();
}

bool IsNamePart(std::string_view s) {
  if (s.empty() || s.size() > 96 || s == "." || s == "..") return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
}

}  // namespace

bool IsValidRepoId(std::string_view id) {
  const std::size_t slash = id.find('/');
  if (slash == std::string_view::npos) return IsNamePart(id);
  return IsNamePart(id.substr(0, slash)) && IsNamePart(id.substr(slash + 1));
}

RepoIndex::~RepoIndex() {
  for (auto& f : files_) {
    if (f.fd >= 0) ::close(f.fd);
  }
}

Result<std::unique_ptr<RepoIndex>> RepoIndex::Build(std::string repo_id, const std::string& dir,
                                                    std::uint64_t lfs_threshold, const std::string& unhashed_glob) {
  if (!IsValidRepoId(repo_id)) {
    return InvalidArgumentError("repo id '" + repo_id + "': expected 'name' or 'org/name' of [A-Za-z0-9._-]");
  }
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return NotFoundError(dir + ": not a directory");

  std::unique_ptr<RepoIndex> index(new RepoIndex());
  index->id_ = std::move(repo_id);
  index->dir_ = dir;

  fs::recursive_directory_iterator it(dir, fs::directory_options::none, ec);
  if (ec) return IOError(dir + ": cannot list: " + ec.message());
  for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) return IOError(dir + ": cannot list: " + ec.message());
    const fs::directory_entry& e = *it;
    if (e.is_symlink(ec)) continue;
    if (e.is_directory(ec)) {
      if (e.path().filename() == ".git") it.disable_recursion_pending();
      continue;
    }
    if (!e.is_regular_file(ec)) continue;
    RepoFile f;
    f.path = fs::relative(e.path(), dir, ec).generic_string();
    if (ec) return IOError(e.path().string() + ": " + ec.message());
    f.fd = ::open(e.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (f.fd < 0) return IOError(e.path().string() + ": open failed: " + std::strerror(errno));
    struct stat st {};
    if (::fstat(f.fd, &st) != 0) {
      const int err = errno;
      ::close(f.fd);
      return IOError(e.path().string() + ": fstat failed: " + std::strerror(err));
    }
    f.size = static_cast<std::uint64_t>(st.st_size);
    f.lfs = f.size >= lfs_threshold || IsLfsByDefault(f.path);
    if (f.lfs && !unhashed_glob.empty() && ::fnmatch(unhashed_glob.c_str(), f.path.c_str(), 0) == 0) {
      f.unhashed = true;
      Digest d(EVP_sha256());
      d.Update("exlr8-hubsim unhashed\n" + f.path + "\n" + std::to_string(f.size) + "\n" +
               std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec));
      f.sha256 = d.HexFinal();
    }
    index->files_.push_back(std::move(f));
  }
  std::sort(index->files_.begin(), index->files_.end(),
            [](const RepoFile& a, const RepoFile& b) { return a.path < b.path; });

  // Hash on a few threads: a multi-GB release would otherwise make startup slow.
  std::atomic<std::size_t> next{0};
  std::vector<Status> errors(index->files_.size());
  const unsigned n_threads =
      std::max(1u, std::min<unsigned>(std::thread::hardware_concurrency(), 8u));
  {
    std::vector<std::jthread> workers;
    for (unsigned t = 0; t < n_threads; ++t) {
      workers.emplace_back([&] {
        for (std::size_t i = next++; i < index->files_.size(); i = next++) {
          errors[i] = HashFile(index->files_[i]);
        }
      });
    }
  }
  for (auto& s : errors) {
    if (!s.ok()) return s;
  }

  // Commit id and directory oids.
  Digest commit(EVP_sha1());
  std::map<std::string, std::vector<std::string>> children;  // dir -> "name oid" lines
  for (const auto& f : index->files_) {
    index->total_size_ += f.size;
    commit.Update(f.path);
    commit.Update("\0", 1);
    commit.Update(std::to_string(f.size));
    commit.Update("\0", 1);
    commit.Update(f.lfs ? f.sha256 : f.git_oid);
    commit.Update("\n");
    std::string child = f.path;
    std::string oid = f.git_oid;
    for (std::size_t slash = child.rfind('/'); slash != std::string::npos; slash = child.rfind('/')) {
      const std::string parent = child.substr(0, slash);
      children[parent].push_back(child.substr(slash + 1) + " " + oid);
      child = parent;
      oid.clear();  // directory entries contribute their name only
    }
  }
  index->commit_ = commit.HexFinal();
  for (auto& [path, lines] : children) {
    std::sort(lines.begin(), lines.end());
    lines.erase(std::unique(lines.begin(), lines.end()), lines.end());
    Digest d(EVP_sha1());
    d.Update(path);
    for (const auto& l : lines) {
      d.Update("\n");
      d.Update(l);
    }
    index->dirs_.push_back(RepoDir{path, d.HexFinal()});
  }
  return index;
}

const RepoFile* RepoIndex::FindFile(std::string_view path) const {
  auto it = std::lower_bound(files_.begin(), files_.end(), path,
                             [](const RepoFile& f, std::string_view p) { return f.path < p; });
  return it != files_.end() && it->path == path ? &*it : nullptr;
}

bool RepoIndex::IsDir(std::string_view path) const {
  auto it = std::lower_bound(dirs_.begin(), dirs_.end(), path,
                             [](const RepoDir& d, std::string_view p) { return d.path < p; });
  return it != dirs_.end() && it->path == path;
}

bool RepoIndex::MatchesRevision(std::string_view rev) const {
  return rev == "main" || rev == "refs/heads/main" || rev == commit_;
}

}  // namespace exlr8::hubsim
