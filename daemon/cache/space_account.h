// The cache's space account: what the file system has free, the room kept
// for the index (the reserve file), the space promised to pulls in flight
// (claims) and the decisions made from them (CheckSpace's verdict, how far
// MakeRoom evicts). docs/CACHE.md "Space and GC" has the rules.
//
// Owns: the claims (their `remaining` callbacks and the filesets they
// write), and the reserve file <dir>/exlr8d.reserve with the memory of
// whether this owner released it. Does not own: the recorded bytes (the
// catalog sums them) or the eviction itself (Cache runs it); the decisions
// take the recorded bytes as a number.
//
// Threads: every method may be called from any thread. claims_mu_ guards
// the claims; it is taken after the catalog's lock or without it, never
// before it, and nothing that holds it calls out except a claim's
// `remaining`. reserve_mu_ makes one release or restore of the reserve run
// at a time; it is a leaf lock.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "daemon/base/mutex.h"
#include "daemon/cache/cache_types.h"
#include "format/status.h"

namespace exlr8 {

class SpaceAccount {
 public:
  struct Options {
    // CacheOptions::byte_budget: nullopt = only the free space limits.
    std::optional<std::uint64_t> byte_budget;
    // CacheOptions::reserve_bytes: the reserve file's size; 0 = none.
    std::uint64_t reserve_bytes = 0;
    // A read-only view never makes the reserve.
    bool read_only = false;
  };

  // `root_fd` is the cache directory, borrowed: it must outlive this
  // account. `shown` names the directory in messages.
  SpaceAccount(int root_fd, std::string shown, Options options);
  SpaceAccount(const SpaceAccount&) = delete;
  SpaceAccount& operator=(const SpaceAccount&) = delete;

  const std::optional<std::uint64_t>& byte_budget() const { return options_.byte_budget; }
  std::uint64_t reserve_bytes() const { return options_.reserve_bytes; }

  // ---- claims (Cache::SpaceClaim) ----

  // Registers a claim; returns its id (never 0). `remaining` is called
  // under claims_mu_ (and the catalog's lock): quick, no calls into the
  // cache.
  std::uint64_t AddClaim(std::function<ClaimedBytes()> remaining) EXLR8_EXCLUDES(claims_mu_);
  // The fileset the claim writes: never evicted while the claim lives.
  void SetClaimFileset(std::uint64_t claim, FilesetId fileset) EXLR8_EXCLUDES(claims_mu_);
  void DropClaim(std::uint64_t claim) EXLR8_EXCLUDES(claims_mu_);
  // The filesets that live claims write.
  std::set<FilesetId> ClaimedFilesets() EXLR8_EXCLUDES(claims_mu_);

  // What the claim `own` (0: none) and every other claim still hold.
  struct ClaimSums {
    ClaimedBytes own, others;
  };
  // The caller holds the lock under which recorded bytes leave claims (the
  // catalog's: CommitVerified's on_recorded), so that the recorded sum it
  // read under the same lock and these sums are of one moment.
  ClaimSums SumClaims(std::uint64_t own) EXLR8_EXCLUDES(claims_mu_);

  // ---- free space and the reserve ----

  // Free bytes for an unprivileged writer (statvfs f_bavail), less what of
  // the reserve this owner released and has not made again.
  Result<std::uint64_t> FreeBytes() EXLR8_EXCLUDES(reserve_mu_);
  // Deletes the reserve if there is one (a regular file only); true if it
  // did. Best effort.
  bool ReleaseReserve() EXLR8_EXCLUDES(reserve_mu_);
  // ReleaseReserve when less than reserve_bytes is free (Open with
  // CacheOptions::use_reserve).
  void ReleaseReserveIfLow() EXLR8_EXCLUDES(reserve_mu_);
  // Makes the reserve reserve_bytes large again (creating it, or completing
  // one cut short: allocated, fdatasynced, its name fsynced) out of the
  // free space, leaving at least `keep_free` of it; never shrinks it.
  // Best effort: the reserve is a margin, not a precondition.
  void RestoreReserve(std::uint64_t keep_free) EXLR8_EXCLUDES(reserve_mu_);
  // Whether this owner released the reserve (the destructor of Cache gives
  // it back from what is free when it did).
  bool released_reserve() EXLR8_EXCLUDES(reserve_mu_);
  // What of the released reserve is not there again.
  std::uint64_t ReserveOwed() EXLR8_EXCLUDES(reserve_mu_);

  // ---- decisions (no side effects) ----

  // OK if `bytes_needed` more bytes fit beside every claim, given the
  // recorded bytes and the free space read after the claims (Cache::
  // CheckSpace has the sums). ResourceExhausted with the message
  // Cache::CheckSpace documents otherwise.
  Status Check(std::uint64_t bytes_needed, std::uint64_t recorded, const ClaimSums& claims,
               std::uint64_t free) EXLR8_EXCLUDES(reserve_mu_);
  // The recorded bytes at which `bytes_needed` fits by Check's sums (on
  // disk, an evicted fileset frees at least its recorded bytes); >=
  // `recorded` when it fits already.
  std::uint64_t RoomTarget(std::uint64_t bytes_needed, std::uint64_t recorded, const ClaimSums& claims,
                           std::uint64_t free) const;

 private:
  std::uint64_t ReserveOwedLocked() EXLR8_REQUIRES(reserve_mu_);

  const int root_fd_;
  const std::string shown_;
  const Options options_;

  Mutex claims_mu_;
  std::map<std::uint64_t, std::function<ClaimedBytes()>> claims_ EXLR8_GUARDED_BY(claims_mu_);
  std::map<std::uint64_t, FilesetId> claim_filesets_ EXLR8_GUARDED_BY(claims_mu_);
  std::uint64_t next_claim_ EXLR8_GUARDED_BY(claims_mu_) = 1;

  Mutex reserve_mu_;
  bool released_reserve_ EXLR8_GUARDED_BY(reserve_mu_) = false;
};

}  // namespace exlr8
