#include "daemon/hub/transfer_slots.h"

namespace exlr8 {

TransferSlots::TransferSlots(HttpTransport* transport, const HttpSettings& settings,
                             CurlTransport::Options curl, Listener* listener)
    : transport_(transport), listener_(listener) {
  if (transport_ == nullptr) {
    own_ = std::make_unique<CurlTransport>(settings, curl);
    transport_ = own_.get();
  }
  slots_.resize(static_cast<std::size_t>(curl.max_transfers));
  for (Slot& s : slots_) s.owner = this;
}

TransferSlots::~TransferSlots() { AbandonAll(); }

TransferSlots::Slot* TransferSlots::Take(const std::string& url) {
  if (busy_ >= static_cast<int>(slots_.size())) return nullptr;
  for (Slot& s : slots_) {
    if (s.busy) continue;
    s.busy = true;
    s.url = url;
    s.checker = AnswerChecker();
    s.paused = false;
    s.consumer_error = Status::Ok();
    return &s;
  }
  return nullptr;
}

void TransferSlots::Start(Slot& s, const HttpRequest& req) {
  ++busy_;
  transport_->Start(req, &s);
}

void TransferSlots::Pause(Slot& s) {
  s.paused = true;
  ++paused_;
}

void TransferSlots::ResumePaused(const std::function<bool()>& may_resume) {
  if (paused_ == 0) return;
  for (Slot& s : slots_) {
    if (!s.busy || !s.paused) continue;
    if (!may_resume()) return;
    s.paused = false;
    --paused_;
    transport_->Resume(&s);
  }
}

void TransferSlots::Free(Slot& s) {
  if (s.paused) --paused_;
  s.paused = false;
  s.busy = false;
  --busy_;
}

int TransferSlots::AbandonAll() {
  int n = 0;
  for (Slot& s : slots_) {
    if (!s.busy) continue;
    transport_->Abandon(&s);
    Free(s);
    ++n;
  }
  return n;
}

void TransferSlots::Ended(Slot& s, const TransferEnd& end) {
  Free(s);
  listener_->OnSlotDone(s, end);
}

}  // namespace exlr8
