// client/lease/device_lease.h without a GPU: the checks OpenDeviceLease
// makes before it touches CUDA, and what a machine without a GPU answers,
// against a real holder (LeaseServer::StartV2) on a real socket. A memfd
// stands in for the allocation's CUDA descriptor: nothing here imports it.
// tests/gpu/device_lease_test.cpp imports real device memory.
#include "client/lease/device_lease.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "client/lease/host_lease.h"
#include "daemon/stage/lease_server.h"
#include "gpu/device.h"
#include "tests/client/lease/lease_v2_test_util.h"

namespace exlr8 {
namespace {

using testing::MakeV2Image;
using testing::SealedMemfd;
using testing::V2Fds;
using testing::V2Image;

constexpr const char* kUuid = "GPU-5a1b2c3d-0000-1111-2222-333344445555";
constexpr const char* kBusId = "0000:4E:00.0";

bool HaveGpu() {
  auto n = CudaDeviceCount();
  return n.ok() && *n > 0;
}

std::filesystem::path SocketPath(const std::string& name) {
  return std::filesystem::temp_directory_path() / (name + "." + std::to_string(::getpid()) + ".sock");
}

LeaseDescriptionV2 DeviceDescription(const V2Image& im) {
  LeaseDescriptionV2 d = im.description;
  d.memory_kind = LeaseMemoryKind::kDevice;
  d.device = LeaseGpu{kUuid, kBusId, 0};
  return d;
}

// Open descriptors of this process other than sockets: the server's ends
// of connections live here too and close on its own thread, but every
// descriptor the lessee receives is a memfd.
int CountNonSocketFds() {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const std::string target = std::filesystem::read_symlink(e.path(), ec).string();
    n += !ec && target.rfind("socket:", 0) != 0 ? 1 : 0;
  }
  return n;
}

// Opens a lease of `d` served with `fds`, checking that the failed open
// leaves no descriptor behind; returns its status.
Status OpenRefused(const std::string& name, const LeaseDescriptionV2& d, std::vector<int> fds) {
  const std::filesystem::path path = SocketPath(name);
  auto server = LeaseServer::StartV2(path, WriteLeaseDescriptionV2(d), fds);
  EXPECT_TRUE(server.ok()) << server.status().ToString();
  if (!server.ok()) return server.status();
  (void)OpenDeviceLease(path, {.timeout = std::chrono::seconds(10)});  // the runtime's own descriptors
  const int before = CountNonSocketFds();
  Result<DeviceLease> lease = OpenDeviceLease(path, {.timeout = std::chrono::seconds(10)});
  EXPECT_FALSE(lease.ok());
  EXPECT_EQ(CountNonSocketFds(), before) << "a refused device lease leaves descriptors open";
  return lease.ok() ? Status::Ok() : lease.status();
}

TEST(DeviceLease, WithoutAGpuIsUnavailableNamingTheLeasesGpu) {
  if (HaveGpu()) GTEST_SKIP() << "a CUDA device is present; this checks the no-device path";
  const V2Image im = MakeV2Image(3);
  V2Fds fds(im);
  const Status s = OpenRefused("dlease-nogpu", DeviceDescription(im), {fds.image, fds.tables});
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find(kUuid), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find(kBusId), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("no CUDA device"), std::string::npos) << s.ToString();
}

TEST(DeviceLease, AHostDescriptionIsFailedPrecondition) {
  const V2Image im = MakeV2Image(4);
  V2Fds fds(im);
  const Status s = OpenRefused("dlease-host", im.description, {fds.image, fds.tables});
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find("OpenHostLease"), std::string::npos) << s.ToString();
}

TEST(DeviceLease, AnUnsealedTablesMemfdIsCorruption) {
  const V2Image im = MakeV2Image(5);
  V2Fds fds(im);
  const int unsealed = SealedMemfd("exlr8-test-tables", im.tables.size(), im.tables, 0);
  const Status s = OpenRefused("dlease-unsealed", DeviceDescription(im), {fds.image, unsealed});
  ::close(unsealed);
  EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find("file descriptor 1 (tables.bytes"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("not sealed"), std::string::npos) << s.ToString();
}

TEST(DeviceLease, TablesOfAnotherSizeAreCorruption) {
  const V2Image im = MakeV2Image(6);
  V2Fds fds(im);
  const int small = SealedMemfd("exlr8-test-tables", im.tables.size() - 64, im.tables);
  const Status s = OpenRefused("dlease-small", DeviceDescription(im), {fds.image, small});
  ::close(small);
  EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find("has " + std::to_string(im.tables.size() - 64) + " bytes"), std::string::npos)
      << s.ToString();
}

TEST(DeviceLease, AHostLesseeStillRefusesADeviceDescription) {
  const V2Image im = MakeV2Image(7);
  V2Fds fds(im);
  const std::filesystem::path path = SocketPath("dlease-hostlessee");
  auto server =
      LeaseServer::StartV2(path, WriteLeaseDescriptionV2(DeviceDescription(im)), {{fds.image, fds.tables}});
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto lease = OpenHostLease(path, std::chrono::seconds(10));
  ASSERT_FALSE(lease.ok());
  EXPECT_EQ(lease.status().code(), StatusCode::kUnimplemented) << lease.status().ToString();
}

TEST(DeviceLease, NoHolderIsNotFound) {
  auto lease = OpenDeviceLease(SocketPath("dlease-none"));
  ASSERT_FALSE(lease.ok());
  EXPECT_EQ(lease.status().code(), StatusCode::kNotFound) << lease.status().ToString();
}

}  // namespace
}  // namespace exlr8
