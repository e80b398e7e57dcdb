// gpu/vmm.h and the device identity of gpu/device.h. The export test runs
// this binary again as a child process (fork + exec, so the child has its own
// CUDA context) that receives the descriptor over a socketpair with
// SCM_RIGHTS, finds the GPU by UUID, maps the memory and sends its bytes back.
// GPU tests skip when no CUDA device is visible.
#include "gpu/vmm.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "gpu/cuda_check.h"
#include "gpu/device.h"

extern char** environ;

namespace exlr8 {
namespace {

constexpr const char* kNoGpu = "no CUDA device: GPU tests run on the device machine";
constexpr const char* kChildEnv = "EXLR8_VMM_TEST_CHILD_SOCKET";

bool HaveGpu() {
  static const bool have = [] {
    auto n = CudaDeviceCount();
    return n.ok() && *n > 0;
  }();
  return have;
}

// Skips when the device cannot export POSIX descriptors, printing why (the
// holder's fall-back case); fails on any other error.
#define SKIP_WITHOUT_FD_EXPORT()                                                            \
  do {                                                                                      \
    if (!HaveGpu()) GTEST_SKIP() << kNoGpu;                                                 \
    const Status support_ = CheckFdExportSupport(0);                                        \
    if (support_.code() == StatusCode::kUnimplemented) GTEST_SKIP() << support_.ToString(); \
    ASSERT_TRUE(support_.ok()) << support_.ToString();                                      \
  } while (0)

// Over the test's socketpair.
bool WriteAll(int fd, const void* p, std::size_t n) {
  const auto* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = ::send(fd, c, n, MSG_NOSIGNAL);  // a dead peer is an error, not SIGPIPE
    if (w <= 0) return false;
    c += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

bool ReadAll(int fd, void* p, std::size_t n) {
  auto* c = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t r = ::read(fd, c, n);
    if (r <= 0) return false;
    c += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

// Sends `text` and the descriptor `fd` in one message.
bool SendWithFd(int sock, const std::string& text, int fd) {
  iovec iov{const_cast<char*>(text.data()), text.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  return ::sendmsg(sock, &msg, MSG_NOSIGNAL) == static_cast<ssize_t>(text.size());
}

// Receives one message of at most 255 bytes and its descriptor (-1 if none).
bool ReceiveWithFd(int sock, std::string* text, int* fd) {
  char buf[256];
  iovec iov{buf, sizeof buf - 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  const ssize_t n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  if (n <= 0) return false;
  text->assign(buf, static_cast<std::size_t>(n));
  *fd = -1;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) std::memcpy(fd, CMSG_DATA(c), sizeof(int));
  return true;
}

// ---- without a GPU ----

TEST(DeviceIdentity, FormatsUuidLikeNvidiaSmi) {
  const unsigned char b[16] = {0x6f, 0x5e, 0x4d, 0x3c, 0x2b, 0x1a, 0x09, 0xf8,
                               0xe7, 0xd6, 0xc5, 0xb4, 0xa3, 0x92, 0x81, 0x70};
  EXPECT_EQ(FormatCudaUuid(b), "GPU-6f5e4d3c-2b1a-09f8-e7d6-c5b4a3928170");
}

TEST(DeviceIdentity, RejectsMalformedUuidBeforeTouchingCuda) {
  for (const char* bad :
       {"", "GPU-", "6f5e4d3c-2b1a-09f8-e7d6-c5b4a3928170", "GPU-6f5e4d3c-2b1a-09f8-e7d6-c5b4a392817",
        "GPU-6f5e4d3c-2b1a-09f8-e7d6-c5b4a392817g", "GPU-6f5e4d3c+2b1a-09f8-e7d6-c5b4a3928170",
        "MIG-6f5e4d3c-2b1a-09f8-e7d6-c5b4a3928170"}) {
    auto r = FindCudaDeviceByUuid(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
  }
}

TEST(Vmm, RejectsBadArgumentsBeforeTouchingCuda) {
  EXPECT_EQ(ExportableDeviceMemory::Allocate(0, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ImportedDeviceMemory::Import(-1, 1 << 21, 0, DeviceMemoryAccess::kReadOnly).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ImportedDeviceMemory::Import(0, 0, 0, DeviceMemoryAccess::kReadOnly).status().code(),
            StatusCode::kInvalidArgument);
  ExportableDeviceMemory empty;
  EXPECT_EQ(empty.ExportFd().status().code(), StatusCode::kFailedPrecondition);
}

TEST(Vmm, WithoutDeviceSaysUnavailable) {
  if (HaveGpu()) GTEST_SKIP() << "a CUDA device is present; this checks the no-device path";
  auto m = ExportableDeviceMemory::Allocate(0, 4096);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kUnavailable) << m.status().ToString();
  EXPECT_EQ(CheckFdExportSupport(0).code(), StatusCode::kUnavailable);
}

// ---- on the device ----

TEST(DeviceIdentity, UuidAndBusIdRoundTrip) {
  if (!HaveGpu()) GTEST_SKIP() << kNoGpu;
  auto count = CudaDeviceCount();
  ASSERT_TRUE(count.ok());
  for (int d = 0; d < *count; ++d) {
    auto id = GetCudaDeviceIdentity(d);
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    std::printf("device %d: %s, PCI %s\n", d, id->uuid.c_str(), id->pci_bus_id.c_str());
    EXPECT_TRUE(std::regex_match(
        id->uuid, std::regex("GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")))
        << id->uuid;
    EXPECT_TRUE(std::regex_match(id->pci_bus_id,
                                 std::regex("[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\\.[0-7]")))
        << id->pci_bus_id;
    auto found = FindCudaDeviceByUuid(id->uuid);
    ASSERT_TRUE(found.ok()) << found.status().ToString();
    EXPECT_EQ(*found, d);
    std::string upper = id->uuid;
    for (std::size_t i = 4; i < upper.size(); ++i) upper[i] = static_cast<char>(std::toupper(upper[i]));
    auto found_upper = FindCudaDeviceByUuid(upper);
    ASSERT_TRUE(found_upper.ok()) << found_upper.status().ToString();
    EXPECT_EQ(*found_upper, d);
  }
  auto none = FindCudaDeviceByUuid("GPU-00000000-0000-0000-0000-000000000000");
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound) << none.status().ToString();
  EXPECT_EQ(GetCudaDeviceIdentity(*count).status().code(), StatusCode::kInvalidArgument);
}

TEST(Vmm, AllocatesGranularSizeMapsAndImportsInProcess) {
  SKIP_WITHOUT_FD_EXPORT();
  auto m = ExportableDeviceMemory::Allocate(0, (3 << 20) + 123);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_GE(m->size(), std::size_t{(3 << 20) + 123});
  std::vector<std::uint8_t> host(m->size());
  std::mt19937_64 rng(9);
  for (auto& b : host) b = static_cast<std::uint8_t>(rng());
  ASSERT_EQ(cudaMemcpy(m->data(), host.data(), host.size(), cudaMemcpyHostToDevice), cudaSuccess);
  auto fd = m->ExportFd();
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  ASSERT_GE(*fd, 0);
  // The same process may import its own export (a second mapping).
  auto imp = ImportedDeviceMemory::Import(*fd, m->size(), 0, DeviceMemoryAccess::kReadWrite);
  ::close(*fd);
  ASSERT_TRUE(imp.ok()) << imp.status().ToString();
  EXPECT_NE(imp->data(), m->data());
  std::vector<std::uint8_t> back(m->size());
  ASSERT_EQ(cudaMemcpy(back.data(), imp->data(), back.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_TRUE(back == host);
  // A size that is not the granularity's multiple is refused.
  auto fd2 = m->ExportFd();
  ASSERT_TRUE(fd2.ok());
  auto bad = ImportedDeviceMemory::Import(*fd2, m->size() - 1, 0, DeviceMemoryAccess::kReadWrite);
  ::close(*fd2);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument) << bad.status().ToString();
}

// The lessee's mapping: read-only, same bytes.
TEST(Vmm, ReadOnlyImportReadsSameBytes) {
  SKIP_WITHOUT_FD_EXPORT();
  auto m = ExportableDeviceMemory::Allocate(0, 1 << 20);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  std::vector<std::uint8_t> host(m->size());
  std::mt19937_64 rng(11);
  for (auto& b : host) b = static_cast<std::uint8_t>(rng());
  ASSERT_EQ(cudaMemcpy(m->data(), host.data(), host.size(), cudaMemcpyHostToDevice), cudaSuccess);
  auto fd = m->ExportFd();
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  auto ro = ImportedDeviceMemory::Import(*fd, m->size(), 0, DeviceMemoryAccess::kReadOnly);
  ::close(*fd);
  ASSERT_TRUE(ro.ok()) << ro.status().ToString();
  std::vector<std::uint8_t> back(host.size());
  ASSERT_EQ(cudaMemcpy(back.data(), ro->data(), back.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_TRUE(back == host);
}

TEST(Vmm, ImportOfNonCudaDescriptorIsAnError) {
  SKIP_WITHOUT_FD_EXPORT();
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  auto r = ImportedDeviceMemory::Import(p[0], std::size_t{2} << 20, 0, DeviceMemoryAccess::kReadWrite);
  ::close(p[0]);
  ::close(p[1]);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("cuMemImportFromShareableHandle"), std::string::npos)
      << r.status().ToString();
}

// The parent: allocate, fill, export; the child (this binary again) imports
// by descriptor and sends the bytes back after the parent has destroyed its
// allocation (the driver keeps the memory while the child maps it).
TEST(Vmm, ChildProcessImportsDescriptorAndReadsSameBytes) {
  SKIP_WITHOUT_FD_EXPORT();
  auto m = ExportableDeviceMemory::Allocate(0, (5 << 20) + 7);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const std::size_t size = m->size();
  std::vector<std::uint8_t> host(size);
  std::mt19937_64 rng(10);
  for (auto& b : host) b = static_cast<std::uint8_t>(rng());
  ASSERT_EQ(cudaMemcpy(m->data(), host.data(), size, cudaMemcpyHostToDevice), cudaSuccess);
  auto id = GetCudaDeviceIdentity(0);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  auto fd = m->ExportFd();
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();

  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  const int child_sock = ::fcntl(sv[1], F_DUPFD, 100);  // without FD_CLOEXEC: the child inherits it
  ASSERT_GE(child_sock, 0);
  ::close(sv[1]);
  // Everything the child needs, built before fork().
  std::string exe = "/proc/self/exe";
  std::string filter = "--gtest_filter=VmmChild.ImportsFromParentSocket";
  std::string env_entry = std::string(kChildEnv) + "=" + std::to_string(child_sock);
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e) envp.push_back(*e);
  envp.push_back(env_entry.data());
  envp.push_back(nullptr);
  char* argv[] = {exe.data(), filter.data(), nullptr};
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::execve(exe.c_str(), argv, envp.data());
    ::_exit(127);
  }
  ::close(child_sock);

  ASSERT_TRUE(SendWithFd(sv[0], id->uuid + " " + std::to_string(size) + "\n", *fd));
  ::close(*fd);
  char imported = 0;
  ASSERT_TRUE(ReadAll(sv[0], &imported, 1)) << "the child exited before importing (its output is above)";
  ASSERT_EQ(imported, 'I');
  *m = ExportableDeviceMemory();  // the exporter lets go first
  ASSERT_TRUE(WriteAll(sv[0], "G", 1));
  std::vector<std::uint8_t> back(size);
  const bool got = ReadAll(sv[0], back.data(), size);
  ::close(sv[0]);
  int wstatus = 0;
  ASSERT_EQ(::waitpid(pid, &wstatus, 0), pid);
  ASSERT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) << "child status " << wstatus;
  ASSERT_TRUE(got) << "the child sent fewer than " << size << " bytes";
  EXPECT_TRUE(back == host) << "the child read other bytes than the parent wrote";
}

// Runs only as the child of the test above (skips otherwise).
TEST(VmmChild, ImportsFromParentSocket) {
  const char* env = std::getenv(kChildEnv);
  if (env == nullptr)
    GTEST_SKIP() << "runs only as the child of Vmm.ChildProcessImportsDescriptorAndReadsSameBytes";
  const int sock = std::atoi(env);
  std::string text;
  int fd = -1;
  ASSERT_TRUE(ReceiveWithFd(sock, &text, &fd));
  ASSERT_GE(fd, 0) << "no descriptor in the message";
  const std::size_t space = text.find(' ');
  ASSERT_NE(space, std::string::npos) << text;
  const std::string uuid = text.substr(0, space);
  const std::size_t size = std::stoull(text.substr(space + 1));
  auto device = FindCudaDeviceByUuid(uuid);
  ASSERT_TRUE(device.ok()) << device.status().ToString();
  auto rw = ImportedDeviceMemory::Import(fd, size, *device, DeviceMemoryAccess::kReadWrite);
  ::close(fd);
  ASSERT_TRUE(rw.ok()) << rw.status().ToString();
  ASSERT_TRUE(WriteAll(sock, "I", 1));
  char go = 0;
  ASSERT_TRUE(ReadAll(sock, &go, 1));
  ASSERT_EQ(go, 'G');
  std::vector<std::uint8_t> a(size);
  ASSERT_EQ(cudaMemcpy(a.data(), rw->data(), size, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_TRUE(WriteAll(sock, a.data(), size));
}

}  // namespace
}  // namespace exlr8
