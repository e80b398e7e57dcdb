// client/lease/device_lease.h on the GPU: a holder built here (a synthetic
// rank image in an exportable VMM allocation, its tables in a sealed memfd,
// served with LeaseServer::StartV2) and lessees in child processes (this
// binary run again as DeviceLeaseChild.Lessee, so each has its own CUDA
// context) that open the lease with OpenDeviceLease, hash every tensor and
// check entry on the GPU (gpu/region_hash.h), copy a few regions back, and
// wait for the release line. GPU tests skip when no CUDA device is visible.
#include "client/lease/device_lease.h"

#include <cuda_runtime.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "daemon/stage/lease_server.h"
#include "format/checksum.h"
#include "gpu/device.h"
#include "gpu/ipc.h"
#include "gpu/region_hash.h"
#include "gpu/vmm.h"
#include "tests/client/lease/lease_v2_test_util.h"

extern char** environ;

namespace exlr8 {
namespace {

using testing::CountOpenFds;
using testing::MakeV2Image;
using testing::SealedMemfd;
using testing::V2Image;

constexpr const char* kNoGpu = "no CUDA device: GPU tests run on the device machine";
constexpr const char* kSocketEnv = "EXLR8_DEVICE_LEASE_CHILD_SOCKET";
constexpr const char* kModeEnv = "EXLR8_DEVICE_LEASE_CHILD_MODE";

void Say(const std::string& s) { (void)!::write(1, s.data(), s.size()); }

bool HaveGpu() {
  static const bool have = [] {
    auto n = CudaDeviceCount();
    return n.ok() && *n > 0;
  }();
  return have;
}

// The lessee, in its own process. Mode "use": open, hash every tensor and
// check entry on the GPU, copy every third tensor back and hash it on the
// host, compare the image's offset table, print what it found, wait for
// the release, let go. Mode "refuse": open three times, each must fail;
// print the error and whether descriptors stayed behind.
TEST(DeviceLeaseChild, Lessee) {
  const char* path = std::getenv(kSocketEnv);
  if (path == nullptr) GTEST_SKIP() << "run by the tests below as a lessee";
  ::alarm(90);  // never outlives a broken test
  const std::string mode = std::getenv(kModeEnv) != nullptr ? std::getenv(kModeEnv) : "use";
  if (mode == "refuse") {
    std::string error;
    int after_first = -1;
    for (int i = 0; i < 3; ++i) {
      auto lease = OpenDeviceLease(path, {.timeout = std::chrono::seconds(20)});
      if (lease.ok()) {
        Say("OPENED-UNEXPECTEDLY\n");
        std::_Exit(6);
      }
      error = lease.status().ToString();
      // The runtime opens its own descriptors the first time; a leak grows.
      if (i == 0) after_first = CountOpenFds();
    }
    Say("REFUSED " + error + "\nFDS " + std::to_string(after_first) + " " + std::to_string(CountOpenFds()) +
        "\n");
    std::_Exit(0);
  }
  auto lease = OpenDeviceLease(path, {.timeout = std::chrono::seconds(20)});
  if (!lease.ok()) {
    Say("OPEN-FAILED " + lease.status().ToString() + "\n");
    std::_Exit(3);
  }
  auto id = GetCudaDeviceIdentity(lease->device());
  if (!id.ok() || cudaSetDevice(lease->device()) != cudaSuccess) std::_Exit(7);

  // Every tensor and every check entry, hashed on the GPU in place.
  std::vector<RegionCheck> checks;
  for (const ImageTensor& t : lease->tables().tensors) {
    RegionCheck c{};
    c.digest = t.xxh64;
    c.segment_count = 1;
    c.segments[0] = {t.offset, t.length};
    checks.push_back(c);
  }
  for (const ImageCheck& k : lease->tables().checks) {
    RegionCheck c{};
    c.digest = k.digest;
    c.segment_count = static_cast<std::uint32_t>(k.segments.size());
    for (std::size_t i = 0; i < k.segments.size(); ++i)
      c.segments[i] = {k.segments[i].offset, k.segments[i].length};
    checks.push_back(c);
  }
  auto report = HashRegions(lease->base(), lease->image_bytes(), checks, CudaStreamView::LegacyDefault());
  if (!report.ok()) {
    Say("HASH-FAILED " + report.status().ToString() + "\n");
    std::_Exit(8);
  }
  // Some copied back and hashed here.
  std::size_t copied = 0, copy_mismatches = 0;
  for (std::size_t i = 0; i < lease->tables().tensors.size(); i += 3) {
    const ImageTensor& t = lease->tables().tensors[i];
    std::vector<std::byte> host(t.length);
    if (cudaMemcpy(host.data(), lease->Region(t), t.length, cudaMemcpyDeviceToHost) != cudaSuccess)
      std::_Exit(9);
    copy_mismatches += Xxh64::Hash(host) != t.xxh64;
    ++copied;
  }
  std::vector<std::uint64_t> table(lease->offset_table().size());
  if (cudaMemcpy(table.data(), lease->device_offset_table(), table.size() * 8, cudaMemcpyDeviceToHost) !=
      cudaSuccess)
    std::_Exit(10);
  const bool table_equal = std::equal(table.begin(), table.end(), lease->offset_table().begin());
  Say("OPENED device=" + std::to_string(lease->device()) + " uuid=" + id->uuid + " regions=" +
      std::to_string(checks.size()) + " gpu_mismatches=" + std::to_string(report->summary.mismatches) +
      " copied=" + std::to_string(copied) + " copy_mismatches=" + std::to_string(copy_mismatches) +
      " offset_table=" + (table_equal ? "equal" : "differs") + "\n");
  auto r = lease->WaitRelease(std::chrono::seconds(30));
  if (!r.ok() || !r->has_value()) {
    Say("NO-RELEASE\n");
    std::_Exit(4);
  }
  Say("RELEASE deadline_s=" + std::to_string((*r)->deadline_s) + ((*r)->holder_gone ? " gone" : "") + "\n");
  lease->Close();
  Say("CLOSED\n");
  std::_Exit(report->summary.mismatches == 0 && copy_mismatches == 0 && table_equal ? 0 : 5);
}

// This binary run again as a lessee of `socket`, with `env` added (or,
// for a name given without "=", removed).
class Lessee {
 public:
  Lessee(const std::filesystem::path& socket, const std::string& mode,
         const std::vector<std::string>& extra) {
    int out[2];
    EXPECT_EQ(::pipe2(out, O_CLOEXEC), 0);
    std::vector<std::string> args = {"/proc/self/exe", "--gtest_filter=DeviceLeaseChild.Lessee"};
    std::vector<std::string> env = {std::string(kSocketEnv) + "=" + socket.string(),
                                    std::string(kModeEnv) + "=" + mode};
    for (const std::string& e : extra)
      if (e.find('=') != std::string::npos) env.push_back(e);
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string var(*e);
      bool dropped = false;
      for (const std::string& x : extra) {
        const std::string name = x.substr(0, x.find('='));
        dropped = dropped || var.compare(0, name.size() + 1, name + "=") == 0;
      }
      if (!dropped) env.push_back(var);
    }
    std::vector<char*> argv, envp;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(out[1], 1);
      ::execve("/proc/self/exe", argv.data(), envp.data());
      ::_exit(127);
    }
    ::close(out[1]);
    out_ = out[0];
  }
  ~Lessee() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      Wait();
    }
    ::close(out_);
  }
  Lessee(const Lessee&) = delete;
  Lessee& operator=(const Lessee&) = delete;

  // Reads the child's output until `text` shows (true), 60 s pass or it
  // closes its output (false).
  bool ReadUntil(const std::string& text) {
    return Read([&] { return printed_.find(text) != std::string::npos; });
  }
  // Reads until a whole line starting with `prefix` came (the child's
  // gtest prints its own lines too).
  bool ReadLine(const std::string& prefix) {
    return Read([&] {
      const std::size_t at = printed_.find(prefix);
      return at != std::string::npos && printed_.find('\n', at) != std::string::npos;
    });
  }
  const std::string& printed() const { return printed_; }
  int Wait() {
    int status = 0;
    if (pid_ > 0) ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }

 private:
  bool Read(const std::function<bool()>& done) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!done()) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now())
              .count();
      if (left <= 0) return false;
      pollfd p{out_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
      char buf[512];
      const ssize_t n = ::read(out_, buf, sizeof buf);
      if (n <= 0) return false;
      printed_.append(buf, static_cast<std::size_t>(n));
    }
    return true;
  }

  pid_t pid_ = -1;
  int out_ = -1;
  std::string printed_;
};

// The holder: the synthetic image in exportable device memory on device 0,
// its tables in a sealed memfd, and a description of kind device.
class DeviceLeaseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveGpu()) GTEST_SKIP() << kNoGpu;
    const Status support = CheckFdExportSupport(0);
    if (support.code() == StatusCode::kUnimplemented) GTEST_SKIP() << support.ToString();
    ASSERT_TRUE(support.ok()) << support.ToString();
    image_ = MakeV2Image(11);
    auto memory = ExportableDeviceMemory::Allocate(0, image_.image.size());
    ASSERT_TRUE(memory.ok()) << memory.status().ToString();
    memory_ = std::move(*memory);
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(memory_.data(), image_.image.data(), image_.image.size(), cudaMemcpyHostToDevice),
              cudaSuccess);
    auto id = GetCudaDeviceIdentity(0);
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    identity_ = *id;
    description_ = image_.description;
    description_.memory_kind = LeaseMemoryKind::kDevice;
    description_.device = LeaseGpu{identity_.uuid, identity_.pci_bus_id, 0};
    description_.allocations = {{memory_.size(), "fd"}};
    tables_fd_ = SealedMemfd("exlr8-test-tables", image_.tables.size(), image_.tables);
    socket_ = std::filesystem::temp_directory_path() / ("dlease-gpu." + std::to_string(::getpid()) + ".sock");
  }
  void TearDown() override {
    server_.reset();
    if (tables_fd_ >= 0) ::close(tables_fd_);
  }

  // Serves `d` (the holder's description unless changed): the VMM
  // allocation's descriptor (when its handle is "fd") and the tables'.
  void Serve(const LeaseDescriptionV2& d) {
    std::vector<int> fds;
    if (d.allocations[0].is_fd()) {
      auto fd = memory_.ExportFd();
      ASSERT_TRUE(fd.ok()) << fd.status().ToString();
      fds.push_back(*fd);
    }
    fds.push_back(tables_fd_);
    auto server = LeaseServer::StartV2(socket_, WriteLeaseDescriptionV2(d), fds);
    if (fds.size() == 2) ::close(fds[0]);  // the server holds its own copy
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(*server);
  }

  // A lessee that must open the lease on the holder's GPU (the ordinal
  // `expect_device` when not empty) and find every byte; then the release
  // reaches it and it lets go.
  void ExpectUsed(const std::vector<std::string>& env, const std::string& expect_device) {
    Lessee lessee(socket_, "use", env);
    ASSERT_TRUE(lessee.ReadLine("OPENED ")) << lessee.printed();
    const std::string regions =
        std::to_string(image_.layout.tables.tensors.size() + image_.layout.tables.checks.size());
    EXPECT_NE(lessee.printed().find("OPENED device=" + expect_device), std::string::npos) << lessee.printed();
    EXPECT_NE(lessee.printed().find(" uuid=" + identity_.uuid + " regions=" + regions + " gpu_mismatches=0 "),
              std::string::npos)
        << lessee.printed();
    EXPECT_NE(lessee.printed().find(" copy_mismatches=0 offset_table=equal"), std::string::npos)
        << lessee.printed();
    auto still = server_->RequestRelease(std::chrono::seconds(20));
    ASSERT_TRUE(still.ok()) << still.status().ToString();
    EXPECT_TRUE(still->empty()) << "the lessee did not let go";
    ASSERT_TRUE(lessee.ReadUntil("CLOSED\n")) << lessee.printed();
    EXPECT_NE(lessee.printed().find("RELEASE deadline_s=20\n"), std::string::npos) << lessee.printed();
    const int status = lessee.Wait();
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status << " " << lessee.printed();
  }

  // A lessee that must be refused with `code` (a status name; any when
  // empty) and a message naming each of
  // `names`, leaving no descriptor behind.
  void ExpectRefused(const std::vector<std::string>& env, const std::string& code,
                     const std::vector<std::string>& names) {
    Lessee lessee(socket_, "refuse", env);
    ASSERT_TRUE(lessee.ReadLine("FDS ")) << lessee.printed();
    EXPECT_NE(lessee.printed().find("REFUSED " + code), std::string::npos) << lessee.printed();
    for (const std::string& n : names) EXPECT_NE(lessee.printed().find(n), std::string::npos) << n;
    const std::size_t at = lessee.printed().find("FDS ");
    int first = -1, last = -2;
    ASSERT_EQ(std::sscanf(lessee.printed().c_str() + at, "FDS %d %d", &first, &last), 2) << lessee.printed();
    EXPECT_EQ(first, last) << "each refused open leaves descriptors behind";
    const int status = lessee.Wait();
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status << " " << lessee.printed();
  }

  V2Image image_;
  ExportableDeviceMemory memory_;
  CudaDeviceIdentity identity_;
  LeaseDescriptionV2 description_;
  int tables_fd_ = -1;
  std::filesystem::path socket_;
  std::unique_ptr<LeaseServer> server_;
};

TEST_F(DeviceLeaseTest, ALesseeFindsEveryRegionOnTheGpuAndLetsGoOnRelease) {
  Serve(description_);
  // Every GPU visible: the holder's by its UUID, whatever its ordinal.
  ExpectUsed({"CUDA_VISIBLE_DEVICES"}, "");
}

TEST_F(DeviceLeaseTest, ALesseeWithCudaVisibleDevicesByUuidFindsTheSameGpu) {
  Serve(description_);
  // The GPU is ordinal 0 of the lessee whatever its number in the holder.
  ExpectUsed({"CUDA_VISIBLE_DEVICES=" + identity_.uuid}, "0");
}

TEST_F(DeviceLeaseTest, ALesseeOpensALegacyIpcAllocation) {
  // The holder's fall-back where VMM export is missing: a cudaMalloc
  // allocation named by its IPC handle, no descriptor for it.
  void* legacy = nullptr;
  ASSERT_EQ(cudaMalloc(&legacy, image_.image.size()), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(legacy, image_.image.data(), image_.image.size(), cudaMemcpyHostToDevice),
            cudaSuccess);
  auto handle = ExportIpcHandle(legacy);
  ASSERT_TRUE(handle.ok()) << handle.status().ToString();
  LeaseDescriptionV2 d = description_;
  d.allocations = {{image_.image.size(), "ipc:" + *handle}};
  Serve(d);
  ExpectUsed({"CUDA_VISIBLE_DEVICES=" + identity_.uuid}, "0");
  server_.reset();
  EXPECT_EQ(cudaFree(legacy), cudaSuccess);
}

TEST_F(DeviceLeaseTest, ALesseeThatSeesAnotherGpuListIsNotFoundNamingTheUuid) {
  LeaseDescriptionV2 d = description_;
  d.device->uuid = "GPU-00000000-1111-2222-3333-444455556666";
  d.device->pci_bus_id = "0000:FF:1F.7";
  Serve(d);
  ExpectRefused({"CUDA_VISIBLE_DEVICES"}, "NotFound", {d.device->uuid, d.device->pci_bus_id});
}

TEST_F(DeviceLeaseTest, ALesseeWithoutTheGpuIsUnavailableNamingIt) {
  Serve(description_);
  ExpectRefused({"CUDA_VISIBLE_DEVICES=none"}, "Unavailable", {identity_.uuid, identity_.pci_bus_id});
}

TEST_F(DeviceLeaseTest, AnAllocationSizeThatIsNotTheDescriptorsIsRefusedWithoutALeak) {
  LeaseDescriptionV2 d = description_;
  d.allocations[0].bytes = 2 * memory_.size();  // a multiple of the granularity, past the allocation
  Serve(d);
  ExpectRefused({"CUDA_VISIBLE_DEVICES"}, "",
                {"import allocation 0 (" + std::to_string(2 * memory_.size()) + " bytes"});
}

TEST_F(DeviceLeaseTest, AnImageWhoseOffsetTableDiffersIsCorruption) {
  // One entry of the device copy changed after the tables were written.
  const std::uint64_t at = description_.image.offset_table + 8;
  const std::uint64_t bogus = 0x100;
  ASSERT_EQ(cudaMemcpy(static_cast<std::byte*>(memory_.data()) + at, &bogus, 8, cudaMemcpyHostToDevice),
            cudaSuccess);
  Serve(description_);
  ExpectRefused({"CUDA_VISIBLE_DEVICES"}, "Corruption",
                {"offset table entry 1 at byte " + std::to_string(at)});
}

}  // namespace
}  // namespace exlr8
