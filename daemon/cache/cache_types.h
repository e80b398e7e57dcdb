// The value types of the cache's interface (ids, files, filesets, pulls,
// eviction results, space claims), shared by Cache (cache.h) and the pieces
// behind it (catalog.h, extent_store.h, space_account.h). Plain data: no
// behaviour, no locks.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/cache/process_pin.h"

namespace exlr8 {

using FilesetId = std::int64_t;
using FileId = std::int64_t;
using PullId = std::int64_t;

// A file of a remote listing, as PutFiles takes it.
struct NewFile {
  std::string path;
  std::uint64_t size = 0;
  std::optional<std::string> sha256;
  std::optional<std::string> git_sha1;
};

// One record of a file whose structure the caller checked (an LVQ5
// container's matrix records, raw tensors and blobs), as the cache's
// record index keeps it (schema 004_lvq5_records.sql).
struct FileRecord {
  std::string name;
  std::string kind;                      // "tetra", "ball", "int4g128", "f16", "quant", "blob"
  std::string shape;                     // "256x264"; raw tensors: their dims joined by 'x'; blobs: ""
  std::uint64_t offset = 0, length = 0;  // the record's bytes in the file
  std::uint64_t xxh64 = 0;               // XXH64 (seed 0) of those bytes
};

// Verified bytes [offset, offset + length) of one file.
struct VerifiedExtent {
  FileId file = 0;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  // [0, size) of a file the caller checked whole against its hash: the same
  // transaction that records it sets the file's whole_verified, so no crash
  // can leave the bytes recorded with the flag unset.
  bool whole_file = false;
  // With whole_file: the file's record index, computed from the verified
  // bytes; it replaces the file's rows in the same transaction. Null: the
  // file has no record index (any rows it had are removed).
  std::shared_ptr<const std::vector<FileRecord>> records;
};

// Bytes [0, bytes) of a file being downloaded whole arrived in order: once
// durable, a restarted download may resume there (never reported present).
struct DurablePrefix {
  FileId file = 0;
  std::uint64_t bytes = 0;
};

struct FilesetInfo {
  FilesetId id = 0;
  std::string repo;      // "org/name"
  std::string revision;  // the revision last resolved to this commit
  std::string commit;
  std::int64_t created_ms = 0;
  std::int64_t last_used_ms = 0;
  std::vector<std::string> pins;  // holders; empty = not pinned
  // Pins of live processes (process_pin.h): exlr8d-stage holding a rank of
  // this fileset in GPU memory. Gc and Evict respect them as they do pins.
  std::vector<ProcessPinInfo> process_pins;
  bool pinned() const { return !pins.empty() || !process_pins.empty(); }
  std::uint64_t file_count = 0;
  std::uint64_t bytes_total = 0;   // sum of remote file sizes
  std::uint64_t bytes_cached = 0;  // sum of verified extents
  // Files verified whole; LVQ5 files among them (those with a record
  // index) and their records (a whole-fileset pull).
  std::uint64_t files_verified = 0;
  std::uint64_t lvq5_files = 0;
  std::uint64_t records = 0;
  // "lvq5" when any verified file has a record index, else "exlr8".
  std::string_view kind() const { return lvq5_files > 0 ? "lvq5" : "exlr8"; }
  // When a scrub (exlr8d verify) last checked every recorded byte and
  // forgot what failed; nullopt = never. verify_failures: checks that failed
  // then.
  std::optional<std::int64_t> verified_ms;
  std::uint64_t verify_failures = 0;
};

struct FileInfo {
  FileId id = 0;
  FilesetId fileset = 0;
  std::string path;  // repo path
  std::uint64_t size = 0;
  std::optional<std::string> sha256;
  std::optional<std::string> git_sha1;
  bool whole_verified = false;
  std::uint64_t bytes_cached = 0;
  std::uint64_t durable_prefix = 0;  // see DurablePrefix; 0 when none
};

enum class PullState { kRunning, kDone, kFailed, kCancelled };
std::string_view PullStateName(PullState state);  // "running", "done", ...

struct PullCounters {
  std::uint64_t bytes_planned = 0;
  std::uint64_t bytes_fetched = 0;  // from the network
  std::uint64_t bytes_reused = 0;   // already in the cache
  std::uint64_t requests = 0;
  std::uint64_t retries = 0;
  std::uint64_t checksum_failures = 0;
};

struct PullSpec {
  FilesetId fileset = 0;
  std::string manifest;  // repo path of the manifest; empty: the whole fileset (no ranks)
  int tp = 1;
  int rank = 0;
  std::string plan_summary_json = "{}";
  // When the pull's work began (it plans before it records itself), Unix
  // ms; 0, or a time after StartPull's, means StartPull's time. Rates shown
  // for the pull are its bytes over the time since then.
  std::int64_t started_ms = 0;
};

struct PullInfo {
  PullId id = 0;
  PullSpec spec;
  PullState state = PullState::kRunning;
  std::string error;  // why it failed or was cancelled
  PullCounters counters;
  std::int64_t started_ms = 0;
  std::int64_t updated_ms = 0;
  std::optional<std::int64_t> finished_ms;
};

struct GcResult {
  std::uint64_t bytes_freed = 0;      // verified bytes of the evicted filesets
  std::vector<FilesetId> evicted;     // in eviction order (LRU first)
  std::uint64_t bytes_remaining = 0;  // verified bytes still cached
};

// Where a file's data lives: its row in the catalog joined with its
// fileset (Catalog::LoadFile), as the extent store opens it.
struct FileLocation {
  FilesetId fileset = 0;
  std::uint64_t size = 0;  // listed (remote) size
  std::string rel;         // <org>/<name>/<commit>/<path>, relative to the cache directory
};

// What a space claim still holds (Cache::SpaceClaim, SpaceAccount).
struct ClaimedBytes {
  // Claimed and not written yet: still to come out of the free space.
  std::uint64_t unwritten = 0;
  // Claimed and not recorded yet, written or not: still to join the
  // recorded bytes, so counted against the budget.
  std::uint64_t unrecorded = 0;
};

}  // namespace exlr8
