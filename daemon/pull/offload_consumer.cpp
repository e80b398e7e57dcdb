#include "daemon/pull/offload_consumer.h"

#include <pthread.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>

namespace exlr8 {

namespace {
// libcurl hands over at most 16 KiB per write callback (CURL_MAX_WRITE_SIZE),
// however large its receive buffer; consecutive chunks of one request are
// merged into messages of up to this size, so the worker makes one pwrite
// and one wake-up per 256 KiB instead of per 16 KiB.
constexpr std::size_t kMessageBytes = 256 * 1024;
// Recycled buffers kept beyond this are freed.
constexpr std::size_t kMaxSpareBuffers = 32;  // 8 MiB at most
}  // namespace

OffloadConsumer::OffloadConsumer(RangeConsumer& inner, RangeFetcher& fetcher, std::size_t max_queued_bytes,
                                 std::function<int(std::uint64_t)> lane, int workers)
    : inner_(inner),
      fetcher_(fetcher),
      max_queued_bytes_(max_queued_bytes),
      lane_(std::move(lane)),
      serialize_(workers <= 1) {
  const int n = std::max(workers, 1);
  for (int i = 0; i < n; ++i) workers_.push_back(std::make_unique<Worker>());
  for (auto& w : workers_)
    w->thread = std::thread([this, worker = w.get()] {
      pthread_setname_np(pthread_self(), "exlr8-write");
      Loop(*worker);
    });
}

OffloadConsumer::~OffloadConsumer() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  for (auto& w : workers_) w->cv.SignalAll();
  for (auto& w : workers_) w->thread.join();
}

bool OffloadConsumer::NextRequest(RangeRequest* out) {
  MutexLock lock(&inner_mu_);
  return inner_.NextRequest(out);
}

bool OffloadConsumer::MayHaveMore() {
  MutexLock lock(&inner_mu_);
  return inner_.MayHaveMore();
}

// A conditional lock, which the analysis cannot follow; inner_mu_ guards
// calls, not fields, so nothing it checks is lost.
template <typename Call>
auto OffloadConsumer::CallInner(Call call) EXLR8_NO_THREAD_SAFETY_ANALYSIS {
  if (!serialize_) return call();
  MutexLock lock(&inner_mu_);
  return call();
}

std::size_t OffloadConsumer::LaneIndex(std::uint64_t id) const {
  return lane_ ? static_cast<std::size_t>(std::clamp(lane_(id), 0, kLanes - 1)) : 0;
}

bool OffloadConsumer::Idle() const {
  return std::all_of(workers_.begin(), workers_.end(), [](const auto& w) { return w->Empty() && !w->busy; });
}

bool OffloadConsumer::ReadyFor(std::uint64_t id, std::size_t bytes) {
  if (LaneIndex(id) != 0) return true;  // those wait in OnData instead
  const std::size_t queued = queued_bytes_[0].load(std::memory_order_relaxed);
  return (queued == 0 || queued + bytes <= max_queued_bytes_) && inner_.ReadyFor(id, bytes);
}

Status OffloadConsumer::OnData(std::uint64_t id, std::uint64_t offset, std::span<const std::byte> bytes) {
  if (failed_count_.load(std::memory_order_acquire) != 0) {
    MutexLock lock(&mu_);
    if (auto it = failed_.find(id); it != failed_.end()) return it->second;
  }
  Open& o = open_[id];
  if (!o.bytes.empty() && (o.offset + o.bytes.size() != offset || o.bytes.size() + bytes.size() > kMessageBytes))
    PushData(id, o.bytes, o.offset, /*refill=*/true);
  if (o.bytes.empty()) {
    o.offset = offset;
    o.bytes.reserve(std::max(kMessageBytes, bytes.size()));
  }
  o.bytes.insert(o.bytes.end(), bytes.begin(), bytes.end());  // within capacity: no allocation
  if (o.bytes.size() >= kMessageBytes) PushData(id, o.bytes, o.offset, /*refill=*/true);
  return Status::Ok();
}

void OffloadConsumer::PushData(std::uint64_t id, std::vector<std::byte>& open, std::uint64_t open_offset,
                               bool refill) {
  if (open.empty()) return;
  const std::size_t lane = LaneIndex(id);
  std::atomic<std::size_t>& queued = queued_bytes_[lane];
  Worker& w = WorkerOf(id);
  bool wake;
  {
    MutexLock lock(&mu_);
    // Backpressure: wait for room in this lane, but never for a message
    // larger than the whole budget once the lane is empty.
    const std::size_t n = open.size();
    if (queued != 0 && queued + n > max_queued_bytes_) {
      producer_waiting_ = true;
      while (queued != 0 && queued + n > max_queued_bytes_) space_cv_.Wait(&mu_);
      producer_waiting_ = false;
    }
    queued += n;
    std::size_t total = 0;
    for (const auto& q : queued_bytes_) total += q;
    peak_queued_bytes_ = std::max(peak_queued_bytes_, total);
    w.lanes[lane].push_back(Message{Op::kData, id, open_offset, std::move(open), Status::Ok()});
    open = {};
    if (refill && !spare_.empty()) {  // the next message's buffer
      open = std::move(spare_.back());
      spare_.pop_back();
      open.clear();  // keeps the capacity
    }
    wake = w.idle;
  }
  if (wake) w.cv.Signal();
}

RangeVerdict OffloadConsumer::OnComplete(std::uint64_t id) {
  if (auto it = open_.find(id); it != open_.end()) {
    PushData(id, it->second.bytes, it->second.offset, /*refill=*/false);
    open_.erase(it);
  }
  Push({Op::kComplete, id, 0, {}, Status::Ok()});
  return RangeVerdict::Pending();
}

// Bytes not yet handed to the worker are dropped: the inner consumer forgets
// what it had of the request anyway.
void OffloadConsumer::OnReset(std::uint64_t id) {
  open_.erase(id);
  Push({Op::kReset, id, 0, {}, Status::Ok()});
}

void OffloadConsumer::OnFailed(std::uint64_t id, const Status& status) {
  open_.erase(id);
  Push({Op::kFailed, id, 0, {}, status});
}

void OffloadConsumer::Push(Message m) {
  Worker& w = WorkerOf(m.id);
  const std::size_t lane = LaneIndex(m.id);
  bool wake;
  {
    MutexLock lock(&mu_);
    w.lanes[lane].push_back(std::move(m));
    wake = w.idle;
  }
  if (wake) w.cv.Signal();
}

void OffloadConsumer::Drain() {
  MutexLock lock(&mu_);
  producer_waiting_ = true;
  while (!Idle()) space_cv_.Wait(&mu_);
  producer_waiting_ = false;
}

std::size_t OffloadConsumer::peak_queued_bytes() const {
  MutexLock lock(&mu_);
  return peak_queued_bytes_;
}

void OffloadConsumer::Loop(Worker& w) {
  mu_.Lock();
  while (true) {
    if (w.Empty() && !stop_) {
      w.idle = true;
      while (!stop_ && w.Empty()) w.cv.Wait(&mu_);
      w.idle = false;
    }
    if (w.Empty()) break;  // stop_ and nothing left
    // The highest lane first: a planner step's completion must not wait
    // behind megabytes of halves or background file data.
    std::size_t top = kLanes - 1;
    while (w.lanes[top].empty()) --top;
    Message m = std::move(w.lanes[top].front());
    w.lanes[top].pop_front();
    w.busy = true;
    mu_.Unlock();
    Handle(m);
    mu_.Lock();
    w.busy = false;
    if (m.op == Op::kData) {
      queued_bytes_[top] -= m.bytes.size();
      if (spare_.size() < kMaxSpareBuffers && m.bytes.capacity() <= kMessageBytes) spare_.push_back(std::move(m.bytes));
    }
    // Producers wait only when a lane is full, or in Drain.
    if (producer_waiting_) space_cv_.SignalAll();
  }
  mu_.Unlock();
}

std::optional<Status> OffloadConsumer::FailureOf(std::uint64_t id) {
  MutexLock lock(&mu_);
  auto it = failed_.find(id);
  if (it == failed_.end()) return std::nullopt;
  return it->second;
}

void OffloadConsumer::Handle(Message& m) {
  auto forget_failure = [&] {
    MutexLock lock(&mu_);
    failed_.erase(m.id);
    failed_count_.store(failed_.size(), std::memory_order_release);
  };
  switch (m.op) {
    case Op::kData: {
      if (FailureOf(m.id)) return;  // the request is failing; drop its bytes
      Status s = CallInner([&] { return inner_.OnData(m.id, m.offset, m.bytes); });
      if (!s.ok()) {
        MutexLock lock(&mu_);
        failed_.emplace(m.id, std::move(s));
        failed_count_.store(failed_.size(), std::memory_order_release);
      }
      return;
    }
    case Op::kComplete: {
      if (auto f = FailureOf(m.id)) {
        forget_failure();
        fetcher_.Deliver(m.id, RangeVerdict::Fail(std::move(*f)));
        return;
      }
      RangeVerdict v = CallInner([&] { return inner_.OnComplete(m.id); });
      if (v.kind == RangeVerdict::Kind::kPending)  // nested offloading is not supported
        v = RangeVerdict::Fail(InternalError("offloaded consumer answered Pending"));
      fetcher_.Deliver(m.id, std::move(v));
      return;
    }
    case Op::kReset:
      CallInner([&] { inner_.OnReset(m.id); });
      return;
    case Op::kFailed:
      forget_failure();
      CallInner([&] { inner_.OnFailed(m.id, m.status); });
      return;
  }
}

}  // namespace exlr8
