// exlr8d-stage: stages a pulled rank's whole image (lease v2) from the cache
// into GPU or host memory and checks it there (daemon/stage/). A program of
// its own, built only with the CUDA Toolkit, so that `exlr8d` itself never
// needs a GPU runtime on the nodes that only pull and serve the API.
// Over ~500 lines while it carries both leases: the v1 holder (halves only,
// `--lease v1`, deprecated for one release) goes in the next release, and
// with it the second copy of the holding loop (ImageHolder::Hold).
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "client/cli/args.h"
#include "client/cli/cli.h"
#include "client/lease/description_v2.h"
#include "daemon/base/mutex.h"
#include "daemon/cache/cache_paths.h"
#include "daemon/signal_watcher.h"
#include "daemon/stage/device_image.h"
#include "daemon/stage/gpu_stage.h"
#include "daemon/stage/host_image.h"
#include "daemon/stage/lease.h"
#include "daemon/stage/lvq5_device_image.h"
#include "daemon/stage/lvq5_image.h"
#include "daemon/stage/rank_reader.h"
#include "daemon/stage/stage_state.h"
#include "daemon/stage/step_reporter.h"
#include "daemon/systemd_notify.h"
#include "gpu/device.h"

namespace exlr8 {
namespace {

constexpr const char* kProg = "exlr8d-stage";
constexpr const char* kUsage =
    R"(usage: exlr8d-stage ORG/NAME --manifest NAME|PATH --tp N --rank R [options]
       exlr8d-stage ORG/NAME [options]   (an LVQ5 fileset, whole)

Assembles TP rank R of N's whole image from the cache (a rank 'exlr8d pull' or
a job of 'exlr8d serve' pulled; read from the mapped cache files): every half
record the rank owns with its vectors, the layers' signs, every dense and
plain tensor (schema/lease/IMAGE.md), in GPU memory (default) or host memory,
and checks it where a serving process will read it: every region's XXH64,
and on a GPU a seeded sample of >= 1 % of the halves decoded in place against
the CPU reference. Then it reports and exits, releasing the memory; with
--hold it keeps the image and leases it to serving processes on this machine
(lease protocol v2, schema/lease/PROTOCOL.md) until SIGINT or SIGTERM, then
asks its lessees to let go and waits for them; told to stop before it holds,
it stops reading or uploading and exits 130. While it runs, the fileset is
pinned (a process pin, which 'exlr8d list' shows and 'exlr8d gc' respects; it
goes when this process does).

Without --manifest it stages a pulled LVQ5 fileset whole (docs/LVQ5.md
"Staging"): every record's tensors, Tetra codes transcoded to the served
layout, as plain tensors named after the records; blobs stay on the host.
On a GPU every Tetra word up to 1 GB of codes (and a seeded >= 1 % of the
rows of every record beyond; all with --check all) is decoded in place and
compared with the CPU reference.

  ORG/NAME            the pulled repository (or --repo ORG/NAME)
  --revision REV      as pulled (default main)
  --manifest NAME     manifest name (home, ...) or repo path
  --tp N --rank R     tensor-parallel degree and rank
  --cache DIR         the cache (default $EXLR8_CACHE, else $XDG_CACHE_HOME/exlr8,
                      else ~/.cache/exlr8); read without taking its lock
  --memory KIND       device (default): one exportable GPU allocation (a VMM
                      file descriptor, or a legacy IPC handle where the
                      driver cannot export one), every region's XXH64
                      checked on the GPU in place and a seeded sample of
                      >= 1 % of the halves (every layer, width and
                      projection; all with --check all) decoded and
                      reconstructed on the GPU from the image in place
                      against the CPU reference (tiles bit for bit, weights
                      per spec 9.3), and one dense matrix of each format
                      (all with --check all) decoded on the GPU in place
                      against the CPU decoders; host: a sealed memfd, every
                      region's XXH64 checked, no GPU needed
  --lease V           v2 (default): the whole image, as above, each lessee
                      getting the image and tables as descriptors; v1
                      (deprecated, removed in the next release; device memory
                      only): the expert halves only, over CUDA IPC
                      (client/lease/description.h), checked by copying a
                      sample back and decoding it again
  --device D          CUDA device (default 0)
  --check all|N       all: decode every half on the GPU (default: the seeded
                      sample); with --lease v1, N halves spread over the rank
                      (default 64)
  --hold SOCKET       after the checks pass, keep the image and answer each
                      connection to the Unix socket SOCKET with the lease. A
                      process that keeps its connection open is a lessee.
  --release-wait S    on SIGINT/SIGTERM, stop taking lessees, send each the
                      release line and wait up to S seconds (default 30) for
                      them to let go before the memory is released; a second
                      signal releases at once
  --state-dir DIR     report each step (and the bytes done of a long one, every
                      second) in DIR/state.json and hold DIR/holder.lock
                      while running (daemon/stage/stage_state.h): how 'exlr8d
                      serve' follows the holders it starts (POST /v1/stages)

Exit status: 0 when every check passed; 1 on a GPU decode mismatch (--lease
v1); 3 when a region is not in the cache (pull first) or no longer matches
its checksum, or the image in device memory differs from the cache; 4 without
a CUDA device; 6 when device memory runs out; 2 usage; 130 when stopped by
SIGINT or SIGTERM before it held the rank.
)";

std::string Pids(const std::vector<pid_t>& pids) {
  std::string out;
  for (pid_t p : pids) out += (out.empty() ? "" : ", ") + std::to_string(p);
  return out;
}

// SIGINT and SIGTERM, counted as they come (a SignalWatcher's thread calls
// Add). The first stops the work under way (`flag` is what the reading and
// the upload poll) or, once the rank is held, starts the release; the
// second releases at once.
class StopRequests {
 public:
  void Add(int sig) {
    {
      MutexLock l(&mu_);
      ++count_;
      last_signal_ = sig;
    }
    flag_.store(true);
    cv_.SignalAll();
  }
  const std::atomic<bool>* flag() const { return &flag_; }
  bool requested() const { return flag_.load(); }
  // Waits until `n` stops have been asked for (true), or `timeout` passed.
  bool WaitFor(int n, std::chrono::milliseconds timeout) {
    MutexLock l(&mu_);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (count_ < n && cv_.WaitUntil(&mu_, deadline)) {
    }
    return count_ >= n;
  }
  void Wait(int n) {
    MutexLock l(&mu_);
    while (count_ < n) cv_.Wait(&mu_);
  }
  int last_signal() {
    MutexLock l(&mu_);
    return last_signal_;
  }

 private:
  std::atomic<bool> flag_{false};
  Mutex mu_;
  CondVar cv_;  // a stop was counted
  int count_ EXLR8_GUARDED_BY(mu_) = 0;
  int last_signal_ EXLR8_GUARDED_BY(mu_) = 0;
};

// Told to stop: no new lessees; the connected ones get `wait` to let go
// (their mappings would point at freed memory), unless another signal says
// to release now. Then the server stops.
void ReleaseWhenLesseesLetGo(LeaseServer& server, StopRequests& stops, std::chrono::seconds wait) {
  server.StopAccepting();
  const auto deadline = std::chrono::steady_clock::now() + wait;
  bool said = false;
  for (std::vector<pid_t> lessees; !(lessees = server.Lessees()).empty();) {
    if (std::chrono::steady_clock::now() >= deadline) {
      std::printf(
          "releasing with %zu lessee(s) still attached (pid %s): their mappings are no longer valid\n",
          lessees.size(), Pids(lessees).c_str());
      break;
    }
    if (!said) {
      std::printf("waiting up to %lld s for %zu lessee(s) to let go (pid %s); another signal releases now\n",
                  static_cast<long long>(wait.count()), lessees.size(), Pids(lessees).c_str());
      std::fflush(stdout);
      said = true;
    }
    if (stops.WaitFor(2, std::chrono::milliseconds(100))) {
      std::printf("signalled again: releasing with %zu lessee(s) attached\n", lessees.size());
      break;
    }
  }
  server.Stop();
}

// A rank's whole image (lease v2), in host memory (--memory host: a sealed
// memfd, daemon/stage/host_image.h) or device memory (--memory device
// --lease v2: daemon/stage/device_image.h), and, with --hold, leased over
// protocol v2 (schema/lease/PROTOCOL.md). The release line asks lessees to
// let go, and the holder waits for them as the v1 device kind does; a host
// memfd outlives this process while a lessee maps it, and so does a VMM
// allocation a lessee imported (the driver counts references), but an IPC
// mapping does not: the wait matters most there.
struct ImageHolder {
  using StepFn = std::function<void(std::string_view, StateMembers, const std::atomic<std::uint64_t>*,
                                    const std::atomic<std::uint64_t>*)>;
  RankRequest& request;
  const std::string& hold;
  std::chrono::seconds release_wait;
  StopRequests& stops;
  StepFn step;
  std::function<int(const Status&)> fail;
  std::function<int(std::string_view, const Status&)> stopped;

  std::uint32_t DeadlineS() const {
    return static_cast<std::uint32_t>(
        std::clamp<std::int64_t>(release_wait.count(), 1, kMaxLeaseReleaseDeadlineS));
  }

  // An EXLR8 rank's image, or (lvq5) a whole LVQ5 fileset's.
  int RunHost(bool lvq5 = false) {
    auto image = lvq5 ? BuildHostLvq5Image(request) : BuildHostRankImage(request);
    if (!image.ok() && image.status().code() == StatusCode::kCancelled)
      return stopped("reading", image.status());
    if (!image.ok()) return fail(image.status());
    if (!image->pin_error.empty())
      std::fprintf(stderr, "%s: warning: not pinned, so gc may evict the fileset while it is held: %s\n",
                   kProg, image->pin_error.c_str());
    const LeaseProof& p = image->proof;
    std::printf(
        "assembled %s of %s@%s TP %d rank %d in host memory: %llu regions, %s hashed (XXH64, %llu "
        "against the cache's verified bytes where the release has no digest), 0 mismatches; "
        "read %.2f s, hash %.2f s\n",
        HumanBytes(image->layout.allocation_bytes()).c_str(), request.repo.c_str(),
        image->commit.substr(0, 8).c_str(), request.tp, request.rank,
        static_cast<unsigned long long>(p.hashed_regions), HumanBytes(p.hashed_bytes).c_str(),
        static_cast<unsigned long long>(image->regions_without_release_digest), p.seconds_read,
        p.seconds_hash);
    std::fflush(stdout);
    if (hold.empty()) {
      std::printf("ok (not held: the image is released now)\n");
      step("released", {}, nullptr, nullptr);
      return kExitOk;
    }
    if (stops.requested()) return stopped("reading", CancelledError("stopped before the lease started"));
    RankRequest described = request;
    if (lvq5) described.manifest = kLvq5LeaseManifest;
    const std::string description =
        WriteLeaseDescriptionV2(DescribeHostImage(*image, described, DeadlineS()));
    StateMembers held;
    held.Add("memory", "host")
        .Add("commit", image->commit)
        .Add("bytes", image->layout.allocation_bytes())
        .Add("regions", p.hashed_regions)
        .Add("lease", hold);
    const int fds[] = {image->image_fd.get(), image->tables_fd.get()};
    return Hold(description, fds, std::move(held), "host memory");
  }

  int RunDevice(DeviceImageOptions options) {
    DeviceImageProgress progress;
    options.progress = &progress;
    options.cancel = stops.flag();
    // Each step with its counters, printed every second (StepReporter).
    options.on_step = [&](int s) {
      switch (s) {
        case 1:
          step("staging", StateMembers().Add("memory", "device"), &progress.copy_done, &progress.copy_total);
          break;
        case 2:
          step("hashing", {}, &progress.hash_done, &progress.hash_total);
          break;
        case 3:
          step("decoding", {}, &progress.decode_done, &progress.decode_total);
          break;
        default:
          break;
      }
    };
    const int device = options.device;
    request.before_reading = [&] { return DescribeCudaDevice(device).status(); };
    auto image = StageDeviceRankImage(request, options);
    if (!image.ok() && image.status().code() == StatusCode::kCancelled)
      return stopped("staging", image.status());
    if (!image.ok()) return fail(image.status());
    if (!image->plan.pin_error.empty())
      std::fprintf(stderr, "%s: warning: not pinned, so gc may evict the fileset while it is held: %s\n",
                   kProg, image->plan.pin_error.c_str());
    const LeaseProof& p = image->proof;
    const std::uint64_t bytes = image->image_bytes();
    std::printf(
        "staged %s of %s@%s TP %d rank %d on GPU %s (%s, %s allocation): upload %.2f s (%.2f GB/s; "
        "staging buffers pinned in %.2f s)\n",
        HumanBytes(bytes).c_str(), request.repo.c_str(), image->commit.substr(0, 8).c_str(), request.tp,
        request.rank, image->identity.uuid.c_str(), image->identity.pci_bus_id.c_str(),
        image->vmm.empty() ? "IPC" : "VMM fd", p.seconds_upload,
        p.seconds_upload > 0 ? static_cast<double>(bytes) / p.seconds_upload / 1e9 : 0.0,
        image->seconds_staging_setup);
    std::printf(
        "proof: %llu regions, %s hashed on the GPU in %.3f s, 0 mismatches (%llu against the cache's "
        "verified bytes where the release has no digest); %llu of %llu halves decoded and reconstructed on "
        "the GPU in place (seed %llu): tiles bit-exact, weights within spec 9.3 (max block error %.2g) "
        "against the CPU reference; %llu dense matrices decoded on the GPU in place and equal to the CPU "
        "decoders'; in %.3f s; plan %.2f s\n",
        static_cast<unsigned long long>(p.hashed_regions), HumanBytes(p.hashed_bytes).c_str(), p.seconds_hash,
        static_cast<unsigned long long>(image->regions_without_release_digest),
        static_cast<unsigned long long>(p.decoded_halves), static_cast<unsigned long long>(p.decoded_of),
        static_cast<unsigned long long>(p.decoded_seed), p.max_block_error,
        static_cast<unsigned long long>(p.dense_decoded_tensors), p.seconds_decode, p.seconds_read);
    std::fflush(stdout);
    if (hold.empty()) {
      std::printf("ok (not held: the image is released now)\n");
      step("released", {}, nullptr, nullptr);
      return kExitOk;
    }
    if (stops.requested()) return stopped("staging", CancelledError("stopped before the lease started"));
    // The device stays current on this thread while the lease is held.
    CudaSetDeviceGuard current;
    if (Status s = current.Set(device); !s.ok()) return fail(s);
    const std::string description =
        WriteLeaseDescriptionV2(DescribeDeviceImage(*image, request, DeadlineS()));
    StateMembers held;
    held.Add("memory", "device")
        .Add("commit", image->commit)
        .Add("bytes", bytes)
        .Add("regions", p.hashed_regions)
        .Add("device", image->identity.uuid)
        .Add("lease", hold);
    std::vector<int> fds;
    if (image->vmm_fd.valid()) fds.push_back(image->vmm_fd.get());
    fds.push_back(image->tables_fd.get());
    return Hold(description, fds, std::move(held), "device memory");
  }

  // A whole LVQ5 fileset in device memory (lvq5_device_image.h).
  int RunDeviceLvq5(DeviceImageOptions options) {
    Lvq5DeviceOptions lvq5;
    lvq5.image = options;
    lvq5.image.cancel = stops.flag();
    auto staged = StageDeviceLvq5Image(request, lvq5);
    if (!staged.ok() && staged.status().code() == StatusCode::kCancelled)
      return stopped("staging", staged.status());
    if (!staged.ok()) return fail(staged.status());
    const DeviceRankImage& image = staged->image;
    if (!image.plan.pin_error.empty())
      std::fprintf(stderr, "%s: warning: not pinned, so gc may evict the fileset while it is held: %s\n",
                   kProg, image.plan.pin_error.c_str());
    const LeaseProof& p = image.proof;
    std::printf(
        "staged %s of %s@%s (LVQ5, %llu records; %llu blobs left on the host) on GPU %s (%s, %s allocation): "
        "upload %.2f s\n",
        HumanBytes(image.image_bytes()).c_str(), request.repo.c_str(), image.commit.substr(0, 8).c_str(),
        static_cast<unsigned long long>(staged->plan.records),
        static_cast<unsigned long long>(staged->plan.blobs), image.identity.uuid.c_str(),
        image.identity.pci_bus_id.c_str(), image.vmm.empty() ? "IPC" : "VMM fd", p.seconds_upload);
    std::printf(
        "proof: %llu regions, %s hashed on the GPU in %.3f s, 0 mismatches; Tetra: %llu records decoded on "
        "every word and %llu sampled (seed %llu), %llu rows / %llu words decoded on the GPU in place, equal "
        "to the CPU reference, in %.3f s; plan %.2f s\n",
        static_cast<unsigned long long>(p.hashed_regions), HumanBytes(p.hashed_bytes).c_str(), p.seconds_hash,
        static_cast<unsigned long long>(staged->tetra_records_full),
        static_cast<unsigned long long>(staged->tetra_records_sampled),
        static_cast<unsigned long long>(p.decoded_seed),
        static_cast<unsigned long long>(staged->tetra_rows_checked),
        static_cast<unsigned long long>(staged->tetra_words_checked), p.seconds_decode, p.seconds_read);
    std::fflush(stdout);
    if (hold.empty()) {
      std::printf("ok (not held: the image is released now)\n");
      step("released", {}, nullptr, nullptr);
      return kExitOk;
    }
    if (stops.requested()) return stopped("staging", CancelledError("stopped before the lease started"));
    RankRequest described = request;
    described.manifest = kLvq5LeaseManifest;
    const std::string description =
        WriteLeaseDescriptionV2(DescribeDeviceImage(image, described, DeadlineS()));
    StateMembers held;
    held.Add("memory", "device")
        .Add("commit", image.commit)
        .Add("bytes", image.image_bytes())
        .Add("regions", p.hashed_regions)
        .Add("lease", hold);
    std::vector<int> fds;
    if (image.vmm_fd.valid()) fds.push_back(image.vmm_fd.get());
    fds.push_back(image.tables_fd.get());
    return Hold(description, fds, std::move(held), "device memory");
  }

  // Serves `description` with `fds` until told to stop, then asks the
  // lessees to let go and waits for them.
  int Hold(const std::string& description, std::span<const int> fds, const StateMembers& held,
           const char* memory) {
    Mutex report_mu;
    const char* phase = "holding";
    auto report_lessees = [&](const std::vector<pid_t>& lessees) {
      MutexLock l(&report_mu);
      step(phase, StateMembers(held).AddArray("lessees", std::span<const pid_t>(lessees)), nullptr, nullptr);
    };
    auto server = LeaseServer::StartV2(hold, description, fds, report_lessees);
    if (!server.ok()) return fail(server.status());
    std::printf("holding: the rank's image is leased on %s (protocol v2, %s) until SIGINT or SIGTERM\n",
                hold.c_str(), memory);
    std::fflush(stdout);
    report_lessees((*server)->Lessees());
    if (Status s = NotifySystemd("READY=1"); !s.ok())
      std::fprintf(stderr, "%s: warning: %s\n", kProg, s.ToString().c_str());
    stops.Wait(1);
    (void)NotifySystemd("STOPPING=1");
    {
      MutexLock l(&report_mu);
      phase = "releasing";
    }
    report_lessees((*server)->Lessees());
    if (Status s = (*server)->AnnounceRelease(release_wait); !s.ok())
      std::fprintf(stderr, "%s: warning: %s\n", kProg, s.ToString().c_str());
    ReleaseWhenLesseesLetGo(**server, stops, release_wait);
    std::printf("released after %llu lease(s) (signal %d)\n",
                static_cast<unsigned long long>((*server)->served()), stops.last_signal());
    step("released", StateMembers().Add("leases_served", (*server)->served()), nullptr, nullptr);
    return kExitOk;
  }
};

int Run(const std::vector<std::string>& argv) {
  Args args;
  if (auto exit = ParseCommandLine(kProg, kUsage, argv,
                                   {"repo", "revision", "manifest", "tp", "rank", "cache", "device", "check",
                                    "hold", "release-wait", "state-dir", "memory", "lease"},
                                   {}, kRepositoryArgument, &args))
    return *exit;
  RankRequest request;
  GpuStageOptions gpu;
  std::int64_t release_wait_s = 30;
  auto parse = [&]() -> Status {
    EXLR8_ASSIGN_OR_RETURN(request.repo, args.Require("repo"));
    request.revision = args.GetOr("revision", "main");
    EXLR8_ASSIGN_OR_RETURN(std::string cache_dir, CacheDirOr(args.Get("cache")));
    request.cache_dir = std::move(cache_dir);
    if (!args.Has("manifest")) {
      // A whole LVQ5 fileset: one image, TP 1 rank 0 (lvq5_image.h).
      if (args.Has("tp") || args.Has("rank"))
        return InvalidArgumentError(
            "--tp and --rank need --manifest: an LVQ5 fileset (no --manifest) is "
            "staged whole");
      EXLR8_ASSIGN_OR_RETURN(release_wait_s, args.GetInt("release-wait", 30, 0, 24 * 3600));
      EXLR8_ASSIGN_OR_RETURN(std::int64_t device, args.GetInt("device", 0, 0, 1024));
      gpu.device = static_cast<int>(device);
      return Status::Ok();
    }
    EXLR8_ASSIGN_OR_RETURN(request.manifest, args.Require("manifest"));
    EXLR8_ASSIGN_OR_RETURN(std::int64_t tp, args.GetInt("tp", -1, 1, 1 << 20));
    if (tp < 0) return InvalidArgumentError("missing --tp");
    EXLR8_ASSIGN_OR_RETURN(std::int64_t rank, args.GetInt("rank", -1, 0, tp - 1));
    if (rank < 0) return InvalidArgumentError("missing --rank");
    request.tp = static_cast<int>(tp);
    request.rank = static_cast<int>(rank);
    EXLR8_ASSIGN_OR_RETURN(release_wait_s, args.GetInt("release-wait", 30, 0, 24 * 3600));
    EXLR8_ASSIGN_OR_RETURN(std::int64_t device, args.GetInt("device", 0, 0, 1024));
    gpu.device = static_cast<int>(device);
    const std::string check = args.GetOr("check", "64");
    if (check == "all") {
      gpu.check_halves = GpuStageOptions::kAllHalves;
    } else {
      EXLR8_ASSIGN_OR_RETURN(std::int64_t n,
                             args.GetInt("check", 64, 0, std::numeric_limits<std::int32_t>::max()));
      gpu.check_halves = static_cast<std::size_t>(n);
    }
    return Status::Ok();
  };
  if (Status s = parse(); !s.ok()) return ReportError(kProg, s);
  const std::string hold = args.GetOr("hold", "");
  const std::string memory = args.GetOr("memory", "device");
  if (memory != "device" && memory != "host")
    return ReportError(kProg, InvalidArgumentError("--memory: '" + memory + "' is neither device nor host"));
  const std::string lease = args.GetOr("lease", "v2");
  if (lease != "v1" && lease != "v2")
    return ReportError(kProg, InvalidArgumentError("--lease: '" + lease + "' is neither v1 nor v2"));
  if (memory == "host" && lease != "v2")
    return ReportError(kProg, InvalidArgumentError("--memory host is leased over protocol v2 only"));
  if (lease == "v1")
    std::fprintf(
        stderr,
        "%s: warning: --lease v1 is deprecated and goes in the next release: it stages the expert "
        "halves only; lease v2 (the default) holds the rank's whole image (schema/lease/PROTOCOL.md)\n",
        kProg);
  const bool device_v2 = memory == "device" && lease == "v2";
  DeviceImageOptions image_options;
  image_options.device = gpu.device;
  if (device_v2 && args.Get("check")) {
    if (args.GetOr("check", "") != "all")
      return ReportError(
          kProg, InvalidArgumentError("--check with --lease v2 (the default): 'all' decodes every half; "
                                      "without it a seeded sample of >= 1 % of the halves is decoded (a "
                                      "count of halves is the deprecated --lease v1's)"));
    image_options.check_all = true;
  }
  if (memory == "host" && args.Get("check"))
    return ReportError(kProg,
                       InvalidArgumentError("--check decodes on a GPU; --memory host hashes every region and "
                                            "decodes nothing (not yet: a GPU check of host images)"));
  // Signals are taken by the watcher's thread, started before any other
  // (CUDA's, the lease server's) so that all inherit the blocked mask, and
  // before the first step is reported: a stop asked for at any step
  // (DELETE /v1/stages/{id} right after POST) ends that step cleanly, never
  // the process mid-way.
  StopRequests stops;
  // Kept blocked at the end: "released" is reported by then, and a signal
  // that comes after must not turn the exit into a death.
  SignalWatcher signals([&stops](int sig) { stops.Add(sig); }, SignalWatcher::AtEnd::kKeepBlocked);
  // A stop pending when the program starts (a DELETE right after the POST)
  // is the watcher's to take: wait for it, so that no step begins before
  // the stop is seen, however late the watcher's thread is scheduled.
  if (sigset_t pending; ::sigpending(&pending) == 0 &&
                        (::sigismember(&pending, SIGINT) == 1 || ::sigismember(&pending, SIGTERM) == 1))
    stops.WaitFor(1, std::chrono::seconds(5));
  // With --state-dir, every step, its progress and the outcome go to
  // DIR/state.json too; the progress of a long step is printed as well.
  std::unique_ptr<StageStateWriter> state;
  if (const std::string dir = args.GetOr("state-dir", ""); !dir.empty()) {
    auto opened = StageStateWriter::Open(dir);
    if (!opened.ok()) return ReportError(kProg, opened.status());
    state = std::move(*opened);
  }
  // What the long steps count up; declared before the reporter, which
  // reads them until it stops.
  RankReadProgress read_progress;
  std::atomic<std::uint64_t> uploaded{0}, upload_total{0};
  StepReporter reporter(std::move(state), stdout);
  auto step = [&](std::string_view name, StateMembers members = {},
                  const std::atomic<std::uint64_t>* done = nullptr,
                  const std::atomic<std::uint64_t>* total = nullptr) {
    reporter.Step(name, std::move(members), done, total);
  };
  auto fail = [&](const Status& s) {
    const int code = ReportError(kProg, s);
    step("failed", StateMembers().Add("error", s.ToString()).Add("exit_status", code));
    return code;
  };
  // Stopped before the rank is held: the step's work is abandoned, and
  // whatever it had (the pin, device memory) is freed on return.
  auto stopped = [&](std::string_view while_doing, const Status& s) {
    const int code = ReportError(kProg, s);
    std::printf("stopped by signal %d while %s: nothing is held\n", stops.last_signal(),
                std::string(while_doing).c_str());
    step("released", StateMembers().Add("stopped_while", while_doing).Add("exit_status", code));
    return code;
  };
  // A --hold path too long for a socket (a deep --cache under exlr8d
  // serve), or taken by a live holder, fails here, before the whole read,
  // upload and check.
  if (!hold.empty())
    if (Status s = CheckCanHoldAt(hold); !s.ok()) return fail(s);
  step("reading", {}, &read_progress.bytes_checked, &read_progress.bytes_total);
  request.cancel = stops.flag();
  request.progress = &read_progress;
  // A process pin for as long as this process runs: gc and evict leave the
  // fileset alone while it is staged and held (daemon/cache/process_pin.h).
  request.pin_holder = "exlr8d-stage " + request.manifest + " tp" + std::to_string(request.tp) + " rank" +
                       std::to_string(request.rank);
  if (request.manifest.empty()) {
    request.pin_holder = "exlr8d-stage " + std::string(kLvq5LeaseManifest);
    if (lease != "v2") return fail(InvalidArgumentError("an LVQ5 fileset is leased over protocol v2 only"));
    ImageHolder holder{request, hold, std::chrono::seconds(release_wait_s), stops, step, fail, stopped};
    return memory == "host" ? holder.RunHost(/*lvq5=*/true) : holder.RunDeviceLvq5(image_options);
  }
  if (memory == "host" || device_v2) {
    ImageHolder holder{request, hold, std::chrono::seconds(release_wait_s), stops, step, fail, stopped};
    return memory == "host" ? holder.RunHost() : holder.RunDevice(image_options);
  }
  request.before_reading = [&] {
    std::printf("located %s of halves of %s TP %d rank %d in the cache; reading them once GPU %d is there\n",
                HumanBytes(read_progress.bytes_total.load()).c_str(), request.repo.c_str(), request.tp,
                request.rank, gpu.device);
    std::fflush(stdout);
    return DescribeCudaDevice(gpu.device).status();
  };
  auto rank = ReadRankHalves(request);
  if (!rank.ok() && rank.status().code() == StatusCode::kCancelled) return stopped("reading", rank.status());
  if (!rank.ok()) return fail(rank.status());
  if (!rank->pin_error.empty())
    std::fprintf(stderr, "%s: warning: not pinned, so gc may evict the fileset while it is held: %s\n", kProg,
                 rank->pin_error.c_str());
  std::printf("read %zu halves (%s) of %s@%s TP %d rank %d from %s, XXH64 checked, in %.2f s\n",
              rank->halves.size(), HumanBytes(rank->total_bytes).c_str(), request.repo.c_str(),
              rank->commit.substr(0, 8).c_str(), request.tp, request.rank, rank->root.c_str(),
              rank->read_seconds);
  std::fflush(stdout);
  upload_total.store(rank->total_bytes);
  gpu.upload.bytes_uploaded = &uploaded;
  step("staging",
       StateMembers().Add("commit", rank->commit).Add("halves", rank->halves.size()).Add("bytes", rank->total_bytes),
       &uploaded, &upload_total);
  CudaSetDeviceGuard device;  // the device stays current while the lease is held
  if (!hold.empty())
    if (Status s = device.Set(gpu.device); !s.ok()) return fail(s);
  StagedHalves staged;
  gpu.cancel = stops.flag();
  auto report = StageOnGpu(*rank, gpu, hold.empty() ? nullptr : &staged);
  if (!report.ok() && report.status().code() == StatusCode::kCancelled)
    return stopped("staging", report.status());
  if (!report.ok()) return fail(report.status());
  const GpuStageReport& r = *report;
  std::printf("staged on %s: %s in %llu halves (%s with alignment), %.2f GB/s\n", r.device.c_str(),
              HumanBytes(r.upload.bytes).c_str(), static_cast<unsigned long long>(r.halves),
              HumanBytes(r.upload.device_bytes).c_str(), r.upload.GBPerSecond());
  std::printf(
      "checked %llu halves (%llu weights): %llu round-trip and %llu decode mismatches; GPU decode %.4f s, "
      "CPU reference %.3f s\n",
      static_cast<unsigned long long>(r.checked_halves), static_cast<unsigned long long>(r.checked_weights),
      static_cast<unsigned long long>(r.round_trip_mismatches),
      static_cast<unsigned long long>(r.decode_mismatches), r.gpu_decode_seconds, r.cpu_decode_seconds);
  if (!r.ok()) {
    std::printf("MISMATCH %s\n", r.first_mismatch.c_str());
    step("failed",
         StateMembers().Add("error", "GPU check mismatch: " + r.first_mismatch).Add("exit_status", kExitVerifyFailed));
    return kExitVerifyFailed;
  }
  if (hold.empty()) {
    std::printf("ok (not held: the buffers are released now)\n");
    step("released");
    return kExitOk;
  }
  // A stop that came after the last check: never start to lease.
  if (stops.requested()) return stopped("staging", CancelledError("stopped before the lease started"));
  auto description = LeaseDescriptionJson(request, *rank, staged, gpu.device);
  if (!description.ok()) return fail(description.status());
  // From here the lease server's thread reports too (each lessee that
  // comes or goes): one lock for both, and the phase it is in.
  StateMembers held;
  held.Add("commit", rank->commit)
      .Add("halves", r.halves)
      .Add("bytes", r.upload.bytes)
      .Add("device_bytes", r.upload.device_bytes)
      .Add("device", r.device)
      .Add("lease", hold)
      .AddFixed("upload_gb_per_s", r.upload.GBPerSecond(), 3)
      .Add("checked_halves", r.checked_halves);
  Mutex report_mu;
  const char* phase = "holding";
  auto report_lessees = [&](const std::vector<pid_t>& lessees) {
    MutexLock l(&report_mu);
    step(phase, StateMembers(held).AddArray("lessees", std::span<const pid_t>(lessees)));
  };
  auto server = LeaseServer::Start(hold, std::move(*description), report_lessees);
  if (!server.ok()) return fail(server.status());
  std::printf("holding: the rank is leased on %s until SIGINT or SIGTERM\n", hold.c_str());
  std::fflush(stdout);
  report_lessees((*server)->Lessees());
  // Type=notify (exlr8d-stage@): a serving unit ordered after this one
  // starts once the lease is there.
  if (Status s = NotifySystemd("READY=1"); !s.ok())
    std::fprintf(stderr, "%s: warning: %s\n", kProg, s.ToString().c_str());
  stops.Wait(1);
  (void)NotifySystemd("STOPPING=1");
  {
    MutexLock l(&report_mu);
    phase = "releasing";
  }
  report_lessees((*server)->Lessees());
  ReleaseWhenLesseesLetGo(**server, stops, std::chrono::seconds(release_wait_s));
  std::printf("released after %llu lease(s) (signal %d)\n",
              static_cast<unsigned long long>((*server)->served()), stops.last_signal());
  step("released", StateMembers().Add("leases_served", (*server)->served()));
  return kExitOk;
}

}  // namespace
}  // namespace exlr8

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return exlr8::Run(args);
}
