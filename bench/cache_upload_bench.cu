// Ways of moving cache files (in the page cache) to the GPU, against a
// plain pinned cudaMemcpyAsync of the same bytes: the measurement behind
// the target "upload >= 0.9x a pinned cudaMemcpyAsync", and the choice of
// the device stage's copy (daemon/stage/device_image.cpp).
//
// The bench writes `files` files of 1 GiB into DIR (pseudo-random bytes;
// left in the page cache, as a warm cache's are), then times, best of
// `reps` passes, each pass with fresh mappings (as a stage starts):
//   baseline   cudaMallocHost buffer -> device, 1 GiB cudaMemcpyAsync pieces
//   mmap       T threads, each assembling windows of W MiB from a MAP_SHARED
//              read-only mapping into its own two pinned buffers (memcpy,
//              page faults included), one stream each: today's stage copy
//   populate   the same after mmap(MAP_POPULATE) (the populate time is
//              printed apart and counted in the total)
//   pread      T threads pread() the windows into their pinned buffers
//   register   cudaHostRegister(read-only) of each file's mapping, then
//              cudaMemcpyAsync straight from it (registration counted)
// Ratios are baseline time / method time (1.0 = as fast as pinned memory).
// The last lines are CSV.
//
// Usage: cache_upload_bench DIR [files (default 8)] [reps (default 3)]
//                           [threads, comma separated (default 8,16)] [window MiB (default 32)]
// Exit status: 0 ok, 1 failure, 2 no CUDA device.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <cuda_runtime_api.h>

namespace {

constexpr std::size_t kGiB = std::size_t{1} << 30;

void Check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "cache_upload_bench: %s: %s\n", what, cudaGetErrorString(e));
  std::exit(e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver ? 2 : 1);
}

void Die(const char* what) {
  std::perror(what);
  std::exit(1);
}

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// splitmix64 words: incompressible, distinct per file.
void FillWords(std::uint8_t* p, std::size_t n, std::uint64_t seed) {
  for (std::size_t i = 0; i < n / 8; ++i) {
    std::uint64_t z = seed + i * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    std::memcpy(p + 8 * i, &z, 8);
  }
}

struct Files {
  std::vector<int> fds;
  std::size_t total() const { return fds.size() * kGiB; }
};

Files WriteFiles(const std::string& dir, int count) {
  Files f;
  std::vector<std::uint8_t> buf(64 << 20);
  for (int i = 0; i < count; ++i) {
    const std::string path = dir + "/cache_upload_bench." + std::to_string(i);
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) Die(path.c_str());
    for (std::size_t off = 0; off < kGiB; off += buf.size()) {
      FillWords(buf.data(), buf.size(), (std::uint64_t{static_cast<std::uint32_t>(i)} << 40) + off);
      if (::pwrite(fd, buf.data(), buf.size(), static_cast<off_t>(off)) != static_cast<ssize_t>(buf.size()))
        Die("pwrite");
    }
    ::unlink(path.c_str());  // gone when the bench exits; the fd keeps it
    f.fds.push_back(fd);
  }
  return f;
}

std::vector<const std::uint8_t*> MapAll(const Files& f, int flags) {
  std::vector<const std::uint8_t*> maps;
  for (int fd : f.fds) {
    void* p = ::mmap(nullptr, kGiB, PROT_READ, MAP_SHARED | flags, fd, 0);
    if (p == MAP_FAILED) Die("mmap");
    (void)::madvise(p, kGiB, MADV_SEQUENTIAL);
    maps.push_back(static_cast<const std::uint8_t*>(p));
  }
  return maps;
}

void UnmapAll(std::vector<const std::uint8_t*>& maps) {
  for (const std::uint8_t* p : maps) ::munmap(const_cast<std::uint8_t*>(p), kGiB);
  maps.clear();
}

// Threads move windows of `window` bytes to the device through their own
// double-buffered pinned staging; `fill(buf, begin, n)` puts image bytes
// [begin, begin + n) into buf. Returns seconds.
template <typename FillFn>
double StagedCopy(std::uint8_t* dev, std::size_t total, int threads, std::size_t window, FillFn fill) {
  std::uint8_t* staging = nullptr;
  Check(cudaMallocHost(reinterpret_cast<void**>(&staging), std::size_t(threads) * 2 * window), "cudaMallocHost");
  std::vector<cudaStream_t> streams(threads);
  std::vector<cudaEvent_t> events(std::size_t(threads) * 2);
  for (auto& s : streams) Check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  for (auto& e : events) Check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  const std::size_t windows = (total + window - 1) / window;
  std::atomic<std::size_t> next{0};
  const auto t0 = Clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      Check(cudaSetDevice(0), "cudaSetDevice");
      bool used[2] = {false, false};
      for (std::size_t w, slot = 0; (w = next.fetch_add(1)) < windows; ++slot) {
        const std::size_t b = slot % 2, begin = w * window, n = std::min(window, total - begin);
        std::uint8_t* buf = staging + (std::size_t(t) * 2 + b) * window;
        cudaEvent_t ev = events[std::size_t(t) * 2 + b];
        if (used[b]) Check(cudaEventSynchronize(ev), "cudaEventSynchronize");
        fill(buf, begin, n);
        Check(cudaMemcpyAsync(dev + begin, buf, n, cudaMemcpyHostToDevice, streams[t]), "cudaMemcpyAsync");
        Check(cudaEventRecord(ev, streams[t]), "cudaEventRecord");
        used[b] = true;
      }
      Check(cudaStreamSynchronize(streams[t]), "cudaStreamSynchronize");
    });
  for (auto& th : pool) th.join();
  const double s = Since(t0);
  for (auto& e : events) cudaEventDestroy(e);
  for (auto& st : streams) cudaStreamDestroy(st);
  cudaFreeHost(staging);
  return s;
}

// The device bytes equal the files' (a spot check of 64 KiB per GiB).
void Verify(const std::uint8_t* dev, const Files& f) {
  std::vector<std::uint8_t> a(64 << 10), b(64 << 10);
  for (std::size_t i = 0; i < f.fds.size(); ++i) {
    const std::size_t off = (i * 7919 * 4096) % (kGiB - a.size());
    Check(cudaMemcpy(a.data(), dev + i * kGiB + off, a.size(), cudaMemcpyDeviceToHost), "cudaMemcpy");
    if (::pread(f.fds[i], b.data(), b.size(), static_cast<off_t>(off)) != static_cast<ssize_t>(b.size()))
      Die("pread");
    if (std::memcmp(a.data(), b.data(), a.size()) != 0) {
      std::fprintf(stderr, "cache_upload_bench: device bytes differ from file %zu at %zu\n", i, off);
      std::exit(1);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: cache_upload_bench DIR [files] [reps] [threads,...] [window MiB]\n");
    return 1;
  }
  const std::string dir = argv[1];
  const int files = argc > 2 ? std::atoi(argv[2]) : 8;
  const int reps = argc > 3 ? std::atoi(argv[3]) : 3;
  std::vector<int> thread_counts;
  for (const char* p = argc > 4 ? argv[4] : "8,16"; *p;) {
    thread_counts.push_back(std::atoi(p));
    while (*p && *p != ',') ++p;
    if (*p == ',') ++p;
  }
  const std::size_t window = std::size_t(argc > 5 ? std::atoi(argv[5]) : 32) << 20;
  if (files < 1 || files > 64 || reps < 1 || window == 0 || kGiB % window != 0) {
    std::fprintf(stderr, "cache_upload_bench: files 1..64, reps >= 1, a window dividing 1024 MiB\n");
    return 1;
  }

  cudaDeviceProp prop{};
  Check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  Check(cudaSetDevice(0), "cudaSetDevice");
  auto w0 = Clock::now();
  const Files f = WriteFiles(dir, files);
  const std::size_t total = f.total();
  const double gb = total / 1e9;
  std::printf("device: %s; %d files of 1 GiB written in %.2f s (page cache)\n", prop.name, files, Since(w0));
  std::uint8_t* dev = nullptr;
  Check(cudaMalloc(reinterpret_cast<void**>(&dev), total), "cudaMalloc");
  cudaStream_t s;
  Check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");

  // Baseline.
  std::uint8_t* pinned = nullptr;
  Check(cudaMallocHost(reinterpret_cast<void**>(&pinned), total), "cudaMallocHost");
  for (std::size_t i = 0; i < f.fds.size(); ++i)
    if (::pread(f.fds[i], pinned + i * kGiB, kGiB, 0) != static_cast<ssize_t>(kGiB)) Die("pread");
  double base = 1e30;
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    for (std::size_t off = 0; off < total; off += kGiB)
      Check(cudaMemcpyAsync(dev + off, pinned + off, kGiB, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync");
    Check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    base = std::min(base, Since(t0));
  }
  Check(cudaFreeHost(pinned), "cudaFreeHost");
  std::printf("baseline: cudaMallocHost -> device            %7.2f GB/s  %.3f s\n", gb / base, base);
  std::vector<std::string> csv;
  auto row = [&](const std::string& name, int threads, double secs, double extra, const char* extra_name) {
    std::printf("%-10s threads %2d window %zu MiB   %7.2f GB/s  %.3f s  %.3fx baseline", name.c_str(), threads,
                window >> 20, gb / secs, secs, base / secs);
    if (extra_name) std::printf("  (%s %.3f s)", extra_name, extra);
    std::printf("\n");
    char line[256];
    std::snprintf(line, sizeof line, "csv,cache_upload_bench,%s,%s,%d,%zu,%zu,%.2f,%.2f,%.3f", prop.name,
                  name.c_str(), threads, window >> 20, total, gb / base, gb / secs, base / secs);
    csv.push_back(line);
  };

  for (int threads : thread_counts) {
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
      Check(cudaMemset(dev, 0, total), "cudaMemset");
      auto maps = MapAll(f, 0);
      best = std::min(best, StagedCopy(dev, total, threads, window, [&](std::uint8_t* buf, std::size_t begin,
                                                                        std::size_t n) {
        std::memcpy(buf, maps[begin / kGiB] + begin % kGiB, n);  // windows divide 1 GiB
      }));
      UnmapAll(maps);
    }
    Verify(dev, f);
    row("mmap", threads, best, 0, nullptr);

    best = 1e30;
    double populate_best = 0;
    for (int r = 0; r < reps; ++r) {
      Check(cudaMemset(dev, 0, total), "cudaMemset");
      auto t0 = Clock::now();
      auto maps = MapAll(f, MAP_POPULATE);
      const double populate = Since(t0);
      const double copy = StagedCopy(dev, total, threads, window, [&](std::uint8_t* buf, std::size_t begin,
                                                                      std::size_t n) {
        std::memcpy(buf, maps[begin / kGiB] + begin % kGiB, n);
      });
      if (populate + copy < best) best = populate + copy, populate_best = populate;
      UnmapAll(maps);
    }
    Verify(dev, f);
    row("populate", threads, best, populate_best, "of it populate");

    best = 1e30;
    for (int r = 0; r < reps; ++r) {
      Check(cudaMemset(dev, 0, total), "cudaMemset");
      best = std::min(best, StagedCopy(dev, total, threads, window, [&](std::uint8_t* buf, std::size_t begin,
                                                                        std::size_t n) {
        std::size_t done = 0;
        while (done < n) {
          const ssize_t got = ::pread(f.fds[begin / kGiB], buf + done, n - done,
                                      static_cast<off_t>(begin % kGiB + done));
          if (got <= 0) Die("pread");
          done += static_cast<std::size_t>(got);
        }
      }));
    }
    Verify(dev, f);
    row("pread", threads, best, 0, nullptr);
  }

  // Registration of the mappings, then DMA straight from them.
  double best = 1e30, reg_best = 0;
  for (int r = 0; r < reps; ++r) {
    Check(cudaMemset(dev, 0, total), "cudaMemset");
    auto t0 = Clock::now();
    auto maps = MapAll(f, 0);
    bool ok = true;
    for (const std::uint8_t* p : maps) {
      const cudaError_t e = cudaHostRegister(const_cast<std::uint8_t*>(p), kGiB, cudaHostRegisterReadOnly);
      if (e != cudaSuccess) {
        std::printf("register   cudaHostRegister of a file mapping failed: %s\n", cudaGetErrorString(e));
        (void)cudaGetLastError();
        ok = false;
        break;
      }
    }
    if (!ok) {
      UnmapAll(maps);
      break;
    }
    const double reg = Since(t0);
    for (std::size_t i = 0; i < maps.size(); ++i)
      Check(cudaMemcpyAsync(dev + i * kGiB, maps[i], kGiB, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync");
    Check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    const double all = Since(t0);
    for (const std::uint8_t* p : maps) Check(cudaHostUnregister(const_cast<std::uint8_t*>(p)), "unregister");
    UnmapAll(maps);
    if (all < best) best = all, reg_best = reg;
  }
  if (best < 1e30) {
    Verify(dev, f);
    row("register", 1, best, reg_best, "of it registration");
  }

  // Registration pipelined with the copies: T threads each register a
  // file's mapping and send it on their own stream, so registering one
  // file overlaps the DMA of another.
  for (int threads : thread_counts) {
    double best_p = 1e30;
    for (int r = 0; r < reps; ++r) {
      Check(cudaMemset(dev, 0, total), "cudaMemset");
      auto maps = MapAll(f, 0);
      std::vector<cudaStream_t> streams(threads);
      for (auto& st : streams) Check(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "cudaStreamCreate");
      std::atomic<std::size_t> next{0};
      const auto t0 = Clock::now();
      std::vector<std::thread> pool;
      for (int t = 0; t < threads; ++t)
        pool.emplace_back([&, t] {
          Check(cudaSetDevice(0), "cudaSetDevice");
          // Pieces of 256 MiB: registration of the next overlaps the DMA of this one.
          constexpr std::size_t kPiece = std::size_t{256} << 20;
          for (std::size_t i; (i = next.fetch_add(1)) < total / kPiece;) {
            auto* p = const_cast<std::uint8_t*>(maps[i * kPiece / kGiB]) + (i * kPiece) % kGiB;
            Check(cudaHostRegister(p, kPiece, cudaHostRegisterReadOnly), "cudaHostRegister");
            Check(cudaMemcpyAsync(dev + i * kPiece, p, kPiece, cudaMemcpyHostToDevice, streams[t]), "memcpy");
          }
          Check(cudaStreamSynchronize(streams[t]), "cudaStreamSynchronize");
        });
      for (auto& th : pool) th.join();
      best_p = std::min(best_p, Since(t0));
      constexpr std::size_t kPiece = std::size_t{256} << 20;
      for (std::size_t i = 0; i < total / kPiece; ++i)
        Check(cudaHostUnregister(const_cast<std::uint8_t*>(maps[i * kPiece / kGiB]) + (i * kPiece) % kGiB),
              "cudaHostUnregister");
      for (auto& st : streams) cudaStreamDestroy(st);
      UnmapAll(maps);
    }
    Verify(dev, f);
    row("reg-pipe", threads, best_p, 0, nullptr);
  }

  // A TP 4 rank's pattern: pieces of 384 KiB (a K4 half) every 1.5 MiB,
  // each registered on its own, by T threads, then sent straight from
  // there. What a per-region registration would cost.
  for (int threads : thread_counts) {
    constexpr std::size_t kPiece = 384 << 10, kStride = 4 * kPiece;
    const std::size_t per_file = kGiB / kStride, pieces = per_file * f.fds.size();
    const double piece_gb = pieces * kPiece / 1e9;
    auto maps = MapAll(f, 0);
    std::vector<cudaStream_t> streams(threads);
    for (auto& st : streams) Check(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "cudaStreamCreate");
    std::atomic<std::size_t> next{0};
    std::atomic<long long> reg_ns{0};
    const auto t0 = Clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        Check(cudaSetDevice(0), "cudaSetDevice");
        for (std::size_t i; (i = next.fetch_add(1)) < pieces;) {
          auto* p = const_cast<std::uint8_t*>(maps[i / per_file]) + (i % per_file) * kStride;
          const auto r0 = Clock::now();
          Check(cudaHostRegister(p, kPiece, cudaHostRegisterReadOnly), "cudaHostRegister");
          reg_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - r0).count();
          Check(cudaMemcpyAsync(dev + i * kPiece, p, kPiece, cudaMemcpyHostToDevice, streams[t]), "memcpy");
        }
        Check(cudaStreamSynchronize(streams[t]), "cudaStreamSynchronize");
      });
    for (auto& th : pool) th.join();
    const double secs = Since(t0);
    const auto u0 = Clock::now();
    for (std::size_t i = 0; i < pieces; ++i)
      Check(cudaHostUnregister(const_cast<std::uint8_t*>(maps[i / per_file]) + (i % per_file) * kStride),
            "cudaHostUnregister");
    const double unreg = Since(u0);
    for (auto& st : streams) cudaStreamDestroy(st);
    UnmapAll(maps);
    std::printf("reg-pieces threads %2d: %zu pieces of 384 KiB (%.2f GB) in %.3f s = %.2f GB/s, %.3fx baseline rate; "
                "%.1f us per registration (thread time), unregister all %.3f s\n",
                threads, pieces, piece_gb, secs, piece_gb / secs, (piece_gb / secs) / (gb / base),
                reg_ns.load() / 1e3 / pieces, unreg);
  }
  // What pinning the stage's staging buffers costs (1 GiB, as 16 threads x
  // 2 x 32 MiB): the runtime's allocator against anonymous memory made
  // resident first (4 KiB pages, or huge pages where the kernel gives
  // them) and then registered.
  for (int way = 0; way < 3; ++way) {
    const std::size_t bytes = kGiB;
    const auto t0 = Clock::now();
    void* p = nullptr;
    if (way == 0) {
      Check(cudaMallocHost(&p, bytes), "cudaMallocHost");
    } else {
      p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | (way == 1 ? MAP_POPULATE : 0),
                 -1, 0);
      if (p == MAP_FAILED) Die("mmap");
      if (way == 2) {
        (void)::madvise(p, bytes, MADV_HUGEPAGE);
        for (std::size_t i = 0; i < bytes; i += 4096) static_cast<volatile std::uint8_t*>(p)[i] = 0;
      }
      Check(cudaHostRegister(p, bytes, cudaHostRegisterDefault), "cudaHostRegister");
    }
    const double secs = Since(t0);
    const double copy = [&] {
      auto c0 = Clock::now();
      Check(cudaMemcpyAsync(dev, p, bytes, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync");
      Check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
      return Since(c0);
    }();
    const char* names[] = {"cudaMallocHost", "mmap(MAP_POPULATE) + cudaHostRegister",
                           "mmap + MADV_HUGEPAGE + touch + cudaHostRegister"};
    std::printf("pinning 1 GiB: %-48s %.3f s; then a copy from it %.2f GB/s\n", names[way], secs, bytes / 1e9 / copy);
    if (way == 0) {
      cudaFreeHost(p);
    } else {
      cudaHostUnregister(p);
      ::munmap(p, bytes);
    }
  }
  std::printf("csv,bench,device,method,threads,window_MiB,bytes,baseline_GBps,method_GBps,ratio\n");
  for (const std::string& l : csv) std::printf("%s\n", l.c_str());
  cudaFree(dev);
  return 0;
}
