// The crash-safe local cache of exlr8d: a partial, sparse mirror of remote
// filesets plus an SQLite index of which bytes are verified.
//
// Layout (docs/CACHE.md has the whole story):
//   <dir>/exlr8d.lock                        held (flock) while a Cache is open
//   <dir>/exlr8d.db                          index, WAL mode, synchronous=FULL
//   <dir>/<org>/<name>/<commit>/<repo path>  data; each verified byte at its
//                                            remote offset, holes elsewhere
// Every data file is created at its remote size (ftruncate, so holes take no
// space), so tools that read the release layout can read the cache directly
// for the byte ranges it holds.
//
// Crash safety. Writing and recording are separate steps:
//   WriteAt          pwrite only. The bytes may sit on disk unrecorded.
//   CommitVerified   fdatasync every touched file (and new directory entries),
//                    THEN record all extents in one transaction.
// So a recorded extent is always on stable storage, whatever moment the
// process dies at (kill -9, power loss). Eviction runs the other way round:
// rows are deleted durably first, files afterwards. The caller verifies bytes
// (checksums) before committing them; the cache does not re-hash.
//
// Ownership and threads. One process owns a cache directory at a time (the
// lock file). A Cache is thread-safe: every method may be called from any
// thread; the engine's loop writes while a REST thread reads. Cache is a
// facade over three pieces that own the state: Catalog (catalog.h, the
// SQLite index; its lock serializes index access), ExtentStore
// (extent_store.h, the data files; pwrite and fdatasync run under none of
// the index's locks, so readers are not stalled by disk flushes) and
// SpaceAccount (space_account.h, free space, the reserve and claims).
// WriteAt calls for the same bytes from two threads at once are the
// caller's problem (they write the same verified content anyway).
//
// Errors: InvalidArgument for bad names/ranges (naming them), NotFound for
// unknown ids or unverified bytes, FailedPrecondition for a held lock or a
// conflicting re-declaration, ResourceExhausted for disk/quota/budget,
// IOError for other OS failures, Corruption for a damaged index.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/base/clock.h"
#include "daemon/cache/cache_types.h"
#include "daemon/cache/extent_set.h"
#include "daemon/cache/process_pin.h"
#include "format/byte_source.h"
#include "format/status.h"

namespace exlr8 {

class SpaceAccount;  // space_account.h

struct CacheOptions {
  // Most bytes the cache may hold (sum of verified extents). CheckSpace
  // refuses work beyond it; Gc(budget) is how a caller gets back under it.
  // nullopt = only the file system's free space limits the cache.
  std::optional<std::uint64_t> byte_budget;
  // The times the cache records (last use, pulls, pins) are its
  // NowUnixMs(); tests inject a FakeClock to make LRU order deterministic.
  // Called under the lock. Must outlive the Cache.
  Clock* clock = &Clock::Real();
  // Write-behind: once this many bytes of a file were written since its last
  // kick, WriteAt asks the kernel to start writing its dirty pages back
  // (sync_file_range SYNC_FILE_RANGE_WRITE, no wait). The disk then writes
  // while the network is still delivering, instead of in one burst at the
  // next commit's fdatasync, which alone makes bytes durable. 0 = off.
  std::uint64_t write_behind_bytes = 8 << 20;
  // How long Open waits for the cache's lock when another process holds it,
  // before FailedPrecondition. Commands that hold it for a moment (`list`,
  // `pin`) must not make a pull starting just then fail, even under a
  // `list` loop; a pull that owns the cache for an
  // hour still gets its clear error after this.
  std::chrono::milliseconds lock_wait{2000};
  // Room for the index on a full file system. SQLite needs space of its own
  // to change anything (WAL frames, and a checkpoint may grow the database),
  // even to delete rows, so a disk filled by a pull would lock out the very
  // commands that free it. Every owner keeps <dir>/exlr8d.reserve, a file
  // of this many bytes allocated on disk (fallocate, fdatasync), made out
  // of what is free beyond another reserve_bytes (never the last of the
  // disk). It is released (deleted) when the index needs it: by Open with
  // `use_reserve` when less than this much is free, and by an eviction
  // whose transaction finds the disk full (it is then tried once more).
  // Released, it is not counted as free (FreeBytes); Gc and Evict make it
  // again from what they freed, and the destructor takes back, from what
  // is free, what this Cache released. 0 = none.
  std::uint64_t reserve_bytes = 16ull << 20;
  // For a command that must work on a full file system because it frees
  // space or is how an operator gets there (gc, pull --make-room, pin,
  // unpin, verify): Open releases the reserve first when less than
  // reserve_bytes is free. A plain pull leaves it alone (it would only
  // fill it), and fails for lack of space as before.
  bool use_reserve = false;
};

class Cache {
 public:
  // Opens (creating) the cache in `dir`: takes <dir>/exlr8d.lock, opens and
  // migrates <dir>/exlr8d.db, and marks pulls left 'running' by a dead
  // process as 'failed'. That mark needs room on disk; on a full one it is
  // left for later (an eviction that frees space tries again), and until
  // then this Cache treats every 'running' pull it did not start as
  // interrupted: reported 'failed', and no bar to eviction. FailedPrecondition
  // naming the lock file and the holder's pid if another Cache (this or
  // another process) holds it, or if the index is newer than this binary.
  // The reserve: see CacheOptions::reserve_bytes.
  // The returned Cache holds the lock until destroyed.
  static Result<std::unique_ptr<Cache>> Open(std::filesystem::path dir, CacheOptions options = {});
  ~Cache();
  Cache(const Cache&) = delete;
  Cache& operator=(const Cache&) = delete;

  // A read-only view of the cache in `dir` for reporting while another
  // process owns it (a pull): no lock is taken, the index is opened
  // read-only (SQLite WAL readers see each committed transaction whole),
  // and every call that would change something fails with
  // FailedPrecondition and changes nothing; the Get/List/Covers/
  // VerifiedExtents/OpenVerified readers work. Pulls of a process that died
  // stay 'running' here until an owner opens the cache. Needs no room on
  // disk beyond what SQLite's shared-memory file already holds. NotFound
  // when `dir` holds no cache; FailedPrecondition when its index is at
  // another schema version than this binary's.
  static Result<std::unique_ptr<Cache>> OpenReadOnly(std::filesystem::path dir);
  bool read_only() const;

  const std::filesystem::path& dir() const;
  // CacheOptions::byte_budget as opened.
  const std::optional<std::uint64_t>& byte_budget() const;

  // ---- filesets ----

  // Returns the fileset for (repo, commit), creating it, and records that
  // `revision` resolves to `commit` (for LookupCommit). Touches last_used.
  // InvalidArgument for an invalid repo id, revision or commit.
  Result<FilesetId> PutFileset(std::string_view repo, std::string_view revision, std::string_view commit);
  // Offline mode: the commit `revision` resolved to when last online.
  // NotFound if never recorded.
  Result<std::string> LookupCommit(std::string_view repo, std::string_view revision);
  // Marks the fileset used now (LRU order for Gc).
  Status Touch(FilesetId fileset);
  // Pins are named by holder; a fileset with any pin is never evicted, nor
  // one with a live process pin (process_pin.h, taken without this class).
  // Pin is idempotent; Unpin of an absent pin is OK (returns OK).
  Status Pin(FilesetId fileset, std::string_view holder = "user");
  Status Unpin(FilesetId fileset, std::string_view holder = "user");
  Result<FilesetInfo> GetFileset(FilesetId fileset);
  // All filesets, most recently used first, with their byte counts.
  Result<std::vector<FilesetInfo>> ListFilesets();

  // ---- files ----

  // Declares a file of a fileset (idempotent). A known file declared with a
  // different size, or a hash that contradicts a known hash, is
  // FailedPrecondition (the remote changed under a fixed commit). A hash
  // unknown so far is filled in. InvalidArgument for an unsafe path or a size
  // >= 2^63.
  Result<FileId> PutFile(FilesetId fileset, std::string_view path, std::uint64_t size,
                         std::optional<std::string> sha256 = std::nullopt,
                         std::optional<std::string> git_sha1 = std::nullopt);
  // PutFile for a whole listing in one transaction (one sync instead of one
  // per file); all or nothing. Ids in the order of `files`.
  Result<std::vector<FileId>> PutFiles(FilesetId fileset, std::span<const NewFile> files);
  Result<FileId> FindFile(FilesetId fileset, std::string_view path);
  Result<FileInfo> GetFile(FileId file);
  Result<std::vector<FileInfo>> ListFiles(FilesetId fileset);
  // Where the file's bytes live: <dir>/<org>/<name>/<commit>/<path>.
  Result<std::filesystem::path> DataPath(FileId file);

  // ---- writing ----

  // pwrites `data` at `offset` of the file, creating it (sparse, at its full
  // size) and its directories if needed. Records nothing.
  // InvalidArgument if [offset, offset + size) is outside the file;
  // ResourceExhausted on ENOSPC, EDQUOT or EFBIG; NotFound for an unknown id.
  Status WriteAt(FileId file, std::uint64_t offset, std::span<const std::byte> data);

  // Makes the given verified extents durable and records them: fdatasync
  // each touched file (plus fsync of directories that gained entries), then
  // one transaction merges them into the extent table. All or nothing: on
  // error nothing is recorded. Empty extents are ignored.
  // InvalidArgument for a range outside its file; NotFound for an unknown
  // file; FailedPrecondition if the file was never written (not on disk).
  // Call it in batches (per second or per N MB), not per extent.
  // `prefixes` are recorded in the same transaction, after the same syncs.
  // A prefix is a resume point only: it never counts as present. An extent
  // with whole_file must be exactly [0, size) (InvalidArgument otherwise).
  // `on_recorded`, when given, runs once the transaction has committed,
  // still under the lock that CheckSpace and MakeRoom hold while they sum
  // the recorded bytes and the claims: a pull takes the bytes just recorded
  // off its claim there (SpaceClaim), so that no check counts them twice
  // (recorded and still claimed) or not at all. It does not run on error;
  // it must be quick and must not call into the Cache.
  Status CommitVerified(std::span<const VerifiedExtent> extents, std::span<const DurablePrefix> prefixes = {},
                        const std::function<void()>& on_recorded = {});

  // The caller checked the whole file against its hash: fdatasync it, then
  // record [0, size) and set whole_verified. A size-0 file is created empty.
  Status MarkWholeFileVerified(FileId file);

  // The whole file as written, for the process that has itself just checked
  // all of it against its hash, before the commit that records it: the
  // planner reads index files and manifests this way instead of waiting for
  // their fdatasync. Never for serving; others use OpenVerified.
  // FailedPrecondition if the file was never written.
  Result<std::unique_ptr<ByteSource>> OpenCheckedByCaller(FileId file);

  // Reads bytes of a file's recorded durable prefix (see DurablePrefix), to
  // hash them again when its download resumes. FailedPrecondition if
  // [offset, offset + out.size()) is not within the prefix.
  Status ReadDurablePrefix(FileId file, std::uint64_t offset, std::span<std::byte> out);
  // The same for several files: one pass of syncs, one transaction.
  Status MarkWholeFilesVerified(std::span<const FileId> files);

  // Un-records bytes found damaged after they were verified (bit rot, a
  // file changed by hand: daemon/scrub/scrub.h). In one transaction, removes
  // the given ranges from their files' verified extents; a whole-verified
  // file that loses any byte is no longer whole-verified, and its durable
  // prefix is dropped. The data files are left alone: the bytes stay on disk
  // unrecorded, so nothing serves them, and the next pull fetches them again.
  // Ranges that cover no recorded byte change nothing. Returns how many
  // recorded bytes were forgotten. InvalidArgument for a range outside its
  // file; NotFound for an unknown file; nothing changes on error.
  Result<std::uint64_t> ForgetExtents(std::span<const VerifiedExtent> ranges);

  // Un-records (as ForgetExtents) the bytes of `fileset` that the cache
  // directory no longer holds at all: files deleted behind the cache's
  // back, and everything past the end of files truncated shorter than their
  // remote size. One stat per file with recorded bytes, no reading: a pull
  // calls it first, so what it reuses is at least there (bytes changed in
  // place are for `exlr8d verify`, which reads them). Returns the bytes
  // forgotten.
  Result<std::uint64_t> ForgetLostBytes(FilesetId fileset);
  // The size of the file's data in the cache directory now, by one stat
  // (no reading); nullopt when it is not there (deleted, never written, or
  // deleted while this process held it open). Every data file is created at
  // its listed size, so another size means it was changed behind the
  // cache's back. Works on a read-only view. NotFound for an unknown id.
  Result<std::optional<std::uint64_t>> SizeOnDisk(FileId file);
  // Cuts a data file grown past its listed size back to it (the bytes past
  // the end are not the release's; the stage refuses such a file). Its
  // recorded bytes stay. A scrub that repairs calls it.
  Status CutToListedSize(FileId file);
  // Records that a scrub just checked every recorded byte of `fileset`, and
  // that `checks_failed` checks failed (their bytes already forgotten).
  Status RecordVerified(FilesetId fileset, std::uint64_t checks_failed);

  // ---- reading ----

  // Whether every byte of [offset, offset + length) is verified.
  // InvalidArgument if the range is outside the file.
  Result<bool> Covers(FileId file, std::uint64_t offset, std::uint64_t length);
  // Verified extents, sorted, merged.
  Result<std::vector<Extent>> VerifiedExtents(FileId file);
  // The file's record index (VerifiedExtent::records), in its order; empty
  // when it has none. Meaningful only while the file is whole_verified.
  Result<std::vector<FileRecord>> Records(FileId file);
  // The holes of [offset, offset + length): what still needs fetching.
  Result<std::vector<Extent>> MissingRanges(FileId file, std::uint64_t offset, std::uint64_t length);
  // A ByteSource over the file that serves only bytes verified when it was
  // opened (a snapshot): ReadAt of a range with an unverified byte is
  // NotFound naming the file and the first missing offset. size() is the
  // remote size. The source owns its descriptor and may outlive the Cache;
  // ReadAt may be called from several threads at once.
  Result<std::unique_ptr<ByteSource>> OpenVerified(FileId file);

  // ---- space ----

  // Free bytes for an unprivileged writer on the cache's file system, less
  // the reserve this Cache released and has not made again (that room is
  // kept for the index: CacheOptions::reserve_bytes).
  Result<std::uint64_t> FreeBytes();
  // Sum of all verified extents.
  Result<std::uint64_t> RecordedBytes();
  // What a claim still holds (see SpaceClaim).
  using ClaimedBytes = exlr8::ClaimedBytes;
  // Space promised to work in progress. Several pulls may run on one Cache
  // at once (`exlr8d serve`); each checks the space for its own plan before
  // it writes, and without claims two of them could each find room for
  // itself and together overrun the disk or the budget. A pull registers a
  // claim whose `remaining` says how many of the bytes it claimed (checked
  // space for) it has not written yet, and not recorded yet; CheckSpace
  // and MakeRoom count those as taken. The unrecorded part may drop only in
  // a CommitVerified's `on_recorded`, as the same bytes join the recorded
  // sum: a check sums both under that lock, so it never counts a byte twice
  // nor misses one. Unregistered when destroyed. `remaining` is called from
  // any thread, under the index lock and the claims' lock: it must be
  // quick and must not call into the Cache.
  class SpaceClaim {
   public:
    ~SpaceClaim();
    // The fileset this claim writes: Gc, MakeRoom and Evict leave it alone
    // while the claim lives (a pull's own fileset, before and after its
    // 'running' row exists).
    void SetFileset(FilesetId fileset);
    SpaceClaim(const SpaceClaim&) = delete;
    SpaceClaim& operator=(const SpaceClaim&) = delete;

   private:
    friend class Cache;
    SpaceClaim(SpaceAccount* account, std::uint64_t id) : account_(account), id_(id) {}
    SpaceAccount* account_;
    std::uint64_t id_;
  };
  // REQUIRES: the claim does not outlive this Cache.
  std::unique_ptr<SpaceClaim> ClaimSpace(std::function<ClaimedBytes()> remaining);

  // OK if `bytes_needed` more bytes fit on disk and within the budget,
  // besides what every claim still holds, `own` (the caller's) included:
  // on disk, the free space less every claim's unwritten bytes; within the
  // budget, the recorded bytes plus every claim's unrecorded ones, summed
  // at one moment (see SpaceClaim). A pull claims first, then checks with
  // bytes_needed 0. ResourceExhausted "need X GB, Y GB free on <dir>
  // (budget Z GB, W GB used; V GB promised to pulls running now)"
  // otherwise, where X is bytes_needed plus what `own` still holds and V
  // what the other claims do.
  Status CheckSpace(std::uint64_t bytes_needed, const SpaceClaim* own = nullptr);
  // Evicts unpinned filesets without a running pull (or a live claim),
  // least recently used first, until RecordedBytes() <= budget or nothing
  // evictable is left
  // (check GcResult::bytes_remaining). Also removes leftover data
  // directories that no fileset row refers to (from a crash mid-eviction).
  Result<GcResult> Gc(std::uint64_t budget);
  // What Gc evicts, as much of it as `bytes_needed` needs to fit (on disk
  // and within the budget, besides every claim, `own` included, as
  // CheckSpace counts): `exlr8d pull --make-room`. Evicts nothing when it fits; may
  // not free enough (CheckSpace after it says).
  Result<GcResult> MakeRoom(std::uint64_t bytes_needed, const SpaceClaim* own = nullptr);
  // Evicts one fileset now, whatever its place in LRU order: its rows
  // durably first, then its data. FailedPrecondition naming the holders if
  // it is pinned, or if a pull of it is running; NotFound for an unknown id.
  Result<GcResult> Evict(FilesetId fileset);

  // ---- pulls ----

  Result<PullId> StartPull(const PullSpec& spec);
  // Replaces the counters of a running pull. FailedPrecondition if finished.
  Status UpdatePull(PullId pull, const PullCounters& counters);
  // REQUIRES: state != kRunning (InvalidArgument otherwise).
  Status FinishPull(PullId pull, PullState state, std::string_view error = {});
  Result<PullInfo> GetPull(PullId pull);
  // Newest first; all filesets when `fileset` is nullopt.
  Result<std::vector<PullInfo>> ListPulls(std::optional<FilesetId> fileset = std::nullopt);

 private:
  struct Rep;
  explicit Cache(std::unique_ptr<Rep> rep);
  std::unique_ptr<Rep> rep_;
};

}  // namespace exlr8
