// TransferSlots: the RangeFetcher's transfers in flight and the transport
// they run on.
//
// What it owns: the transport (the one the options name, or its own
// CurlTransport sized for the fetcher), one slot per transfer that may run
// at once, each slot's receiving end (an HttpTransfer: the request it
// carries, its AnswerChecker, whether it is held back), and the counts of
// busy and paused slots. What it leaves to its owner (the Listener): what a
// body chunk or a transfer's end means for the request.
//
// Thread rules: Wake from any thread; everything else, and the Listener's
// calls, on the thread inside RangeFetcher::Run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "daemon/hub/answer_checker.h"
#include "daemon/hub/curl_transport.h"
#include "daemon/hub/http_transport.h"
#include "format/status.h"

namespace exlr8 {

class TransferSlots {
 public:
  struct Slot;
  // What the transfers' callbacks mean; implemented by the fetcher.
  class Listener {
   public:
    virtual ~Listener() = default;
    virtual HttpTransfer::Body OnSlotBody(Slot& s, const char* p, std::size_t n) = 0;
    // After the slot is free again (it may be started anew from here).
    virtual void OnSlotDone(Slot& s, const TransferEnd& end) = 0;
  };

  // One transfer slot: the receiving end of one request at a time.
  struct Slot final : HttpTransfer {
    TransferSlots* owner = nullptr;
    bool busy = false;
    bool is_resolve = false;
    std::uint32_t index = 0;  // job (range) or file (resolve)
    std::uint32_t generation = 0;
    std::string url;
    AnswerChecker checker;  // range transfers: judges the answer
    bool paused = false;    // held back (bandwidth limit, or a consumer not ready)
    Status consumer_error;

    Body OnBody(const char* p, std::size_t n) override { return owner->listener_->OnSlotBody(*this, p, n); }
    void OnDone(const TransferEnd& end) override { owner->Ended(*this, end); }
  };

  // `transport`: the one to use, or null for an own CurlTransport over
  // `settings` with `curl`. REQUIRES: `transport` (when set), `settings`
  // and `listener` outlive the slots.
  TransferSlots(HttpTransport* transport, const HttpSettings& settings, CurlTransport::Options curl,
                Listener* listener);
  // Abandons the transfers still running.
  ~TransferSlots();
  TransferSlots(const TransferSlots&) = delete;
  TransferSlots& operator=(const TransferSlots&) = delete;

  HttpTransport& transport() { return *transport_; }
  int busy() const { return busy_; }
  int paused() const { return paused_; }

  // A free slot, prepared for a transfer to `url`, or null when all are busy.
  Slot* Take(const std::string& url);
  // Starts `req` in `s` (from Take).
  void Start(Slot& s, const HttpRequest& req);
  // Marks `s` held back; its OnBody returns kPause after this.
  void Pause(Slot& s);
  // Lets the held-back transfers go on while `may_resume()` says so. The
  // transport offers the held chunk again from inside Resume, which may
  // pause it again.
  void ResumePaused(const std::function<bool()>& may_resume);
  // Ends every running transfer without OnDone; returns how many there were.
  int AbandonAll();

 private:
  void Free(Slot& s);
  void Ended(Slot& s, const TransferEnd& end);

  std::unique_ptr<HttpTransport> own_;  // when no transport was given
  HttpTransport* transport_;
  Listener* const listener_;
  std::vector<Slot> slots_;
  int busy_ = 0;
  int paused_ = 0;
};

}  // namespace exlr8
