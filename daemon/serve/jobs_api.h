// The REST routes that make `exlr8d serve` run pulls and scrubs (version 1),
// in front of the status routes (daemon/api/status_api.h), which get every
// other request.
//
//   POST   /v1/pulls        {"repo":"org/name","manifest":"home","tp":4,"rank":1,
//                            "revision":"main","endpoint":URL,"pin":"holder"}
//                            (revision, endpoint and pin optional) -> 202
//                            {"job":{...}}: queued, runs when its turn comes
//   POST   /v1/verify       {"repo":"org/name","revision":"main"} (revision
//                            optional) -> 202 {"job":{...}}: scrubs that
//                            fileset (daemon/scrub/scrub.h), forgetting what
//                            no longer matches; once done, the job carries
//                            the report as "result"
//   POST   /v1/evict        {"repo":"org/name","revision":"main"} -> 202
//                            {"job":{...}}: evicts that fileset (as
//                            `exlr8d gc --repo`; a pinned one fails the
//                            job), after the jobs of its repo before it;
//                            "result": bytes freed and remaining
//   GET    /v1/jobs         {"jobs":[...]} newest first (at most 100)
//   GET    /v1/jobs/{id}    {"job":{...}}; a running job carries "progress"
//                            (a pull: phase, bytes, ranges, rate, ETA; a
//                            verify: bytes checked of total, failures, rate,
//                            ETA), a queued one "waiting": why it has not
//                            started (a job of its repo before it, no free
//                            slot, the cache owned by another process)
//   DELETE /v1/jobs/{id}    cancels it (202; 409 once finished)
//   DELETE /v1/pulls/{id}   cancels the job running pull {id} (409 for a
//                            pull another process runs: stop that process)
//   /v1/stages...           GPU holders: daemon/serve/stages_api.h
//   GET    /metrics         Prometheus text exposition (Metrics below)
//
// Bodies are JSON objects of at most 64 KiB (the server's bound); unknown
// fields are refused (400 naming them), so a typo never goes unnoticed.
#pragma once

#include "daemon/api/api_server.h"
#include "daemon/api/status_api.h"
#include "daemon/serve/job_runner.h"
#include "daemon/serve/stage_manager.h"

namespace exlr8 {

// The job as JSON (no trailing newline).
std::string JobJson(const JobSnapshot& job);

// Parse a POST /v1/pulls body, or a /v1/verify or /v1/evict one (`kind`).
// InvalidArgument naming the field.
Result<JobRequest> ParseJobRequest(std::string_view body);
Result<JobRequest> ParseFilesetRequest(std::string_view body, JobKind kind);

class JobsApi {
 public:
  // `stages` (optional): the /v1/stages routes (stages_api.h).
  JobsApi(JobRunner& runner, const StatusApi& status, StageManager* stages = nullptr)
      : runner_(runner), status_(status), stages_(stages) {}
  ApiResponse Handle(const ApiRequest& request) const;

 private:
  // GET /metrics: the cache's metrics (StatusApi::AppendCacheMetrics), the
  // queue by state, the server's totals as counters, each running job's
  // bytes planned and done.
  ApiResponse Metrics() const;

  JobRunner& runner_;
  const StatusApi& status_;
  StageManager* stages_;
};

}  // namespace exlr8
