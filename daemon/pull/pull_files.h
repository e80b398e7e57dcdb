// PullFiles: what the cache holds of the fileset one pull writes, as the
// run sees it: the listing (read again after each step that records), the
// whole files this run checked by hash and has not recorded yet, the index
// files the halves' checksum tails are read from, and what of a plan is
// still missing.
//
// Thread rules: the pull's Run() thread only; no lock of its own (the
// Cache is safe to call from any thread).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "daemon/cache/cache.h"
#include "daemon/pull/consumers.h"
#include "daemon/pull/pull_job.h"
#include "format/byte_source.h"
#include "format/plan.h"
#include "format/status.h"

namespace exlr8 {

class PullFiles {
 public:
  // REQUIRES: `cache` and `counters` outlive this.
  PullFiles(Cache& cache, JobCounters& counters) : cache_(cache), counters_(counters) {}

  // The fileset; `where` ("org/name@commit") names it in errors. Then
  // Refresh() reads its listing.
  void SetFileset(FilesetId fileset, std::string where);
  // Reads the listing again. The first time, first un-records what is no
  // longer in the cache directory (bytes_lost()): what a run reuses must at
  // least be there.
  Status Refresh();
  const std::map<std::string, FileInfo>& all() const { return files_; }
  // NotFound "org/name@commit has no file PATH".
  Result<const FileInfo*> File(const std::string& path) const;

  // A whole file the planner reads: recorded in the cache, or checked by
  // hash in this run (MarkChecked) and not yet recorded.
  Result<std::unique_ptr<ByteSource>> OpenForPlanning(const FileInfo& f);
  Result<std::string> ReadText(const std::string& path);
  void MarkChecked(const std::vector<FileId>& files) { checked_here_.insert(files.begin(), files.end()); }
  // A whole-fileset pull: .bin files that start with the LVQ5 magic are
  // checked against its structure and get a record index
  // (WholeFileTarget::check_lvq5).
  void CheckLvq5Files() { check_lvq5_ = true; }
  // The index files, open, by path (PlannerInput::index_sources).
  void SetIndexSources(std::map<std::string, std::unique_ptr<ByteSource>> sources) {
    index_sources_ = std::move(sources);
  }

  // The files of `paths` not yet verified in the cache (adds the others'
  // sizes to *reused). Empty files are checked and marked here. Online,
  // bytes recorded without the verified flag are un-recorded and an
  // interrupted download resumes (WholeFileTarget::resume_from).
  Result<std::vector<WholeFileTarget>> MissingWholeFiles(const std::vector<std::string>& paths, bool offline,
                                                         std::uint64_t* reused);
  // The plan's halves not yet verified in the cache, grouped into requests
  // (adds the others' sizes to *reused; sets ranges_total and bytes_reused).
  Result<std::vector<FileWork>> MissingHalves(const Plan& plan, std::uint64_t coalesce_gap,
                                              std::uint64_t* reused);
  // What of the plan the cache does not hold verified (reads the listing
  // again first): bytes, and the plan's requests (ranges, whole files) that still have
  // some missing; `complete` when none.
  Status CountMissing(const Plan& plan, PullSummary* sum);

  // Recorded bytes found missing from the cache directory (PullSummary).
  std::uint64_t bytes_lost() const { return bytes_lost_; }

 private:
  Cache& cache_;
  JobCounters& counters_;
  FilesetId fileset_ = 0;
  std::string where_;
  std::map<std::string, FileInfo> files_;  // by repo path
  std::set<FileId> checked_here_;
  std::map<std::string, std::unique_ptr<ByteSource>> index_sources_;
  std::uint64_t bytes_lost_ = 0;
  bool check_lvq5_ = false;
};

}  // namespace exlr8
