// Every test's scratch space: a fresh directory under $TMPDIR (or /tmp),
// removed with its contents when the TempDir goes. Header-only, with no
// dependency on the code under test, so format/, client/ and daemon/ tests
// all use this one.
#pragma once

#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

namespace exlr8::testing {

class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/exlr8-test-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) std::abort();  // no scratch space: nothing can be tested
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace exlr8::testing
