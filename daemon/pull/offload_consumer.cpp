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
constexpr std::size_t kMaxSpareBuffers = 64;  // 16 MiB at most
}  // namespace

OffloadConsumer::OffloadConsumer(RangeConsumer& inner, RangeFetcher& fetcher, std::size_t max_queued_bytes,
                                 std::function<bool(std::uint64_t)> urgent)
    : inner_(inner), fetcher_(fetcher), max_queued_bytes_(max_queued_bytes), urgent_(std::move(urgent)) {
  worker_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "exlr8-write");
    Loop();
  });
}

OffloadConsumer::~OffloadConsumer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  worker_.join();
}

bool OffloadConsumer::NextRequest(RangeRequest* out) {
  std::lock_guard<std::mutex> lock(inner_mu_);
  return inner_.NextRequest(out);
}

bool OffloadConsumer::MayHaveMore() {
  std::lock_guard<std::mutex> lock(inner_mu_);
  return inner_.MayHaveMore();
}

OffloadConsumer::Lane& OffloadConsumer::LaneOf(std::uint64_t id) {
  return lanes_[urgent_ && urgent_(id) ? kUrgent : kNormal];
}

bool OffloadConsumer::ReadyFor(std::uint64_t id, std::size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (urgent_ && urgent_(id)) return true;
  const Lane& lane = LaneOf(id);
  return lane.queued_bytes == 0 || lane.queued_bytes + bytes <= max_queued_bytes_;
}

Status OffloadConsumer::OnData(std::uint64_t id, std::uint64_t offset, std::span<const std::byte> bytes) {
  std::unique_lock<std::mutex> lock(mu_);
  if (auto it = failed_.find(id); it != failed_.end()) return it->second;
  Lane& lane = LaneOf(id);
  // Backpressure: wait for room in this lane, but never for a chunk larger
  // than the whole budget once the lane is empty.
  if (lane.queued_bytes != 0 && lane.queued_bytes + bytes.size() > max_queued_bytes_) {
    producer_waiting_ = true;
    space_cv_.wait(lock, [&] {
      return lane.queued_bytes == 0 || lane.queued_bytes + bytes.size() <= max_queued_bytes_;
    });
    producer_waiting_ = false;
  }
  lane.queued_bytes += bytes.size();
  peak_queued_bytes_ = std::max(peak_queued_bytes_, lanes_[0].queued_bytes + lanes_[1].queued_bytes);
  if (!lane.queue.empty()) {
    Message& last = lane.queue.back();
    if (last.op == Op::kData && last.id == id && last.offset + last.bytes.size() == offset &&
        last.bytes.size() + bytes.size() <= kMessageBytes) {
      last.bytes.insert(last.bytes.end(), bytes.begin(), bytes.end());  // within capacity: no allocation
      return Status::Ok();  // the worker was woken for `last` already
    }
  }
  Message m{Op::kData, id, offset, {}, Status::Ok()};
  if (!spare_.empty()) {
    m.bytes = std::move(spare_.back());
    spare_.pop_back();
  }
  m.bytes.reserve(std::max(kMessageBytes, bytes.size()));
  m.bytes.assign(bytes.begin(), bytes.end());
  lane.queue.push_back(std::move(m));
  const bool wake = worker_idle_;
  lock.unlock();
  if (wake) work_cv_.notify_one();
  return Status::Ok();
}

RangeVerdict OffloadConsumer::OnComplete(std::uint64_t id) {
  Push({Op::kComplete, id, 0, {}, Status::Ok()});
  return RangeVerdict::Pending();
}

void OffloadConsumer::OnReset(std::uint64_t id) { Push({Op::kReset, id, 0, {}, Status::Ok()}); }

void OffloadConsumer::OnFailed(std::uint64_t id, const Status& status) {
  Push({Op::kFailed, id, 0, {}, status});
}

void OffloadConsumer::Push(Message m) {
  bool wake;
  {
    std::lock_guard<std::mutex> lock(mu_);
    LaneOf(m.id).queue.push_back(std::move(m));
    wake = worker_idle_;
  }
  if (wake) work_cv_.notify_one();
}

void OffloadConsumer::Drain() {
  std::unique_lock<std::mutex> lock(mu_);
  producer_waiting_ = true;
  space_cv_.wait(lock, [&] { return lanes_[0].queue.empty() && lanes_[1].queue.empty() && !busy_; });
  producer_waiting_ = false;
}

std::size_t OffloadConsumer::peak_queued_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_queued_bytes_;
}

void OffloadConsumer::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    auto empty = [&] { return lanes_[0].queue.empty() && lanes_[1].queue.empty(); };
    if (empty() && !stop_) {
      worker_idle_ = true;
      work_cv_.wait(lock, [&] { return stop_ || !empty(); });
      worker_idle_ = false;
    }
    if (empty()) return;  // stop_ and nothing left
    // Urgent work first: a foreground step's completion must not wait
    // behind megabytes of background file data.
    Lane& lane = lanes_[kUrgent].queue.empty() ? lanes_[kNormal] : lanes_[kUrgent];
    Message m = std::move(lane.queue.front());
    lane.queue.pop_front();
    busy_ = true;
    lock.unlock();
    Handle(m);
    lock.lock();
    busy_ = false;
    if (m.op == Op::kData) {
      lane.queued_bytes -= m.bytes.size();
      if (spare_.size() < kMaxSpareBuffers && m.bytes.capacity() <= kMessageBytes) spare_.push_back(std::move(m.bytes));
    }
    // Producers wait only when the queue is full, or in Drain.
    if (producer_waiting_) space_cv_.notify_all();
  }
}

void OffloadConsumer::Handle(Message& m) {
  // The error the worker met earlier for this request, if any.
  auto failure = [&]() -> std::optional<Status> {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = failed_.find(m.id);
    if (it == failed_.end()) return std::nullopt;
    return it->second;
  };
  auto forget_failure = [&] {
    std::lock_guard<std::mutex> lock(mu_);
    failed_.erase(m.id);
  };
  switch (m.op) {
    case Op::kData: {
      if (failure()) return;  // the request is failing; drop its bytes
      Status s;
      {
        std::lock_guard<std::mutex> lock(inner_mu_);
        s = inner_.OnData(m.id, m.offset, m.bytes);
      }
      if (!s.ok()) {
        std::lock_guard<std::mutex> lock(mu_);
        failed_.emplace(m.id, std::move(s));
      }
      return;
    }
    case Op::kComplete: {
      if (auto f = failure()) {
        forget_failure();
        fetcher_.Deliver(m.id, RangeVerdict::Fail(std::move(*f)));
        return;
      }
      RangeVerdict v;
      {
        std::lock_guard<std::mutex> lock(inner_mu_);
        v = inner_.OnComplete(m.id);
      }
      if (v.kind == RangeVerdict::Kind::kPending)  // nested offloading is not supported
        v = RangeVerdict::Fail(InternalError("offloaded consumer answered Pending"));
      fetcher_.Deliver(m.id, std::move(v));
      return;
    }
    case Op::kReset: {
      std::lock_guard<std::mutex> lock(inner_mu_);
      inner_.OnReset(m.id);
      return;
    }
    case Op::kFailed: {
      forget_failure();
      std::lock_guard<std::mutex> lock(inner_mu_);
      inner_.OnFailed(m.id, m.status);
      return;
    }
  }
}

}  // namespace exlr8
