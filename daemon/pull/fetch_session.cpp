#include "daemon/pull/fetch_session.h"

#include <pthread.h>

#include <array>
#include <chrono>

#include "daemon/base/clock.h"
#include "daemon/base/mutex.h"

namespace exlr8 {

namespace {
constexpr int kSlotBits = 8;
constexpr std::size_t kMaxSubmissions = (std::size_t{1} << kSlotBits) - 1;
// Received bytes waiting for the offload worker, per lane.
constexpr std::size_t kQueuedBytes = 8u << 20;
static_assert(OffloadConsumer::kLanes == FetchSession::kStep + 1, "one offload lane per priority");
}  // namespace

// The consumer the fetcher runs: hands out the submitted consumers'
// requests (ids tagged with the submission's slot) and routes callbacks back.
class FetchSession::Mux final : public RangeConsumer {
 public:
  Mux(RangeFetcher& fetcher, Clock& clock, std::chrono::nanoseconds max_hold)
      : fetcher_(fetcher), clock_(clock), max_hold_(max_hold) {}

  Ticket Add(RangeConsumer& consumer, Priority priority, int cap) EXLR8_EXCLUDES(mu_) {
    Ticket t;
    {
      MutexLock lock(&mu_);
      if (count_ >= kMaxSubmissions) return kMaxSubmissions;  // Wait reports it
      t = count_++;
      subs_[t] = Sub{&consumer, priority, cap};
    }
    fetcher_.Wake();
    return t;
  }

  bool NextRequest(RangeRequest* out) override EXLR8_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    // Planner steps first; then capped submissions below their cap (their
    // share of the slots: the dense files keep streaming beside the halves
    // instead of waiting for all of them, and end before they do); then by
    // priority.
    if (HandOut(out, [](const Sub& s) { return s.priority == kStep; }, kStep)) return true;
    if (HandOut(out, [](const Sub& s) { return s.priority < kForeground && s.cap > 0 && s.live < static_cast<std::uint64_t>(s.cap); },
                kForeground))
      return true;
    for (int priority : {kForeground, kBackground})
      if (HandOut(out, [priority](const Sub& s) { return s.priority == priority; }, priority)) return true;
    return false;
  }

  bool MayHaveMore() override EXLR8_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    if (!closed_) return true;
    for (std::size_t i = 0; i < count_; ++i)
      if (!subs_[i].exhausted) return true;
    return false;
  }

  Status OnData(std::uint64_t id, std::uint64_t offset, std::span<const std::byte> bytes) override {
    return Of(id).OnData(id >> kSlotBits, offset, bytes);
  }

  RangeVerdict OnComplete(std::uint64_t id) override {
    RangeVerdict v = Of(id).OnComplete(id >> kSlotBits);
    if (v.kind == RangeVerdict::Kind::kAccept) End(id);
    return v;
  }

  void OnReset(std::uint64_t id) override { Of(id).OnReset(id >> kSlotBits); }

  // Background transfers are held back while a planner step has requests
  // in flight, so the step's bytes get the whole link (they are few, and
  // the pull waits for them) — for at most max_hold per step: a held
  // transfer receives nothing, and libcurl's low-speed check (the stall
  // timeout, 30 s by default) would end it after a long step on a slow
  // link. Called on the fetch thread, lock-free.
  bool ReadyFor(std::uint64_t id, std::size_t /*bytes*/) override {
    if (PriorityOf(id) != kBackground) return true;
    const std::int64_t since = hold_since_ns_.load(std::memory_order_relaxed);
    return since == 0 || NowNs() - since > max_hold_.count();
  }

  // The offload worker's lane: steps first, then halves, then the
  // background (whose transfers alone are held back when it is full).
  int Lane(std::uint64_t id) const { return PriorityOf(id); }

  void OnFailed(std::uint64_t id, const Status& status) override {
    Of(id).OnFailed(id >> kSlotBits, status);
    End(id);
  }

  void Close() {
    {
      MutexLock lock(&mu_);
      closed_ = true;
    }
    fetcher_.Wake();
  }

  void SetEnded(Status status) EXLR8_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    ended_ = true;
    run_status_ = std::move(status);
    cv_.SignalAll();
  }

  Status Wait(Ticket t) EXLR8_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    if (t >= count_) return InternalError("fetch session: more than " + std::to_string(kMaxSubmissions) + " steps");
    while (!(subs_[t].exhausted && subs_[t].live == 0) && !ended_) cv_.Wait(&mu_);
    if (subs_[t].exhausted && subs_[t].live == 0) return Status::Ok();
    if (!run_status_.ok()) return run_status_;
    return InternalError("fetch session ended before a submitted step ran");
  }

  Status run_status() EXLR8_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    return run_status_;
  }

 private:
  struct Sub {
    RangeConsumer* consumer = nullptr;
    Priority priority = kBackground;
    int cap = 0;
    bool exhausted = false;
    std::uint64_t live = 0;  // handed out, not ended
  };

  // A submission's consumer and priority are written once under mu_ before
  // any of its ids exist, so reading them for a live id needs no lock (the
  // analysis cannot see that ordering; the rest of Sub is read under mu_).
  RangeConsumer& Of(std::uint64_t id) EXLR8_NO_THREAD_SAFETY_ANALYSIS {
    return *subs_[id & kMaxSubmissions].consumer;
  }
  int PriorityOf(std::uint64_t id) const EXLR8_NO_THREAD_SAFETY_ANALYSIS {
    return subs_[id & kMaxSubmissions].priority;
  }

  void End(std::uint64_t id) EXLR8_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    Sub& s = subs_[id & kMaxSubmissions];
    if (s.live == 0) return;  // never: the fetcher ends each request once
    --s.live;
    if (s.priority == kStep && --steps_live_ == 0) hold_since_ns_.store(0, std::memory_order_relaxed);
    if (s.exhausted && s.live == 0) cv_.SignalAll();
  }

  // The first request of the submissions `eligible` selects, in the order
  // submitted, within their caps; `start_priority` is what the fetcher
  // orders it by (RangeRequest::priority).
  template <typename Eligible>
  bool HandOut(RangeRequest* out, Eligible eligible, int start_priority) EXLR8_REQUIRES(mu_) {
    for (std::size_t i = 0; i < count_; ++i) {
      Sub& s = subs_[i];
      if (s.exhausted || !eligible(s)) continue;
      if (s.cap > 0 && s.live >= static_cast<std::uint64_t>(s.cap) && Capped(i)) continue;
      if (s.consumer->NextRequest(out)) {
        if (s.priority == kStep && steps_live_++ == 0) hold_since_ns_.store(NowNs(), std::memory_order_relaxed);
        out->id = (out->id << kSlotBits) | i;
        out->priority = static_cast<std::uint8_t>(start_priority);  // also ahead of requests pulled earlier
        ++s.live;
        return true;
      }
      s.exhausted = true;
      if (s.live == 0) cv_.SignalAll();
    }
    return false;
  }

  bool Capped(std::size_t i) const EXLR8_REQUIRES(mu_) {
    if (!closed_) return true;
    for (std::size_t j = 0; j < count_; ++j)
      if (subs_[j].priority > subs_[i].priority && !subs_[j].exhausted) return true;
    return false;
  }

  // Nanoseconds on clock_'s steady time line; never 0.
  std::int64_t NowNs() const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(clock_.Now().time_since_epoch()).count() | 1;
  }

  RangeFetcher& fetcher_;
  Clock& clock_;
  const std::chrono::nanoseconds max_hold_;
  Mutex mu_;
  CondVar cv_;  // signalled when a submission ends or the run does
  std::array<Sub, kMaxSubmissions> subs_ EXLR8_GUARDED_BY(mu_){};
  std::size_t count_ EXLR8_GUARDED_BY(mu_) = 0;
  bool closed_ EXLR8_GUARDED_BY(mu_) = false;
  bool ended_ EXLR8_GUARDED_BY(mu_) = false;
  int steps_live_ EXLR8_GUARDED_BY(mu_) = 0;  // kStep requests handed out, not ended
  // When steps_live_ last became nonzero (NowNs); 0 while none.
  std::atomic<std::int64_t> hold_since_ns_{0};
  Status run_status_ EXLR8_GUARDED_BY(mu_);
};

FetchSession::FetchSession(RangeFetcher& fetcher, const std::atomic<bool>* cancel, int write_threads,
                           std::chrono::milliseconds max_hold)
    : fetcher_(fetcher), mux_(std::make_unique<Mux>(fetcher, fetcher.clock(), max_hold)) {
  offload_ = std::make_unique<OffloadConsumer>(
      *mux_, fetcher_, kQueuedBytes, [mux = mux_.get()](std::uint64_t id) { return mux->Lane(id); }, write_threads);
  thread_ = std::thread([this, cancel] {
    pthread_setname_np(pthread_self(), "exlr8-fetch");  // for top -H, perf, gdb
    RunFetch(cancel);
  });
}

FetchSession::~FetchSession() {
  if (thread_.joinable()) Abort();
}

void FetchSession::RunFetch(const std::atomic<bool>* cancel) {
  Status s = fetcher_.Run(*offload_, cancel);
  offload_->Drain();  // every callback has run before anyone is told
  mux_->SetEnded(std::move(s));
}

FetchSession::Ticket FetchSession::Submit(RangeConsumer& consumer, Priority priority, int cap) {
  return mux_->Add(consumer, priority, cap);
}

Status FetchSession::Wait(Ticket ticket) { return mux_->Wait(ticket); }

Status FetchSession::Finish() {
  mux_->Close();
  if (thread_.joinable()) thread_.join();
  return mux_->run_status();
}

void FetchSession::Abort() {
  fetcher_.Cancel();
  mux_->Close();
  if (thread_.joinable()) thread_.join();
}

}  // namespace exlr8
