// A pull job: the pull engine (PullJob) run for one request, its attempt
// linked to the cache's pull row as soon as the engine records one, and
// the fileset pinned once done when the request names a holder.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <utility>
#include <vector>

#include "daemon/base/mutex.h"
#include "daemon/serve/job_kinds.h"
#include "format/json.h"

namespace exlr8 {

namespace {

// "https://hub.example/" and "https://hub.example" are one endpoint.
std::string NormalizedEndpoint(std::string e) {
  if (e.empty()) {
    const char* env = std::getenv("HF_ENDPOINT");
    e = env != nullptr && *env ? env : "https://huggingface.co";
  }
  while (!e.empty() && e.back() == '/') e.pop_back();
  return e;
}

// How often the pull row's id is looked for while the engine plans.
constexpr std::chrono::milliseconds kLinkPoll{100};

class PullJobKind final : public Job {
 public:
  PullJobKind(const JobInfo& info, const JobContext& context) : info_(info), ctx_(context) {}

  JobOutcome Run(Cache& cache) override EXLR8_EXCLUDES(mu_);
  void Cancel() override EXLR8_EXCLUDES(mu_) {
    MutexLock l(&mu_);
    cancelled_ = true;
    if (pull_) pull_->Cancel();
  }
  JobReport Report() const override EXLR8_EXCLUDES(mu_) {
    JobReport r;
    MutexLock l(&mu_);
    if (pull_) r.progress = pull_->Progress();
    return r;
  }
  void AddTotals(RunnerTotals& t) const override EXLR8_EXCLUDES(mu_) {
    MutexLock l(&mu_);
    if (!pull_) return;
    const PullProgress p = pull_->Progress();
    t.bytes_received += p.bytes_received;
    t.bytes_verified += p.bytes_verified;
    t.http_requests += p.fetch.transfers;
    t.http_retries += p.fetch.retries;
    t.hub_resolves += p.fetch.resolves;
    t.checksum_failures += p.checksum_failures;
  }

 private:
  // The linker thread: records the attempt's pull row once the engine has
  // one (after planning), so GET /v1/jobs/{id} can point at /v1/pulls/{id}.
  void Link(PullJob* pull) EXLR8_EXCLUDES(mu_);
  JobOutcome Outcome(Cache& cache, const Result<PullSummary>& result);

  const JobInfo info_;
  const JobContext ctx_;
  mutable Mutex mu_;
  CondVar ran_cv_;  // signalled when the engine's Run returns
  bool cancelled_ EXLR8_GUARDED_BY(mu_) = false;
  bool ran_ EXLR8_GUARDED_BY(mu_) = false;
  // Created by Run, kept until the job is destroyed (its counters are the
  // job's totals). Its Run is called outside mu_; Cancel and Progress are
  // thread-safe.
  std::unique_ptr<PullJob> pull_ EXLR8_GUARDED_BY(mu_);
};

void PullJobKind::Link(PullJob* pull) {
  for (;;) {
    PullId id = 0;
    {
      MutexLock l(&mu_);
      if (ran_) return;
      id = pull->Progress().pull_id;
      if (id == 0) {
        ctx_.clock->WaitFor(&ran_cv_, &mu_, kLinkPoll);
        continue;
      }
    }
    LogIfUnrecorded(ctx_.queue->SetPull(info_.id, id), info_.id, "its pull");
    return;
  }
}

JobOutcome PullJobKind::Run(Cache& cache) {
  const JobRequest& r = info_.request;
  const PullOptions o = PullOptionsForJob(*ctx_.pull_defaults, r);
  if (r.manifest.empty())
    std::fprintf(stderr, "exlr8d serve: job %lld: pulling %s@%s, the whole fileset (attempt %d)\n",
                 static_cast<long long>(info_.id), r.repo.c_str(), r.revision.c_str(), info_.attempts + 1);
  else
    std::fprintf(stderr, "exlr8d serve: job %lld: pulling %s@%s, manifest %s, TP %d rank %d (attempt %d)\n",
                 static_cast<long long>(info_.id), r.repo.c_str(), r.revision.c_str(), r.manifest.c_str(),
                 r.tp, r.rank, info_.attempts + 1);
  PullJob* pull = nullptr;
  {
    MutexLock l(&mu_);
    pull_ = std::make_unique<PullJob>(cache, o);
    pull = pull_.get();
    if (cancelled_) pull->Cancel();
  }
  std::thread linker([this, pull] { Link(pull); });
  Result<PullSummary> result = pull->Run();
  {
    MutexLock l(&mu_);
    ran_ = true;
    ran_cv_.SignalAll();  // holding mu_, so the linker cannot miss it
  }
  linker.join();
  const PullId pull_id = pull->Progress().pull_id;
  if (pull_id != 0) LogIfUnrecorded(ctx_.queue->SetPull(info_.id, pull_id), info_.id, "its pull");
  return Outcome(cache, result);
}

JobOutcome PullJobKind::Outcome(Cache& cache, const Result<PullSummary>& result) {
  const long long job = static_cast<long long>(info_.id);
  if (result.ok()) {
    std::fprintf(stderr, "exlr8d serve: job %lld: %s; fetched %llu bytes, reused %llu, %.2f s\n", job,
                 result->complete ? "done" : "incomplete",
                 static_cast<unsigned long long>(result->bytes_fetched),
                 static_cast<unsigned long long>(result->bytes_reused), result->elapsed_s);
    if (!result->hub_error.empty())
      std::fprintf(
          stderr,
          "exlr8d serve: job %lld: the hub could not be asked what %s is now (%s); served from the cache: "
          "commit %s, what %s last resolved to here, where the rank is complete\n",
          job, result->revision.c_str(), result->hub_error.c_str(), result->commit.c_str(),
          result->revision.c_str());
    if (!result->evicted.empty())
      std::fprintf(stderr, "exlr8d serve: job %lld made room: evicted %zu fileset%s, %llu bytes\n", job,
                   result->evicted.size(), result->evicted.size() == 1 ? "" : "s",
                   static_cast<unsigned long long>(result->bytes_evicted));
  } else {
    std::fprintf(stderr, "exlr8d serve: job %lld: %s\n", job, result.status().ToString().c_str());
  }
  JobOutcome out;
  out.status = result.status();
  if (result.ok() && !result->complete) {
    out.failure = "the pull ended without every byte of its plan verified";
    return out;
  }
  if (result.ok() && !info_.request.pin.empty()) {
    auto set = cache.PutFileset(result->repo, result->revision, result->commit);
    Status pinned = set.ok() ? cache.Pin(*set, info_.request.pin) : set.status();
    if (!pinned.ok()) {
      out.failure = "pulled, but pinning failed: " + pinned.ToString();
      return out;
    }
  }
  // In the job's result: what make_room evicted, and a pull served from
  // the cache because the hub could not be asked (the commit and why).
  std::vector<JsonValue::Member> said;
  if (result.ok() && !result->evicted.empty()) {
    said.emplace_back("evicted_filesets", JsonValue::UInt(result->evicted.size()));
    said.emplace_back("bytes_evicted", JsonValue::UInt(result->bytes_evicted));
  }
  if (result.ok() && !result->hub_error.empty()) {
    said.emplace_back("served_from_cache", JsonValue::Bool(true));
    said.emplace_back("commit", JsonValue::String(result->commit));
    said.emplace_back("hub_error", JsonValue::String(result->hub_error));
  }
  if (!said.empty()) out.result = JsonValue::Object(std::move(said)).Dump();
  return out;
}

}  // namespace

PullOptions PullOptionsForJob(const PullOptions& defaults, const JobRequest& r) {
  PullOptions o = defaults;
  o.repo = r.repo;
  o.revision = r.revision;
  o.manifest = r.manifest;
  o.tp = r.tp;
  o.rank = r.rank;
  o.dry_run = false;
  o.make_room = r.make_room;
  o.allow_local_manifest = false;
  if (!r.endpoint.empty() && NormalizedEndpoint(r.endpoint) != NormalizedEndpoint(defaults.hub.endpoint)) {
    o.hub.endpoint = r.endpoint;
    o.hub.token = std::string();  // anonymous: never the server's token to another host
    o.hub.token_file.clear();
    o.hub.token_from_environment = false;
  }
  return o;
}

std::unique_ptr<Job> MakePullJob(const JobInfo& info, const JobContext& context) {
  return std::make_unique<PullJobKind>(info, context);
}

}  // namespace exlr8
