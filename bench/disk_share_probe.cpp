// disk_share_probe: how a durable writer and a server's reads share one disk.
//
// The cold mode of bench/pull_bench.sh serves the release from the same disk
// the puller writes, so the puller's writes slow the server's reads. This
// probe replays that pattern without the network: THREADS readers pread
// strided pieces of SRC (like nginx serving one rank: one piece in STRIDE),
// and each piece is written at the same offset of a sparse file in DST, the
// way a cache mirrors the remote layout. The modes differ only in how (and
// whether) the written bytes are made durable:
//
//   memory   pwrite, nothing more (what curl --parallel does)
//   sync     memory, then fdatasync at the end (curl + sync)
//   kick     pwrite; every 8 MiB start write-back of the file
//            (sync_file_range WRITE), fdatasync every 16 MiB on a committer
//            thread, fdatasync at the end (what exlr8d does today)
//   paced    pwrite; PACE_DEPTH write-back threads make the written pieces
//            durable in order, each PACE bytes at a time (sync_file_range
//            WAIT_BEFORE|WRITE|WAIT_AFTER), fdatasync at the end
//   idle     kick, but the write-back and commits come from a thread in the
//            idle I/O class (ioprio_set): only a scheduler that honours
//            priorities (mq-deadline, bfq) can make use of it
//   direct   O_DIRECT pwrite from the readers (no page-cache copy, no
//            write-back later), fdatasync at the end
//
// --read-rate caps the readers' total rate, as a network-bound server
// would (curl reads the cold benchmark's rank at about 650 MB/s), so the
// disk has idle time the writes may use. --read-chunk reads each piece in
// requests of that size, one after another, readahead off: a server whose
// reads wait on the disk's latency (nginx's sendfile cold) rather than on
// its bandwidth.
//
// Prints, per run: when the last read ended, when every byte was durable,
// and the rate. Before each run it drops the page cache (needs root), so
// SRC is read from the disk. Also prints the disk's queue settings.
//
//   disk_share_probe SRC DST_DIR [--bytes 578M] [--modes memory,sync,kick,paced,idle,direct]
//                    [--rounds 3] [--threads 16] [--piece 192K] [--stride 4] [--pace 1M]
//                    [--pace-depth 1] [--read-rate 0] [--read-chunk 0]
//
// SRC is created (random bytes, fsync'ed) when it is missing or too small.
// Results and what they mean: docs/BENCHMARKS.md ("Durable writes beside a
// server's reads", and "Why cold misses" under the pull benchmarks).
#include <fcntl.h>
#include <linux/ioprio.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string src, dst_dir;
  std::uint64_t bytes = 578ull << 20;
  std::vector<std::string> modes = {"memory", "sync", "kick", "paced", "idle", "direct"};
  int rounds = 3;
  int threads = 16;
  std::uint64_t piece = 192 << 10;
  std::uint64_t stride = 4;
  std::uint64_t pace = 1 << 20;
  int pace_depth = 1;          // write-back threads of `paced`
  std::uint64_t read_rate = 0;  // bytes/s all readers together; 0 = as fast as the disk
  std::uint64_t read_chunk = 0;  // each piece read in requests of this size, readahead off; 0 = one pread
};

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "disk_share_probe: %s: %s\n", what.c_str(), std::strerror(errno));
  std::exit(1);
}

std::uint64_t ParseBytes(const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  switch (*end) {
    case 'K': case 'k': v *= 1 << 10; break;
    case 'M': case 'm': v *= 1 << 20; break;
    case 'G': case 'g': v *= 1 << 30; break;
    default: break;
  }
  return static_cast<std::uint64_t>(v);
}

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string part; std::getline(in, part, ',');)
    if (!part.empty()) out.push_back(part);
  return out;
}

void PwriteAll(int fd, const char* p, std::size_t n, std::uint64_t off, const char* what) {
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, p, n, static_cast<off_t>(off));
    if (w < 0) {
      if (errno == EINTR) continue;
      Die(what);
    }
    p += w, n -= static_cast<std::size_t>(w), off += static_cast<std::uint64_t>(w);
  }
}

void PreadAll(int fd, char* p, std::size_t n, std::uint64_t off) {
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, static_cast<off_t>(off));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) Die("pread source");
    p += r, n -= static_cast<std::size_t>(r), off += static_cast<std::uint64_t>(r);
  }
}

void Fdatasync(int fd) {
  while (::fdatasync(fd) != 0)
    if (errno != EINTR) Die("fdatasync");
}

void MakeSource(const Options& o) {
  const std::uint64_t need = o.bytes * o.stride + o.piece * o.stride;
  struct stat st {};
  if (::stat(o.src.c_str(), &st) == 0 && static_cast<std::uint64_t>(st.st_size) >= need) return;
  std::printf("writing %s (%.2f GB of random bytes)\n", o.src.c_str(), need / 1e9);
  const int fd = ::open(o.src.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) Die("create " + o.src);
  std::vector<std::uint64_t> block((4 << 20) / 8);
  std::mt19937_64 rng(7);
  for (std::uint64_t done = 0; done < need; done += block.size() * 8) {
    for (auto& w : block) w = rng();
    PwriteAll(fd, reinterpret_cast<const char*>(block.data()), block.size() * 8, done, "write source");
  }
  Fdatasync(fd);
  ::close(fd);
}

void DropCaches() {
  ::sync();
  std::ofstream f("/proc/sys/vm/drop_caches");
  f << "3\n";
  if (!f) std::printf("(could not drop the page cache: not root? the source is read warm)\n");
}

void SetIdleIoPriority() {
  if (::syscall(SYS_ioprio_set, IOPRIO_WHO_PROCESS, 0, IOPRIO_PRIO_VALUE(IOPRIO_CLASS_IDLE, 0)) != 0)
    std::perror("ioprio_set idle");
}

// A queue of written pieces for the write-back thread of `paced`.
struct Pieces {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<std::uint64_t, std::uint64_t>> q;
  bool done = false;
};

struct RunResult {
  double read_s = 0, durable_s = 0;
};

RunResult RunOnce(const Options& o, const std::string& mode, int round) {
  const std::string dst = o.dst_dir + "/probe-" + mode + "-" + std::to_string(round);
  ::unlink(dst.c_str());
  DropCaches();
  const int src = ::open(o.src.c_str(), O_RDONLY | O_CLOEXEC);
  if (src < 0) Die("open " + o.src);
  if (o.read_chunk > 0) (void)::posix_fadvise(src, 0, 0, POSIX_FADV_RANDOM);  // no readahead
  const bool direct = mode == "direct";
  const int out = ::open(dst.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | (direct ? O_DIRECT : 0), 0644);
  if (out < 0) Die("create " + dst);

  const std::uint64_t pieces = o.bytes / o.piece;
  std::atomic<std::uint64_t> next{0}, since_kick{0}, since_commit{0};
  std::atomic<bool> reading{true};
  Pieces written;
  std::mutex commit_mu;
  std::condition_variable commit_cv;
  std::uint64_t commits_due = 0;

  const bool kicks = mode == "kick" || mode == "idle";
  // Kick and commit: on the readers for `kick`, on a helper thread for `idle`.
  auto kick_and_commit = [&](std::uint64_t n) {
    if (since_kick.fetch_add(n) + n >= (8u << 20)) {
      since_kick = 0;
      if (mode == "kick") (void)::sync_file_range(out, 0, 0, SYNC_FILE_RANGE_WRITE);
    }
    if (since_commit.fetch_add(n) + n >= (16u << 20)) {
      since_commit = 0;
      std::lock_guard l(commit_mu);
      ++commits_due;
      commit_cv.notify_one();
    }
  };

  const auto t0 = Clock::now();
  std::thread committer;
  std::vector<std::thread> pacers;
  if (kicks) {
    committer = std::thread([&] {
      if (mode == "idle") SetIdleIoPriority();
      std::unique_lock l(commit_mu);
      while (true) {
        commit_cv.wait_for(l, std::chrono::milliseconds(5), [&] { return commits_due > 0 || !reading; });
        const bool last = !reading;
        const bool due = commits_due > 0;
        commits_due = 0;
        l.unlock();
        if (mode == "idle") (void)::sync_file_range(out, 0, 0, SYNC_FILE_RANGE_WRITE);
        if (due) Fdatasync(out);
        l.lock();
        if (last) return;
      }
    });
  }
  for (int d = 0; mode == "paced" && d < o.pace_depth; ++d) {
    pacers.emplace_back([&] {
      std::unique_lock l(written.mu);
      while (true) {
        written.cv.wait(l, [&] { return !written.q.empty() || written.done; });
        if (written.q.empty()) return;
        // Take up to `pace` bytes; each piece is its own range (the file is sparse).
        std::vector<std::pair<std::uint64_t, std::uint64_t>> batch;
        std::uint64_t bytes = 0;
        while (!written.q.empty() && bytes < o.pace) {
          batch.push_back(written.q.front());
          bytes += written.q.front().second;
          written.q.pop_front();
        }
        l.unlock();
        for (auto [off, len] : batch)
          (void)::sync_file_range(out, static_cast<off_t>(off), static_cast<off_t>(len), SYNC_FILE_RANGE_WRITE);
        for (auto [off, len] : batch)
          (void)::sync_file_range(out, static_cast<off_t>(off), static_cast<off_t>(len),
                                  SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
        l.lock();
      }
    });
  }

  std::vector<std::thread> readers;
  for (int t = 0; t < o.threads; ++t) {
    readers.emplace_back([&] {
      void* mem = nullptr;
      if (::posix_memalign(&mem, 4096, o.piece) != 0) Die("posix_memalign");
      char* buf = static_cast<char*>(mem);
      for (std::uint64_t i; (i = next.fetch_add(1)) < pieces;) {
        // A network-bound server hands out pieces no faster than read_rate.
        if (o.read_rate > 0)
          std::this_thread::sleep_until(t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
                                                 static_cast<double>(i * o.piece) / static_cast<double>(o.read_rate))));
        const std::uint64_t off = i * o.stride * o.piece;
        if (o.read_chunk == 0) {
          PreadAll(src, buf, o.piece, off);
        } else {  // one disk request per chunk, each waited for: latency-bound, like sendfile
          for (std::uint64_t c = 0; c < o.piece; c += o.read_chunk)
            PreadAll(src, buf + c, std::min(o.read_chunk, o.piece - c), off + c);
        }
        PwriteAll(out, buf, o.piece, off, "write destination");
        if (kicks) kick_and_commit(o.piece);
        if (mode == "paced") {
          std::lock_guard l(written.mu);
          written.q.emplace_back(off, o.piece);
          written.cv.notify_one();
        }
      }
      std::free(mem);
    });
  }
  for (auto& r : readers) r.join();
  const double read_s = std::chrono::duration<double>(Clock::now() - t0).count();
  reading = false;
  if (committer.joinable()) {
    {
      std::lock_guard l(commit_mu);
      commit_cv.notify_one();
    }
    committer.join();
  }
  if (!pacers.empty()) {
    {
      std::lock_guard l(written.mu);
      written.done = true;
      written.cv.notify_all();
    }
    for (auto& p : pacers) p.join();
  }
  if (mode != "memory") Fdatasync(out);
  const double durable_s = std::chrono::duration<double>(Clock::now() - t0).count();
  ::close(out);
  ::close(src);
  ::unlink(dst.c_str());
  return {read_s, mode == "memory" ? 0.0 : durable_s};
}

void PrintDiskSettings(const std::string& path) {
  std::printf("disk settings (queues of every block device):\n");
  std::fflush(stdout);
  // Diagnostics only: a failed command leaves a line out, nothing more.
  if (std::system(("df -hT " + path + " | tail -1").c_str()) != 0) std::printf("  (df failed)\n");
  if (std::system(
      "for q in /sys/block/*/queue; do d=${q%/queue}; d=${d##*/}; "
      "printf '  %-8s scheduler=%s nr_requests=%s max_sectors_kb=%s rotational=%s\\n' $d "
      "\"$(cat $q/scheduler 2>/dev/null)\" \"$(cat $q/nr_requests 2>/dev/null)\" "
      "\"$(cat $q/max_sectors_kb 2>/dev/null)\" \"$(cat $q/rotational 2>/dev/null)\"; done") != 0)
    std::printf("  (could not read the queues)\n");
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::vector<std::string> pos;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "disk_share_probe: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--bytes") o.bytes = ParseBytes(value());
    else if (a == "--modes") o.modes = Split(value());
    else if (a == "--rounds") o.rounds = std::atoi(value().c_str());
    else if (a == "--threads") o.threads = std::atoi(value().c_str());
    else if (a == "--piece") o.piece = ParseBytes(value());
    else if (a == "--stride") o.stride = ParseBytes(value());
    else if (a == "--pace") o.pace = ParseBytes(value());
    else if (a == "--pace-depth") o.pace_depth = std::atoi(value().c_str());
    else if (a == "--read-rate") o.read_rate = ParseBytes(value());
    else if (a == "--read-chunk") o.read_chunk = ParseBytes(value());
    else pos.push_back(a);
  }
  if (pos.size() != 2 || o.piece % 4096 != 0 || o.threads < 1 || o.stride < 1 || o.pace_depth < 1) {
    std::fprintf(stderr, "usage: disk_share_probe SRC DST_DIR [--bytes N] [--modes a,b] [--rounds R] "
                         "[--threads T] [--piece N (multiple of 4096)] [--stride S] [--pace N] [--pace-depth D] "
                         "[--read-rate BYTES/s] [--read-chunk N]\n");
    return 2;
  }
  o.src = pos[0];
  o.dst_dir = pos[1];
  PrintDiskSettings(o.dst_dir);
  std::fflush(stdout);
  MakeSource(o);
  std::printf("%llu pieces of %llu KiB, one in %llu, %d readers (%s); pace %llu KiB x %d\n",
              static_cast<unsigned long long>(o.bytes / o.piece), static_cast<unsigned long long>(o.piece >> 10),
              static_cast<unsigned long long>(o.stride), o.threads,
              o.read_rate ? (std::to_string(o.read_rate / 1000000) + " MB/s").c_str() : "as fast as the disk",
              static_cast<unsigned long long>(o.pace >> 10), o.pace_depth);
  std::printf("%-8s %5s %10s %12s %10s\n", "mode", "round", "reads end", "all durable", "MB/s");
  for (int round = 0; round < o.rounds; ++round) {
    // Rotate the order, so no mode always runs first after the source was written.
    for (std::size_t k = 0; k < o.modes.size(); ++k) {
      const std::string& mode = o.modes[(k + round) % o.modes.size()];
      const RunResult r = RunOnce(o, mode, round);
      const double end = r.durable_s > 0 ? r.durable_s : r.read_s;
      std::printf("%-8s %5d %9.3fs %11.3fs %10.0f\n", mode.c_str(), round, r.read_s, r.durable_s,
                  (o.bytes / o.piece) * o.piece / end / 1e6);
      std::fflush(stdout);
    }
  }
  return 0;
}
