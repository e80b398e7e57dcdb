// Uploading a host rank image (a memfd, daemon/stage's host memory kind) to
// the GPU, against a plain pinned cudaMemcpyAsync of the same bytes: the
// measurement behind the target "upload >= 0.9x a pinned cudaMemcpyAsync".
//
// Rows (best of `reps` passes; copies timed with CUDA events, the rest with
// a steady clock):
//   baseline:   cudaMallocHost buffer -> device, cudaMemcpyAsync in 1 GiB
//               pieces on one stream
//   register:   cudaHostRegister of the memfd's shared mapping (read-only
//               flag, as a lessee would), the pinning cost a holder pays
//               once per stage
//   memfd:      the registered memfd mapping -> device, same pieces
//   pageable:   the memfd mapping unregistered -> device (what a holder
//               that skips registering would get)
// The device side is one cudaMalloc of the whole image. Bytes are
// pseudo-random, written into the memfd by `threads` threads first (the
// holder's fill; its time is printed too). The last line is CSV.
//
// Usage: host_upload_bench [GiB (default 8)] [reps (default 3)] [threads (default 8)]
// Exit status: 0 ok, 1 failure, 2 no CUDA device.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include <cuda_runtime_api.h>

namespace {

void Check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "host_upload_bench: %s: %s\n", what, cudaGetErrorString(e));
  std::exit(e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver ? 2 : 1);
}

double Seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Fills [p, p + n) with splitmix64 words on `threads` threads.
void Fill(std::uint8_t* p, std::size_t n, int threads) {
  std::vector<std::thread> ts;
  const std::size_t words = n / 8, share = (words + threads - 1) / threads;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([=] {
      for (std::size_t i = t * share; i < std::min(words, (t + 1) * share); ++i) {
        std::uint64_t z = i + 0x9E3779B97F4A7C15ull;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        std::memcpy(p + 8 * i, &z, 8);
      }
    });
  for (auto& t : ts) t.join();
}

// Best seconds of `reps` copies of n bytes from src to dst in 1 GiB pieces.
double TimeCopy(void* dst, const void* src, std::size_t n, int reps, cudaStream_t s) {
  cudaEvent_t a, b;
  Check(cudaEventCreate(&a), "cudaEventCreate");
  Check(cudaEventCreate(&b), "cudaEventCreate");
  double best = 1e30;
  constexpr std::size_t kPiece = std::size_t{1} << 30;
  for (int r = 0; r < reps; ++r) {
    Check(cudaEventRecord(a, s), "cudaEventRecord");
    for (std::size_t off = 0; off < n; off += kPiece)
      Check(cudaMemcpyAsync(static_cast<std::uint8_t*>(dst) + off, static_cast<const std::uint8_t*>(src) + off,
                            std::min(kPiece, n - off), cudaMemcpyHostToDevice, s),
            "cudaMemcpyAsync");
    Check(cudaEventRecord(b, s), "cudaEventRecord");
    Check(cudaEventSynchronize(b), "cudaEventSynchronize");
    float ms = 0;
    Check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
    best = std::min(best, ms / 1e3);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const double gib = argc > 1 ? std::atof(argv[1]) : 8;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 3;
  const int threads = argc > 3 ? std::atoi(argv[3]) : 8;
  if (gib <= 0 || gib > 64 || reps < 1 || threads < 1 || threads > 256) {
    std::fprintf(stderr, "usage: host_upload_bench [GiB 0..64] [reps >= 1] [threads 1..256]\n");
    return 1;
  }
  const std::size_t n = static_cast<std::size_t>(gib * (1ull << 30)) / 4096 * 4096;
  int devices = 0;
  Check(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
  cudaDeviceProp prop{};
  Check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  cudaStream_t s;
  Check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  void* dev = nullptr;
  Check(cudaMalloc(&dev, n), "cudaMalloc");

  // The holder's image: a memfd filled through a shared mapping.
  const int fd = memfd_create("host_upload_bench", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(n)) != 0) {
    std::perror("memfd_create/ftruncate");
    return 1;
  }
  auto* img = static_cast<std::uint8_t*>(mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  if (img == MAP_FAILED) {
    std::perror("mmap");
    return 1;
  }
  auto t0 = std::chrono::steady_clock::now();
  Fill(img, n, threads);
  const double fill_s = Seconds(t0, std::chrono::steady_clock::now());

  // The same fill into memfds whose pages exist before the copy: allocated
  // by fallocate, or by MAP_POPULATE (the first-touch fault per 4 KiB page
  // is what limits the plain fill).
  double prefill_s[2] = {0, 0}, alloc_s[2] = {0, 0};
  for (int v = 0; v < 2; ++v) {
    const int fd2 = memfd_create("host_upload_bench.pre", MFD_CLOEXEC);
    if (fd2 < 0 || ftruncate(fd2, static_cast<off_t>(n)) != 0) return 1;
    auto a0 = std::chrono::steady_clock::now();
    if (v == 0 && fallocate(fd2, 0, 0, static_cast<off_t>(n)) != 0) {
      std::perror("fallocate");
      return 1;
    }
    auto* m = static_cast<std::uint8_t*>(
        mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED | (v == 1 ? MAP_POPULATE : 0), fd2, 0));
    if (m == MAP_FAILED) return 1;
    auto a1 = std::chrono::steady_clock::now();
    Fill(m, n, threads);
    alloc_s[v] = Seconds(a0, a1);
    prefill_s[v] = Seconds(a1, std::chrono::steady_clock::now());
    munmap(m, n);
    close(fd2);
  }

  // Baseline: pinned host memory from the runtime.
  void* pinned = nullptr;
  Check(cudaMallocHost(&pinned, n), "cudaMallocHost");
  std::memcpy(pinned, img, n);
  const double base_s = TimeCopy(dev, pinned, n, reps, s);
  Check(cudaFreeHost(pinned), "cudaFreeHost");

  const double pageable_s = TimeCopy(dev, img, n, 1, s);

  t0 = std::chrono::steady_clock::now();
  Check(cudaHostRegister(img, n, cudaHostRegisterReadOnly), "cudaHostRegister");
  const double register_s = Seconds(t0, std::chrono::steady_clock::now());
  const double memfd_s = TimeCopy(dev, img, n, reps, s);
  t0 = std::chrono::steady_clock::now();
  Check(cudaHostUnregister(img), "cudaHostUnregister");
  const double unregister_s = Seconds(t0, std::chrono::steady_clock::now());

  const double gb = n / 1e9;
  std::printf("device: %s; image %.2f GB in a memfd, filled by %d threads in %.3f s (%.1f GB/s)\n", prop.name, gb,
              threads, fill_s, gb / fill_s);
  std::printf("  after fallocate (%.3f s): fill %.3f s (%.1f GB/s); after MAP_POPULATE (%.3f s): fill %.3f s (%.1f GB/s)\n",
              alloc_s[0], prefill_s[0], gb / prefill_s[0], alloc_s[1], prefill_s[1], gb / prefill_s[1]);
  std::printf("baseline: cudaMallocHost -> device          %8.2f GB/s  %.3f s\n", gb / base_s, base_s);
  std::printf("memfd registered -> device                  %8.2f GB/s  %.3f s  %.3fx baseline\n", gb / memfd_s,
              memfd_s, base_s / memfd_s);
  std::printf("memfd pageable -> device                    %8.2f GB/s  %.3f s  %.3fx baseline\n", gb / pageable_s,
              pageable_s, base_s / pageable_s);
  std::printf("cudaHostRegister of the memfd mapping       %8.3f s (%.1f GB/s); unregister %.3f s\n", register_s,
              gb / register_s, unregister_s);
  std::printf("csv,bench,device,bytes,baseline_GBps,memfd_registered_GBps,ratio,pageable_GBps,register_s,fill_s\n");
  std::printf("csv,host_upload_bench,%s,%zu,%.2f,%.2f,%.3f,%.2f,%.3f,%.3f\n", prop.name, n, gb / base_s, gb / memfd_s,
              base_s / memfd_s, gb / pageable_s, register_s, fill_s);
  munmap(img, n);
  close(fd);
  cudaFree(dev);
  return 0;
}
