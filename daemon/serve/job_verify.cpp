// A verify job: the scrub of the fileset a request names, repairing (it
// forgets what no longer matches, which the next pull fetches again).
#include <atomic>
#include <chrono>
#include <cstdio>

#include "daemon/base/mutex.h"
#include "daemon/scrub/scrub.h"
#include "daemon/serve/job_kinds.h"

namespace exlr8 {

namespace {

class VerifyJob final : public Job {
 public:
  VerifyJob(const JobInfo& info, const JobContext& context) : info_(info), ctx_(context) {}

  JobOutcome Run(Cache& cache) override EXLR8_EXCLUDES(mu_);
  void Cancel() override { cancel_.store(true); }
  JobReport Report() const override EXLR8_EXCLUDES(mu_) {
    JobReport r;
    MutexLock l(&mu_);
    if (!checking_) return r;
    VerifyProgress v;
    v.bytes_total = counters_.bytes_total.load(std::memory_order_relaxed);
    v.bytes_checked = counters_.bytes_checked.load(std::memory_order_relaxed);
    v.failures = counters_.failures.load(std::memory_order_relaxed);
    v.elapsed_s = std::chrono::duration<double>(ctx_.clock->Now() - started_).count();
    r.verify_progress = v;
    return r;
  }
  void AddTotals(RunnerTotals& t) const override {
    t.scrub_bytes_checked += counters_.bytes_checked.load(std::memory_order_relaxed);
    t.scrub_failures += counters_.failures.load(std::memory_order_relaxed);
  }

 private:
  const JobInfo info_;
  const JobContext ctx_;
  std::atomic<bool> cancel_{false};  // the scrub's cancel flag
  ScrubCounters counters_;           // written by the scrub, read by Report
  mutable Mutex mu_;
  bool checking_ EXLR8_GUARDED_BY(mu_) = false;  // Run has begun the scrub
  Clock::TimePoint started_ EXLR8_GUARDED_BY(mu_);
};

JobOutcome VerifyJob::Run(Cache& cache) {
  const JobRequest& r = info_.request;
  const long long job = static_cast<long long>(info_.id);
  std::fprintf(stderr, "exlr8d serve: job %lld: verifying %s@%s (attempt %d)\n", job, r.repo.c_str(),
               r.revision.c_str(), info_.attempts + 1);
  {
    MutexLock l(&mu_);
    checking_ = true;
    started_ = ctx_.clock->Now();
  }
  auto scrubbed = [&]() -> Result<ScrubReport> {
    EXLR8_ASSIGN_OR_RETURN(FilesetInfo set, FindJobFileset(cache, r));
    ScrubOptions o;
    o.repair = true;
    o.cancel = &cancel_;
    o.counters = &counters_;
    return ScrubFileset(cache, set.id, o);
  }();
  if (scrubbed.ok()) {
    std::fprintf(stderr,
                 "exlr8d serve: job %lld: checked %llu bytes in %.2f s, %zu failed, forgot %llu bytes\n", job,
                 static_cast<unsigned long long>(scrubbed->bytes_checked), scrubbed->seconds,
                 static_cast<std::size_t>(scrubbed->checks_failed),
                 static_cast<unsigned long long>(scrubbed->bytes_forgotten));
  } else {
    std::fprintf(stderr, "exlr8d serve: job %lld: %s\n", job, scrubbed.status().ToString().c_str());
  }
  JobOutcome out;
  out.status = scrubbed.status();
  if (scrubbed.ok()) out.result = ScrubReportJson(*scrubbed).Dump();
  return out;
}

}  // namespace

Result<FilesetInfo> FindJobFileset(Cache& cache, const JobRequest& r) {
  auto commit = cache.LookupCommit(r.repo, r.revision);
  if (!commit.ok())
    return NotFoundError(r.repo + "@" + r.revision + " was never pulled into " + cache.dir().string());
  EXLR8_ASSIGN_OR_RETURN(std::vector<FilesetInfo> sets, cache.ListFilesets());
  for (FilesetInfo& set : sets)
    if (set.repo == r.repo && set.commit == *commit) return std::move(set);
  return NotFoundError(r.repo + " commit " + *commit + " is not in " + cache.dir().string());
}

std::unique_ptr<Job> MakeVerifyJob(const JobInfo& info, const JobContext& context) {
  return std::make_unique<VerifyJob>(info, context);
}

}  // namespace exlr8
