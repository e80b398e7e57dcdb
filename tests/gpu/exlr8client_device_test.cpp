// libexlr8client's device leases (client/exlr8client/driver_device_lease.h:
// the CUDA driver loaded with dlopen, no CUDA linked into the library) on a
// GPU, against real holders of the shared fixture's TP 3 rank 1 pulled from
// the hub simulator into a real cache:
//   - the real `exlr8d-stage --memory device --lease v2 --hold SOCK` (a VMM
//     allocation exported as a descriptor): opened in this process through
//     the C++ API, every tensor read back with the CUDA runtime's cudaMemcpy
//     (the library maps in the primary context, which the runtime uses) and
//     equal to the host image this process builds from the same cache; by a
//     C lessee linked with the library alone (exlr8client_read_check) with
//     CUDA_VISIBLE_DEVICES set to the GPU's UUID; refused where the process
//     sees no GPU; the holder's release reaching an open lease;
//   - a holder in this process of the same rank staged with the legacy IPC
//     allocation (DeviceImageOptions::force_ipc; the command has no option
//     for it), opened by the C lessee; a description naming another GPU is
//     NOT_FOUND naming it.
// The driver declarations the library carries (cuda_driver.h) are checked
// against cuda.h at compile time.
#include <cuda.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "client/exlr8client/cuda_driver.h"
#include "client/lease/description_v2.h"
#include "daemon/stage/device_image.h"
#include "daemon/stage/host_image.h"
#include "daemon/stage/lease_server.h"
#include "exlr8/exlr8client.hpp"
#include "format/checksum.h"
#include "gpu/device.h"
#include "tests/daemon/cache_test_util.h"
#include "tests/daemon/child_process.h"
#include "tests/daemon/pull_test_util.h"
#include "tests/daemon/rank_test_util.h"
#include "tests/format/block_tolerance.h"

// ---- cuda_driver.h's ABI against cuda.h ----
namespace cudrv = exlr8::cudrv;
static_assert(cudrv::kSuccess == CUDA_SUCCESS);
static_assert(cudrv::kErrorInvalidValue == CUDA_ERROR_INVALID_VALUE);
static_assert(cudrv::kErrorOutOfMemory == CUDA_ERROR_OUT_OF_MEMORY);
static_assert(cudrv::kErrorNotInitialized == CUDA_ERROR_NOT_INITIALIZED);
static_assert(cudrv::kErrorDeinitialized == CUDA_ERROR_DEINITIALIZED);
static_assert(cudrv::kErrorStubLibrary == CUDA_ERROR_STUB_LIBRARY);
static_assert(cudrv::kErrorCallRequiresNewerDriver == CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER);
static_assert(cudrv::kErrorNoDevice == CUDA_ERROR_NO_DEVICE);
static_assert(cudrv::kErrorInvalidHandle == CUDA_ERROR_INVALID_HANDLE);
static_assert(cudrv::kErrorNotSupported == CUDA_ERROR_NOT_SUPPORTED);
static_assert(cudrv::kErrorSystemDriverMismatch == CUDA_ERROR_SYSTEM_DRIVER_MISMATCH);
static_assert(cudrv::kMemHandleTypePosixFileDescriptor == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
static_assert(cudrv::kMemLocationTypeDevice == CU_MEM_LOCATION_TYPE_DEVICE);
static_assert(cudrv::kMemAccessFlagsProtRead == CU_MEM_ACCESS_FLAGS_PROT_READ);
static_assert(cudrv::kIpcMemLazyEnablePeerAccess == CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
static_assert(cudrv::kIpcHandleSize == CU_IPC_HANDLE_SIZE);
static_assert(cudrv::kFuncAttributeMaxDynamicSharedSizeBytes ==
              CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES);
static_assert(std::is_same_v<cudrv::CUmodule, CUmodule>);
static_assert(std::is_same_v<cudrv::CUfunction, CUfunction>);
static_assert(std::is_same_v<cudrv::CUstream, CUstream>);
static_assert(sizeof(cudrv::CUresult) == sizeof(CUresult));
static_assert(sizeof(cudrv::CUdevice) == sizeof(CUdevice));
static_assert(std::is_same_v<cudrv::CUdeviceptr, CUdeviceptr>);
static_assert(std::is_same_v<cudrv::CUmemGenericAllocationHandle, CUmemGenericAllocationHandle>);
static_assert(std::is_same_v<cudrv::CUcontext, CUcontext>);
static_assert(sizeof(cudrv::CUuuid) == sizeof(CUuuid));
static_assert(sizeof(cudrv::CUipcMemHandle) == sizeof(CUipcMemHandle));
static_assert(sizeof(cudrv::CUmemLocation) == sizeof(CUmemLocation));
static_assert(offsetof(cudrv::CUmemLocation, id) == offsetof(CUmemLocation, id));
static_assert(sizeof(cudrv::CUmemAccessDesc) == sizeof(CUmemAccessDesc));
static_assert(offsetof(cudrv::CUmemAccessDesc, flags) == offsetof(CUmemAccessDesc, flags));
static_assert(sizeof(CUmemAccess_flags) == sizeof(int) && sizeof(CUmemLocationType) == sizeof(int) &&
              sizeof(CUmemAllocationHandleType) == sizeof(int));

namespace exlr8 {
namespace {

using ::exlr8::testing::TempDir;

bool HaveGpu() {
  auto n = CudaDeviceCount();
  return n.ok() && *n > 0;
}

#define SKIP_WITHOUT_GPU() \
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device: GPU tests run on the device machine"

// The C lessee (linked with libexlr8client alone) on `sock`, with
// `env` ("NAME=value ..." or "") before it.
std::pair<int, std::string> RunReadCheck(const std::string& env, const std::string& sock,
                                         const std::string& args = "") {
  return RunShell(env + " " + EXLR8_READ_CHECK + " " + sock + " " + args);
}

// Every tensor of `lease` read back with the runtime (cudaMemcpy on the
// device pointers the library gives) equals `image` (the host image of the
// same rank) and hashes to its xxh64; each lookup finds it again; the
// image's offset table equals the tables'.
void ExpectEveryTensorOnTheGpu(const exlr8client::Lease& lease, std::span<const std::byte> image) {
  const exlr8client::Info info = lease.info();
  ASSERT_EQ(info.image_bytes, image.size());
  ASSERT_EQ(cudaSetDevice(info.cuda_device), cudaSuccess);
  std::vector<std::byte> bytes;
  int halves = 0, named = 0;
  for (std::uint64_t i = 0; i < lease.tensor_count(); ++i) {
    const exlr8client::Tensor t = lease.tensor(i);
    ASSERT_EQ(t.data, static_cast<const std::byte*>(info.image) + t.offset);
    bytes.assign(t.length, std::byte{0});
    ASSERT_EQ(cudaMemcpy(bytes.data(), t.data, t.length, cudaMemcpyDeviceToHost), cudaSuccess) << i;
    EXPECT_EQ(Xxh64::Hash(bytes), t.xxh64) << i;
    EXPECT_EQ(std::memcmp(bytes.data(), image.data() + t.offset, t.length), 0) << i;
    std::optional<exlr8client::Tensor> same;
    if (t.kind == EXLR8_TENSOR_HALF_RECORD) {
      ++halves;
      same = lease.FindHalf(t.layer, t.expert, t.proj, t.half);
    } else if (t.kind == EXLR8_TENSOR_SIGNS_IN || t.kind == EXLR8_TENSOR_SIGNS_OUT) {
      same = lease.FindSigns(t.layer, t.kind == EXLR8_TENSOR_SIGNS_OUT);
    } else {
      ++named;
      same = lease.Find(t.name);
    }
    ASSERT_TRUE(same.has_value()) << i;
    EXPECT_EQ(same->index, i);
  }
  EXPECT_GT(halves, 0);
  EXPECT_GT(named, 0);
  // exlr8_lease_read gives the same bytes as the runtime.
  const exlr8client::Tensor last = lease.tensor(lease.tensor_count() - 1);
  std::vector<std::byte> read(last.length);
  lease.Read(last.offset, read.data(), read.size());
  EXPECT_EQ(std::memcmp(read.data(), image.data() + last.offset, last.length), 0);
  // The offset table, as kernels index it.
  const exlr8client::OffsetTable table = lease.offset_table();
  std::vector<std::uint64_t> on_gpu(table.entries);
  ASSERT_EQ(cudaMemcpy(on_gpu.data(), table.image, table.entries * 8, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(std::memcmp(on_gpu.data(), table.host, table.entries * 8), 0);
}

class Exlr8ClientDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_GPU();
    sim_ = StartSim(TinyRelease());
    auto pulled = Pull(cache_.path(), Options(*sim_, "home", 3, 1));
    ASSERT_TRUE(pulled.ok()) << pulled.status().ToString();
    auto id = GetCudaDeviceIdentity(0);
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    identity_ = *id;
    auto host = BuildHostRankImage(TestRankRequest(cache_.path(), 3, 1));
    ASSERT_TRUE(host.ok()) << host.status().ToString();
    const std::span<const std::byte> b = host->image.bytes();
    image_.assign(b.begin(), b.end());
  }

  std::unique_ptr<hubsim::HubSim> sim_;
  TempDir cache_, run_;
  CudaDeviceIdentity identity_;
  std::vector<std::byte> image_;  // the host image of TP 3 rank 1
};

using ::exlr8::testing::BlocksOutsideTolerance;

// exlr8_lease_half_weights on a device lease (the library's embedded
// kernels, launched through the driver on a runtime stream and on the
// legacy default stream) against the same rank's host lease (format/'s CPU
// code, itself tested bit for bit against DecodeExpertHalf in
// exlr8client_test): every half within spec 9.3; how many are
// bit-identical is printed.
TEST_F(Exlr8ClientDeviceTest, HalfWeightsOnTheGpuEqualTheHostLeasesWithinTolerance) {
  auto holder = [&](const char* memory, const fs::path& sock, const char* err) {
    std::vector<std::string> args = {"--cache",        cache_.path().string(),
                                     "--repo",         "exlr8/test",
                                     "--manifest",     "home",
                                     "--tp",           "3",
                                     "--rank",         "1",
                                     "--memory",       memory,
                                     "--hold",         sock.string(),
                                     "--release-wait", "20"};
    if (std::string(memory) == "device") {
      args.insert(args.end(), {"--lease", "v2", "--device", "0"});
    }
    return std::make_unique<ChildProcess>("exlr8d-stage", args, (run_.path() / err).string());
  };
  const fs::path dsock = run_.path() / "device.sock", hsock = run_.path() / "host.sock";
  auto dholder = holder("device", dsock, "device.err");
  auto hholder = holder("host", hsock, "host.err");
  ASSERT_TRUE(dholder->ReadUntil("holding:")) << dholder->printed();
  ASSERT_TRUE(hholder->ReadUntil("holding:")) << hholder->printed();
  {
    exlr8client::Lease dev = exlr8client::Lease::Open(dsock.string(), {exlr8client::MemoryKind::kDevice});
    exlr8client::Lease host = exlr8client::Lease::Open(hsock.string(), {exlr8client::MemoryKind::kHost});
    ASSERT_EQ(dev.tensor_count(), host.tensor_count());
    ASSERT_EQ(cudaSetDevice(dev.info().cuda_device), cudaSuccess);
    cudaStream_t stream = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    float* d = nullptr;
    std::size_t capacity = 0;
    int halves = 0, identical = 0, outside = 0;
    std::vector<float> got;
    for (std::uint64_t i = 0; i < dev.tensor_count(); ++i) {
      const exlr8client::Tensor t = dev.tensor(i);
      if (t.kind != EXLR8_TENSOR_HALF_RECORD) continue;
      SCOPED_TRACE(i);
      const std::vector<float> want = host.HalfWeights(i);
      if (want.size() > capacity) {
        if (d != nullptr) {
          ASSERT_EQ(cudaFree(d), cudaSuccess);
        }
        ASSERT_EQ(cudaMalloc(&d, want.size() * sizeof(float)), cudaSuccess);
        capacity = want.size();
      }
      ASSERT_EQ(cudaMemset(d, 0xFF, want.size() * sizeof(float)),
                cudaSuccess);  // NaNs: every element written?
      // Every other half on the legacy default stream (NULL).
      cudaStream_t s = halves % 2 == 0 ? stream : nullptr;
      dev.HalfWeights(i, d, want.size(), s);
      ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
      got.assign(want.size(), 0.0f);
      ASSERT_EQ(cudaMemcpy(got.data(), d, got.size() * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
      const std::uint64_t hidden = want.size() / 128;
      const bool down = t.proj == EXLR8_PROJ_DOWN;
      const int bad =
          BlocksOutsideTolerance(down ? 128 : hidden, down ? hidden : 128, got.data(), want.data());
      EXPECT_EQ(bad, 0) << "L" << t.layer << " e" << t.expert << " p" << t.proj << " h" << t.half << " K"
                        << t.k;
      outside += bad;
      if (std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0) ++identical;
      ++halves;
    }
    std::printf(
        "device half weights: %d halves, %d bit-identical to the host lease's, %d blocks outside 9.3\n",
        halves, identical, outside);
    EXPECT_GT(halves, 0);
    // A wrong size is refused before any launch.
    std::uint64_t first = 0;
    while (dev.tensor(first).kind != EXLR8_TENSOR_HALF_RECORD) ++first;
    EXPECT_EQ(exlr8_lease_half_weights(dev.get(), first, d, 1, stream), EXLR8_INVALID_ARGUMENT);
    // The host-vector form is for host leases.
    try {
      (void)dev.HalfWeights(first);
      ADD_FAILURE() << "a device lease's weights into a host vector";
    } catch (const exlr8client::Error& e) {
      EXPECT_EQ(e.status(), EXLR8_FAILED_PRECONDITION);
    }
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    ASSERT_EQ(cudaFree(d), cudaSuccess);
    ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
  }
}

TEST_F(Exlr8ClientDeviceTest, TheRealHoldersVmmImageOpensFromThisProcessAndAnother) {
  const fs::path sock = run_.path() / "lease.sock";
  ChildProcess holder("exlr8d-stage", {"--cache",        cache_.path().string(),
                                       "--repo",         "exlr8/test",
                                       "--manifest",     "home",
                                       "--tp",           "3",
                                       "--rank",         "1",
                                       "--memory",       "device",
                                       "--lease",        "v2",
                                       "--device",       "0",
                                       "--hold",         sock.string(),
                                       "--release-wait", "20"},
                      (run_.path() / "stage.err").string());
  ASSERT_TRUE(holder.ReadUntil("holding:")) << holder.printed();

  {
    exlr8client::Lease lease = exlr8client::Lease::Open(sock.string(), {exlr8client::MemoryKind::kDevice});
    const exlr8client::Info info = lease.info();
    EXPECT_EQ(info.memory_kind, static_cast<std::uint32_t>(EXLR8_MEMORY_DEVICE));
    EXPECT_EQ(std::string(info.gpu_uuid), identity_.uuid);
    EXPECT_EQ(std::string(info.gpu_pci_bus_id), identity_.pci_bus_id);
    EXPECT_EQ(info.cuda_device, 0);  // the holder's device 0, seen with the same CUDA_VISIBLE_DEVICES
    const std::string description(lease.description_json());
    EXPECT_NE(description.find("\"handle\":\"fd\""), std::string::npos) << description;
    EXPECT_EQ(lease.proof().hashed_mismatches, 0u);
    ExpectEveryTensorOnTheGpu(lease, image_);
    lease.Close();
  }

  // Another process, linked with the library alone, with the GPU named by
  // its UUID: ordinal 0 there whatever it is here.
  const auto [code, out] =
      RunReadCheck("CUDA_VISIBLE_DEVICES=" + identity_.uuid, sock.string(), "--uuid " + identity_.uuid);
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("OPENED kind=device cuda_device=0 uuid=" + identity_.uuid + " tensors="),
            std::string::npos)
      << out;
  EXPECT_NE(out.find(" mismatches=0 offset_table=equal\n"), std::string::npos) << out;
  EXPECT_NE(out.find("CLOSED\n"), std::string::npos) << out;

  // A process that sees no GPU: Unavailable, naming the lease's GPU.
  const auto [code_none, out_none] = RunReadCheck("CUDA_VISIBLE_DEVICES=none", sock.string());
  EXPECT_EQ(code_none, 3) << out_none;
  EXPECT_NE(out_none.find("REFUSED UNAVAILABLE: "), std::string::npos) << out_none;
  EXPECT_NE(out_none.find(identity_.uuid), std::string::npos) << out_none;
  EXPECT_NE(out_none.find(identity_.pci_bus_id), std::string::npos) << out_none;

  // The holder's release reaches an open lease, which lets go in time.
  exlr8client::Lease lease = exlr8client::Lease::Open(sock.string());
  EXPECT_FALSE(lease.PollRelease().has_value());
  holder.Send(SIGTERM);
  const std::optional<exlr8client::Release> release = lease.PollRelease(std::chrono::seconds(20));
  ASSERT_TRUE(release.has_value());
  EXPECT_FALSE(release->holder_gone);
  EXPECT_EQ(release->deadline_s, 20u);
  ASSERT_TRUE(holder.ReadUntil("waiting up to")) << holder.printed();
  lease.Close();
  // The holder counts every lease it gave over its life: this process's
  // two, the UUID child's and the one the GPU-less child refused.
  ASSERT_TRUE(holder.ReadUntil("released after 4 lease(s)")) << holder.printed();
  EXPECT_EQ(holder.Signal(0), 0) << holder.ReadAll();
}

TEST_F(Exlr8ClientDeviceTest, ALegacyIpcImageOpensInAnotherProcessAndAnotherGpuIsNotFound) {
  const RankRequest request = TestRankRequest(cache_.path(), 3, 1);
  DeviceImageOptions options;
  options.force_ipc = true;
  auto dev = StageDeviceRankImage(request, options);
  ASSERT_TRUE(dev.ok()) << dev.status().ToString();
  ASSERT_EQ(dev->ipc_handle.size(), 128u);
  const LeaseDescriptionV2 d = DescribeDeviceImage(*dev, request);
  ASSERT_EQ(d.allocations.size(), 1u);
  ASSERT_EQ(d.allocations[0].handle, "ipc:" + dev->ipc_handle);
  const fs::path sock = run_.path() / "ipc.sock";
  const std::vector<int> fds = {dev->tables_fd.get()};
  auto server = LeaseServer::StartV2(sock, WriteLeaseDescriptionV2(d), fds);
  ASSERT_TRUE(server.ok()) << server.status().ToString();

  // This process made the allocation (the driver opens no IPC handle in
  // the process that made it): another process opens it.
  const auto [code, out] =
      RunReadCheck("CUDA_VISIBLE_DEVICES=" + identity_.uuid, sock.string(), "--uuid " + identity_.uuid);
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("OPENED kind=device cuda_device=0 uuid=" + identity_.uuid + " tensors="),
            std::string::npos)
      << out;
  EXPECT_NE(out.find(" mismatches=0 offset_table=equal\n"), std::string::npos) << out;
  EXPECT_NE(out.find("CLOSED\n"), std::string::npos) << out;
  // It let go: the holder has no lessee left.
  auto still = (*server)->RequestRelease(std::chrono::seconds(5));
  ASSERT_TRUE(still.ok()) << still.status().ToString();
  EXPECT_TRUE(still->empty());

  // A description naming a GPU this process does not see: NOT_FOUND,
  // naming it and the GPUs visible.
  LeaseDescriptionV2 other = d;
  other.device->uuid = "GPU-00000000-1111-2222-3333-444455556666";
  other.device->pci_bus_id = "0000:FF:1F.7";
  const fs::path other_sock = run_.path() / "other.sock";
  auto other_server = LeaseServer::StartV2(other_sock, WriteLeaseDescriptionV2(other), fds);
  ASSERT_TRUE(other_server.ok()) << other_server.status().ToString();
  const auto [code_nf, out_nf] = RunReadCheck("", other_sock.string());
  EXPECT_EQ(code_nf, 3) << out_nf;
  EXPECT_NE(out_nf.find("REFUSED NOT_FOUND: "), std::string::npos) << out_nf;
  EXPECT_NE(out_nf.find(other.device->uuid + " (PCI bus 0000:FF:1F.7)"), std::string::npos) << out_nf;
  EXPECT_NE(out_nf.find(identity_.uuid), std::string::npos) << "the visible GPUs are listed: " << out_nf;
}

}  // namespace
}  // namespace exlr8
