// A deterministic stand-in for libFuzzer's driver, for builds without clang.
//
//   fuzz_x [--seed=N] [--mutations=N] [--max-len=N] <file or dir>...
//
// Runs LLVMFuzzerTestOneInput on every file given (directories: their
// regular files, sorted by name), then on `mutations` inputs made from them
// by a seeded PRNG: bit flips, byte edits, truncations, insertions,
// deletions, duplicated chunks, dictionary tokens and (for length-prefixed
// formats) edits of the leading LE u64. The seed is printed; the same seed
// and corpus give the same inputs. EXLR8_FUZZ_SEED overrides the default
// seed. If an input crashes the target, it is written to
// replay-crash-<seed>-<n>.bin in the working directory first.
#include <algorithm>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

using Bytes = std::vector<std::uint8_t>;

// splitmix64: small, fast, and identical on every platform.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t Next() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform-enough in [0, n); REQUIRES: n > 0.
  std::size_t Below(std::size_t n) { return static_cast<std::size_t>(Next() % n); }

 private:
  std::uint64_t state_;
};

constexpr std::string_view kTokens[] = {
    "{", "}", "[", "]", ":", ",", "\"", "\\", "true", "null", "-0", "1e999", "1e-999", "0.5",
    "18446744073709551615", "18446744073709551616", "-9223372036854775809", "\\u0000",
    "\\ud800", "\\udc00", "\\ud83d\\ude00", "\xC0\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80",
    "\"__metadata__\"", "\"__pad.", "\"dtype\"", "\"shape\"", "\"data_offsets\"", "\"U8\"",
    "\"F32\"", "\"I64\"", "\"Q8\"", "1099511627776", "[[[[[[[[", "]]]]]]]]", "    ",
};
constexpr std::uint8_t kInteresting[] = {0x00, 0x01, 0x7F, 0x80, 0xFF, 0xC3, 0xE2, 0xF0, ' ',
                                         '"', '\\', '{', '}', '[', ']', ',', ':', '-', '0', '9'};

void Mutate(Bytes& b, Rng& rng, std::size_t max_len) {
  const std::size_t ops = 1 + rng.Below(4);
  for (std::size_t op = 0; op < ops; ++op) {
    switch (rng.Below(10)) {
      case 0:  // flip a bit
        if (!b.empty()) b[rng.Below(b.size())] ^= static_cast<std::uint8_t>(1u << rng.Below(8));
        break;
      case 1:  // interesting byte
        if (!b.empty()) b[rng.Below(b.size())] = kInteresting[rng.Below(std::size(kInteresting))];
        break;
      case 2:  // random byte
        if (!b.empty()) b[rng.Below(b.size())] = static_cast<std::uint8_t>(rng.Next());
        break;
      case 3:  // truncate
        b.resize(rng.Below(b.size() + 1));
        break;
      case 4: {  // insert random bytes
        const std::size_t at = rng.Below(b.size() + 1);
        const std::size_t n = 1 + rng.Below(8);
        for (std::size_t i = 0; i < n; ++i)
          b.insert(b.begin() + static_cast<std::ptrdiff_t>(at), static_cast<std::uint8_t>(rng.Next()));
        break;
      }
      case 5: {  // delete a range
        if (b.empty()) break;
        const std::size_t at = rng.Below(b.size());
        const std::size_t n = 1 + rng.Below(std::min<std::size_t>(64, b.size() - at));
        b.erase(b.begin() + static_cast<std::ptrdiff_t>(at), b.begin() + static_cast<std::ptrdiff_t>(at + n));
        break;
      }
      case 6: {  // copy a chunk elsewhere (duplicate keys, repeated entries)
        if (b.empty()) break;
        const std::size_t from = rng.Below(b.size());
        const std::size_t n = 1 + rng.Below(std::min<std::size_t>(256, b.size() - from));
        const Bytes chunk(b.begin() + static_cast<std::ptrdiff_t>(from),
                          b.begin() + static_cast<std::ptrdiff_t>(from + n));
        const std::size_t at = rng.Below(b.size() + 1);
        b.insert(b.begin() + static_cast<std::ptrdiff_t>(at), chunk.begin(), chunk.end());
        break;
      }
      case 7: {  // dictionary token
        const std::string_view t = kTokens[rng.Below(std::size(kTokens))];
        const std::size_t at = rng.Below(b.size() + 1);
        if (rng.Below(2) && at + t.size() <= b.size())
          std::copy(t.begin(), t.end(), b.begin() + static_cast<std::ptrdiff_t>(at));
        else
          b.insert(b.begin() + static_cast<std::ptrdiff_t>(at), t.begin(), t.end());
        break;
      }
      case 8: {  // change a digit (sizes, offsets, dims)
        std::size_t tries = 16;
        while (!b.empty() && tries--) {
          const std::size_t at = rng.Below(b.size());
          if (b[at] >= '0' && b[at] <= '9') {
            b[at] = static_cast<std::uint8_t>('0' + rng.Below(10));
            break;
          }
        }
        break;
      }
      default: {  // leading LE u64: nudge it, or make it match the length
        if (b.size() < 8) break;
        std::uint64_t v = 0;
        for (int i = 0; i < 8; ++i) v |= static_cast<std::uint64_t>(b[i]) << (8 * i);
        switch (rng.Below(4)) {
          case 0: v = b.size() - 8; break;
          case 1: v += rng.Below(17) - 8; break;
          case 2: v = rng.Next(); break;
          default: v = rng.Below(b.size()); break;
        }
        for (int i = 0; i < 8; ++i) b[i] = static_cast<std::uint8_t>(v >> (8 * i));
        break;
      }
    }
  }
  if (b.size() > max_len) b.resize(max_len);
}

// Crash reporting: the input being run, written out by the signal handler.
const Bytes* g_current = nullptr;
char g_crash_path[256];

extern "C" void OnFatalSignal(int sig) {
  if (g_current) {
    const int fd = ::open(g_crash_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      const ssize_t written = ::write(fd, g_current->data(), g_current->size());
      (void)written;
      ::close(fd);
    }
    static const char kMsg[] = "replay: crashing input written to ";
    (void)!::write(2, kMsg, sizeof kMsg - 1);
    (void)!::write(2, g_crash_path, std::strlen(g_crash_path));
    (void)!::write(2, "\n", 1);
  }
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

void Run(const Bytes& input, std::uint64_t seed, std::size_t n) {
  std::snprintf(g_crash_path, sizeof g_crash_path, "replay-crash-%llu-%zu.bin",
                static_cast<unsigned long long>(seed), n);
  g_current = &input;
  LLVMFuzzerTestOneInput(input.data(), input.size());
  g_current = nullptr;
}

bool ReadFile(const std::filesystem::path& p, Bytes& out) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return false;
  out.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::uint64_t seed = 1;
  if (const char* env = std::getenv("EXLR8_FUZZ_SEED")) seed = std::strtoull(env, nullptr, 10);
  std::size_t mutations = 3000;
  std::size_t max_len = 1 << 16;
  std::vector<std::filesystem::path> files;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg.starts_with("--seed=")) {
      seed = std::strtoull(argv[i] + 7, nullptr, 10);
    } else if (arg.starts_with("--mutations=")) {
      mutations = std::strtoull(argv[i] + 12, nullptr, 10);
    } else if (arg.starts_with("--max-len=")) {
      max_len = std::strtoull(argv[i] + 10, nullptr, 10);
    } else if (arg.starts_with("-")) {
      std::fprintf(stderr, "usage: %s [--seed=N] [--mutations=N] [--max-len=N] <file or dir>...\n", argv[0]);
      return 2;
    } else if (std::filesystem::is_directory(arg)) {
      std::vector<std::filesystem::path> in_dir;
      for (const auto& e : std::filesystem::directory_iterator(arg))
        if (e.is_regular_file()) in_dir.push_back(e.path());
      std::sort(in_dir.begin(), in_dir.end());
      files.insert(files.end(), in_dir.begin(), in_dir.end());
    } else {
      files.emplace_back(arg);
    }
  }
  if (files.empty()) {
    std::fprintf(stderr, "replay: no input files\n");
    return 2;
  }
  for (int sig : {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL}) std::signal(sig, OnFatalSignal);
  std::printf("replay: seed=%llu (set with --seed=N or EXLR8_FUZZ_SEED), %zu files, %zu mutations\n",
              static_cast<unsigned long long>(seed), files.size(), mutations);
  std::fflush(stdout);

  std::vector<Bytes> corpus;
  for (const auto& f : files) {
    Bytes b;
    if (!ReadFile(f, b)) {
      std::fprintf(stderr, "replay: cannot read %s\n", f.c_str());
      return 2;
    }
    Run(b, seed, corpus.size());
    corpus.push_back(std::move(b));
  }
  Rng rng(seed);
  Bytes input;
  for (std::size_t n = 0; n < mutations; ++n) {
    // Mostly mutate a seed; sometimes keep mutating the previous input so
    // that edits compound.
    if (input.empty() || rng.Below(4) != 0) input = corpus[rng.Below(corpus.size())];
    Mutate(input, rng, max_len);
    Run(input, seed, corpus.size() + n);
  }
  std::printf("replay: ran %zu inputs without a failure\n", corpus.size() + mutations);
  return 0;
}
