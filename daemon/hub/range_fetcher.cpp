// RangeFetcher::Impl: the live requests and the loop that drives them.
//
// What it owns: the job slots (one per live request, from NextRequest to
// its one ending), the transfer slots and the HttpTransport under them,
// the rate pausing, the counters, the cancel flags and the verdicts other
// threads Deliver. What it leaves to others: judging answers
// (AnswerChecker), when to retry (TransferScheduler), which URL a file's
// ranges go to (FileResolver), the network (HttpTransport; CurlTransport
// by default).
//
// Over 500 lines because what remains is one state machine: every
// transport callback, verdict and cancel moves a job between the same
// states and ends it through the same FailJob / ApplyVerdict, so the job
// table and those transitions stay together.
#include "daemon/hub/range_fetcher.h"

#include <algorithm>
#include <deque>
#include <limits>
#include <optional>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "daemon/base/clock.h"
#include "daemon/base/mutex.h"
#include "daemon/hub/answer_checker.h"
#include "daemon/hub/curl_transport.h"
#include "daemon/hub/file_resolver.h"
#include "daemon/hub/http_common.h"
#include "daemon/hub/http_transport.h"
#include "daemon/hub/hub_protocol.h"
#include "daemon/hub/transfer_scheduler.h"

namespace exlr8 {
namespace {

using std::chrono::milliseconds;

constexpr std::uint32_t kNone = std::numeric_limits<std::uint32_t>::max();

}  // namespace

struct RangeFetcher::Impl {
  using FileState = FileResolver::File;

  // ---- one live request ----
  struct Job {
    enum class State : std::uint8_t { kFree, kReady, kWaitFile, kBackoff, kRunning, kVerifying };
    State state = State::kFree;
    RangeRequest req;
    std::uint32_t file = kNone;
    std::uint64_t delivered = 0;  // bytes of this try given to OnData
    int attempts = 0;             // failed tries
    int refetches = 0;
    int throttled = 0;
  };

  // ---- one transfer slot: the receiving end of one request at a time ----
  struct Transfer final : HttpTransfer {
    Impl* impl = nullptr;
    bool busy = false;
    bool is_resolve = false;
    std::uint32_t index = kNone;  // job (range) or file (resolve)
    std::uint32_t generation = 0;
    std::string url;
    AnswerChecker checker;  // range transfers: judges the answer
    bool paused = false;    // held back (bandwidth limit, or a consumer not ready)
    Status consumer_error;

    Body OnBody(const char* p, std::size_t n) override { return impl->OnBody(*this, p, n); }
    void OnDone(const TransferEnd& end) override { impl->OnTransferDone(*this, end); }
  };

  struct Counters {
    std::atomic<std::uint64_t> requests_started{0}, requests_done{0}, requests_failed{0}, transfers{0},
        retries{0}, resumes{0}, bytes_received{0}, bytes_discarded{0}, resolves{0}, reresolves{0},
        rate_limited{0}, unavailable{0}, ignored_range{0}, bad_answers{0}, overlong_bodies{0}, refetches{0},
        active_transfers{0};
  };

  Impl(const HubClient& h, RangeFetcherOptions o)
      : hub(h),
        opts(Normalized(std::move(o))),
        clock(opts.clock != nullptr ? opts.clock : &Clock::Real()),
        sched(*clock, RetryPolicyOf(opts)),
        resolver(FileResolver::Naming{[&h](std::string_view p) { return h.ResolveUrl(p); },
                                      [&h](std::string_view p) { return h.DescribeFile(p); }},
                 sched, ResolverOptionsOf(opts)) {
    if (opts.transport != nullptr) {
      transport = opts.transport;
    } else {
      CurlTransport::Options co;
      co.max_transfers = opts.max_parallel;
      co.extra_connections = opts.max_parallel_resolves;
      co.h2_streams_per_connection = opts.h2_streams_per_connection;
      own_transport = std::make_unique<CurlTransport>(hub.http_settings(), co);
      transport = own_transport.get();
    }
    transfers.resize(static_cast<std::size_t>(opts.max_parallel));
    for (Transfer& t : transfers) t.impl = this;
  }

  static RangeFetcherOptions Normalized(RangeFetcherOptions o) {
    o.max_parallel = std::max(1, o.max_parallel);
    if (o.h2_streams_per_connection <= 0) o.h2_streams_per_connection = o.max_parallel;
    o.max_parallel_resolves = std::clamp(o.max_parallel_resolves, 1, o.max_parallel);
    o.max_queued = std::max(0, o.max_queued);
    o.max_attempts = std::max(1, o.max_attempts);
    return o;
  }

  static FileResolver::Options ResolverOptionsOf(const RangeFetcherOptions& o) {
    FileResolver::Options r;
    r.max_parallel_resolves = o.max_parallel_resolves;
    r.max_attempts = o.max_attempts;
    r.max_reresolves_per_file = o.max_reresolves_per_file;
    r.max_throttle_wait = o.max_throttle_wait;
    return r;
  }

  static RetryPolicy RetryPolicyOf(const RangeFetcherOptions& o) {
    RetryPolicy p;
    p.max_attempts = o.max_attempts;
    p.max_throttled = o.max_throttled;
    p.retry_base = o.retry_base;
    p.retry_cap = o.retry_cap;
    p.max_throttle_wait = o.max_throttle_wait;
    return p;
  }

  ~Impl() {
    for (Transfer& t : transfers)
      if (t.busy) transport->Abandon(&t);
  }

  const HubClient& hub;
  RangeFetcherOptions opts;
  Clock* clock;                                  // opts.clock, or the real one
  std::unique_ptr<HttpTransport> own_transport;  // when opts.transport is null
  HttpTransport* transport = nullptr;            // opts.transport, or own_transport
  std::vector<Transfer> transfers;
  int busy_transfers = 0;
  int paused_transfers = 0;
  Counters counters;
  std::atomic<bool> cancel_flag{false};
  std::atomic<bool> user_cancel{false};  // Cancel(), not Abort()
  Mutex abort_mu;
  Status abort_reason EXLR8_GUARDED_BY(abort_mu);  // the first Abort's

  // Verdicts handed over by Deliver (any thread), acted on by Run.
  Mutex verdict_mu;
  std::vector<std::pair<std::uint64_t, RangeVerdict>> delivered_verdicts EXLR8_GUARDED_BY(verdict_mu);
  // Jobs whose verdict is pending, by request id (Run's thread only).
  std::unordered_map<std::uint64_t, std::uint32_t> verifying;
  Status cancel_reason;  // why CancelAll ended the run

  // Per Run.
  RangeConsumer* consumer = nullptr;
  std::vector<Job> jobs;
  std::vector<std::uint32_t> free_jobs;
  // The ready line, the retry timers, the resolve pause and the backoff.
  TransferScheduler sched;
  // Every file's URL and resolve state; persists across runs.
  FileResolver resolver;
  bool source_done = false;
  bool stopping = false;
  std::uint64_t failed_this_run = 0;
  Status first_failure;
  // The bandwidth limit this run honours (options' shared one, or its own);
  // null = none.
  std::shared_ptr<RateLimiter> rate;

  // ---------------------------------------------------------------- helpers

  static void Inc(std::atomic<std::uint64_t>& c, std::uint64_t n = 1) {
    c.fetch_add(n, std::memory_order_relaxed);
  }

  std::string Describe(const Job& j) const {
    std::string s = j.req.label.empty() ? std::string("range") : j.req.label;
    s += ": " + hub.DescribeFile(j.req.path) + " bytes=" + std::to_string(j.req.offset) + "-" +
         std::to_string(j.req.offset + j.req.length - 1);
    return s;
  }

  milliseconds Backoff(int attempt) { return sched.Backoff(attempt); }

  Transfer* FreeTransfer() {
    if (busy_transfers >= opts.max_parallel) return nullptr;
    for (Transfer& t : transfers) {
      if (!t.busy) return &t;
    }
    return nullptr;
  }

  // ------------------------------------------------------ ending a request

  void ReleaseJob(std::uint32_t ji) {
    Job& j = jobs[ji];
    j.state = Job::State::kFree;
    j.req.path.clear();
    j.req.label.clear();
    free_jobs.push_back(ji);
  }

  void FailJob(std::uint32_t ji, Status status) {
    Job& j = jobs[ji];
    Inc(counters.requests_failed);
    ++failed_this_run;
    if (first_failure.ok()) first_failure = status;
    consumer->OnFailed(j.req.id, status);
    ReleaseJob(ji);
    if (opts.stop_on_failure) stopping = true;
  }

  void Retry(std::uint32_t ji, const Status& error) {
    Job& j = jobs[ji];
    ++j.attempts;
    const std::optional<Clock::TimePoint> when = sched.AfterFailedTry(j.attempts);
    if (!when) {
      FailJob(ji, Status(error.code(), Describe(j) + ": failed after " + std::to_string(j.attempts) +
                                           " attempts; last error: " + error.message()));
      return;
    }
    Inc(counters.retries);
    if (j.delivered > 0) Inc(counters.resumes);
    Schedule(ji, *when);
  }

  void Schedule(std::uint32_t ji, Clock::TimePoint when) {
    jobs[ji].state = Job::State::kBackoff;
    sched.RetryAt(ji, jobs[ji].req.priority, when);
  }

  void CompleteJob(std::uint32_t ji) {
    Job& j = jobs[ji];
    RangeVerdict v = consumer->OnComplete(j.req.id);
    if (v.kind == RangeVerdict::Kind::kPending) {
      j.state = Job::State::kVerifying;
      verifying[j.req.id] = ji;
      return;
    }
    ApplyVerdict(ji, std::move(v));
  }

  // After a cancel: waits for the verdicts still pending (the consumer
  // promised them), then applies them; a Refetch ends the job instead.
  void AwaitVerdicts() {
    while (!verifying.empty()) {
      ApplyDeliveredVerdicts(&cancel_reason);
      if (verifying.empty()) break;
      (void)transport->Wait(milliseconds(100));  // Deliver wakes it
    }
  }

  // Acts on verdicts delivered from other threads since the last call.
  // `cancelled`: the run is over; a Refetch verdict ends the job with it.
  void ApplyDeliveredVerdicts(const Status* cancelled = nullptr) {
    std::vector<std::pair<std::uint64_t, RangeVerdict>> batch;
    {
      MutexLock lock(&verdict_mu);
      if (delivered_verdicts.empty()) return;
      batch.swap(delivered_verdicts);
    }
    for (auto& [id, v] : batch) {
      auto it = verifying.find(id);
      if (it == verifying.end()) continue;  // ended meanwhile (cancelled)
      const std::uint32_t ji = it->second;
      verifying.erase(it);
      if (v.kind == RangeVerdict::Kind::kPending) {
        FailJob(ji, InternalError(Describe(jobs[ji]) + ": consumer delivered a pending verdict"));
        continue;
      }
      if (cancelled != nullptr && v.kind == RangeVerdict::Kind::kRefetch) {
        FailJob(ji, cancelled->WithContext(Describe(jobs[ji])));
        continue;
      }
      ApplyVerdict(ji, std::move(v));
    }
  }

  void ApplyVerdict(std::uint32_t ji, RangeVerdict v) {
    Job& j = jobs[ji];
    switch (v.kind) {
      case RangeVerdict::Kind::kAccept:
        Inc(counters.requests_done);
        ReleaseJob(ji);
        return;
      case RangeVerdict::Kind::kFail:
        FailJob(ji, v.status.ok() ? InternalError(Describe(j) + ": consumer failed the range") : v.status);
        return;
      case RangeVerdict::Kind::kRefetch:
        if (j.refetches >= opts.max_refetches) {
          std::string msg =
              Describe(j) + ": data failed verification " + std::to_string(j.refetches + 1) + " times";
          if (!v.status.ok()) msg += " (" + v.status.message() + ")";
          FailJob(ji, CorruptionError(std::move(msg)));
          return;
        }
        ++j.refetches;
        Inc(counters.refetches);
        consumer->OnReset(j.req.id);
        j.delivered = 0;
        j.attempts = 0;
        j.state = Job::State::kReady;
        sched.MakeReady(ji, jobs[ji].req.priority);
        return;
      case RangeVerdict::Kind::kPending:
        break;  // handled by the callers
    }
  }

  // ------------------------------------------------------------ file state

  // Ends the requests a resolve's end decided on.
  void Apply(const FileResolver::Outcome& out) {
    for (std::uint32_t ji : out.ready) {
      jobs[ji].state = Job::State::kReady;
      sched.MakeReady(ji, jobs[ji].req.priority);
    }
    for (std::uint32_t ji : out.failed) FailJob(ji, out.failure.WithContext(Describe(jobs[ji])));
  }

  void StartResolves() {
    while (resolver.CanStartResolve() && !stopping) {
      Transfer* t = FreeTransfer();
      if (t == nullptr) return;
      const std::optional<std::uint32_t> fi = resolver.StartNextResolve();
      if (!fi) return;
      const FileState& f = resolver.file(*fi);
      BeginTransfer(*t, f.next_url);
      t->is_resolve = true;
      t->index = *fi;
      HttpRequest req;
      req.url = t->url;
      req.head_only = true;
      Inc(counters.resolves);
      hub.CountResolve();
      if (f.ever_resolved && f.hops == 0) Inc(counters.reresolves);
      AddTransfer(*t, req);
    }
  }

  void OnResolveDone(Transfer& t, const TransferEnd& end) {
    const std::uint32_t fi = t.index;
    const std::string& path = resolver.file(fi).path;
    HubClient::ResolveStep step;
    if (!end.ok) {
      step.status = IOError(hub.DescribeFile(path) + ": resolve: " + end.error);
      step.retryable = !end.permanent;  // another try meets the same certificate
    } else {
      step = hub.InterpretResolve(path, t.url, t.head, clock->Now());
      if (!step.resolved && !step.follow && t.head.status == 429) {
        Inc(counters.rate_limited);
        hub.CountRateLimited();
      }
    }
    Apply(resolver.OnResolveEnd(fi, std::move(step)));
  }

  // --------------------------------------------------------------- ranges

  void BeginTransfer(Transfer& t, const std::string& url) {
    t.busy = true;
    t.url = url;
    t.checker = AnswerChecker();
    t.paused = false;
    t.consumer_error = Status::Ok();
  }

  void AddTransfer(Transfer& t, const HttpRequest& req) {
    ++busy_transfers;
    Inc(counters.active_transfers);
    transport->Start(req, &t);
  }

  void StartRange(std::uint32_t ji, Transfer& t) {
    Job& j = jobs[ji];
    const FileState& f = resolver.file(j.file);
    j.state = Job::State::kRunning;
    BeginTransfer(t, f.url);
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
    Inc(counters.transfers);
    if (f.on_hub) {  // a GET of the hub's /resolve/ URL: the Hub rate-limits these too
      Inc(counters.resolves);
      hub.CountResolve();
    }
    AddTransfer(t, req);
  }

  void StartRanges(Clock::TimePoint now) {
    while (sched.HasReady() && !stopping) {
      const std::uint32_t ji = sched.FrontReady();
      Job& j = jobs[ji];
      // A failed re-resolve fails the file; the switch then fails the job.
      resolver.ExpireIfDue(j.file, now);
      const FileState& f = resolver.file(j.file);
      switch (f.state) {
        case FileState::State::kReady: {
          if (f.size && j.req.offset + j.req.length > *f.size) {
            sched.PopReady();
            // The server's own answer disagrees with the listing the plan
            // came from: Corruption (exit 3), not a usage error.
            FailJob(ji, CorruptionError(Describe(j) + ": range ends at " +
                                        std::to_string(j.req.offset + j.req.length) +
                                        ", past the file size " + std::to_string(*f.size) +
                                        " that its resolve answered (the hub's listing says otherwise)"));
            continue;
          }
          Transfer* t = FreeTransfer();
          if (t == nullptr) return;
          sched.PopReady();
          StartRange(ji, *t);
          continue;
        }
        case FileState::State::kFailed:
          sched.PopReady();
          FailJob(ji, f.failure.WithContext(Describe(j)));
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

  // Unpauses transfers held back (by the bandwidth limit while the budget
  // allows, or by a consumer that was not ready). The transport offers the
  // held chunk again from inside Resume, which may pause it again.
  void ResumePaused(Clock::TimePoint now) {
    if (paused_transfers == 0) return;
    for (Transfer& t : transfers) {
      if (!t.busy || !t.paused) continue;
      if (OverBudget(now)) return;
      t.paused = false;
      --paused_transfers;
      transport->Resume(&t);
    }
  }

  // A body chunk of a range transfer (or an error body).
  HttpTransfer::Body OnBody(Transfer& t, const char* p, std::size_t n) {
    using Body = HttpTransfer::Body;
    if (t.is_resolve) return Body::kContinue;  // HEAD: no body expected
    if (rate != nullptr && !t.paused && OverBudget(clock->Now())) {
      // The transport keeps this chunk and stops reading the socket; TCP
      // flow control then slows the sender. ResumePaused lets it go on.
      t.paused = true;
      ++paused_transfers;
      return Body::kPause;
    }
    Job& j = jobs[t.index];
    // Only a transfer with a connection of its own is held back for its
    // consumer: pausing one stream of a shared HTTP/2 connection stalls the
    // others with it (the transport stops reading the connection, or
    // buffers the stream). A multiplexed transfer's OnData applies the backpressure.
    if (!t.checker.discarding() && !t.multiplexed && !consumer->ReadyFor(j.req.id, n)) {
      t.paused = true;  // ResumePaused offers the chunk again
      ++paused_transfers;
      return Body::kPause;
    }
    t.checker.CountBody(n);
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
      Status s = consumer->OnData(
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

  void OnRangeDone(Transfer& t, const TransferEnd& end) {
    const std::uint32_t ji = t.index;
    Job& j = jobs[ji];
    if (t.checker.overlong()) Inc(counters.overlong_bodies);
    if (!t.consumer_error.ok()) {
      FailJob(ji, t.consumer_error);
      return;
    }
    const long status = t.head.status;
    if (t.checker.complete() && (status == 200 || status == 206)) {
      CompleteJob(ji);
      return;
    }
    AnswerVerdict v = t.checker.Finish(t.head, end, Describe(j));
    const FileState& f = resolver.file(j.file);
    switch (v.kind) {
      case AnswerVerdict::Kind::kComplete:
        CompleteJob(ji);
        return;
      case AnswerVerdict::Kind::kRetry:
        if (v.bad_answer) Inc(counters.bad_answers);
        if (status >= 500) Inc(counters.unavailable);
        Retry(ji, v.status);
        return;
      case AnswerVerdict::Kind::kFail:
        FailJob(ji, std::move(v.status));
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
            FailJob(ji, f.failure.WithContext(Describe(j)));
            return;
          }
        }
        j.state = Job::State::kReady;
        sched.MakeReady(ji, jobs[ji].req.priority);
        return;
      case AnswerVerdict::Kind::kThrottled: {
        if (status == 429)
          Inc(counters.rate_limited);
        else
          Inc(counters.unavailable);
        if (!v.wait || *v.wait <= opts.max_throttle_wait) ++j.throttled;  // a wait too long fails anyway
        const TransferScheduler::Throttle next = sched.AfterThrottle(j.throttled, v.wait);
        switch (next.kind) {
          case TransferScheduler::Throttle::Kind::kWaitTooLong:
            FailJob(ji, Status(v.status.code(),
                               v.status.message() + WaitPastCap(*v.wait, opts.max_throttle_wait)));
            return;
          case TransferScheduler::Throttle::Kind::kTooOften:
            FailJob(ji, Status(v.status.code(), v.status.message() + " (throttled " +
                                                    std::to_string(j.throttled) + " times)"));
            return;
          case TransferScheduler::Throttle::Kind::kRetryAt:
            break;
        }
        Inc(counters.retries);
        Schedule(ji, next.when);
        return;
      }
    }
  }

  // A transfer ended (the transport calls this from Perform).
  void OnTransferDone(Transfer& t, const TransferEnd& end) {
    if (t.paused) --paused_transfers;
    t.paused = false;
    t.busy = false;
    --busy_transfers;
    counters.active_transfers.fetch_sub(1, std::memory_order_relaxed);
    if (t.is_resolve) {
      OnResolveDone(t, end);
    } else {
      OnRangeDone(t, end);
    }
  }

  // ------------------------------------------------------------- the loop

  void PullRequests() {
    while (!source_done && !stopping && !free_jobs.empty()) {
      const std::uint32_t ji = free_jobs.back();
      Job& j = jobs[ji];
      if (!consumer->NextRequest(&j.req)) {
        if (!consumer->MayHaveMore()) source_done = true;
        return;
      }
      free_jobs.pop_back();
      Inc(counters.requests_started);
      j.delivered = 0;
      j.attempts = j.refetches = j.throttled = 0;
      if (j.req.length == 0 || j.req.offset > kMaxHubFileSize ||
          j.req.length > kMaxHubFileSize - j.req.offset) {
        j.file = kNone;
        FailJob(ji, InvalidArgumentError((j.req.label.empty() ? std::string("range") : j.req.label) +
                                         ": bad range offset " + std::to_string(j.req.offset) + " length " +
                                         std::to_string(j.req.length)));
        continue;
      }
      if (Status s = ValidateHubPath(j.req.path); !s.ok()) {
        FailJob(ji, Status(StatusCode::kInvalidArgument,
                           (j.req.label.empty() ? std::string("range") : j.req.label) + ": " + s.message()));
        continue;
      }
      j.file = resolver.FileFor(j.req.path);
      j.state = Job::State::kReady;
      sched.MakeReady(ji, jobs[ji].req.priority);
    }
  }

  void PromoteDue() {
    sched.PromoteDue([this](std::uint32_t ji) {
      if (jobs[ji].state != Job::State::kBackoff) return false;
      jobs[ji].state = Job::State::kReady;
      return true;
    });
  }

  bool AnyLive() const { return free_jobs.size() < jobs.size() || busy_transfers > 0; }

  void CancelAll(const Status& why) {
    for (Transfer& t : transfers) {
      if (!t.busy) continue;
      transport->Abandon(&t);
      if (t.paused) --paused_transfers;
      t.paused = false;
      t.busy = false;
      --busy_transfers;
      counters.active_transfers.fetch_sub(1, std::memory_order_relaxed);
    }
    resolver.CancelRun();
    sched.Clear();
    cancel_reason = why;
    for (std::uint32_t ji = 0; ji < jobs.size(); ++ji) {
      // A job whose verdict is pending keeps it: the consumer may already
      // have accepted it (AwaitVerdicts applies it), so it ends exactly once.
      if (jobs[ji].state == Job::State::kFree || jobs[ji].state == Job::State::kVerifying) continue;
      Inc(counters.requests_failed);
      consumer->OnFailed(jobs[ji].req.id, why.WithContext(Describe(jobs[ji])));
      ReleaseJob(ji);
    }
  }

  Status Run(RangeConsumer& c, const std::atomic<bool>* cancel) {
    consumer = &c;
    const std::size_t cap =
        static_cast<std::size_t>(opts.max_parallel) + static_cast<std::size_t>(opts.max_queued);
    jobs.assign(cap, Job());
    free_jobs.clear();
    for (std::size_t i = cap; i-- > 0;) free_jobs.push_back(static_cast<std::uint32_t>(i));
    sched.Clear();
    resolver.StartRun();
    source_done = stopping = false;
    verifying.clear();
    {
      MutexLock lock(&verdict_mu);
      delivered_verdicts.clear();  // stale: from an earlier Run
    }
    failed_this_run = 0;
    first_failure = Status::Ok();
    rate = opts.shared_rate;
    if (rate == nullptr && opts.max_bytes_per_second > 0)
      rate = std::make_shared<RateLimiter>(opts.max_bytes_per_second);

    Status result;
    while (true) {
      const bool by_caller = user_cancel.load() || (cancel != nullptr && cancel->load());
      const bool cancelled = cancel_flag.load() || by_caller;
      if (cancelled || stopping) {
        Status aborted;
        {
          MutexLock lock(&abort_mu);
          aborted = std::exchange(abort_reason, Status::Ok());
        }
        const Status why =
            !cancelled ? CancelledError("fetch stopped after an earlier failure")
            : (!by_caller && !aborted.ok())
                ? Status(aborted.code(), "stopped after another request failed: " + aborted.message())
                : CancelledError("fetch cancelled");
        CancelAll(why);
        if (cancelled) {
          cancel_flag.store(false);
          user_cancel.store(false);
          result = why;
        }
        break;
      }
      const auto now = clock->Now();
      ApplyDeliveredVerdicts();
      PullRequests();
      PromoteDue();
      StartResolves();
      StartRanges(now);
      if (!AnyLive() && source_done) break;
      if (stopping) continue;

      ResumePaused(now);

      const Result<int> done = transport->Perform();
      if (!done.ok()) {
        result = done.status();
        CancelAll(result);
        break;
      }
      // Completions free slots and may end the run: loop before sleeping.
      if (*done > 0) continue;
      const int timeout =
          static_cast<int>(sched.PollTimeout(resolver.HasQueued(), paused_transfers > 0).count());
      if (timeout > 0) {
        const Status waited = transport->Wait(milliseconds(timeout));
        if (!waited.ok()) {
          result = waited;
          CancelAll(result);
          break;
        }
      }
    }
    AwaitVerdicts();
    consumer = nullptr;
    if (!result.ok()) return result;
    if (failed_this_run > 0) {
      return Status(first_failure.code(),
                    first_failure.message() + " (" + std::to_string(failed_this_run) + " request(s) failed)");
    }
    return Status::Ok();
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
  impl_->transport->Wake();
}

void RangeFetcher::Abort(const Status& reason) {
  {
    MutexLock lock(&impl_->abort_mu);
    if (impl_->abort_reason.ok())
      impl_->abort_reason = reason.ok() ? CancelledError("fetch aborted") : reason;
  }
  impl_->cancel_flag.store(true);
  impl_->transport->Wake();
}

void RangeFetcher::Wake() { impl_->transport->Wake(); }

void RangeFetcher::ExpectServedByHub(const std::string& path, std::uint64_t size) {
  impl_->resolver.ExpectServedByHub(path, size);
}

void RangeFetcher::Deliver(std::uint64_t id, RangeVerdict verdict) {
  {
    MutexLock lock(&impl_->verdict_mu);
    impl_->delivered_verdicts.emplace_back(id, std::move(verdict));
  }
  impl_->transport->Wake();
}

FetchCounters RangeFetcher::counters() const {
  const Impl::Counters& c = impl_->counters;
  auto get = [](const std::atomic<std::uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  FetchCounters s;
  s.requests_started = get(c.requests_started);
  s.requests_done = get(c.requests_done);
  s.requests_failed = get(c.requests_failed);
  s.transfers = get(c.transfers);
  s.retries = get(c.retries);
  s.resumes = get(c.resumes);
  s.bytes_received = get(c.bytes_received);
  s.bytes_discarded = get(c.bytes_discarded);
  s.resolves = get(c.resolves);
  s.reresolves = get(c.reresolves);
  s.rate_limited = get(c.rate_limited);
  s.unavailable = get(c.unavailable);
  s.ignored_range = get(c.ignored_range);
  s.bad_answers = get(c.bad_answers);
  s.overlong_bodies = get(c.overlong_bodies);
  s.refetches = get(c.refetches);
  s.active_transfers = get(c.active_transfers);
  return s;
}

}  // namespace exlr8
