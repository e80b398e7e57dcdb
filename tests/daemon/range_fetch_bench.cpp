// Throughput check for RangeFetcher: fetches one hub file as N ranges,
// hashing (XXH64) and pwrite()-ing every byte, and prints MB/s.
//   range_fetch_bench ENDPOINT REPO PATH FILE_SIZE RANGE_BYTES PARALLEL OUT_FILE
// Compare with: curl --parallel --parallel-max PARALLEL over the same ranges.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "daemon/hub/range_fetcher.h"
#include "format/checksum.h"

namespace {

class BenchConsumer : public exlr8::RangeConsumer {
 public:
  BenchConsumer(std::string path, std::uint64_t size, std::uint64_t range, int fd)
      : path_(std::move(path)), size_(size), range_(range), fd_(fd) {}
  bool NextRequest(exlr8::RangeRequest* out) override {
    if (next_ >= size_) return false;
    out->path = path_;
    out->offset = next_;
    out->length = std::min(range_, size_ - next_);
    out->id = next_;
    out->label = "bench";
    next_ += out->length;
    return true;
  }
  exlr8::Status OnData(std::uint64_t, std::uint64_t offset, std::span<const std::byte> bytes) override {
    if (hash_on_) hash_.Update(bytes);  // one running hash: enough to model the per-byte cost
    if (::pwrite(fd_, bytes.data(), bytes.size(), static_cast<off_t>(offset)) !=
        static_cast<ssize_t>(bytes.size())) {
      return exlr8::IOError("pwrite failed");
    }
    return exlr8::Status::Ok();
  }
  exlr8::RangeVerdict OnComplete(std::uint64_t) override { return exlr8::RangeVerdict::Accept(); }
  void OnReset(std::uint64_t) override {}
  void OnFailed(std::uint64_t, const exlr8::Status& s) override { std::fprintf(stderr, "%s\n", s.ToString().c_str()); }

 private:
  std::string path_;
  std::uint64_t size_, range_, next_ = 0;
  int fd_;
  exlr8::Xxh64 hash_;
  bool hash_on_ = std::getenv("BENCH_NOHASH") == nullptr;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 8) {
    std::fprintf(stderr, "usage: %s ENDPOINT REPO PATH FILE_SIZE RANGE_BYTES PARALLEL OUT_FILE\n", argv[0]);
    return 2;
  }
  exlr8::HubOptions ho;
  ho.endpoint = argv[1];
  ho.use_env_proxy = false;
  auto hub = exlr8::HubClient::Open(ho, argv[2], "main");
  if (!hub.ok()) {
    std::fprintf(stderr, "%s\n", hub.status().ToString().c_str());
    return 1;
  }
  const std::uint64_t size = std::strtoull(argv[4], nullptr, 10);
  const std::uint64_t range = std::strtoull(argv[5], nullptr, 10);
  exlr8::RangeFetcherOptions fo;
  fo.max_parallel = std::atoi(argv[6]);
  const int fd = ::open(argv[7], O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return 1;
  BenchConsumer consumer(argv[3], size, range, fd);
  exlr8::RangeFetcher fetcher(**hub, fo);
  const auto t0 = std::chrono::steady_clock::now();
  exlr8::Status s = fetcher.Run(consumer);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ::close(fd);
  const exlr8::FetchCounters c = fetcher.counters();
  std::printf("%s: %llu bytes in %.3f s = %.1f MB/s, %llu transfers, %llu retries, %llu resolves\n",
              s.ToString().c_str(), static_cast<unsigned long long>(c.bytes_received), secs,
              static_cast<double>(c.bytes_received) / secs / 1e6, static_cast<unsigned long long>(c.transfers),
              static_cast<unsigned long long>(c.retries), static_cast<unsigned long long>(c.resolves));
  return s.ok() ? 0 : 1;
}
