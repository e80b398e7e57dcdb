// A TP rank's plan made again from what a cache holds, and how much of it
// is there: no network and no writes, so a read-only view of a cache that
// another process owns will do.
//
// The planner's inputs are the fileset's expert index files and manifest,
// as a pull verified them whole; the halves are located by the index files
// alone (absolute offsets: PlanOptions::defer_headers). Used by
// exlr8d-stage (daemon/stage/rank_reader.h) and by the rank's status
// (`exlr8d status`, GET /v1/ranks).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "daemon/cache/cache.h"
#include "format/plan.h"
#include "format/status.h"

namespace exlr8 {

// The fileset `repo` at `revision` (a branch or tag as last resolved, or a
// commit) as pulled into `cache`: NotFound "... was never pulled into DIR
// (run exlr8d pull first)" otherwise.
Result<FilesetInfo> FindPulledFileset(Cache& cache, const std::string& repo, const std::string& revision);

struct CachedRankPlan {
  std::vector<FileInfo> files;
  std::map<std::string, const FileInfo*> by_path;  // into `files`
  // The expert index files, open on their verified bytes: the halves'
  // checksum tails are read from them.
  std::map<std::string, std::unique_ptr<ByteSource>> index_sources;
  // Those index files parsed, by layer (the plan's input).
  std::map<int, ExpertIndex> indexes;
  Plan plan;  // width-file headers deferred (not in the plan)
};

// The index files and the manifest are checked against their listed
// hashes first. Errors: NotFound when the manifest or an index file is not
// verified in the cache; Corruption when one no longer matches its hash,
// or from the format's parsers; InvalidArgument from the format's parsers and
// the planner (a rank outside [0, tp), say).
// `check_index_hashes` false: only the manifest is hashed (a status
// answered on the REST server's thread must stay quick; the index files are
// some 70 MB at GLM-5.3 scale). The stage, which hands the bytes out,
// checks both.
// `local_manifest`: the text of a manifest that is not part of the release
// (a custom width mix a pull took from a local file), used instead of
// looking `manifest` up in the release; null: the release's.
Result<CachedRankPlan> PlanRankFromCache(Cache& cache, const FilesetInfo& fileset, const std::string& manifest,
                                         int tp, int rank, bool check_index_hashes = true,
                                         const std::string* local_manifest = nullptr);

// Whether the whole fileset of repo@revision (as `exlr8d pull` without a
// manifest fetches it) is in the cache: every listed file verified whole
// and still at its listed size (Cache::SizeOnDisk, as for a rank).
struct WholeFilesetStatus {
  FilesetInfo fileset;  // kind(), records, lvq5_files
  std::uint64_t files = 0, files_verified = 0, files_changed = 0;
  std::uint64_t bytes_verified = 0;
  std::string first_missing;  // "" when complete
  bool complete() const { return files_verified == files; }
};
// Errors as FindPulledFileset.
Result<WholeFilesetStatus> CheckWholeFilesetStatus(Cache& cache, const std::string& repo,
                                                   const std::string& revision);

// How much of a rank's plan the cache holds as verified: the whole files
// (dense, vocab, config, index files, manifests), the width files' headers
// and the halves. Only recorded (verified) bytes count, and only those the
// files still hold: each file of the plan with recorded bytes is looked at
// (one stat, no reading; Cache::SizeOnDisk). Bytes changed in place are for
// `exlr8d verify`, which reads them.
struct RankStatus {
  std::string commit;
  std::uint64_t files = 0, files_verified = 0;      // whole files
  std::uint64_t headers = 0, headers_verified = 0;  // width files the rank reads from
  std::uint64_t halves = 0, halves_verified = 0;
  // Bytes of the plan; headers count once their size is known, that is
  // once their first 8 bytes are verified.
  std::uint64_t bytes_planned = 0, bytes_verified = 0;
  // Files of the plan with recorded bytes whose size in the cache directory
  // is not their listed size, or that are gone (truncated, grown or deleted
  // behind the cache's back): the stage refuses such a file, and the next
  // pull forgets what they lost and mends them. Bytes past a truncated
  // file's end do not count as verified above.
  std::uint64_t files_changed = 0;
  // The first thing missing, named with its file and offset ("" when none).
  std::string first_missing;
  // False while the manifest or an index file is not verified in the cache
  // yet (a pull that has just begun): the plan cannot be made, so the counts
  // above are all 0 and first_missing names that file.
  bool planned = true;
  bool complete() const {
    return planned && files_verified == files && headers_verified == headers && halves_verified == halves &&
           files_changed == 0;
  }
};

// Errors as FindPulledFileset and PlanRankFromCache: a rank whose plan
// can never be made from the cache (never pulled, no such manifest in the
// release) is an error, not an incomplete status; one whose manifest or
// index files are not verified yet is incomplete (`planned` false).
Result<RankStatus> CheckRankStatus(Cache& cache, const std::string& repo, const std::string& revision,
                                   const std::string& manifest, int tp, int rank,
                                   const std::string* local_manifest = nullptr);

}  // namespace exlr8
