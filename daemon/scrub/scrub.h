// Scrub: checks every byte the cache records as verified against the
// format's checksums again, and forgets (Cache::ForgetExtents) what no
// longer matches. Disks rot and people edit files by hand; without this, a
// damaged byte would stay "present" forever and every later pull would
// reuse it. After a repairing scrub, the next pull fetches exactly the
// forgotten bytes again.
//
// What checks what (the checks a pull made, redone from the cache alone):
//  - whole files (expert index files, manifests, dense and vocab files,
//    config.json): the SHA-256 of the hub's LFS listing, or the git blob
//    SHA-1 of small files; dense and vocab files also against the format
//    (CheckDenseFile: every tensor inside the file, none overlapping, valid
//    records, every block checksum of spec 5.4), and expert index files by
//    parsing them;
//  - expert halves in width files: XXH64 with their index-file tail (spec
//    5.3), for every half of the layer's index file that is recorded,
//    whichever manifest and rank brought it;
//  - LVQ5 files (a whole-fileset pull): the SHA-256, and in the same pass
//    each record's XXH64 against the record index (a failure names the
//    records that changed);
//  - a width file's header [0, 8 + N): parsed, and every half the index
//    stores at that width must lie inside its data section. The format has
//    no checksum for headers, so a changed byte that still parses (inside a
//    tensor name, say) is not caught here.
// Index files are checked first. One that fails is forgotten, and the
// halves and header of its layer's width files are left unchecked (not
// forgotten: they were verified against the good copy) and reported as
// such, so a scrub after the next pull checks them. Recorded bytes that no
// check covers are reported as unaccounted (a cache written by exlr8d has
// none).
//
// Reads only verified bytes (Cache::OpenVerified), on several threads.
// Repairing needs a writable Cache (its lock); on a read-only view
// (Cache::OpenReadOnly, beside a running pull) the scrub checks and reports.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "daemon/cache/cache.h"
#include "format/json.h"
#include "format/status.h"

namespace exlr8 {

// Live counters, readable from any thread while a scrub runs.
struct ScrubCounters {
  std::atomic<std::uint64_t> bytes_total{0};    // to check, once planned
  std::atomic<std::uint64_t> bytes_checked{0};
  std::atomic<std::uint64_t> failures{0};
};

struct ScrubOptions {
  // Forget what fails. REQUIRES a writable Cache (FailedPrecondition
  // otherwise, before anything is read).
  bool repair = true;
  // Hashing threads: 0 = one per core, at most 16.
  int threads = 0;
  // Set from any thread: the scrub stops after the units in progress and
  // returns Cancelled, forgetting nothing.
  const std::atomic<bool>* cancel = nullptr;
  ScrubCounters* counters = nullptr;  // optional
};

// One check that failed: which bytes, what they are, and why.
struct ScrubFailure {
  std::string file;  // repo path
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  std::string what;   // "L3 e0 gate h7 K2", "header", "whole file"
  std::string error;  // the check's own message
};

struct ScrubReport {
  FilesetId fileset = 0;
  std::string repo;
  std::string commit;
  std::uint64_t bytes_recorded = 0;  // verified bytes of the fileset, before
  std::uint64_t bytes_checked = 0;
  std::uint64_t whole_files = 0;     // checks run, by kind
  std::uint64_t halves = 0;
  std::uint64_t headers = 0;
  // Records of LVQ5 files whose XXH64 was checked against the record index
  // (in the pass that hashes their file).
  std::uint64_t records = 0;
  // Recorded bytes of width files whose index file failed or is not
  // recorded whole: not checkable now (see above).
  std::uint64_t bytes_unchecked = 0;
  // Recorded bytes no check covers.
  std::uint64_t bytes_unaccounted = 0;
  std::uint64_t checks_failed = 0;
  // The first kMaxFailureDetails failures found, sorted by file path, then
  // offset (a lost data file fails every half in it: thousands).
  std::vector<ScrubFailure> failures;
  bool repaired = false;  // every failed check's bytes were forgotten
  std::uint64_t bytes_forgotten = 0;
  double seconds = 0;

  static constexpr std::size_t kMaxFailureDetails = 1000;
  bool clean() const { return checks_failed == 0; }
};

// Scrubs one fileset. Errors are about the scrub itself (an unknown
// fileset, a failing index query, Cancelled); what the checks find is in
// the report.
Result<ScrubReport> ScrubFileset(Cache& cache, FilesetId fileset, const ScrubOptions& options = {});

// The report as a JSON object: repo, commit, clean, the byte counts, the
// checks by kind, every failure (file, offset, length, what, error),
// repaired, bytes_forgotten, seconds. What `exlr8d verify --json` prints per
// fileset and a verify job of `exlr8d serve` keeps as its result.
JsonValue ScrubReportJson(const ScrubReport& report);

}  // namespace exlr8
