// RangeFetcher::Impl: the driver that moves the live requests along.
//
// What it owns: the run's loop, the resolves in flight and what their
// answers mean, the start of each range transfer and what its body and end
// mean for its request, the rate pausing, and the cancel flags. The state
// lives in the pieces it drives, each owning its own: RangeJobs (the live
// requests, their endings, the verdicts other threads Deliver, the
// counters), TransferSlots (the transfers in flight and the transport),
// TransferScheduler (the ready line, retry timers, backoff), FileResolver
// (which URL a file's ranges go to), AnswerChecker (judging an answer).
// About 570 lines: every function here moves one transfer between those
// pieces (start, body, end, verdict), and what is left is that hand-off.
#include "daemon/hub/range_fetcher.h"

#include <algorithm>
#include <optional>
#include <string_view>
#include <utility>

#include "daemon/base/clock.h"
#include "daemon/base/mutex.h"
#include "daemon/hub/answer_checker.h"
#include "daemon/hub/concurrency_controller.h"
#include "daemon/hub/connection_spread.h"
#include "daemon/hub/file_resolver.h"
#include "daemon/hub/http_common.h"
#include "daemon/hub/http_transport.h"
#include "daemon/hub/range_jobs.h"
#include "daemon/hub/transfer_scheduler.h"
#include "daemon/hub/transfer_slots.h"

namespace exlr8 {
namespace {

using std::chrono::milliseconds;
using Job = RangeJobs::Job;
using Slot = TransferSlots::Slot;

RangeFetcherOptions Normalized(RangeFetcherOptions o) {
  o.max_parallel = std::max(1, o.max_parallel);
  o.adaptive_floor = std::clamp(o.adaptive_floor, 1, o.max_parallel);
  o.adaptive_initial = std::clamp(o.adaptive_initial, o.adaptive_floor, o.max_parallel);
  if (o.h2_streams_per_connection <= 0) o.h2_streams_per_connection = o.max_parallel;
  if (o.short_path_h2_streams <= 0) o.short_path_h2_streams = o.max_parallel;
  o.max_parallel_resolves = std::clamp(o.max_parallel_resolves, 1, o.max_parallel);
  o.max_queued = std::max(0, o.max_queued);
  o.max_attempts = std::max(1, o.max_attempts);
  return o;
}

FileResolver::Options ResolverOptionsOf(const RangeFetcherOptions& o) {
  FileResolver::Options r;
  r.max_parallel_resolves = o.max_parallel_resolves;
  r.max_attempts = o.max_attempts;
  r.max_reresolves_per_file = o.max_reresolves_per_file;
  r.max_throttle_wait = o.max_throttle_wait;
  return r;
}

RetryPolicy RetryPolicyOf(const RangeFetcherOptions& o) {
  RetryPolicy p;
  p.max_attempts = o.max_attempts;
  p.max_throttled = o.max_throttled;
  p.retry_base = o.retry_base;
  p.retry_cap = o.retry_cap;
  p.max_throttle_wait = o.max_throttle_wait;
  return p;
}

CurlTransport::Options CurlOptionsOf(const RangeFetcherOptions& o) {
  CurlTransport::Options co;
  co.max_transfers = o.max_parallel;
  co.extra_connections = o.max_parallel_resolves;
  co.h2_streams_per_connection = o.h2_streams_per_connection;
  return co;
}

void Inc(std::atomic<std::uint64_t>& c, std::uint64_t n = 1) { FetchCounterCells::Inc(c, n); }

std::optional<ConcurrencyController> ControllerOf(const RangeFetcherOptions& o, Clock& clock) {
  if (!o.adaptive) return std::nullopt;
  ConcurrencyOptions c;
  c.floor = o.adaptive_floor;
  c.initial = o.adaptive_initial;
  c.ceiling = o.max_parallel;
  return std::optional<ConcurrencyController>(std::in_place, clock, c);
}

std::optional<ConnectionSpread> SpreadOf(const RangeFetcherOptions& o) {
  if (!o.h2_streams_by_path) return std::nullopt;
  ConnectionSpread::Options s;
  s.long_path_streams = o.h2_streams_per_connection;
  s.short_path_streams = o.short_path_h2_streams;
  s.short_path = o.short_path_wait;
  return std::optional<ConnectionSpread>(std::in_place, s);
}

}  // namespace

struct RangeFetcher::Impl final : TransferSlots::Listener {
  using FileState = FileResolver::File;

  Impl(const HubClient& h, RangeFetcherOptions o)
      : hub(h),
        opts(Normalized(std::move(o))),
        clock(opts.clock != nullptr ? opts.clock : &Clock::Real()),
        sched(*clock, RetryPolicyOf(opts)),
        resolver(FileResolver::Naming{[&h](std::string_view p) { return h.ResolveUrl(p); },
                                      [&h](std::string_view p) { return h.DescribeFile(p); }},
                 sched, ResolverOptionsOf(opts)),
        jobs(h, sched, resolver, counters, opts.max_refetches, opts.stop_on_failure),
        slots(opts.transport, hub.http_settings(), CurlOptionsOf(opts), this),
        concurrency(ControllerOf(opts, *clock)),
        spread(SpreadOf(opts)) {
    counters.h2_streams.store(static_cast<std::uint64_t>(opts.h2_streams_per_connection), std::memory_order_relaxed);
    PublishConcurrency();
  }

  const HubClient& hub;
  const RangeFetcherOptions opts;
  Clock* const clock;  // opts.clock, or the real one
  FetchCounterCells counters;
  std::atomic<bool> cancel_flag{false};
  std::atomic<bool> user_cancel{false};  // Cancel(), not Abort()
  Mutex abort_mu;
  Status abort_reason EXLR8_GUARDED_BY(abort_mu);  // the first Abort's
  Status cancel_reason;                            // why CancelAll ended the run

  // The ready line, the retry timers, the resolve pause and the backoff.
  TransferScheduler sched;
  // Every file's URL and resolve state; persists across runs.
  FileResolver resolver;
  // The live requests of the run.
  RangeJobs jobs;
  // Declared last: destroyed first, abandoning its transfers while the
  // rest they point into is still there.
  TransferSlots slots;
  // The limit on transfers in flight, when it adapts; persists across runs.
  std::optional<ConcurrencyController> concurrency;
  int transport_limit = 0;  // what the transport was last told
  // Streams per connection by the path's round trip, when nobody set them;
  // persists across runs.
  std::optional<ConnectionSpread> spread;
  int transport_streams = opts.h2_streams_per_connection;  // what the transport was last told
  // The bandwidth limit this run honours (options' shared one, or its own);
  // null = none.
  std::shared_ptr<RateLimiter> rate;

  RangeConsumer& consumer() { return *consumer_; }

  // Transfers (ranges and resolves) that may be in flight now.
  int Limit() const { return concurrency ? concurrency->limit() : opts.max_parallel; }
  bool Full() const { return slots.busy() >= Limit(); }

  void PublishConcurrency() {
    if (concurrency && concurrency->limit() != transport_limit) {
      transport_limit = concurrency->limit();
      slots.transport().SetTransferLimit(transport_limit);
    }
    const auto limit = static_cast<std::uint64_t>(Limit());
    counters.concurrency_limit.store(limit, std::memory_order_relaxed);
    counters.concurrency_peak.store(concurrency ? static_cast<std::uint64_t>(concurrency->peak()) : limit,
                                    std::memory_order_relaxed);
    counters.concurrency_backoffs.store(concurrency ? concurrency->backoffs() : 0, std::memory_order_relaxed);
  }
  RangeConsumer* consumer_ = nullptr;

  // ------------------------------------------------------------ resolves

  // Ends the requests a resolve's end decided on.
  void Apply(const FileResolver::Outcome& out) {
    for (std::uint32_t ji : out.ready) jobs.MakeReady(ji);
    for (std::uint32_t ji : out.failed) jobs.Fail(ji, out.failure.WithContext(jobs.Describe(ji)));
  }

  void StartResolves() {
    while (resolver.CanStartResolve() && !jobs.stopping()) {
      if (Full()) return;
      const std::optional<std::uint32_t> fi = resolver.StartNextResolve();
      if (!fi) return;
      const FileState& f = resolver.file(*fi);
      Slot* t = slots.Take(f.next_url);
      t->is_resolve = true;
      t->index = *fi;
      HttpRequest req;
      req.url = t->url;
      req.head_only = true;
      Inc(counters.resolves);
      hub.CountResolve();
      if (f.ever_resolved && f.hops == 0) Inc(counters.reresolves);
      StartTransfer(*t, req);
    }
  }

  void OnResolveDone(Slot& t, const TransferEnd& end) {
    const std::uint32_t fi = t.index;
    const std::string& path = resolver.file(fi).path;
    HubClient::ResolveStep step;
    if (!end.ok) {
      step.status = IOError(hub.DescribeFile(path) + ": resolve: " + end.error);
      step.retryable = !end.permanent;  // another try meets the same certificate
    } else {
      step = hub.InterpretResolve(path, t.url, t.head, clock->Now(), clock->WallNow());
      if (!step.resolved && !step.follow && t.head.status == 429) {
        Inc(counters.rate_limited);
        hub.CountRateLimited();
        if (concurrency) concurrency->Throttled();
      }
    }
    Apply(resolver.OnResolveEnd(fi, std::move(step)));
  }

  // --------------------------------------------------------------- ranges

  void StartTransfer(Slot& t, const HttpRequest& req) {
    Inc(counters.active_transfers);
    slots.Start(t, req);
  }

  void StartRange(std::uint32_t ji, Slot& t) {
    Job& j = jobs.job(ji);
    const FileState& f = resolver.file(j.file);
    j.state = Job::State::kRunning;
    t.is_resolve = false;
    t.index = ji;
    t.generation = f.generation;
    RangeExpectation want;
    want.offset = j.req.offset;
    want.length = j.req.length;
    want.delivered = j.delivered;
    want.file_size = f.size;
    want.on_hub = f.on_hub;
    want.presumed_url = f.presumed;
    want.pinned_commit = hub.commit();
    want.token_sent = f.on_hub && hub.has_token();
    want.token = hub.http_settings().token;
    t.checker = AnswerChecker(want);
    HttpRequest req;
    req.url = t.url;
    req.has_range = true;
    req.range_first = t.checker.first();
    req.range_last = t.checker.last();
    req.bulk = opts.bulk_range_bytes > 0 && req.range_last - req.range_first + 1 >= opts.bulk_range_bytes &&
               !(spread && spread->short_path());
    Inc(counters.transfers);
    if (f.on_hub) {  // a GET of the hub's /resolve/ URL: the Hub rate-limits these too
      Inc(counters.resolves);
      hub.CountResolve();
    }
    StartTransfer(t, req);
  }

  void StartRanges(Clock::TimePoint now) {
    while (sched.HasReady() && !jobs.stopping()) {
      const std::uint32_t ji = sched.FrontReady();
      Job& j = jobs.job(ji);
      // A failed re-resolve fails the file; the switch then fails the job.
      resolver.ExpireIfDue(j.file, now);
      const FileState& f = resolver.file(j.file);
      switch (f.state) {
        case FileState::State::kReady: {
          if (f.size && j.req.offset + j.req.length > *f.size) {
            sched.PopReady();
            // The server's own answer disagrees with the listing the plan
            // came from: Corruption (exit 3), not a usage error.
            jobs.Fail(ji, CorruptionError(jobs.Describe(ji) + ": range ends at " +
                                          std::to_string(j.req.offset + j.req.length) +
                                          ", past the file size " + std::to_string(*f.size) +
                                          " that its resolve answered (the hub's listing says otherwise)"));
            continue;
          }
          if (Full()) return;
          Slot* t = slots.Take(f.url);
          if (t == nullptr) return;
          sched.PopReady();
          StartRange(ji, *t);
          if (concurrency) concurrency->InFlight(slots.busy());
          continue;
        }
        case FileState::State::kFailed:
          sched.PopReady();
          jobs.Fail(ji, f.failure.WithContext(jobs.Describe(ji)));
          continue;
        case FileState::State::kUnresolved:
        case FileState::State::kQueued:
        case FileState::State::kResolving:
          sched.PopReady();
          j.state = Job::State::kWaitFile;
          resolver.Wait(j.file, ji);
          StartResolves();
          continue;
      }
    }
  }

  bool OverBudget(Clock::TimePoint now) const { return rate != nullptr && rate->Exhausted(now); }

  // A body chunk of a transfer (of a range, or an error body).
  HttpTransfer::Body OnSlotBody(Slot& t, const char* p, std::size_t n) override {
    using Body = HttpTransfer::Body;
    if (t.is_resolve) return Body::kContinue;  // HEAD: no body expected
    if (rate != nullptr && !t.paused && OverBudget(clock->Now())) {
      // The transport keeps this chunk and stops reading the socket; TCP
      // flow control then slows the sender. ResumePaused lets it go on.
      slots.Pause(t);
      return Body::kPause;
    }
    Job& j = jobs.job(t.index);
    // Only a transfer with a connection of its own is held back for its
    // consumer: pausing one stream of a shared HTTP/2 connection stalls the
    // others with it (the transport stops reading the connection, or
    // buffers the stream). A multiplexed transfer's OnData applies the backpressure.
    if (!t.checker.discarding() && !t.multiplexed && !consumer().ReadyFor(j.req.id, n)) {
      if (concurrency) concurrency->Pressure();
      slots.Pause(t);  // ResumePaused offers the chunk again
      return Body::kPause;
    }
    t.checker.CountBody(n);
    if (concurrency) concurrency->Received(n);
    // Every byte off the wire counts against the limit, discarded ones too.
    if (rate != nullptr) rate->Consume(n, clock->Now());
    if (!t.checker.head_checked()) {
      if (t.head.status == 200) Inc(counters.ignored_range);
      if (t.checker.CheckHead(t.head) == AnswerChecker::Head::kBad) return Body::kStop;
    }
    if (t.checker.discarding()) return t.checker.error_body_too_long() ? Body::kStop : Body::kContinue;

    const AnswerChecker::Slice slice = t.checker.Plan(n);
    if (slice.skip > 0) Inc(counters.bytes_discarded, slice.skip);
    if (slice.take > 0) {
      Status s = consumer().OnData(
          j.req.id, t.checker.next_offset(),
          std::span<const std::byte>(reinterpret_cast<const std::byte*>(p + slice.skip), slice.take));
      if (!s.ok()) {
        t.consumer_error = std::move(s);
        return Body::kStop;
      }
      j.delivered += slice.take;
      Inc(counters.bytes_received, slice.take);
    }
    t.checker.Accept(slice);
    if (slice.beyond > 0) Inc(counters.bytes_discarded, slice.beyond);
    return slice.cut ? Body::kStop : Body::kContinue;
  }

  void OnRangeDone(Slot& t, const TransferEnd& end) {
    const std::uint32_t ji = t.index;
    Job& j = jobs.job(ji);
    if (t.checker.overlong()) Inc(counters.overlong_bodies);
    if (!t.consumer_error.ok()) {
      jobs.Fail(ji, t.consumer_error);
      return;
    }
    const long status = t.head.status;
    if (t.checker.complete() && (status == 200 || status == 206)) {
      jobs.Complete(ji);
      return;
    }
    AnswerVerdict v = t.checker.Finish(t.head, end, jobs.Describe(ji), clock->WallNow());
    const FileState& f = resolver.file(j.file);
    switch (v.kind) {
      case AnswerVerdict::Kind::kComplete:
        jobs.Complete(ji);
        return;
      case AnswerVerdict::Kind::kRetry:
        if (v.bad_answer) Inc(counters.bad_answers);
        if (status >= 500) Inc(counters.unavailable);
        if (concurrency && (!end.ok || status >= 500)) concurrency->Failed();
        jobs.Retry(ji, v.status);
        return;
      case AnswerVerdict::Kind::kFail:
        jobs.Fail(ji, v.status);
        return;
      case AnswerVerdict::Kind::kReresolve:
        // Not an attempt. A redirect where the hub was presumed to serve
        // the bytes is bounded since a resolved file is never presumed
        // again; a CDN's refusals are bounded by max_reresolves_per_file.
        // Only the first answer about the file's current URL acts on it.
        if (t.generation == f.generation && f.state == FileState::State::kReady) {
          if (IsRedirectStatus(status)) {
            resolver.Unpresume(j.file);
          } else if (!resolver.Invalidate(j.file, v.status.message())) {
            jobs.Fail(ji, f.failure.WithContext(jobs.Describe(ji)));
            return;
          }
        }
        jobs.MakeReady(ji);
        return;
      case AnswerVerdict::Kind::kThrottled: {
        if (status == 429)
          Inc(counters.rate_limited);
        else
          Inc(counters.unavailable);
        if (concurrency) concurrency->Throttled();
        if (!v.wait || *v.wait <= opts.max_throttle_wait) ++j.throttled;  // a wait too long fails anyway
        const TransferScheduler::Throttle next = sched.AfterThrottle(j.throttled, v.wait);
        switch (next.kind) {
          case TransferScheduler::Throttle::Kind::kWaitTooLong:
            jobs.Fail(ji, Status(v.status.code(),
                                 v.status.message() + WaitPastCap(*v.wait, opts.max_throttle_wait)));
            return;
          case TransferScheduler::Throttle::Kind::kTooOften:
            jobs.Fail(ji, Status(v.status.code(), v.status.message() + " (throttled " +
                                                      std::to_string(j.throttled) + " times)"));
            return;
          case TransferScheduler::Throttle::Kind::kRetryAt:
            break;
        }
        Inc(counters.retries);
        jobs.RetryAt(ji, next.when);
        return;
      }
    }
  }

  // A transfer ended (the transport calls this from Perform); its slot is
  // free again.
  void OnSlotDone(Slot& t, const TransferEnd& end) override {
    counters.active_transfers.fetch_sub(1, std::memory_order_relaxed);
    if (concurrency) concurrency->Ended();
    if (spread) {
      spread->Answered(!t.is_resolve, end.answer_wait);
      if (spread->streams() != transport_streams) {
        transport_streams = spread->streams();
        slots.transport().SetStreamsPerConnection(transport_streams);
        counters.h2_streams.store(static_cast<std::uint64_t>(transport_streams), std::memory_order_relaxed);
      }
    }
    if (t.is_resolve) {
      OnResolveDone(t, end);
    } else {
      OnRangeDone(t, end);
    }
  }

  // ------------------------------------------------------------- the loop

  void CancelAll(const Status& why) {
    const int abandoned = slots.AbandonAll();
    counters.active_transfers.fetch_sub(static_cast<std::uint64_t>(abandoned), std::memory_order_relaxed);
    resolver.CancelRun();
    sched.Clear();
    cancel_reason = why;
    jobs.FailAllLive(why);
  }

  // After a cancel: waits for the verdicts still pending (the consumer
  // promised them), then applies them; a Refetch ends the job instead.
  void AwaitVerdicts() {
    while (jobs.AnyVerifying()) {
      jobs.ApplyDelivered(&cancel_reason);
      if (!jobs.AnyVerifying()) break;
      (void)slots.transport().Wait(milliseconds(100));  // Deliver wakes it
    }
  }

  // Why the run stops now, if it does: a cancel, an abort, or a failure
  // with stop_on_failure.
  std::optional<Status> StopReason(const std::atomic<bool>* cancel, bool* cancelled) {
    const bool by_caller = user_cancel.load() || (cancel != nullptr && cancel->load());
    *cancelled = cancel_flag.load() || by_caller;
    if (!*cancelled && !jobs.stopping()) return std::nullopt;
    Status aborted;
    {
      MutexLock lock(&abort_mu);
      aborted = std::exchange(abort_reason, Status::Ok());
    }
    if (!*cancelled) return CancelledError("fetch stopped after an earlier failure");
    if (!by_caller && !aborted.ok())
      return Status(aborted.code(), "stopped after another request failed: " + aborted.message());
    return CancelledError("fetch cancelled");
  }

  Status Run(RangeConsumer& c, const std::atomic<bool>* cancel) {
    consumer_ = &c;
    jobs.StartRun(&c,
                  static_cast<std::size_t>(opts.max_parallel) + static_cast<std::size_t>(opts.max_queued));
    sched.Clear();
    resolver.StartRun();
    rate = opts.shared_rate;
    if (rate == nullptr && opts.max_bytes_per_second > 0)
      rate = std::make_shared<RateLimiter>(opts.max_bytes_per_second, *clock);

    Status result;
    while (true) {
      bool cancelled = false;
      if (std::optional<Status> why = StopReason(cancel, &cancelled)) {
        CancelAll(*why);
        if (cancelled) {
          cancel_flag.store(false);
          user_cancel.store(false);
          result = *why;
        }
        break;
      }
      const auto now = clock->Now();
      if (concurrency) {
        concurrency->Tick();
        PublishConcurrency();
      }
      jobs.ApplyDelivered();
      jobs.PullRequests();
      jobs.PromoteDue();
      StartResolves();
      StartRanges(now);
      if (!jobs.AnyLive() && slots.busy() == 0 && jobs.source_done()) break;
      if (jobs.stopping()) continue;

      slots.ResumePaused([&] { return !OverBudget(now); });

      const Result<int> done = slots.transport().Perform();
      if (!done.ok()) {
        result = done.status();
        CancelAll(result);
        break;
      }
      // Completions free slots and may end the run: loop before sleeping.
      if (*done > 0) continue;
      const int timeout =
          static_cast<int>(sched.PollTimeout(resolver.HasQueued(), slots.paused() > 0).count());
      if (timeout > 0) {
        const Status waited = slots.transport().Wait(milliseconds(timeout));
        if (!waited.ok()) {
          result = waited;
          CancelAll(result);
          break;
        }
      }
    }
    AwaitVerdicts();
    jobs.EndRun();
    consumer_ = nullptr;
    if (!result.ok()) return result;
    return jobs.RunResult();
  }
};

RangeFetcher::RangeFetcher(const HubClient& hub, RangeFetcherOptions options)
    : impl_(std::make_unique<Impl>(hub, std::move(options))) {}

RangeFetcher::~RangeFetcher() = default;

Status RangeFetcher::Run(RangeConsumer& consumer, const std::atomic<bool>* cancel) {
  return impl_->Run(consumer, cancel);
}

void RangeFetcher::Cancel() {
  impl_->user_cancel.store(true);
  impl_->cancel_flag.store(true);
  impl_->slots.transport().Wake();
}

void RangeFetcher::Abort(const Status& reason) {
  {
    MutexLock lock(&impl_->abort_mu);
    if (impl_->abort_reason.ok())
      impl_->abort_reason = reason.ok() ? CancelledError("fetch aborted") : reason;
  }
  impl_->cancel_flag.store(true);
  impl_->slots.transport().Wake();
}

void RangeFetcher::Wake() { impl_->slots.transport().Wake(); }

void RangeFetcher::ExpectServedByHub(const std::string& path, std::uint64_t size) {
  impl_->resolver.ExpectServedByHub(path, size);
}

void RangeFetcher::Deliver(std::uint64_t id, RangeVerdict verdict) {
  impl_->jobs.Deliver(id, std::move(verdict));
  impl_->slots.transport().Wake();
}

FetchCounters RangeFetcher::counters() const { return impl_->counters.Snapshot(); }

Clock& RangeFetcher::clock() const { return *impl_->clock; }

}  // namespace exlr8
