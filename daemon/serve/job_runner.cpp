#include "daemon/serve/job_runner.h"

#include <cstdio>
#include <system_error>

#include "daemon/serve/cache_owner.h"
#include "daemon/serve/job_kinds.h"
#include "daemon/serve/job_scheduler.h"

namespace exlr8 {

namespace {
constexpr const char* kJobDbName = "exlr8d.jobs.db";
}  // namespace

// Members are destroyed in reverse: the scheduler (whose jobs use the
// store and the options) before the store.
struct JobRunner::Rep {
  JobRunnerOptions opt;
  std::unique_ptr<JobStore> store;
  std::unique_ptr<JobScheduler> scheduler;
};

JobRunner::JobRunner(std::unique_ptr<Rep> rep) : rep_(std::move(rep)) {}
JobRunner::~JobRunner() { Stop(); }

PullOptions JobRunner::OptionsFor(const PullOptions& defaults, const JobRequest& request) {
  return PullOptionsForJob(defaults, request);
}

Result<std::unique_ptr<JobRunner>> JobRunner::Start(JobRunnerOptions options) {
  auto rep = std::make_unique<Rep>();
  rep->opt = std::move(options);
  const JobRunnerOptions& opt = rep->opt;
  if (opt.max_running < 1) return InvalidArgumentError("max_running must be at least 1");
  // One limit for every job at once, not one each.
  RangeFetcherOptions& fetch = rep->opt.pull.fetch;
  if (fetch.max_bytes_per_second > 0 && fetch.shared_rate == nullptr)
    fetch.shared_rate = std::make_shared<RateLimiter>(fetch.max_bytes_per_second);
  std::error_code ec;
  std::filesystem::create_directories(opt.cache_dir, ec);
  if (ec) return IOError("create " + opt.cache_dir.string() + ": " + ec.message());
  EXLR8_ASSIGN_OR_RETURN(rep->store, JobStore::Open(opt.cache_dir / kJobDbName, JobStoreLimits{.clock = opt.clock}));
  EXLR8_ASSIGN_OR_RETURN(int requeued, rep->store->RequeueInterrupted());
  if (requeued > 0)
    std::fprintf(stderr, "exlr8d serve: %d job%s interrupted by a stop queued again; resuming\n", requeued,
                 requeued == 1 ? "" : "s");
  JobContext context;
  context.queue = rep->store.get();
  context.pull_defaults = &rep->opt.pull;
  context.clock = opt.clock;
  JobSchedulerOptions so;
  so.max_running = opt.max_running;
  so.retry = opt.lock_retry;
  so.clock = opt.clock;
  rep->scheduler = std::make_unique<JobScheduler>(
      *rep->store,
      std::make_unique<CacheOwner>(CacheOwner::OpenerFor(opt.cache_dir, opt.cache), *opt.clock,
                                   opt.lock_retry),
      [context](const JobInfo& info) { return MakeJob(info, context); }, so);
  rep->scheduler->Start();
  return std::unique_ptr<JobRunner>(new JobRunner(std::move(rep)));
}

void JobRunner::Stop() { rep_->scheduler->Stop(); }

Result<JobSnapshot> JobRunner::Submit(const JobRequest& request) {
  EXLR8_ASSIGN_OR_RETURN(JobId id, rep_->store->Add(request));
  rep_->scheduler->Kick();
  return Snapshot(id);
}

Result<JobSnapshot> JobRunner::Cancel(JobId id) { return rep_->scheduler->Cancel(id); }

std::optional<JobId> JobRunner::RunningJobOfPull(std::int64_t pull) const {
  return rep_->scheduler->RunningJobOfPull(pull);
}

Result<JobSnapshot> JobRunner::Snapshot(JobId id) const { return rep_->scheduler->Snapshot(id); }

Result<std::vector<JobSnapshot>> JobRunner::List(std::size_t limit, std::optional<JobState> state) const {
  EXLR8_ASSIGN_OR_RETURN(std::vector<JobInfo> jobs, rep_->store->List(limit, state));
  return rep_->scheduler->Describe(std::move(jobs));
}

Result<RunnerMetrics> JobRunner::Metrics() const {
  RunnerMetrics m;
  EXLR8_ASSIGN_OR_RETURN(m.jobs_by_state, rep_->store->CountByState());
  std::vector<JobId> ids;
  m.totals = rep_->scheduler->Totals(&ids);
  m.max_running = rep_->scheduler->max_running();
  for (JobId id : ids) {
    auto s = Snapshot(id);
    if (s.ok() && s->info.state == JobState::kRunning) m.running.push_back(std::move(*s));
  }
  return m;
}

}  // namespace exlr8
