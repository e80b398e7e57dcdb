// The three kinds of fetch a pull makes, as RangeConsumers
// (daemon/hub/range_fetcher.h). Internal to daemon/pull.
//
//   WholeFileConsumer  whole files, streamed into the cache and hashed
//                      (SHA-256 or git blob SHA-1) as they arrive
//   HeaderConsumer     the first bytes of width files, kept in memory until
//                      the safetensors header is complete
//   HalfConsumer       expert halves: written into the cache and hashed
//                      (XXH64 + index-file tail) as they stream in
//
// All of them write with Cache::WriteAt only; recording happens through the
// CommitBatcher after verification.
//
// Thread rules: NextRequest on one thread (the fetcher's); the calls for
// one request in order, one at a time, but calls for different requests may
// run concurrently (OffloadConsumer with several workers): the state shared
// between requests is locked, each request's own state is not.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "daemon/base/mutex.h"
#include "daemon/cache/cache.h"
#include "daemon/cache/digest.h"
#include "daemon/hub/range_fetcher.h"
#include "daemon/pull/commit_batcher.h"
#include "format/checksum.h"
#include "format/plan.h"

namespace exlr8 {

// Counters shared with PullJob::Progress() (read from other threads).
struct JobCounters {
  std::atomic<std::uint64_t> bytes_planned{0};
  std::atomic<std::uint64_t> bytes_reused{0};
  std::atomic<std::uint64_t> bytes_verified{0};
  std::atomic<std::uint64_t> ranges_total{0};
  std::atomic<std::uint64_t> ranges_done{0};
  std::atomic<std::uint64_t> checksum_failures{0};
  std::atomic<std::uint64_t> bytes_resumed{0};
  // The part of bytes_verified this run wrote itself (a resumed prefix was
  // written by an earlier one): what its space claims are spent on.
  std::atomic<std::uint64_t> bytes_written_verified{0};
};

// The state of each request in flight, by id. The map is locked (requests
// start on the fetch thread and end on any write worker); an entry is used
// by its own request's worker only, and references to it stay valid until
// it is erased.
template <typename T>
class LiveRequests {
 public:
  void Emplace(std::uint64_t id, T value) EXLR8_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    map_.emplace(id, std::move(value));
  }
  T& At(std::uint64_t id) EXLR8_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    return map_.at(id);
  }
  void Erase(std::uint64_t id) EXLR8_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    map_.erase(id);
  }

 private:
  Mutex mu_;
  std::unordered_map<std::uint64_t, T> map_ EXLR8_GUARDED_BY(mu_);
};

// Base: remembers the first failure and cancels the fetcher on failures that
// no other request can get past (disk full, permission).
class ConsumerBase : public RangeConsumer {
 public:
  explicit ConsumerBase(RangeFetcher& fetcher) : fetcher_(fetcher) {}
  void OnFailed(std::uint64_t id, const Status& status) override;
  // Final once the run has ended.
  Status first_error() const EXLR8_EXCLUDES(failure_mu_) {
    MutexLock lock(&failure_mu_);
    return first_error_;
  }
  std::uint64_t failures() const EXLR8_EXCLUDES(failure_mu_) {
    MutexLock lock(&failure_mu_);
    return failures_;
  }

 protected:
  virtual void Forget(std::uint64_t id) = 0;
  // Counts a failed request; the first one's status is first_error().
  void NoteFailure(const Status& status) EXLR8_EXCLUDES(failure_mu_);
  RangeFetcher& fetcher_;

 private:
  mutable Mutex failure_mu_;
  Status first_error_ EXLR8_GUARDED_BY(failure_mu_);
  std::uint64_t failures_ EXLR8_GUARDED_BY(failure_mu_) = 0;
};

struct WholeFileTarget {
  FileId file = 0;
  std::string path;
  std::uint64_t size = 0;
  std::string sha256;    // LFS files
  std::string git_sha1;  // regular files
  // [0, resume_from) is on disk from an interrupted download (durable, not
  // verified): it is hashed from the cache and only the rest is fetched.
  // REQUIRES: resume_from < size.
  std::uint64_t resume_from = 0;
  // A dense or vocab file: once its hash matches, it must also be what the
  // format says (CheckDenseFile, format/dense.h: a header whose tensors lie
  // inside the file without overlapping, valid records, every block
  // checksum of spec 5.4) before it is recorded.
  bool check_dense = false;
  // A .bin file of a whole-fileset pull: once its hash matches, if it starts
  // with the LVQ5 magic, it must also pass the container's structural
  // checks (lvq5::ReadIndex), and its record index (each record's kind,
  // shape, range and XXH64) is recorded with it (daemon/cache/record_index.h).
  bool check_lvq5 = false;
};

// Whole files: each is hashed as it streams in and, once complete and
// matching, queued for commit as verified whole. A file with check_dense is
// read back (Cache::OpenCheckedByCaller) and checked against the format on
// the consumer's own thread first, so that neither the fetch thread nor a
// write worker stalls on gigabytes of reading; one that fails is not
// recorded, and the consumer's first_error() names it (Corruption: the file,
// the tensor or matrix block, the byte offset).
class WholeFileConsumer final : public ConsumerBase {
 public:
  WholeFileConsumer(RangeFetcher& fetcher, Cache& cache, CommitBatcher& batch, JobCounters& counters,
                    std::vector<WholeFileTarget> targets);
  // Stops the checker thread: files whose check has not ended are not
  // recorded.
  ~WholeFileConsumer() override;
  bool NextRequest(RangeRequest* out) override;
  Status OnData(std::uint64_t id, std::uint64_t offset, std::span<const std::byte> bytes) override;
  RangeVerdict OnComplete(std::uint64_t id) override;
  void OnReset(std::uint64_t id) override;
  // Hashes the durable prefix of every target that resumes (see
  // WholeFileTarget::resume_from), ahead of its request: reading gigabytes
  // back from disk must not happen on the thread that handles every other
  // request's bytes. Call before the consumer is run; without it, a prefix
  // is hashed when its request's first bytes arrive.
  Status HashPrefixes();

  // Waits until every check queued so far has ended (call after the run, so
  // that verified() and first_error() are final).
  void DrainChecks() EXLR8_EXCLUDES(check_mu_);

  // Files verified (and queued for commit) in this run.
  std::vector<FileId> verified() EXLR8_EXCLUDES(verified_mu_) {
    MutexLock lock(&verified_mu_);
    return verified_;
  }
  // Bytes written into the cache so far (any thread).
  std::uint64_t bytes_written() const { return bytes_written_.load(std::memory_order_relaxed); }

 private:
  struct Live {
    StreamDigest digest;
    bool prefix_hashed = false;  // the resumed prefix went into `digest`
  };
  void Forget(std::uint64_t id) override { live_.Erase(id); }
  Status HashPrefix(const WholeFileTarget& t, StreamDigest& digest);
  // The file matched its hash (and its format): queue it for commit as
  // verified whole, with its record index if it has one.
  Status Accepted(const WholeFileTarget& t, std::shared_ptr<const std::vector<FileRecord>> records = nullptr);
  void QueueCheck(std::size_t target) EXLR8_EXCLUDES(check_mu_);
  void CheckLoop() EXLR8_EXCLUDES(check_mu_);
  Cache& cache_;
  CommitBatcher& batch_;
  JobCounters& counters_;
  std::vector<WholeFileTarget> targets_;
  std::size_t next_ = 0;
  LiveRequests<Live> live_;
  std::vector<std::optional<StreamDigest>> prefix_digests_;  // by target, from HashPrefixes
  Mutex verified_mu_;
  std::vector<FileId> verified_ EXLR8_GUARDED_BY(verified_mu_);
  std::atomic<std::uint64_t> bytes_written_{0};
  // The dense checks: targets waiting, and the thread that runs them.
  Mutex check_mu_;
  CondVar check_cv_;  // queued, stopping, or one ended
  std::deque<std::size_t> check_queue_ EXLR8_GUARDED_BY(check_mu_);
  bool checking_ EXLR8_GUARDED_BY(check_mu_) = false;  // a check is running
  bool check_stop_ EXLR8_GUARDED_BY(check_mu_) = false;
  std::thread checker_ EXLR8_GUARDED_BY(check_mu_);
};

struct HeaderTarget {
  FileId file = 0;
  std::string path;
  std::uint64_t size = 0;
  std::vector<std::byte> bytes;   // what arrived so far, from offset 0
  std::uint64_t wanted = 0;       // bytes to request in this round
  std::uint64_t first_round = 0;  // bytes of the first request, and of a restart from byte 0
  std::optional<std::uint64_t> header_bytes;  // 8 + N once known
  // XXH64 of each earlier complete, valid fetch that no other agreed with
  // (at most max_refetches + 2 of them).
  std::vector<std::uint64_t> earlier_digests;
  bool done = false;              // handled (and `bytes` freed): not requested again
};

class HeaderConsumer final : public ConsumerBase {
 public:
  // Requests [bytes.size(), wanted) of each target that is not done and has
  // wanted > bytes.size(). `on_complete` (optional) runs when a request of a
  // target that is not done has arrived, on what arrived so far: it may
  // learn header_bytes, finish the target (done), raise `wanted` for the
  // next round, or start it over (bytes cleared); its error fails that
  // request.
  HeaderConsumer(RangeFetcher& fetcher, std::vector<HeaderTarget>& targets,
                 std::function<Status(HeaderTarget&)> on_complete = {})
      : ConsumerBase(fetcher), targets_(targets), on_complete_(std::move(on_complete)) {}
  bool NextRequest(RangeRequest* out) override;
  Status OnData(std::uint64_t id, std::uint64_t offset, std::span<const std::byte> bytes) override;
  RangeVerdict OnComplete(std::uint64_t id) override;
  void OnReset(std::uint64_t id) override;

 private:
  void Forget(std::uint64_t) override {}
  std::vector<HeaderTarget>& targets_;
  std::function<Status(HeaderTarget&)> on_complete_;
  std::size_t next_ = 0;
  Mutex mu_;
  // id -> bytes.size() at start
  std::unordered_map<std::uint64_t, std::size_t> start_size_ EXLR8_GUARDED_BY(mu_);
};

// One half still to fetch.
struct HalfWork {
  std::uint64_t offset = 0, length = 0, xxh64 = 0;
  std::array<ByteRun, 2> tail{};
  HalfTag tag;
};

// One width file's halves still to fetch, and the requests covering them.
struct FileWork {
  FileId file = 0;
  std::string path;
  const ByteSource* index = nullptr;  // the verified index file (checksum tails)
  std::vector<HalfWork> halves;       // sorted by offset
  struct Request {
    std::uint64_t offset, length;
    std::uint32_t first, count;       // halves[first, first + count)
  };
  std::vector<Request> requests;
};

// Builds `requests` from `halves`: runs merged when the gap is <= gap.
void BuildRequests(FileWork& work, std::uint64_t gap);

class HalfConsumer final : public ConsumerBase {
 public:
  HalfConsumer(RangeFetcher& fetcher, Cache& cache, CommitBatcher& batch, JobCounters& counters,
               std::vector<FileWork>& files);
  bool NextRequest(RangeRequest* out) override;
  Status OnData(std::uint64_t id, std::uint64_t offset, std::span<const std::byte> bytes) override;
  RangeVerdict OnComplete(std::uint64_t id) override;
  void OnReset(std::uint64_t id) override;

 private:
  struct Live {
    FileWork* file;
    const FileWork::Request* request;
    std::vector<Xxh64> hashes;  // one per half of the request
    std::uint32_t cursor = 0;   // first half not yet fully hashed
  };
  void Forget(std::uint64_t id) override { live_.Erase(id); }
  Cache& cache_;
  CommitBatcher& batch_;
  JobCounters& counters_;
  std::vector<FileWork>& files_;
  std::size_t next_file_ = 0, next_request_ = 0;
  std::uint64_t next_id_ = 0;
  LiveRequests<Live> live_;
};

}  // namespace exlr8
