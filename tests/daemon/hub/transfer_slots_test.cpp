// TransferSlots alone, on the fake hub's transport: slots taken and freed,
// held back and resumed, abandoned.
#include "daemon/hub/transfer_slots.h"

#include <gtest/gtest.h>

#include <vector>

#include "tests/daemon/hub/fake_transport.h"

namespace exlr8 {
namespace {

using testing::FakeHubTransport;

constexpr char kPrefix[] = "http://hub.test/org/model/resolve/c/";

struct Recorder final : TransferSlots::Listener {
  TransferSlots* slots = nullptr;
  bool pause_next = false;
  std::vector<std::uint32_t> done;
  std::vector<int> busy_at_done;
  std::size_t bytes = 0;
  HttpTransfer::Body OnSlotBody(TransferSlots::Slot& s, const char*, std::size_t n) override {
    if (pause_next) {
      pause_next = false;
      slots->Pause(s);
      return HttpTransfer::Body::kPause;
    }
    bytes += n;
    return HttpTransfer::Body::kContinue;
  }
  void OnSlotDone(TransferSlots::Slot& s, const TransferEnd& end) override {
    EXPECT_TRUE(end.ok) << end.error;
    EXPECT_FALSE(s.busy);
    done.push_back(s.index);
    busy_at_done.push_back(slots->busy());
  }
};

class TransferSlotsTest : public ::testing::Test {
 protected:
  TransferSlotsTest() : net_(kPrefix, "c") {
    net_.regular_files["f"] = std::string(1'000, 'x');
    net_.chunk = 100;
    CurlTransport::Options o;
    o.max_transfers = 2;
    slots_ = std::make_unique<TransferSlots>(&net_, settings_, o, &rec_);
    rec_.slots = slots_.get();
  }

  TransferSlots::Slot* StartGet(std::uint32_t index) {
    TransferSlots::Slot* s = slots_->Take(std::string(kPrefix) + "f");
    if (s == nullptr) return nullptr;
    s->index = index;
    HttpRequest req;
    req.url = s->url;
    slots_->Start(*s, req);
    return s;
  }

  HttpSettings settings_;
  FakeHubTransport net_;
  Recorder rec_;
  std::unique_ptr<TransferSlots> slots_;
};

TEST_F(TransferSlotsTest, HandsOutAtMostItsSlotsAndFreesEachBeforeItsEndIsTold) {
  ASSERT_NE(StartGet(1), nullptr);
  ASSERT_NE(StartGet(2), nullptr);
  EXPECT_EQ(StartGet(3), nullptr);
  EXPECT_EQ(slots_->busy(), 2);
  auto ended = slots_->transport().Perform();
  ASSERT_TRUE(ended.ok());
  EXPECT_EQ(*ended, 2);
  EXPECT_EQ(rec_.done, (std::vector<std::uint32_t>{1, 2}));
  EXPECT_EQ(rec_.busy_at_done, (std::vector<int>{1, 0}));
  EXPECT_EQ(rec_.bytes, 2'000u);
  EXPECT_NE(StartGet(3), nullptr);
}

TEST_F(TransferSlotsTest, HeldBackTransferGoesOnOnlyWhenResumeIsAllowed) {
  rec_.pause_next = true;
  ASSERT_NE(StartGet(1), nullptr);
  ASSERT_EQ(*slots_->transport().Perform(), 0);
  EXPECT_EQ(slots_->paused(), 1);
  slots_->ResumePaused([] { return false; });
  EXPECT_EQ(slots_->paused(), 1);
  slots_->ResumePaused([] { return true; });
  EXPECT_EQ(slots_->paused(), 0);
  ASSERT_EQ(*slots_->transport().Perform(), 1);
  EXPECT_EQ(rec_.bytes, 1'000u);  // the held chunk was offered again, once
}

TEST_F(TransferSlotsTest, AbandonAllEndsRunningTransfersWithoutTheirEnd) {
  rec_.pause_next = true;
  ASSERT_NE(StartGet(1), nullptr);
  ASSERT_NE(StartGet(2), nullptr);
  ASSERT_EQ(*slots_->transport().Perform(), 1);  // 2 ran through; 1 is held
  EXPECT_EQ(slots_->AbandonAll(), 1);
  EXPECT_EQ(slots_->busy(), 0);
  EXPECT_EQ(slots_->paused(), 0);
  ASSERT_EQ(*slots_->transport().Perform(), 0);
  EXPECT_EQ(rec_.done, (std::vector<std::uint32_t>{2}));
}

}  // namespace
}  // namespace exlr8
