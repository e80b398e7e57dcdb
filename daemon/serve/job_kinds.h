// The kinds of job `exlr8d serve` runs, each a Job (job.h) in a file of its
// own: a pull (job_pull.cpp, the pull engine), a verify (job_verify.cpp,
// the scrub, which forgets what no longer matches) and an evict
// (job_evict.cpp). Each owns its work's state; the scheduler records how
// it ends.
#pragma once

#include <memory>

#include "daemon/base/clock.h"
#include "daemon/pull/pull_job.h"
#include "daemon/serve/job.h"
#include "daemon/serve/job_store.h"
#include "format/status.h"

namespace exlr8 {

// What the jobs of every kind share. The pointees outlive every job.
struct JobContext {
  JobQueue* queue = nullptr;                   // where a job records what it learns on the way
  const PullOptions* pull_defaults = nullptr;  // the server's pull options (JobRunnerOptions::pull)
  Clock* clock = &Clock::Real();
};

// The job `info` asks for, not started.
std::unique_ptr<Job> MakeJob(const JobInfo& info, const JobContext& context);
std::unique_ptr<Job> MakePullJob(const JobInfo& info, const JobContext& context);
std::unique_ptr<Job> MakeVerifyJob(const JobInfo& info, const JobContext& context);
std::unique_ptr<Job> MakeEvictJob(const JobInfo& info, const JobContext& context);

// The options a pull job runs with: `defaults`, with the request's repo,
// revision, manifest, TP degree and rank; local manifest files refused. A
// request naming an endpoint other than the defaults' gets no token at
// all, so a client cannot send the server's token to a host of its choosing.
PullOptions PullOptionsForJob(const PullOptions& defaults, const JobRequest& request);

// The fileset a verify or evict job names: the commit its revision last
// resolved to in this cache. NotFound naming it otherwise.
Result<FilesetInfo> FindJobFileset(Cache& cache, const JobRequest& request);

}  // namespace exlr8
