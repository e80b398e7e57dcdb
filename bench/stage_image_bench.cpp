// Staging a rank's whole image into device memory (StageDeviceRankImage,
// daemon/stage/device_image.h) from a pulled cache, against a plain pinned
// cudaMemcpyAsync of the same byte count in the same run: the measurement
// behind the targets "upload >= 0.9x a pinned cudaMemcpyAsync", "GPU XXH64
// >= 200 GB/s" and "default stage of a ~10 GB rank <= 2.5 s".
//
// Rows (best of `reps` stages; the stage's own timings, steady clock):
//   stage:     the whole StageDeviceRankImage (plan, allocation, copy, GPU
//              hash, GPU decode of the sample, tables memfd)
//   upload:    its copy step (bytes of the header, offset table and
//              regions / seconds), and its ratio to the baseline
//   hash:      its GPU XXH64 of every check entry (bytes / seconds)
//   decode:    its sample (or all, --check all) decoded and compared
//   baseline:  a cudaMallocHost buffer of the copy's byte count -> a
//              cudaMalloc buffer, cudaMemcpyAsync in 1 GiB pieces on one
//              stream (CUDA events), best of `reps`
// The last line is CSV. The cache must hold the rank (exlr8d pull, or
// bench/stage_image_bench.sh, which synthesizes a release and pulls it).
//
// Usage: stage_image_bench --cache DIR --repo ORG/NAME --manifest NAME --tp N --rank R
//          [--reps 3] [--threads T] [--staging-mib 4] [--buffers 2] [--check all] [--ipc]
// Exit status: 0 ok, 1 failure, 2 usage or no CUDA device.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "daemon/stage/device_image.h"
#include "gpu/device.h"

namespace exlr8 {
namespace {

int Fail(const std::string& what) {
  std::fprintf(stderr, "stage_image_bench: %s\n", what.c_str());
  return 1;
}

// Best seconds of `reps` pinned cudaMemcpyAsync passes of `bytes`.
Result<double> PinnedBaseline(std::size_t bytes, int reps, int device) {
  CudaSetDeviceGuard guard;
  EXLR8_RETURN_IF_ERROR(guard.Set(device));
  void* host = nullptr;
  void* dev = nullptr;
  if (cudaMallocHost(&host, bytes) != cudaSuccess) return ResourceExhaustedError("cudaMallocHost");
  if (cudaMalloc(&dev, bytes) != cudaSuccess) {
    cudaFreeHost(host);
    return ResourceExhaustedError("cudaMalloc");
  }
  std::memset(host, 0x5A, bytes);
  cudaStream_t s;
  cudaEvent_t a, b;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  double best = 1e30;
  constexpr std::size_t kPiece = std::size_t{1} << 30;
  for (int r = 0; r < reps; ++r) {
    cudaEventRecord(a, s);
    for (std::size_t off = 0; off < bytes; off += kPiece)
      cudaMemcpyAsync(static_cast<char*>(dev) + off, static_cast<char*>(host) + off,
                      std::min(kPiece, bytes - off), cudaMemcpyHostToDevice, s);
    cudaEventRecord(b, s);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    best = std::min(best, ms / 1e3);
  }
  const cudaError_t e = cudaGetLastError();
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaStreamDestroy(s);
  cudaFree(dev);
  cudaFreeHost(host);
  if (e != cudaSuccess) return InternalError(std::string("baseline copy: ") + cudaGetErrorString(e));
  return best;
}

int Main(int argc, char** argv) {
  RankRequest request;
  DeviceImageOptions options;
  int reps = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "stage_image_bench: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--cache")
      request.cache_dir = value();
    else if (a == "--repo")
      request.repo = value();
    else if (a == "--manifest")
      request.manifest = value();
    else if (a == "--tp")
      request.tp = std::atoi(value().c_str());
    else if (a == "--rank")
      request.rank = std::atoi(value().c_str());
    else if (a == "--reps")
      reps = std::max(1, std::atoi(value().c_str()));
    else if (a == "--threads")
      options.threads = std::atoi(value().c_str());
    else if (a == "--staging-mib")
      options.staging_bytes = std::size_t(std::max(1, std::atoi(value().c_str()))) << 20;
    else if (a == "--buffers")
      options.staging_buffers = std::max(1, std::atoi(value().c_str()));
    else if (a == "--device")
      options.device = std::atoi(value().c_str());
    else if (a == "--check")
      options.check_all = value() == "all";
    else if (a == "--ipc")
      options.force_ipc = true;
    else {
      std::fprintf(stderr, "stage_image_bench: unknown argument %s (see the file's header)\n", a.c_str());
      return 2;
    }
  }
  if (request.cache_dir.empty() || request.repo.empty() || request.manifest.empty()) {
    std::fprintf(stderr,
                 "usage: stage_image_bench --cache DIR --repo ORG/NAME --manifest NAME --tp N --rank R "
                 "[--reps 3] [--threads T] [--staging-mib 4] [--buffers 2] [--check all] [--ipc]\n");
    return 2;
  }
  if (Status s = RequireCudaDevice(); !s.ok()) {
    std::fprintf(stderr, "stage_image_bench: %s\n", s.ToString().c_str());
    return 2;
  }
  if (auto d = DescribeCudaDevice(options.device); d.ok()) std::printf("device: %s\n", d->c_str());

  double best_total = 1e30, best_upload = 1e30, best_hash = 1e30, best_decode = 1e30;
  std::uint64_t copy_bytes = 0, hash_bytes = 0, image_bytes = 0, decoded = 0, of = 0;
  bool vmm = false;
  for (int r = 0; r < reps; ++r) {
    DeviceImageProgress progress;
    options.progress = &progress;
    const auto t0 = std::chrono::steady_clock::now();
    auto img = StageDeviceRankImage(request, options);
    const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!img.ok()) return Fail(img.status().ToString());
    const LeaseProof& p = img->proof;
    copy_bytes = progress.copy_total.load();
    hash_bytes = p.hashed_bytes;
    image_bytes = img->image_bytes();
    decoded = p.decoded_halves;
    of = p.decoded_of;
    vmm = !img->vmm.empty();
    std::printf("stage %d: %.3f s (plan %.3f, staging buffers %.3f, upload %.3f, hash %.4f, decode %.3f)\n",
                r + 1, total, p.seconds_read, img->seconds_staging_setup, p.seconds_upload, p.seconds_hash,
                p.seconds_decode);
    best_total = std::min(best_total, total);
    best_upload = std::min(best_upload, p.seconds_upload);
    best_hash = std::min(best_hash, p.seconds_hash);
    best_decode = std::min(best_decode, p.seconds_decode);
  }  // the image is freed before the baseline allocates
  auto base = PinnedBaseline(copy_bytes, reps, options.device);
  if (!base.ok()) return Fail(base.status().ToString());
  const double up_gbs = static_cast<double>(copy_bytes) / best_upload / 1e9;
  const double base_gbs = static_cast<double>(copy_bytes) / *base / 1e9;
  const double hash_gbs = static_cast<double>(hash_bytes) / best_hash / 1e9;
  std::printf("image %.3f GB (%s), copied %.3f GB, hashed %.3f GB, decoded %llu of %llu halves\n",
              image_bytes / 1e9, vmm ? "VMM" : "IPC", copy_bytes / 1e9, hash_bytes / 1e9,
              static_cast<unsigned long long>(decoded), static_cast<unsigned long long>(of));
  std::printf("upload %.2f GB/s vs pinned cudaMemcpyAsync %.2f GB/s: %.2fx\n", up_gbs, base_gbs,
              up_gbs / base_gbs);
  std::printf("hash %.1f GB/s; decode %.3f s; stage %.3f s (best of %d)\n", hash_gbs, best_decode, best_total,
              reps);
  std::printf(
      "csv,image_bytes,copy_bytes,threads,staging_mib,buffers,upload_gbs,pinned_gbs,ratio,hash_gbs,"
      "decoded,of,decode_s,stage_s\n");
  std::printf("csv,%llu,%llu,%d,%zu,%d,%.3f,%.3f,%.3f,%.1f,%llu,%llu,%.4f,%.4f\n",
              static_cast<unsigned long long>(image_bytes), static_cast<unsigned long long>(copy_bytes),
              options.threads, options.staging_bytes >> 20, options.staging_buffers, up_gbs, base_gbs,
              up_gbs / base_gbs, hash_gbs, static_cast<unsigned long long>(decoded),
              static_cast<unsigned long long>(of), best_decode, best_total);
  return 0;
}

}  // namespace
}  // namespace exlr8

int main(int argc, char** argv) { return exlr8::Main(argc, argv); }
