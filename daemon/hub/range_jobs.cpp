#include "daemon/hub/range_jobs.h"

#include "daemon/hub/hub_protocol.h"

namespace exlr8 {

FetchCounters FetchCounterCells::Snapshot() const {
  auto get = [](const std::atomic<std::uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  FetchCounters s;
  s.requests_started = get(requests_started);
  s.requests_done = get(requests_done);
  s.requests_failed = get(requests_failed);
  s.transfers = get(transfers);
  s.retries = get(retries);
  s.resumes = get(resumes);
  s.bytes_received = get(bytes_received);
  s.bytes_discarded = get(bytes_discarded);
  s.resolves = get(resolves);
  s.reresolves = get(reresolves);
  s.rate_limited = get(rate_limited);
  s.unavailable = get(unavailable);
  s.ignored_range = get(ignored_range);
  s.bad_answers = get(bad_answers);
  s.overlong_bodies = get(overlong_bodies);
  s.refetches = get(refetches);
  s.active_transfers = get(active_transfers);
  s.concurrency_limit = get(concurrency_limit);
  s.concurrency_peak = get(concurrency_peak);
  s.concurrency_backoffs = get(concurrency_backoffs);
  s.h2_streams = get(h2_streams);
  return s;
}

RangeJobs::RangeJobs(const HubClient& hub, TransferScheduler& sched, FileResolver& resolver,
                     FetchCounterCells& counters, int max_refetches, bool stop_on_failure)
    : hub_(hub),
      sched_(sched),
      resolver_(resolver),
      counters_(counters),
      max_refetches_(max_refetches),
      stop_on_failure_(stop_on_failure) {}

void RangeJobs::StartRun(RangeConsumer* consumer, std::size_t capacity) {
  consumer_ = consumer;
  jobs_.assign(capacity, Job());
  free_.clear();
  for (std::size_t i = capacity; i-- > 0;) free_.push_back(static_cast<std::uint32_t>(i));
  verifying_.clear();
  {
    MutexLock lock(&verdict_mu_);
    delivered_.clear();  // stale: from an earlier Run
  }
  source_done_ = stopping_ = false;
  failed_this_run_ = 0;
  first_failure_ = Status::Ok();
}

Status RangeJobs::RunResult() const {
  if (failed_this_run_ == 0) return Status::Ok();
  return Status(first_failure_.code(),
                first_failure_.message() + " (" + std::to_string(failed_this_run_) + " request(s) failed)");
}

std::string RangeJobs::Describe(std::uint32_t ji) const {
  const Job& j = jobs_[ji];
  std::string s = j.req.label.empty() ? std::string("range") : j.req.label;
  s += ": " + hub_.DescribeFile(j.req.path) + " bytes=" + std::to_string(j.req.offset) + "-" +
       std::to_string(j.req.offset + j.req.length - 1);
  return s;
}

void RangeJobs::PullRequests() {
  while (!source_done_ && !stopping_ && !free_.empty()) {
    const std::uint32_t ji = free_.back();
    Job& j = jobs_[ji];
    if (!consumer_->NextRequest(&j.req)) {
      if (!consumer_->MayHaveMore()) source_done_ = true;
      return;
    }
    free_.pop_back();
    FetchCounterCells::Inc(counters_.requests_started);
    j.delivered = 0;
    j.attempts = j.refetches = j.throttled = 0;
    if (j.req.length == 0 || j.req.offset > kMaxHubFileSize ||
        j.req.length > kMaxHubFileSize - j.req.offset) {
      j.file = kNoFile;
      Fail(ji, InvalidArgumentError((j.req.label.empty() ? std::string("range") : j.req.label) +
                                    ": bad range offset " + std::to_string(j.req.offset) + " length " +
                                    std::to_string(j.req.length)));
      continue;
    }
    if (Status s = ValidateHubPath(j.req.path); !s.ok()) {
      Fail(ji, Status(StatusCode::kInvalidArgument,
                      (j.req.label.empty() ? std::string("range") : j.req.label) + ": " + s.message()));
      continue;
    }
    j.file = resolver_.FileFor(j.req.path);
    MakeReady(ji);
  }
}

void RangeJobs::MakeReady(std::uint32_t ji) {
  jobs_[ji].state = Job::State::kReady;
  sched_.MakeReady(ji, jobs_[ji].req.priority);
}

void RangeJobs::PromoteDue() {
  sched_.PromoteDue([this](std::uint32_t ji) {
    if (jobs_[ji].state != Job::State::kBackoff) return false;
    jobs_[ji].state = Job::State::kReady;
    return true;
  });
}

void RangeJobs::Retry(std::uint32_t ji, const Status& error) {
  Job& j = jobs_[ji];
  ++j.attempts;
  const std::optional<Clock::TimePoint> when = sched_.AfterFailedTry(j.attempts);
  if (!when) {
    Fail(ji, Status(error.code(), Describe(ji) + ": failed after " + std::to_string(j.attempts) +
                                      " attempts; last error: " + error.message()));
    return;
  }
  FetchCounterCells::Inc(counters_.retries);
  if (j.delivered > 0) FetchCounterCells::Inc(counters_.resumes);
  RetryAt(ji, *when);
}

void RangeJobs::RetryAt(std::uint32_t ji, Clock::TimePoint when) {
  jobs_[ji].state = Job::State::kBackoff;
  sched_.RetryAt(ji, jobs_[ji].req.priority, when);
}

void RangeJobs::Release(std::uint32_t ji) {
  Job& j = jobs_[ji];
  j.state = Job::State::kFree;
  j.req.path.clear();
  j.req.label.clear();
  free_.push_back(ji);
}

void RangeJobs::Fail(std::uint32_t ji, const Status& status) {
  Job& j = jobs_[ji];
  FetchCounterCells::Inc(counters_.requests_failed);
  ++failed_this_run_;
  if (first_failure_.ok()) first_failure_ = status;
  consumer_->OnFailed(j.req.id, status);
  Release(ji);
  if (stop_on_failure_) stopping_ = true;
}

void RangeJobs::Complete(std::uint32_t ji) {
  Job& j = jobs_[ji];
  RangeVerdict v = consumer_->OnComplete(j.req.id);
  if (v.kind == RangeVerdict::Kind::kPending) {
    j.state = Job::State::kVerifying;
    verifying_[j.req.id] = ji;
    return;
  }
  ApplyVerdict(ji, std::move(v));
}

void RangeJobs::Deliver(std::uint64_t id, RangeVerdict verdict) {
  MutexLock lock(&verdict_mu_);
  delivered_.emplace_back(id, std::move(verdict));
}

void RangeJobs::ApplyDelivered(const Status* cancelled) {
  std::vector<std::pair<std::uint64_t, RangeVerdict>> batch;
  {
    MutexLock lock(&verdict_mu_);
    if (delivered_.empty()) return;
    batch.swap(delivered_);
  }
  for (auto& [id, v] : batch) {
    auto it = verifying_.find(id);
    if (it == verifying_.end()) continue;  // ended meanwhile (cancelled)
    const std::uint32_t ji = it->second;
    verifying_.erase(it);
    if (v.kind == RangeVerdict::Kind::kPending) {
      Fail(ji, InternalError(Describe(ji) + ": consumer delivered a pending verdict"));
      continue;
    }
    if (cancelled != nullptr && v.kind == RangeVerdict::Kind::kRefetch) {
      Fail(ji, cancelled->WithContext(Describe(ji)));
      continue;
    }
    ApplyVerdict(ji, std::move(v));
  }
}

void RangeJobs::ApplyVerdict(std::uint32_t ji, RangeVerdict v) {
  Job& j = jobs_[ji];
  switch (v.kind) {
    case RangeVerdict::Kind::kAccept:
      FetchCounterCells::Inc(counters_.requests_done);
      Release(ji);
      return;
    case RangeVerdict::Kind::kFail:
      Fail(ji, v.status.ok() ? InternalError(Describe(ji) + ": consumer failed the range") : v.status);
      return;
    case RangeVerdict::Kind::kRefetch:
      if (j.refetches >= max_refetches_) {
        std::string msg =
            Describe(ji) + ": data failed verification " + std::to_string(j.refetches + 1) + " times";
        if (!v.status.ok()) msg += " (" + v.status.message() + ")";
        Fail(ji, CorruptionError(std::move(msg)));
        return;
      }
      ++j.refetches;
      FetchCounterCells::Inc(counters_.refetches);
      consumer_->OnReset(j.req.id);
      j.delivered = 0;
      j.attempts = 0;
      MakeReady(ji);
      return;
    case RangeVerdict::Kind::kPending:
      break;  // handled by the callers
  }
}

void RangeJobs::FailAllLive(const Status& why) {
  for (std::uint32_t ji = 0; ji < jobs_.size(); ++ji) {
    // A job whose verdict is pending keeps it: the consumer may already
    // have accepted it (ApplyDelivered applies it), so it ends exactly once.
    if (jobs_[ji].state == Job::State::kFree || jobs_[ji].state == Job::State::kVerifying) continue;
    FetchCounterCells::Inc(counters_.requests_failed);
    consumer_->OnFailed(jobs_[ji].req.id, why.WithContext(Describe(ji)));
    Release(ji);
  }
}

}  // namespace exlr8
