// The lessee's side of the lease socket (client/lease/lease_client.h), over
// a real Unix socket served by a plain thread of the test: no holder, no
// daemon, no GPU.
#include "client/lease/lease_client.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include "tests/client/lease/lease_test_util.h"

namespace exlr8 {
namespace {

namespace fs = std::filesystem;
using ::exlr8::testing::ValidLeaseDescription;
using ::testing::HasSubstr;

// A holder of one connection: answers it with `text`, ends its side of the
// stream, then waits for the lessee to let go (end of stream) and records it.
class OneShotHolder {
 public:
  OneShotHolder(const fs::path& path, std::string text) : path_(path), text_(std::move(text)) {
    listener_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    auto addr = UnixSocketAddress(path_);
    EXPECT_TRUE(addr.ok());
    EXPECT_EQ(::bind(listener_, reinterpret_cast<const sockaddr*>(&*addr), sizeof *addr), 0);
    EXPECT_EQ(::listen(listener_, 1), 0);
    thread_ = std::thread([this] {
      const int c = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) return;
      for (std::size_t sent = 0; sent < text_.size();) {
        const ssize_t n = ::send(c, text_.data() + sent, text_.size() - sent, MSG_NOSIGNAL);
        if (n <= 0) break;
        sent += static_cast<std::size_t>(n);
      }
      ::shutdown(c, SHUT_WR);
      char b;
      pollfd p{c, POLLIN, 0};
      if (::poll(&p, 1, 10'000) == 1 && ::recv(c, &b, 1, 0) == 0) let_go_ = true;
      ::close(c);
    });
  }
  ~OneShotHolder() {
    ::shutdown(listener_, SHUT_RDWR);
    if (thread_.joinable()) thread_.join();
    ::close(listener_);
  }
  // Joins the holder's thread: true when the lessee closed its connection.
  bool LetGo() {
    if (thread_.joinable()) thread_.join();
    return let_go_;
  }

 private:
  fs::path path_;
  std::string text_;
  int listener_ = -1;
  bool let_go_ = false;
  std::thread thread_;
};

class LeaseClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/lease_client_test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(LeaseClientTest, ReceivesTheDescriptionAndHoldsTheConnectionUntilClosed) {
  const LeaseDescription d = ValidLeaseDescription();
  OneShotHolder holder(dir_ / "lease.sock", WriteLeaseDescription(d));
  auto lease = ReceiveLease(dir_ / "lease.sock");
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  EXPECT_TRUE(lease->connection.valid());
  EXPECT_EQ(lease->description.commit, d.commit);
  EXPECT_EQ(lease->description.halves.size(), 2u);
  lease->connection.Close();
  EXPECT_TRUE(holder.LetGo());
}

TEST_F(LeaseClientTest, AMalformedDescriptionIsCorruptionNamingTheSocket) {
  OneShotHolder holder(dir_ / "lease.sock", "{not json");
  auto lease = ReceiveLease(dir_ / "lease.sock");
  EXPECT_EQ(lease.status().code(), StatusCode::kCorruption);
  EXPECT_THAT(lease.status().message(),
              HasSubstr("lease description from " + (dir_ / "lease.sock").string()));
  EXPECT_TRUE(holder.LetGo()) << "a refused lease is let go at once";
}

TEST_F(LeaseClientTest, AHolderClosingWithoutADescriptionIsUnavailable) {
  OneShotHolder holder(dir_ / "lease.sock", "");
  EXPECT_EQ(ReceiveLease(dir_ / "lease.sock").status().code(), StatusCode::kUnavailable);
}

TEST_F(LeaseClientTest, NoSocketIsNotFoundAndALongPathInvalid) {
  EXPECT_EQ(ReceiveLease(dir_ / "none.sock").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(ReceiveLease(dir_ / std::string(200, 'x')).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace exlr8
