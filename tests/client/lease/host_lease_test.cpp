// The lessee's side of lease protocol v2 (client/lease/host_lease.h and
// lease_v2_framing.h) against a fake holder on a real Unix socket that
// sends what each test tells it: a good lease opens and every tensor's bytes
// hash to their digest; every broken holder gets a named error, and no
// descriptor stays open after it.
#include "client/lease/host_lease.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "client/lease/description.h"
#include "client/lease/lease_client.h"
#include "format/checksum.h"
#include "tests/client/lease/lease_test_util.h"
#include "tests/client/lease/lease_v2_test_util.h"

namespace exlr8 {
namespace {

using testing::CountOpenFds;
using ::testing::HasSubstr;
using testing::MakeV2Image;
using testing::SealedMemfd;
using testing::V2Fds;
using testing::V2Image;

// A holder that answers one connection: sends `first` with `fds` (none:
// no control message), then `rest`, then closes unless told to hold the
// connection until Finish.
class FakeHolder {
 public:
  explicit FakeHolder(std::string name) {
    path_ = std::filesystem::temp_directory_path() / (name + "." + std::to_string(::getpid()) + ".sock");
    ::unlink(path_.c_str());
    listener_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    auto addr = UnixSocketAddress(path_);
    EXPECT_TRUE(addr.ok());
    EXPECT_EQ(::bind(listener_, reinterpret_cast<const sockaddr*>(&*addr), sizeof *addr), 0);
    EXPECT_EQ(::listen(listener_, 4), 0);
  }
  ~FakeHolder() {
    Finish();
    ::close(listener_);
    ::unlink(path_.c_str());
  }
  const std::filesystem::path& path() const { return path_; }

  struct Chunk {
    std::string bytes;
    std::vector<int> fds;
  };
  void Serve(std::string first, std::vector<int> fds, std::string rest = {}, bool hold = false) {
    Serve({{std::move(first), std::move(fds)}, {std::move(rest), {}}}, hold);
  }
  // Each chunk in its own sendmsg.
  void Serve(std::vector<Chunk> chunks, bool hold) {
    thread_ = std::thread([this, chunks = std::move(chunks), hold] {
      const int c = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) return;
      // Each chunk waits until the lessee has read the one before (the
      // kernel would otherwise hand both to one recvmsg).
      bool first = true;
      for (const Chunk& chunk : chunks) {
        if (chunk.bytes.empty() && chunk.fds.empty()) continue;
        if (!first) WaitDrained(c);
        first = false;
        SendWithFds(c, chunk.bytes, chunk.fds);
      }
      if (hold) {
        char b;
        while (::read(release_[0], &b, 1) < 0 && errno == EINTR) {
        }
        if (!late_.empty()) (void)::send(c, late_.data(), late_.size(), MSG_NOSIGNAL);
        if (late_close_) {
          ::close(c);
          return;
        }
        while (::read(release_[0], &b, 1) < 0 && errno == EINTR) {
        }
      }
      ::close(c);
    });
  }
  // Held: sends `late` (then closes when `close`) and waits for the next
  // Step, or ends.
  void Step(std::string late = {}, bool close = false) {
    late_ = std::move(late);
    late_close_ = close;
    (void)!::write(release_[1], "x", 1);
  }
  void Finish() {
    if (thread_.joinable()) {
      (void)!::write(release_[1], "xx", 2);
      thread_.join();
    }
  }
  FakeHolder(const FakeHolder&) = delete;
  FakeHolder& operator=(const FakeHolder&) = delete;

  // Until the peer has read everything sent on `c` (at most 5 s).
  static void WaitDrained(int c) {
    for (int i = 0; i < 5000; ++i) {
      int queued = 0;
      if (::ioctl(c, SIOCOUTQ, &queued) != 0 || queued == 0) return;
      ::usleep(1000);
    }
  }

  static void SendWithFds(int c, const std::string& bytes, const std::vector<int>& fds) {
    std::vector<char> control(CMSG_SPACE(sizeof(int) * std::max<std::size_t>(fds.size(), 1)));
    iovec iov{const_cast<char*>(bytes.data()), bytes.size()};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (!fds.empty()) {
      msg.msg_control = control.data();
      msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
      cmsghdr* cm = CMSG_FIRSTHDR(&msg);
      cm->cmsg_level = SOL_SOCKET;
      cm->cmsg_type = SCM_RIGHTS;
      cm->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
      std::memcpy(CMSG_DATA(cm), fds.data(), sizeof(int) * fds.size());
    }
    if (!bytes.empty() || !fds.empty()) {
      if (bytes.empty()) {  // descriptors need a byte to ride on
        char z = ' ';
        iov = {&z, 1};
      }
      EXPECT_GE(::sendmsg(c, &msg, MSG_NOSIGNAL), 0) << std::strerror(errno);
    }
  }

 private:
  std::filesystem::path path_;
  int listener_ = -1;
  int release_[2] = {-1, -1};
  std::thread thread_;
  std::string late_;
  bool late_close_ = false;

 public:
  struct Pipe {
    explicit Pipe(int* p) { EXPECT_EQ(::pipe2(p, O_CLOEXEC), 0); }
  } pipe_{release_};
};

std::string Line(const LeaseDescriptionV2& d) { return WriteLeaseDescriptionV2(d) + "\n"; }

TEST(HostLease, OpensAndEveryTensorHashesToItsDigest) {
  const V2Image im = MakeV2Image(7);
  V2Fds fds(im);
  FakeHolder holder("lease_v2_ok");
  holder.Serve(Line(im.description), {fds.image, fds.tables}, {}, /*hold=*/true);
  const int maps_before = testing::CountMemfdMappings();
  auto lease = OpenHostLease(holder.path());
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  ASSERT_TRUE(lease->is_open());
  EXPECT_EQ(testing::CountMemfdMappings(), maps_before + 1) << "the image only; the tables are unmapped";
  EXPECT_EQ(lease->allocation_bytes(), im.image.size());
  EXPECT_EQ(lease->tables().tensors.size(), im.layout.tables.tensors.size());
  for (const ImageTensor& t : lease->tables().tensors)
    EXPECT_EQ(Xxh64::Hash(lease->Region(t)), t.xxh64) << t.What();
  for (const ImageCheck& c : lease->tables().checks) {
    Xxh64 h;
    for (const ImageSegment& s : c.segments) h.Update({lease->base() + s.offset, s.length});
    EXPECT_EQ(h.Digest(), c.digest);
  }
  const ImageTensor* norm = lease->tables().FindByName("model.norm.weight");
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(norm->length, 512u);
  const ImageTensor* shared = lease->tables().FindHalf(1, kSharedExpert, Proj::kGate, 0);
  ASSERT_NE(shared, nullptr);
  const auto idx = lease->tables().OffsetIndex(1, kSharedExpert, Proj::kGate, 0);
  ASSERT_TRUE(idx.has_value());
  EXPECT_EQ(lease->offset_table()[*idx], shared->offset);
  EXPECT_EQ(lease->tables().FindHalf(1, 0, Proj::kGate, 0), nullptr);
  EXPECT_EQ(lease->header().commit, testing::kV2Commit);
  EXPECT_EQ(lease->proof().hashed_regions, im.layout.tables.tensors.size());

  // No release yet; then the release line, split across two sends.
  auto none = lease->PollRelease();
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_FALSE(none->has_value());
  holder.Step(R"({"type":"release","deadline_s":12})"
              "\n");
  auto r = lease->WaitRelease(std::chrono::seconds(10));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ((*r)->deadline_s, 12u);
  EXPECT_FALSE((*r)->holder_gone);
  lease->Close();
  EXPECT_FALSE(lease->is_open());
  EXPECT_EQ(testing::CountMemfdMappings(), maps_before);
}

TEST(HostLease, AHolderThatGoesAwayIsAReleaseWithHolderGone) {
  const V2Image im = MakeV2Image();
  V2Fds fds(im);
  FakeHolder holder("lease_v2_gone");
  holder.Serve(Line(im.description), {fds.image, fds.tables}, {}, /*hold=*/true);
  auto lease = OpenHostLease(holder.path());
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  holder.Step({}, /*close=*/true);
  auto r = lease->WaitRelease(std::chrono::seconds(10));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->has_value());
  EXPECT_TRUE((*r)->holder_gone);
}

TEST(HostLease, AHolderLineThatIsNotAReleaseIsCorruption) {
  const V2Image im = MakeV2Image();
  V2Fds fds(im);
  FakeHolder holder("lease_v2_badline");
  holder.Serve(Line(im.description), {fds.image, fds.tables}, {}, /*hold=*/true);
  auto lease = OpenHostLease(holder.path());
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  holder.Step("{\"type\":\"renew\"}\n");
  auto r = lease->WaitRelease(std::chrono::seconds(10));
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("renew"));
}

// Each broken holder: the lessee's error names what, and every descriptor
// it received is closed.
struct BrokenCase {
  std::string name;
  std::string expect_substr;
  StatusCode code;
};

class BrokenHolder : public ::testing::Test {
 protected:
  // Opens against a holder sending `first` with `fds` (closed by the test
  // after the holder is done) and checks the error and the descriptor
  // count.
  void ExpectRefused(const std::string& first, const std::vector<int>& fds, StatusCode code,
                     const std::string& substr, std::string rest = {}) {
    FakeHolder holder("lease_v2_broken");
    const int before = CountOpenFds();
    const int maps_before = testing::CountMemfdMappings();
    holder.Serve(first, fds, rest);
    auto lease = OpenHostLease(holder.path(), std::chrono::seconds(5));
    holder.Finish();
    ASSERT_FALSE(lease.ok());
    EXPECT_EQ(lease.status().code(), code) << lease.status().ToString();
    EXPECT_THAT(lease.status().message(), HasSubstr(substr));
    EXPECT_EQ(CountOpenFds(), before) << "a descriptor leaked: " << lease.status().ToString();
    EXPECT_EQ(testing::CountMemfdMappings(), maps_before)
        << "a mapping leaked: " << lease.status().ToString();
  }
  const V2Image im = MakeV2Image();
  V2Fds fds{im};
};

TEST_F(BrokenHolder, FewerDescriptorsThanNamed) {
  ExpectRefused(Line(im.description), {fds.tables}, StatusCode::kCorruption,
                "names 2 file descriptors (1 allocations with handle \"fd\" and the tables) but 1 came");
}

TEST_F(BrokenHolder, MoreDescriptorsThanNamed) {
  ExpectRefused(Line(im.description), {fds.image, fds.tables, fds.tables}, StatusCode::kCorruption,
                "but 3 came");
}

TEST_F(BrokenHolder, NoDescriptors) {
  ExpectRefused(Line(im.description), {}, StatusCode::kCorruption, "but 0 came");
}

TEST_F(BrokenHolder, FarTooManyDescriptors) {
  ExpectRefused(Line(im.description), std::vector<int>(40, fds.tables), StatusCode::kCorruption,
                "more than 18 file descriptors");
}

TEST_F(BrokenHolder, DescriptorsAfterTheFirstByte) {
  FakeHolder holder("lease_v2_late");
  const int before = CountOpenFds();
  const std::string line = Line(im.description);
  holder.Serve({{line.substr(0, 1), {}}, {line.substr(1), {fds.image, fds.tables}}}, /*hold=*/false);
  auto lease = OpenHostLease(holder.path(), std::chrono::seconds(5));
  holder.Finish();
  ASSERT_FALSE(lease.ok());
  EXPECT_THAT(lease.status().message(), HasSubstr("2 file descriptors came after its first byte"));
  EXPECT_EQ(CountOpenFds(), before);
}

TEST_F(BrokenHolder, DescriptorsWithALaterLine) {
  FakeHolder holder("lease_v2_later");
  const std::string line = Line(im.description);
  holder.Serve({{line, {fds.image, fds.tables}}, {"{}\n", {fds.tables}}}, /*hold=*/true);
  auto lease = OpenHostLease(holder.path(), std::chrono::seconds(5));
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  const int before = CountOpenFds();
  auto r = lease->WaitRelease(std::chrono::seconds(5));
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(),
              HasSubstr("1 file descriptors (or other control data) after the description"));
  EXPECT_EQ(CountOpenFds(), before);
}

TEST_F(BrokenHolder, ImageMemfdSmallerThanNamed) {
  const int small = SealedMemfd("small", im.image.size() - 4096, im.image);
  ExpectRefused(Line(im.description), {small, fds.tables}, StatusCode::kCorruption,
                "file descriptor 0 (memory.allocations[0].bytes " + std::to_string(im.image.size()) +
                    ") has " + std::to_string(im.image.size() - 4096) + " bytes");
  ::close(small);
}

TEST_F(BrokenHolder, TablesMemfdOfAnotherSize) {
  const int big = SealedMemfd("big", im.tables.size() + 1, im.tables);
  ExpectRefused(Line(im.description), {fds.image, big}, StatusCode::kCorruption,
                "file descriptor 1 (tables.bytes " + std::to_string(im.tables.size()) + ") has " +
                    std::to_string(im.tables.size() + 1) + " bytes");
  ::close(big);
}

TEST_F(BrokenHolder, DescriptionNamingALargerAllocation) {
  LeaseDescriptionV2 d = im.description;
  d.allocations[0].bytes += 1 << 20;
  ExpectRefused(
      Line(d), {fds.image, fds.tables}, StatusCode::kCorruption,
      "file descriptor 0 (memory.allocations[0].bytes " + std::to_string(d.allocations[0].bytes) + ")");
}

TEST_F(BrokenHolder, UnsealedMemfd) {
  const int open = SealedMemfd("unsealed", im.image.size(), im.image, F_SEAL_SHRINK | F_SEAL_GROW);
  ExpectRefused(Line(im.description), {open, fds.tables}, StatusCode::kCorruption,
                "file descriptor 0 (memory.allocations[0].bytes " + std::to_string(im.image.size()) +
                    ") is not sealed");
  ::close(open);
}

TEST_F(BrokenHolder, MemfdThatMayShrink) {
  const int f = SealedMemfd("shrinkable", im.image.size(), im.image, F_SEAL_GROW | F_SEAL_WRITE);
  ExpectRefused(Line(im.description), {f, fds.tables}, StatusCode::kCorruption,
                "file descriptor 0 (memory.allocations[0].bytes " + std::to_string(im.image.size()) +
                    ") is not sealed");
  ::close(f);
}

TEST(HostLease, AFutureWriteSealServesAsAWriteSeal) {
  const V2Image im = MakeV2Image(3);
  V2Fds fds(im);
  const int f =
      SealedMemfd("future", im.image.size(), im.image, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE);
  FakeHolder holder("lease_v2_future");
  holder.Serve(Line(im.description), {f, fds.tables});
  auto lease = OpenHostLease(holder.path());
  holder.Finish();
  ::close(f);
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
}

TEST_F(BrokenHolder, NotAFile) {
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  ExpectRefused(Line(im.description), {p[0], fds.tables}, StatusCode::kCorruption, "is not a regular file");
  ::close(p[0]);
  ::close(p[1]);
}

TEST_F(BrokenHolder, SwappedDescriptors) {
  ExpectRefused(Line(im.description), {fds.tables, fds.image}, StatusCode::kCorruption, "file descriptor 0");
}

TEST_F(BrokenHolder, ImageBytesThatAreNotTheHeaderNamed) {
  std::vector<std::byte> bad = im.image;
  bad[0] = std::byte{'X'};  // the magic
  const int f = SealedMemfd("badmagic", bad.size(), bad);
  ExpectRefused(Line(im.description), {f, fds.tables}, StatusCode::kCorruption, "image header");
  ::close(f);
}

TEST_F(BrokenHolder, ImageOffsetTableThatDiffersFromTheTables) {
  std::vector<std::byte> bad = im.image;
  bad[im.description.image.offset_table + 8] ^= std::byte{1};
  const int f = SealedMemfd("badtable", bad.size(), bad);
  ExpectRefused(Line(im.description), {f, fds.tables}, StatusCode::kCorruption,
                "the image's offset table entry 1");
  ::close(f);
}

TEST_F(BrokenHolder, Garbage) {
  ExpectRefused("\x01garbage}{\n", {fds.image, fds.tables}, StatusCode::kCorruption,
                "lease description from");
}

TEST_F(BrokenHolder, ClosedBeforeTheEndOfLine) {
  std::string line = Line(im.description);
  line.pop_back();
  ExpectRefused(line, {fds.image, fds.tables}, StatusCode::kCorruption,
                "before the description's end of line");
}

TEST_F(BrokenHolder, ALineLongerThanTheLimit) {
  ExpectRefused(std::string(kMaxLeaseDescriptionV2Bytes + 10, 'x'), {fds.image, fds.tables},
                StatusCode::kCorruption, "without its end of line");
}

TEST_F(BrokenHolder, AHolderThatStopsMidLineTimesOut) {
  FakeHolder holder("lease_v2_slow");
  const int before = CountOpenFds();
  const std::string line = Line(im.description);
  holder.Serve(line.substr(0, 100), {fds.image, fds.tables}, {}, /*hold=*/true);
  auto lease = OpenHostLease(holder.path(), std::chrono::milliseconds(200));
  holder.Finish();
  ASSERT_FALSE(lease.ok());
  EXPECT_EQ(lease.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(lease.status().message(), HasSubstr("sent no whole description within 200 ms"));
  EXPECT_EQ(CountOpenFds(), before);
}

TEST_F(BrokenHolder, ClosedWithoutADescription) {
  ExpectRefused("", {}, StatusCode::kUnavailable, "without a description");
}

TEST_F(BrokenHolder, AV1Holder) {
  ExpectRefused(WriteLeaseDescription(testing::ValidLeaseDescription()), {}, StatusCode::kFailedPrecondition,
                "speaks lease protocol v1");
}

TEST_F(BrokenHolder, DeviceMemoryIsUnimplementedHere) {
  LeaseDescriptionV2 d = im.description;
  d.memory_kind = LeaseMemoryKind::kDevice;
  d.device = LeaseGpu{"GPU-5a1b2c3d-0000-1111-2222-333344445555", "0000:4E:00.0", 0};
  ExpectRefused(Line(d), {fds.image, fds.tables}, StatusCode::kUnimplemented,
                "device memory needs libexlr8client's CUDA part");
}

TEST(HostLease, NoHolderIsNotFound) {
  auto lease = OpenHostLease("/tmp/exlr8-no-such-lease.sock");
  ASSERT_FALSE(lease.ok());
  EXPECT_EQ(lease.status().code(), StatusCode::kNotFound);
}

// --- the framing, without a socket ----------------------------------------

TEST(LeaseLineReader, SplitsLinesAcrossAppends) {
  LeaseLineReader r(8);
  ASSERT_TRUE(r.Append("ab").ok());
  EXPECT_FALSE(r.NextLine().has_value());
  ASSERT_TRUE(r.Append("c\nde\nf").ok());
  EXPECT_EQ(r.NextLine(), "abc");
  EXPECT_EQ(r.NextLine(), "de");
  EXPECT_FALSE(r.NextLine().has_value());
  EXPECT_EQ(r.pending(), 1u);
  ASSERT_TRUE(r.Append("\n").ok());
  EXPECT_EQ(r.NextLine(), "f");
}

TEST(LeaseLineReader, RefusesALineOverTheLimitWholeOrNot) {
  LeaseLineReader whole(4);
  EXPECT_TRUE(whole.Append("abcd\n").ok());
  EXPECT_FALSE(whole.Append("abcde\n").ok());
  EXPECT_FALSE(whole.Append("a").ok()) << "spent after a failure";
  LeaseLineReader split(4);
  EXPECT_TRUE(split.Append("ab").ok());
  EXPECT_TRUE(split.Append("cd").ok());
  const Status s = split.Append("e");
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_THAT(s.message(), HasSubstr("longer than 4 bytes"));
}

TEST(LeaseHolderLine, ParsesTheReleaseLineOnly) {
  auto r = ParseLeaseHolderLine(WriteLeaseReleaseLine(30));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->deadline_s, 30u);
  EXPECT_EQ(ParseLeaseHolderLine(R"({"type":"release","deadline_s":0})")->deadline_s, 0u);
  EXPECT_EQ(ParseLeaseHolderLine(R"({"type":"release","deadline_s":3600})")->deadline_s, 3600u);
  for (const char* bad :
       {R"({"type":"release","deadline_s":3601})", R"({"type":"release","deadline_s":01})",
        R"({"type":"release","deadline_s":-1})", R"({"type":"release","deadline_s":})",
        R"({"type":"release","deadline_s":1 })", R"({"type":"release","deadline_s":1)",
        R"({"type":"release","deadline_s":1.5})", R"({"deadline_s":1,"type":"release"})", "", "{}"}) {
    auto p = ParseLeaseHolderLine(bad);
    EXPECT_FALSE(p.ok()) << bad;
    EXPECT_EQ(p.status().code(), StatusCode::kCorruption) << bad;
  }
}

TEST(LeaseV2Opening, ChecksTheDescriptorCount) {
  const V2Image im = MakeV2Image();
  const std::string text = WriteLeaseDescriptionV2(im.description);
  EXPECT_TRUE(ParseLeaseV2Opening(text, 2).ok());
  auto one = ParseLeaseV2Opening(text, 1, "sock");
  ASSERT_FALSE(one.ok());
  EXPECT_THAT(one.status().message(), HasSubstr("lease description from sock: names 2 file descriptors"));
  EXPECT_EQ(LeaseV2FdCount(im.description), 2u);
}

}  // namespace
}  // namespace exlr8
