// An evict job: removes the fileset a request names from the cache. The
// first attempt records the commit it chose before evicting anything; an
// attempt after a restart evicts that commit or nothing, never what the
// revision names by then (a pull in between may have fetched another
// commit of it, which is not what the client asked to evict).
#include <algorithm>
#include <cstdio>

#include "daemon/serve/job_kinds.h"
#include "format/json.h"

namespace exlr8 {

namespace {

class EvictJob final : public Job {
 public:
  EvictJob(const JobInfo& info, const JobContext& context) : info_(info), ctx_(context) {}

  JobOutcome Run(Cache& cache) override;
  // One short cache transaction: once Run has begun it runs to its end. The
  // scheduler never begins it once a client has cancelled the job.
  void Cancel() override {}
  JobReport Report() const override { return {}; }
  void AddTotals(RunnerTotals&) const override {}

 private:
  Result<JsonValue> Evict(Cache& cache);

  const JobInfo info_;
  const JobContext ctx_;
};

Result<JsonValue> EvictJob::Evict(Cache& cache) {
  const JobRequest& r = info_.request;
  const long long job = static_cast<long long>(info_.id);
  FilesetInfo set;
  if (info_.target_commit.empty()) {
    // The first attempt: the revision names a commit now; that one is
    // recorded before anything is evicted.
    EXLR8_ASSIGN_OR_RETURN(set, FindJobFileset(cache, r));
    EXLR8_RETURN_IF_ERROR(ctx_.queue->SetTargetCommit(info_.id, set.commit));
  } else {
    EXLR8_ASSIGN_OR_RETURN(std::vector<FilesetInfo> sets, cache.ListFilesets());
    const auto it = std::find_if(sets.begin(), sets.end(), [&](const FilesetInfo& s) {
      return s.repo == r.repo && s.commit == info_.target_commit;
    });
    if (it == sets.end()) {
      std::fprintf(stderr, "exlr8d serve: job %lld: %s commit %s was evicted by its earlier attempt\n", job,
                   r.repo.c_str(), info_.target_commit.c_str());
      EXLR8_ASSIGN_OR_RETURN(const std::uint64_t remaining, cache.RecordedBytes());
      return JsonValue::Object({{"repo", JsonValue::String(r.repo)},
                                {"commit", JsonValue::String(info_.target_commit)},
                                {"bytes_freed", JsonValue::UInt(0)},
                                {"bytes_remaining", JsonValue::UInt(remaining)},
                                {"evicted_before_a_restart", JsonValue::Bool(true)}});
    }
    set = *it;
  }
  EXLR8_ASSIGN_OR_RETURN(GcResult gone, cache.Evict(set.id));
  std::fprintf(stderr, "exlr8d serve: job %lld: evicted %s commit %s, freed %llu bytes\n", job,
               set.repo.c_str(), set.commit.c_str(), static_cast<unsigned long long>(gone.bytes_freed));
  return JsonValue::Object({{"repo", JsonValue::String(set.repo)},
                            {"commit", JsonValue::String(set.commit)},
                            {"bytes_freed", JsonValue::UInt(gone.bytes_freed)},
                            {"bytes_remaining", JsonValue::UInt(gone.bytes_remaining)}});
}

JobOutcome EvictJob::Run(Cache& cache) {
  const JobRequest& r = info_.request;
  std::fprintf(stderr, "exlr8d serve: job %lld: evicting %s@%s\n", static_cast<long long>(info_.id),
               r.repo.c_str(), r.revision.c_str());
  Result<JsonValue> evicted = Evict(cache);
  if (!evicted.ok())
    std::fprintf(stderr, "exlr8d serve: job %lld: %s\n", static_cast<long long>(info_.id),
                 evicted.status().ToString().c_str());
  JobOutcome out;
  out.status = evicted.status();
  if (evicted.ok()) out.result = evicted->Dump();
  return out;
}

}  // namespace

std::unique_ptr<Job> MakeEvictJob(const JobInfo& info, const JobContext& context) {
  return std::make_unique<EvictJob>(info, context);
}

std::unique_ptr<Job> MakeJob(const JobInfo& info, const JobContext& context) {
  switch (info.request.kind) {
    case JobKind::kPull:
      return MakePullJob(info, context);
    case JobKind::kVerify:
      return MakeVerifyJob(info, context);
    case JobKind::kEvict:
      return MakeEvictJob(info, context);
  }
  return MakePullJob(info, context);  // unreachable: every kind is above
}

}  // namespace exlr8
