// Where HubClient's settings come from beyond HubOptions' fields: the token
// (options, a token file, HF_TOKEN, $HF_HOME/token), the CA bundle and
// HF_HUB_OFFLINE. Pure reads of the options, the environment and files.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "daemon/hub/hub_client.h"

namespace exlr8 {
namespace {

const char* Env(const char* name) {
  const char* v = std::getenv(name);
  return (v != nullptr && *v != '\0') ? v : nullptr;
}

// A token file: a regular file of at most 4096 bytes. One named explicitly
// (`must_exist`) must be readable; at a default location a missing or
// unreadable file means no token. Anything else (a directory, a FIFO) is
// never read: reading it could throw and abort the process (and serve at
// every restart), or hang the pull.
Result<std::string> ReadTokenFile(const std::string& path, bool must_exist) {
  auto unreadable = [&](const std::string& why) -> Result<std::string> {
    if (!must_exist) return std::string();
    return InvalidArgumentError("token file '" + EscapeForMessage(path, 200) + "' cannot be read: " + why);
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return unreadable(std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) return unreadable(std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return unreadable("not a regular file");
  constexpr std::size_t kMaxTokenFile = 4096;
  std::string text(kMaxTokenFile + 1, '\0');
  std::size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return unreadable(std::strerror(errno));
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  if (got > kMaxTokenFile)
    return InvalidArgumentError("token file '" + EscapeForMessage(path, 200) + "' is larger than 4096 bytes");
  text.resize(got);
  return text;
}

}  // namespace

std::string ChooseHubEndpoint(const HubOptions& options) {
  if (!options.endpoint.empty()) return options.endpoint;
  const char* env = Env("HF_ENDPOINT");
  return env != nullptr ? env : "https://huggingface.co";
}

Result<std::string> LoadHubToken(const HubOptions& options) {
  std::string token;
  std::string source;
  // What the operator named on the command line wins over the environment:
  // --token-file over HF_TOKEN.
  if (options.token) {
    token = *options.token;
    source = "the token option";
  } else if (!options.token_file.empty()) {
    EXLR8_ASSIGN_OR_RETURN(token, ReadTokenFile(options.token_file, true));
    source = "token file '" + options.token_file + "'";
  } else if (const char* t = options.token_from_environment ? Env("HF_TOKEN") : nullptr) {
    token = t;
    source = "HF_TOKEN";
  } else if (const char* t2 = options.token_from_environment ? Env("HUGGING_FACE_HUB_TOKEN") : nullptr) {
    token = t2;
    source = "HUGGING_FACE_HUB_TOKEN";
  } else if (options.token_from_environment) {
    std::string path;
    if (const char* p = Env("HF_TOKEN_PATH")) {
      path = p;
    } else if (const char* home = Env("HF_HOME")) {
      path = std::string(home) + "/token";
    } else if (const char* xdg = Env("XDG_CACHE_HOME")) {
      path = std::string(xdg) + "/huggingface/token";
    } else if (const char* h = Env("HOME")) {
      path = std::string(h) + "/.cache/huggingface/token";
    }
    if (!path.empty()) {
      EXLR8_ASSIGN_OR_RETURN(token, ReadTokenFile(path, false));
      source = "token file '" + path + "'";
    }
  }
  // Trim surrounding whitespace (files end with a newline).
  const auto not_space = [](char c) { return std::isspace(static_cast<unsigned char>(c)) == 0; };
  token.erase(token.begin(), std::find_if(token.begin(), token.end(), not_space));
  token.erase(std::find_if(token.rbegin(), token.rend(), not_space).base(), token.end());
  for (char c : token) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u >= 0x7f) {
      return InvalidArgumentError("the Hugging Face token from " + source +
                                  " contains whitespace or non-printable characters");
    }
  }
  return token;
}

bool HfEnvironmentFlag(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return false;
  std::string upper(v);
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return upper == "1" || upper == "ON" || upper == "YES" || upper == "TRUE";
}

bool HubOfflineFromEnvironment() { return HfEnvironmentFlag("HF_HUB_OFFLINE"); }

bool HubDebugFromEnvironment() { return HfEnvironmentFlag("HF_DEBUG") || HfEnvironmentFlag("EXLR8_DEBUG"); }

Result<std::string> ChooseCaBundle(const HubOptions& options) {
  std::string path = options.ca_bundle, source = "--ca-bundle";
  for (const char* var : {"CURL_CA_BUNDLE", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE"}) {
    if (!path.empty()) break;
    if (const char* v = Env(var)) path = v, source = var;
  }
  if (path.empty()) return path;
  std::ifstream in(path, std::ios::binary);
  if (!in) return InvalidArgumentError("CA bundle '" + path + "' (from " + source + ") cannot be read");
  return path;
}

}  // namespace exlr8
