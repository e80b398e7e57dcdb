// A rank's whole image staged from a real cache (pulled from the hub
// simulator) into GPU memory and validated there: the device bytes equal
// the host image's (BuildHostRankImage), the proof shows the sample
// reconstructed within spec 9.3 and dense matrices of every format decoded,
// a byte changed on the device is found and named by the in-place check
// (by the hash, and by the reconstruction or dense check alone), a stop
// ends the stage, and the legacy IPC allocation works as well as the VMM
// one.
#include "daemon/stage/device_image.h"

#include <cuda_runtime.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <set>
#include <tuple>
#include <vector>

#include "client/lease/description_v2.h"
#include "client/lease/image_layout.h"
#include "client/lease/lease_v2_framing.h"
#include "daemon/stage/host_image.h"
#include "daemon/stage/image_reference.h"
#include "gpu/device.h"
#include "gpu/ipc.h"
#include "gpu/vmm.h"
#include "tests/daemon/cache_test_util.h"
#include "tests/daemon/child_process.h"
#include "tests/daemon/host_image_test_util.h"
#include "tests/daemon/pull_test_util.h"
#include "tests/daemon/rank_test_util.h"

namespace exlr8 {
namespace {

using ::exlr8::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::StartsWith;

bool HaveGpu() {
  auto n = CudaDeviceCount();
  return n.ok() && *n > 0;
}

#define SKIP_WITHOUT_GPU() \
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device: GPU tests run on the device machine"

std::vector<std::byte> CopyBack(const DeviceRankImage& img) {
  std::vector<std::byte> out(img.image_bytes());
  EXPECT_EQ(cudaMemcpy(out.data(), img.data(), out.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  return out;
}

// Stages (tp, rank) on the device and checks it against the host image of
// the same rank, byte for byte, and the proof and description.
void StageAndCompare(const fs::path& cache, int tp, int rank, bool force_ipc, bool check_all) {
  SCOPED_TRACE("TP " + std::to_string(tp) + " rank " + std::to_string(rank) + (force_ipc ? " ipc" : " vmm") +
               (check_all ? " check all" : ""));
  RankRequest request = TestRankRequest(cache, tp, rank);
  DeviceImageProgress progress;
  DeviceImageOptions options;
  options.force_ipc = force_ipc;
  options.check_all = check_all;
  options.progress = &progress;
  options.threads = 3;
  options.staging_bytes = 64 << 10;  // many chunks through each buffer
  auto dev = StageDeviceRankImage(request, options);
  ASSERT_TRUE(dev.ok()) << dev.status().ToString();
  auto host = BuildHostRankImage(request);
  ASSERT_TRUE(host.ok()) << host.status().ToString();
  std::printf(
      "device image TP %d rank %d: %llu bytes, read %.4f s, upload %.4f s, hash %.4f s, decode %.4f s "
      "(%llu of %llu halves)\n",
      tp, rank, static_cast<unsigned long long>(dev->image_bytes()), dev->proof.seconds_read,
      dev->proof.seconds_upload, dev->proof.seconds_hash, dev->proof.seconds_decode,
      static_cast<unsigned long long>(dev->proof.decoded_halves),
      static_cast<unsigned long long>(dev->proof.decoded_of));

  // The image and the tables equal the host kind's.
  ASSERT_EQ(dev->image_bytes(), host->layout.allocation_bytes());
  EXPECT_GE(dev->allocation_bytes(), dev->image_bytes());
  const std::vector<std::byte> bytes = CopyBack(*dev);
  ASSERT_EQ(bytes.size(), host->image.bytes().size());
  std::size_t first_diff = bytes.size();
  for (std::size_t i = 0; i < bytes.size() && first_diff == bytes.size(); ++i)
    if (bytes[i] != host->image.bytes()[i]) first_diff = i;
  EXPECT_EQ(first_diff, bytes.size())
      << "the device image differs from the host image at byte " << first_diff;
  EXPECT_EQ(ReadFd(dev->tables_fd.get()), ReadFd(host->tables_fd.get()));
  EXPECT_EQ(dev->tables_bytes, host->tables_bytes);

  // Memory kind: the VMM allocation with its descriptor, or IPC.
  if (force_ipc) {
    EXPECT_TRUE(dev->vmm.empty());
    EXPECT_FALSE(dev->vmm_fd.valid());
    EXPECT_EQ(dev->ipc_handle.size(), 128u);
  } else if (!dev->vmm.empty()) {
    EXPECT_TRUE(dev->vmm_fd.valid());
    EXPECT_TRUE(dev->ipc_handle.empty());
  }

  // The proof: every check hashed; the sample covers every (layer, width,
  // projection) and >= 1 % of the halves, or all of them.
  const ImageTables& t = dev->plan.layout.tables;
  std::uint64_t halves = 0;
  std::set<std::tuple<int, int, int>> groups;
  for (const ImageTensor& x : t.tensors)
    if (x.kind == ImageRegionKind::kHalfRecord) {
      ++halves;
      groups.insert({x.layer, x.k, x.proj});
    }
  EXPECT_EQ(dev->proof.hashed_regions, t.checks.size());
  EXPECT_EQ(dev->proof.hashed_bytes, host->proof.hashed_bytes);
  EXPECT_EQ(dev->proof.hashed_mismatches, 0u);
  EXPECT_EQ(dev->proof.decoded_of, halves);
  if (check_all) {
    EXPECT_EQ(dev->proof.decoded_halves, halves);
  } else {
    EXPECT_GE(dev->proof.decoded_halves, groups.size());
    EXPECT_GE(dev->proof.decoded_halves,
              static_cast<std::uint64_t>(std::ceil(0.01 * static_cast<double>(halves))));
  }
  EXPECT_TRUE(dev->proof.tiles_bit_exact);
  // Reconstruction on the GPU within spec 9.3 of the CPU reference.
  EXPECT_LE(dev->proof.max_block_error, 1e-5);
  EXPECT_GE(dev->proof.max_block_error, 0.0);
  // Dense matrices decoded on the GPU: one of each format present (the
  // fixture has all seven), or all of them.
  auto dense = ImageDenseMatrices(t);
  ASSERT_TRUE(dense.ok()) << dense.status().ToString();
  std::set<DenseFormat> formats;
  for (const ImageDenseMatrix& m : *dense) formats.insert(m.format);
  EXPECT_EQ(formats.size(), 7u);
  EXPECT_EQ(dev->proof.dense_decoded_tensors, check_all ? dense->size() : formats.size());
  EXPECT_EQ(dev->proof.dense_decoded_mismatches, 0u);
  std::printf("  max block error %.3g, %llu dense matrices decoded\n", dev->proof.max_block_error,
              static_cast<unsigned long long>(dev->proof.dense_decoded_tensors));
  EXPECT_EQ(progress.step.load(), 4);
  EXPECT_EQ(progress.copy_done.load(), progress.copy_total.load());
  EXPECT_EQ(progress.hash_done.load(), progress.hash_total.load());
  EXPECT_GT(progress.decode_done.load(), 0u);
  EXPECT_EQ(progress.decode_done.load(), progress.decode_total.load());

  // The description parses and names the GPU and the allocation.
  const std::string text = WriteLeaseDescriptionV2(DescribeDeviceImage(*dev, request));
  auto d = ParseLeaseDescriptionV2(text);
  ASSERT_TRUE(d.ok()) << d.status().ToString() << "\n" << text;
  EXPECT_EQ(d->memory_kind, LeaseMemoryKind::kDevice);
  ASSERT_TRUE(d->device.has_value());
  auto identity = GetCudaDeviceIdentity(0);
  ASSERT_TRUE(identity.ok());
  EXPECT_EQ(d->device->uuid, identity->uuid);
  ASSERT_EQ(d->allocations.size(), 1u);
  EXPECT_EQ(d->allocations[0].bytes, dev->allocation_bytes());
  if (force_ipc) {
    EXPECT_EQ(d->allocations[0].handle, "ipc:" + dev->ipc_handle);
  } else if (!dev->vmm.empty()) {
    EXPECT_EQ(d->allocations[0].handle, "fd");
  }
  EXPECT_EQ(d->proof.decoded_halves, dev->proof.decoded_halves);
  // ... and agrees with the image's header and tables as a lessee reads them.
  auto header = ParseImageHeader(bytes);
  ASSERT_TRUE(header.ok()) << header.status().ToString();
  auto tables = ParseImageTables(ReadFd(dev->tables_fd.get()), header->allocation_bytes);
  ASSERT_TRUE(tables.ok()) << tables.status().ToString();
  EXPECT_TRUE(CheckLeaseImage(*d, *header, *tables).ok());
}

TEST(DeviceImage, WithoutDeviceSaysUnavailable) {
  if (HaveGpu()) GTEST_SKIP() << "a CUDA device is present; this checks the no-device path";
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  ASSERT_TRUE(Pull(cache.path(), Options(*sim, "home", 1, 0)).ok());
  auto img = StageDeviceRankImage(TestRankRequest(cache.path(), 1, 0), {});
  EXPECT_EQ(img.status().code(), StatusCode::kUnavailable) << img.status().ToString();
}

// The cache's answer comes first: a rank never pulled is NotFound (exit 3,
// "pull it first") on any machine, not Unavailable for want of a GPU.
TEST(DeviceImage, ARankNeverPulledIsNotFoundWithOrWithoutAGpu) {
  TempDir cache;
  auto img = StageDeviceRankImage(TestRankRequest(cache.path(), 1, 0), {});
  EXPECT_EQ(img.status().code(), StatusCode::kNotFound) << img.status().ToString();
}

TEST(DeviceImage, HoldsTheHostImagesBytesAtEveryTpDegree) {
  SKIP_WITHOUT_GPU();
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  for (int tp : {1, 3, 4, 5, 6, 7}) {
    const int rank = tp - 1;
    ASSERT_TRUE(Pull(cache.path(), Options(*sim, "home", tp, rank)).ok());
    StageAndCompare(cache.path(), tp, rank, /*force_ipc=*/false, /*check_all=*/false);
  }
}

TEST(DeviceImage, CheckAllDecodesEveryHalf) {
  SKIP_WITHOUT_GPU();
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  ASSERT_TRUE(Pull(cache.path(), Options(*sim, "home", 3, 1)).ok());
  StageAndCompare(cache.path(), 3, 1, /*force_ipc=*/false, /*check_all=*/true);
}

TEST(DeviceImage, TheIpcFallbackStagesAndChecks) {
  SKIP_WITHOUT_GPU();
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  ASSERT_TRUE(Pull(cache.path(), Options(*sim, "home", 4, 1)).ok());
  StageAndCompare(cache.path(), 4, 1, /*force_ipc=*/true, /*check_all=*/false);
}

// A byte changed in device memory after the stage: the in-place check
// names the region and the byte, and passes again once it is restored.
TEST(DeviceImage, AFlippedByteOnTheDeviceIsFoundAndNamed) {
  SKIP_WITHOUT_GPU();
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  ASSERT_TRUE(Pull(cache.path(), Options(*sim, "home", 4, 1)).ok());
  auto img = StageDeviceRankImage(TestRankRequest(cache.path(), 4, 1), {});
  ASSERT_TRUE(img.ok()) << img.status().ToString();
  ASSERT_TRUE(CheckDeviceImage(*img, {}).ok());
  const ImageTables& t = img->plan.layout.tables;
  // The last half record (a shared or routed one) and a dense data region.
  std::vector<const ImageTensor*> targets;
  for (auto it = t.tensors.rbegin(); it != t.tensors.rend(); ++it)
    if (it->kind == ImageRegionKind::kHalfRecord) {
      targets.push_back(&*it);
      break;
    }
  for (const ImageTensor& x : t.tensors)
    if (x.kind == ImageRegionKind::kDenseData) {
      targets.push_back(&x);
      break;
    }
  ASSERT_EQ(targets.size(), 2u);
  for (const ImageTensor* x : targets) {
    SCOPED_TRACE(x->What());
    // A byte in the middle of a check's segment inside the region.
    std::uint64_t at = UINT64_MAX;
    for (const ImageCheck& c : t.checks)
      for (const ImageSegment& seg : c.segments)
        if (at == UINT64_MAX && seg.offset >= x->offset && seg.offset + seg.length <= x->offset + x->length)
          at = seg.offset + seg.length / 2;
    ASSERT_NE(at, UINT64_MAX) << "no check covers " << x->What();
    std::byte* p = const_cast<std::byte*>(img->data()) + at;
    std::byte was{};
    ASSERT_EQ(cudaMemcpy(&was, p, 1, cudaMemcpyDeviceToHost), cudaSuccess);
    const std::byte flipped = was ^ std::byte{0x5A};
    ASSERT_EQ(cudaMemcpy(p, &flipped, 1, cudaMemcpyHostToDevice), cudaSuccess);
    const Status s = CheckDeviceImage(*img, {});
    EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
    EXPECT_THAT(s.message(), HasSubstr(x->What()));  // layer, expert, projection, half / the name
    EXPECT_THAT(s.message(), HasSubstr("image offset " + std::to_string(at)));
    EXPECT_THAT(s.message(), HasSubstr("at byte"));  // the cache file and byte
    ASSERT_EQ(cudaMemcpy(p, &was, 1, cudaMemcpyHostToDevice), cudaSuccess);
    EXPECT_TRUE(CheckDeviceImage(*img, {}).ok());
  }
}

// A sign flipped in a half record's slice (svh / suh) or block row, or in a
// layer's signs, on the device after the stage: the tiles still decode bit
// for bit, so only the reconstruction check (run without the hash step)
// can see it, and it names the half, the block and the values.
TEST(DeviceImage, TheReconstructionCheckFindsAChangedVectorByItself) {
  SKIP_WITHOUT_GPU();
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  ASSERT_TRUE(Pull(cache.path(), Options(*sim, "home", 4, 1)).ok());
  auto img = StageDeviceRankImage(TestRankRequest(cache.path(), 4, 1), {});
  ASSERT_TRUE(img.ok()) << img.status().ToString();
  DeviceImageOptions decode_only;
  decode_only.skip_hash = true;
  decode_only.check_all = true;  // the changed half is in the sample
  ASSERT_TRUE(CheckDeviceImage(*img, decode_only).ok());
  const ImageTables& t = img->plan.layout.tables;
  const ImageTensor* gate = nullptr;
  const ImageTensor* down = nullptr;
  for (const ImageTensor& x : t.tensors)
    if (x.kind == ImageRegionKind::kHalfRecord) {
      if (x.proj == static_cast<std::uint8_t>(Proj::kDown) && down == nullptr) down = &x;
      if (x.proj != static_cast<std::uint8_t>(Proj::kDown) && gate == nullptr) gate = &x;
    }
  ASSERT_NE(gate, nullptr);
  ASSERT_NE(down, nullptr);
  struct Target {
    const ImageTensor* half;
    std::uint64_t at;  // first byte of a vector element
    std::size_t elem;
    std::size_t count;  // elements of the vector
    std::string what;
  };
  const ImageTensor* signs = t.FindSigns(gate->layer, /*out=*/false);
  ASSERT_NE(signs, nullptr);
  const std::vector<Target> targets = {
      {gate, gate->offset + gate->shape[0], DTypeSize(gate->dtype), gate->shape[1], "svh"},
      {down, down->offset + down->shape[0], DTypeSize(down->dtype), down->shape[1], "suh"},
      {down, down->offset + down->shape[0] + std::uint64_t{down->shape[1]} * DTypeSize(down->dtype),
       DTypeSize(down->block_dtype), down->shape[2], "sv_block"},
      {gate, signs->offset, DTypeSize(signs->dtype), signs->shape[0], "signs.in"},
  };
  for (const Target& x : targets) {
    SCOPED_TRACE(x.what + " of " + x.half->What());
    // The sign bit of the first non-zero element: a weight column (or
    // block) changes sign, nothing becomes NaN.
    std::byte* p = const_cast<std::byte*>(img->data()) + x.at;
    const std::size_t n = std::min<std::size_t>(x.count, 64);
    std::vector<std::byte> host(n * x.elem);
    ASSERT_EQ(cudaMemcpy(host.data(), p, host.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    std::size_t e = 0;
    auto magnitude_zero = [&](std::size_t i) {
      for (std::size_t b = 0; b < x.elem; ++b) {
        const auto v = std::to_integer<unsigned>(host[i * x.elem + b]);
        if ((b + 1 == x.elem ? (v & 0x7F) : v) != 0) return false;
      }
      return true;
    };
    while (e < n && magnitude_zero(e)) ++e;
    ASSERT_LT(e, n);
    std::byte* sign = p + e * x.elem + x.elem - 1;
    std::byte was{};
    ASSERT_EQ(cudaMemcpy(&was, sign, 1, cudaMemcpyDeviceToHost), cudaSuccess);
    const std::byte flipped = was ^ std::byte{0x80};
    ASSERT_EQ(cudaMemcpy(sign, &flipped, 1, cudaMemcpyHostToDevice), cudaSuccess);
    const Status s = CheckDeviceImage(*img, decode_only);
    EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
    EXPECT_THAT(s.message(), HasSubstr("reconstructs differently on the GPU"));
    EXPECT_THAT(s.message(), HasSubstr("block ["));
    EXPECT_THAT(s.message(), HasSubstr("worst at weight"));
    if (x.what != "signs.in") {
      EXPECT_THAT(s.message(), HasSubstr(x.half->What()));
    }
    // The hash step sees it as well.
    EXPECT_EQ(CheckDeviceImage(*img, {}).code(), StatusCode::kCorruption);
    ASSERT_EQ(cudaMemcpy(sign, &was, 1, cudaMemcpyHostToDevice), cudaSuccess);
    EXPECT_TRUE(CheckDeviceImage(*img, decode_only).ok());
  }
}

// A byte changed in a dense matrix's data on the device after the stage:
// the dense check alone (no hash step) finds it, bit for bit for the exact
// formats and per block for TRELLIS, and names the matrix.
TEST(DeviceImage, TheDenseCheckFindsAChangedByteByItself) {
  SKIP_WITHOUT_GPU();
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  ASSERT_TRUE(Pull(cache.path(), Options(*sim, "home", 3, 0)).ok());
  auto img = StageDeviceRankImage(TestRankRequest(cache.path(), 3, 0), {});
  ASSERT_TRUE(img.ok()) << img.status().ToString();
  DeviceImageOptions decode_only;
  decode_only.skip_hash = true;
  decode_only.check_all = true;
  ASSERT_TRUE(CheckDeviceImage(*img, decode_only).ok());
  EXPECT_GT(img->proof.dense_decoded_tensors, 0u);
  const ImageTables& t = img->plan.layout.tables;
  auto dense = ImageDenseMatrices(t);
  ASSERT_TRUE(dense.ok()) << dense.status().ToString();
  std::set<DenseFormat> done;
  for (const ImageDenseMatrix& m : *dense) {
    if (!done.insert(m.format).second) continue;
    SCOPED_TRACE(m.name + " " + std::string(DenseFormatName(m.format)));
    // A byte in the middle of the matrix's first data tensor.
    const ImageTensor& data = t.tensors[m.first];
    std::byte* p = const_cast<std::byte*>(img->data()) + data.offset + data.length / 2;
    std::byte was{};
    ASSERT_EQ(cudaMemcpy(&was, p, 1, cudaMemcpyDeviceToHost), cudaSuccess);
    const std::byte flipped = was ^ std::byte{0x21};
    ASSERT_EQ(cudaMemcpy(p, &flipped, 1, cudaMemcpyHostToDevice), cudaSuccess);
    const Status s = CheckDeviceImage(*img, decode_only);
    EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
    EXPECT_THAT(s.message(), HasSubstr("dense matrix '" + m.name + "'"));
    EXPECT_THAT(s.message(), HasSubstr("decodes differently on the GPU"));
    EXPECT_THAT(s.message(), HasSubstr(m.format == DenseFormat::kTrellis ? "block [" : "weight ["));
    ASSERT_EQ(cudaMemcpy(p, &was, 1, cudaMemcpyHostToDevice), cudaSuccess);
    EXPECT_TRUE(CheckDeviceImage(*img, decode_only).ok());
  }
  EXPECT_EQ(done.size(), 7u);
}

TEST(DeviceImage, AStopAskedForEndsTheStage) {
  SKIP_WITHOUT_GPU();
  auto sim = StartSim(TinyRelease());
  TempDir cache;
  ASSERT_TRUE(Pull(cache.path(), Options(*sim, "home", 4, 0)).ok());
  std::atomic<bool> stop{false};
  RankRequest request = TestRankRequest(cache.path(), 4, 0);
  request.before_reading = [&] {
    stop = true;  // as a signal would, once the plan is made
    return Status::Ok();
  };
  DeviceImageProgress progress;
  DeviceImageOptions options;
  options.cancel = &stop;
  options.progress = &progress;
  auto stopped = StageDeviceRankImage(request, options);
  EXPECT_EQ(stopped.status().code(), StatusCode::kCancelled) << stopped.status().ToString();
  EXPECT_EQ(progress.copy_done.load(), 0u);
  // A stop during the checks ends them too.
  stop = false;
  request.before_reading = nullptr;
  auto img = StageDeviceRankImage(request, {});
  ASSERT_TRUE(img.ok()) << img.status().ToString();
  stop = true;
  EXPECT_EQ(CheckDeviceImage(*img, options).code(), StatusCode::kCancelled);
}

// A lessee's side of protocol v2, by hand (the lessee library is not this
// test's subject): connects, and reads lines with the descriptors that
// come with them.
class RawLessee {
 public:
  bool Connect(const fs::path& path) {
    fd_ = UniqueFd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
    return fd_.valid() && ::connect(fd_.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  // The next line (without "\n"); "" at the end of the stream.
  std::string Line() {
    for (;;) {
      if (const auto nl = buffer_.find('\n'); nl != std::string::npos) {
        std::string line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        return line;
      }
      char buf[4096];
      alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxLeaseV2Fds)];
      iovec iov{buf, sizeof buf};
      msghdr msg{};
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      msg.msg_control = control;
      msg.msg_controllen = sizeof control;
      const ssize_t n = ::recvmsg(fd_.get(), &msg, MSG_CMSG_CLOEXEC);
      if (n <= 0) return {};
      for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
          const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
          for (std::size_t i = 0; i < count; ++i) {
            int fd;
            std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
            fds.emplace_back(fd);
          }
        }
      buffer_.append(buf, static_cast<std::size_t>(n));
    }
  }
  void Close() { fd_ = UniqueFd(); }
  std::vector<UniqueFd> fds;

 private:
  UniqueFd fd_;
  std::string buffer_;
};

// exlr8d-stage --memory device --lease v2 --hold, end to end: another
// process (this one) finds the GPU by UUID, maps the allocation from the
// descriptor (or the IPC handle) read-only and reads the host image's
// bytes; the tables' memfd holds the host kind's tables; SIGTERM sends the
// release line, and the holder exits once the lessee has let go.
TEST(DeviceImage, ALesseeMapsTheHeldImageAndLetsGoWhenAsked) {
  SKIP_WITHOUT_GPU();
  auto sim = StartSim(TinyRelease());
  TempDir cache, run;
  ASSERT_TRUE(Pull(cache.path(), Options(*sim, "home", 3, 1)).ok());
  const fs::path sock = run.path() / "lease.sock";
  ChildProcess stage(
      "exlr8d-stage",
      {"--cache", cache.path().string(), "--repo", "exlr8/test", "--manifest", "home", "--tp", "3", "--rank",
       "1", "--memory", "device", "--lease", "v2", "--hold", sock.string(), "--release-wait", "20"},
      (run.path() / "stage.err").string());
  ASSERT_TRUE(stage.ReadUntil("holding:")) << stage.printed();
  EXPECT_NE(stage.printed().find("bit-exact"), std::string::npos) << stage.printed();

  RawLessee lessee;
  ASSERT_TRUE(lessee.Connect(sock));
  const std::string opening = lessee.Line();
  auto d = ParseLeaseV2Opening(opening, lessee.fds.size());
  ASSERT_TRUE(d.ok()) << d.status().ToString() << "\n" << opening;
  ASSERT_EQ(d->memory_kind, LeaseMemoryKind::kDevice);
  ASSERT_TRUE(d->device.has_value());
  auto device = FindCudaDeviceByUuid(d->device->uuid);
  ASSERT_TRUE(device.ok()) << device.status().ToString();
  ASSERT_EQ(cudaSetDevice(*device), cudaSuccess);

  auto host = BuildHostRankImage(TestRankRequest(cache.path(), 3, 1));
  ASSERT_TRUE(host.ok()) << host.status().ToString();
  ASSERT_EQ(d->image.bytes, host->image.bytes().size());
  std::vector<std::byte> bytes(d->image.bytes);
  {
    ImportedDeviceMemory imported;
    IpcMapping ipc;
    const void* p = nullptr;
    if (d->allocations[0].is_fd()) {
      auto m = ImportedDeviceMemory::Import(lessee.fds.front().get(), d->allocations[0].bytes, *device,
                                            DeviceMemoryAccess::kReadOnly);
      ASSERT_TRUE(m.ok()) << m.status().ToString();
      imported = std::move(*m);
      p = imported.data();
    } else {
      auto m = IpcMapping::Open(std::string_view(d->allocations[0].handle).substr(4));
      ASSERT_TRUE(m.ok()) << m.status().ToString();
      ipc = std::move(*m);
      p = ipc.data();
    }
    ASSERT_EQ(cudaMemcpy(bytes.data(), p, bytes.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  }
  EXPECT_EQ(std::memcmp(bytes.data(), host->image.bytes().data(), bytes.size()), 0);
  EXPECT_EQ(ReadFd(lessee.fds.back().get()), ReadFd(host->tables_fd.get()));

  stage.Send(SIGTERM);
  const std::string release = lessee.Line();
  auto parsed = ParseLeaseHolderLine(release);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString() << ": " << release;
  EXPECT_EQ(parsed->deadline_s, 20u);
  lessee.fds.clear();
  lessee.Close();
  ASSERT_TRUE(stage.ReadUntil("released after 1 lease(s)")) << stage.printed();
  EXPECT_EQ(stage.Signal(0), 0) << stage.ReadAll();
}

}  // namespace
}  // namespace exlr8
