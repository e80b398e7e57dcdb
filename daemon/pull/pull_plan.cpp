// PullJob's planning steps: the planner's whole files, the plan of the
// halves, then the width files' headers that complete it.
#include <set>

#include "daemon/cache/cache_paths.h"
#include "daemon/pull/consumers.h"
#include "daemon/pull/header_step.h"
#include "daemon/pull/pull_job_rep.h"
#include "format/manifest.h"
#include "format/planner_input.h"

namespace exlr8 {

Status PullJob::Rep::EnsureWholeFiles(const std::vector<std::string>& paths, std::uint64_t* reused) {
  EXLR8_ASSIGN_OR_RETURN(std::vector<WholeFileTarget> targets,
                         files.MissingWholeFiles(paths, opt.offline, reused));
  if (targets.empty()) return Status::Ok();
  std::uint64_t missing_bytes = 0;  // a resumed prefix is on disk already
  for (const WholeFileTarget& t : targets) missing_bytes += t.size - t.resume_from;
  if (opt.offline)
    return FailedPreconditionError("offline mode: " + std::to_string(targets.size()) + " files (" +
                                   std::to_string(missing_bytes) + " bytes, first " + targets[0].path +
                                   ") are not in the cache");
  EXLR8_RETURN_IF_ERROR(space.CheckAndClaim(missing_bytes));
  if (streams == nullptr) return InternalError("fetch step without a fetch session");
  CommitBatcher& batch = streams->NewStepBatch();
  WholeFileConsumer consumer(*fetcher, cache, batch, counters, std::move(targets));
  Status s = streams->RunStep(consumer, consumer);
  consumer.DrainChecks();
  if (s.ok()) s = consumer.first_error();
  // Readable by the planner now; recorded (and flagged verified) as soon as
  // durable: the step's batch commits now, while the planner goes on.
  files.MarkChecked(consumer.verified());
  const Status committing = batch.CommitSoon();
  return s.ok() ? committing : s;
}

Result<RankPlan> PullJob::Rep::PlanRank(std::uint64_t* reused) {
  phases.Set(PullPhase::kMetadata);
  RankPlan rp;
  // The manifest: a name, a repo path, or else a local JSON file (a custom
  // width mix that is not part of the release).
  rp.manifest_path = IsManifestName(opt.manifest) ? ManifestPath(opt.manifest) : opt.manifest;
  std::optional<std::string> local_manifest;
  if (!files.all().contains(rp.manifest_path)) {
    std::error_code ec;
    if (!opt.allow_local_manifest)
      return NotFoundError("manifest '" + opt.manifest + "' is not in " + opt.repo + "@" + commit + " (no " +
                           rp.manifest_path + ")");
    if (IsManifestName(opt.manifest) || !std::filesystem::is_regular_file(opt.manifest, ec))
      return NotFoundError("manifest '" + opt.manifest + "' is neither in " + opt.repo + "@" + commit +
                           " (no " + rp.manifest_path + ") nor a local file");
    EXLR8_ASSIGN_OR_RETURN(local_manifest, ReadSmallFile(opt.manifest, kMaxManifestBytes));
  }
  rp.manifest_is_local = local_manifest.has_value();
  std::vector<ReleaseFile> release_files;
  std::vector<std::string> metadata;  // the whole files the planner reads
  if (!local_manifest) metadata.push_back(rp.manifest_path);
  for (const auto& [path, f] : files.all()) {
    release_files.push_back({f.path, f.size, f.sha256, f.git_sha1});
    if (ClassifyReleasePath(path).kind == ReleaseFileKind::kExpertIndex) metadata.push_back(path);
  }
  // Every other file is fetched whole, whatever the plan: start those now.
  for (const auto& [path, f] : files.all())
    if (ClassifyReleasePath(path).kind != ReleaseFileKind::kExpertWidth &&
        std::find(metadata.begin(), metadata.end(), path) == metadata.end())
      rp.whole.push_back(path);
  if (!opt.dry_run && !opt.offline) {
    EXLR8_ASSIGN_OR_RETURN(std::vector<WholeFileTarget> targets,
                           files.MissingWholeFiles(rp.whole, opt.offline, reused));
    EXLR8_RETURN_IF_ERROR(streams->StartFiles(std::move(targets)));
  }
  EXLR8_RETURN_IF_ERROR(EnsureWholeFiles(metadata, reused));
  PlannerSources sources;
  sources.open_index = [this](const ReleaseFile& rf) -> Result<std::unique_ptr<ByteSource>> {
    EXLR8_ASSIGN_OR_RETURN(const FileInfo* f, files.File(rf.path));
    return files.OpenForPlanning(*f);
  };
  sources.manifest_name = opt.manifest;
  sources.manifest_text = [&]() -> Result<std::string> {
    if (local_manifest) return std::move(*local_manifest);
    return files.ReadText(rp.manifest_path);
  };
  EXLR8_ASSIGN_OR_RETURN(PlannerInput input, AssemblePlannerInput(std::move(release_files), sources));
  files.SetIndexSources(std::move(input.index_sources));

  // plan: the halves, located by the index files alone (absolute offsets)
  phases.Set(PullPhase::kPlan);
  PlanOptions plan_options{opt.tp, opt.rank, opt.coalesce_gap, /*defer_headers=*/true};
  EXLR8_ASSIGN_OR_RETURN(rp.plan, MakePlan(input.release, *input.manifest, plan_options));
  counters.bytes_planned.store(rp.plan.totals.needed_bytes);
  // What the width files' headers are checked against: where their halves
  // lie. The index tables themselves are dropped here (66 MB at GLM-5.3
  // scale, a third of the pull's peak heap): the halves carry their own
  // checksums and tails, and the tails are read from index_sources.
  for (const PlanFile& pf : rp.plan.files) {
    if (pf.whole) continue;
    const ReleasePath path = ClassifyReleasePath(pf.path);
    auto ix = input.release.indexes.find(path.layer);
    if (ix == input.release.indexes.end())
      return CorruptionError(pf.path + ": no index file for layer " + std::to_string(path.layer));
    Result<WidthFileSpan> span = ix->second.SpanOfWidth(path.k);
    if (!span.ok()) return span.status().WithContext(pf.index_path);
    rp.spans.emplace(pf.path, std::move(*span));
    rp.width_paths.push_back(pf.path);
  }
  return rp;
}

Status PullJob::Rep::AddHeaders(RankPlan& rp, std::uint64_t* reused) {
  phases.Set(PullPhase::kHeaders);
  std::vector<const FileInfo*> width_files;
  for (const std::string& path : rp.width_paths) {
    EXLR8_ASSIGN_OR_RETURN(const FileInfo* f, files.File(path));
    width_files.push_back(f);
  }
  HeaderStep::Env env{cache, counters, space, fetcher.get()};
  env.offline = opt.offline;
  env.max_refetches = opt.fetch.max_refetches;
  env.max_header_bytes = opt.max_header_bytes;
  env.run_round = [this](HeaderConsumer& consumer) -> Status {
    if (streams == nullptr) return InternalError("fetch step without a fetch session");
    return streams->RunStep(consumer, consumer);
  };
  env.new_batch = [this]() -> CommitBatcher& { return streams->NewStepBatch(); };
  HeaderStep step(std::move(env), rp.spans);
  EXLR8_RETURN_IF_ERROR(step.Run(width_files, reused));
  EXLR8_RETURN_IF_ERROR(AddWidthHeaders(rp.plan, step.TakeHeaderBytes()));
  counters.bytes_planned.store(rp.plan.totals.needed_bytes);
  counters.bytes_reused.store(*reused);
  return Status::Ok();
}

}  // namespace exlr8
