#include "daemon/cache/space_account.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <span>
#include <utility>
#include <vector>

#include "daemon/base/posix.h"
#include "daemon/cache/cache_paths.h"
#include "format/units.h"

namespace exlr8 {

SpaceAccount::SpaceAccount(int root_fd, std::string shown, Options options)
    : root_fd_(root_fd), shown_(std::move(shown)), options_(std::move(options)) {}

// ---- claims ----

std::uint64_t SpaceAccount::AddClaim(std::function<ClaimedBytes()> remaining) {
  MutexLock l(&claims_mu_);
  const std::uint64_t id = next_claim_++;
  claims_.emplace(id, std::move(remaining));
  return id;
}

void SpaceAccount::SetClaimFileset(std::uint64_t claim, FilesetId fileset) {
  MutexLock l(&claims_mu_);
  claim_filesets_[claim] = fileset;
}

void SpaceAccount::DropClaim(std::uint64_t claim) {
  MutexLock l(&claims_mu_);
  claims_.erase(claim);
  claim_filesets_.erase(claim);
}

std::set<FilesetId> SpaceAccount::ClaimedFilesets() {
  MutexLock l(&claims_mu_);
  std::set<FilesetId> out;
  for (const auto& [id, fileset] : claim_filesets_) out.insert(fileset);
  return out;
}

SpaceAccount::ClaimSums SpaceAccount::SumClaims(std::uint64_t own) {
  MutexLock l(&claims_mu_);
  ClaimSums sums;
  for (const auto& [id, remaining] : claims_) {
    const ClaimedBytes held = remaining();
    ClaimedBytes& into = id == own ? sums.own : sums.others;
    into.unwritten += held.unwritten;
    into.unrecorded += held.unrecorded;
  }
  return sums;
}

// ---- free space and the reserve ----

Result<std::uint64_t> SpaceAccount::FreeBytes() {
  struct statvfs vfs;
  if (::fstatvfs(root_fd_, &vfs) != 0) return ErrnoStatus(errno, "statvfs " + shown_);
  const std::uint64_t free =
      static_cast<std::uint64_t>(vfs.f_bavail) * static_cast<std::uint64_t>(vfs.f_frsize);
  return free - std::min(free, ReserveOwed());
}

bool SpaceAccount::ReleaseReserve() {
  MutexLock l(&reserve_mu_);
  const std::string name(kCacheReserveName);
  struct stat st;
  // Only a regular file of ours; anything else there is left alone.
  if (::fstatat(root_fd_, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) return false;
  if (::unlinkat(root_fd_, name.c_str(), 0) != 0) return false;
  released_reserve_ = true;
  return true;
}

void SpaceAccount::ReleaseReserveIfLow() {
  if (options_.read_only || options_.reserve_bytes == 0) return;
  struct statvfs vfs;
  if (::fstatvfs(root_fd_, &vfs) == 0 &&
      static_cast<std::uint64_t>(vfs.f_bavail) * vfs.f_frsize < options_.reserve_bytes)
    (void)ReleaseReserve();
}

bool SpaceAccount::released_reserve() {
  MutexLock l(&reserve_mu_);
  return released_reserve_;
}

std::uint64_t SpaceAccount::ReserveOwed() {
  MutexLock l(&reserve_mu_);
  return ReserveOwedLocked();
}

std::uint64_t SpaceAccount::ReserveOwedLocked() {
  const std::uint64_t want = options_.reserve_bytes;
  if (!released_reserve_ || want == 0) return 0;
  struct stat st;
  if (::fstatat(root_fd_, std::string(kCacheReserveName).c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 ||
      !S_ISREG(st.st_mode))
    return want;
  const std::uint64_t have =
      std::min(static_cast<std::uint64_t>(st.st_size), static_cast<std::uint64_t>(st.st_blocks) * 512);
  return want - std::min(want, have);
}

void SpaceAccount::RestoreReserve(std::uint64_t keep_free) {
  const std::uint64_t want = options_.reserve_bytes;
  if (want == 0 || options_.read_only) return;
  MutexLock l(&reserve_mu_);
  const std::string name(kCacheReserveName);
  std::uint64_t have = 0;  // allocated bytes of the reserve now
  struct stat st;
  if (::fstatat(root_fd_, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    if (!S_ISREG(st.st_mode)) return;  // not ours
    have = std::min(static_cast<std::uint64_t>(st.st_size), static_cast<std::uint64_t>(st.st_blocks) * 512);
  }
  if (have >= want) return;
  struct statvfs vfs;
  if (::fstatvfs(root_fd_, &vfs) != 0) return;
  const std::uint64_t free = static_cast<std::uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  if (free <= keep_free) return;
  const std::uint64_t size = have + std::min(want - have, free - keep_free);
  UniqueFd fd(::openat(root_fd_, name.c_str(), O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd.valid()) return;
  // Allocated, not sparse: a hole would free nothing when deleted.
  int rc = ::fallocate(fd.get(), 0, 0, static_cast<off_t>(size));
  if (rc != 0 && (errno == EOPNOTSUPP || errno == ENOSYS)) {  // written out instead
    const std::vector<std::byte> zeros(1 << 20);
    Status written = Status::Ok();
    for (std::uint64_t at = 0; at < size && written.ok(); at += zeros.size())
      written = PwriteAll(fd.get(), at,
                          std::span(zeros).first(std::min<std::uint64_t>(zeros.size(), size - at)), name);
    rc = written.ok() ? 0 : -1;
  }
  // Durable, so that a crash does not leave the cache without it: the
  // allocation (fdatasync) and the name (fsync of the directory).
  if (rc == 0 && ::fdatasync(fd.get()) == 0) (void)::fsync(root_fd_);
}

// ---- decisions ----

Status SpaceAccount::Check(std::uint64_t bytes_needed, std::uint64_t recorded, const ClaimSums& claims,
                           std::uint64_t free) {
  // What claims still write comes out of the free space, and what they
  // still record into the cache.
  const std::uint64_t available = free - std::min(free, claims.others.unwritten);
  const std::uint64_t disk_needed = bytes_needed + claims.own.unwritten;
  const std::uint64_t committed = recorded + claims.others.unrecorded;
  const std::uint64_t budget_needed = bytes_needed + claims.own.unrecorded;
  const std::optional<std::uint64_t>& budget = options_.byte_budget;
  const bool over_budget = budget && (committed > *budget || budget_needed > *budget - committed);
  if (disk_needed <= available && !over_budget) return Status::Ok();
  std::string msg = "need " + HumanBytes(over_budget ? budget_needed : disk_needed) + ", " +
                    HumanBytes(free) + " free on " + shown_;
  if (const std::uint64_t owed = ReserveOwed(); owed > 0)
    msg += " besides " + HumanBytes(owed) + " kept for the index";
  if (budget) {
    msg += " (budget " + HumanBytes(*budget) + ", " + HumanBytes(recorded) + " used";
  } else {
    msg += " (no budget";
  }
  if (const std::uint64_t promised = over_budget ? claims.others.unrecorded : claims.others.unwritten;
      promised > 0)
    msg += "; " + HumanBytes(promised) + " promised to pulls running now";
  if (over_budget) msg += "; over budget: run gc or raise the budget";
  msg += ")";
  return ResourceExhaustedError(std::move(msg));
}

std::uint64_t SpaceAccount::RoomTarget(std::uint64_t bytes_needed, std::uint64_t recorded,
                                       const ClaimSums& claims, std::uint64_t free) const {
  std::uint64_t target = recorded;
  const std::uint64_t available = free - std::min(free, claims.others.unwritten);
  const std::uint64_t disk_needed = bytes_needed + claims.own.unwritten;
  // On disk: an evicted fileset frees at least its recorded bytes.
  if (disk_needed > available) target = recorded - std::min(recorded, disk_needed - available);
  if (const std::optional<std::uint64_t>& budget = options_.byte_budget) {
    // All of them may exceed the budget alone.
    const std::uint64_t wanted = claims.others.unrecorded + claims.own.unrecorded + bytes_needed;
    target = std::min(target, *budget - std::min(*budget, wanted));
  }
  return target;
}

}  // namespace exlr8
