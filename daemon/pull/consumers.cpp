#include "daemon/pull/consumers.h"

#include <pthread.h>

#include <algorithm>
#include <utility>

#include "daemon/cache/record_index.h"
#include "format/dense.h"

namespace exlr8 {

namespace {

// Another source's bytes under the file's repo path, so that the format's
// errors name the release's file rather than where the cache keeps it.
class RepoPathSource final : public ByteSource {
 public:
  RepoPathSource(const ByteSource& inner, std::string name) : inner_(inner), name_(std::move(name)) {}
  std::uint64_t size() const override { return inner_.size(); }
  Status ReadAt(std::uint64_t offset, std::span<std::byte> dst) const override {
    return inner_.ReadAt(offset, dst);
  }
  const std::string& name() const override { return name_; }

 private:
  const ByteSource& inner_;
  std::string name_;
};

}  // namespace

void ConsumerBase::NoteFailure(const Status& status) {
  MutexLock lock(&failure_mu_);
  ++failures_;
  if (first_error_.ok()) first_error_ = status;
}

void ConsumerBase::OnFailed(std::uint64_t id, const Status& status) {
  NoteFailure(status);
  Forget(id);
  // Nothing else can succeed past these: stop the whole run early, with
  // this as the reason every other open request (of any consumer) ends with.
  // Unavailable too: a request that used up its retries on 5xx/429 means
  // the server is down or throttling hard, and the pull can no longer
  // complete; going on would keep it running until every other request had
  // used up its own retries (in a 503 storm, more than twice as long as the
  // first to give up). The next run resumes from what is recorded.
  if (status.code() == StatusCode::kResourceExhausted || status.code() == StatusCode::kPermissionDenied ||
      status.code() == StatusCode::kIOError || status.code() == StatusCode::kUnavailable)
    fetcher_.Abort(status);
}

// ---- whole files ----

WholeFileConsumer::WholeFileConsumer(RangeFetcher& fetcher, Cache& cache, CommitBatcher& batch, JobCounters& counters,
                                     std::vector<WholeFileTarget> targets)
    : ConsumerBase(fetcher), cache_(cache), batch_(batch), counters_(counters), targets_(std::move(targets)) {}

WholeFileConsumer::~WholeFileConsumer() {
  std::thread checker;
  {
    MutexLock lock(&check_mu_);
    check_stop_ = true;
    checker = std::move(checker_);
  }
  check_cv_.SignalAll();
  if (checker.joinable()) checker.join();
}

void WholeFileConsumer::QueueCheck(std::size_t target) {
  MutexLock lock(&check_mu_);
  check_queue_.push_back(target);
  if (!checker_.joinable()) checker_ = std::thread([this] { CheckLoop(); });
  check_cv_.SignalAll();
}

void WholeFileConsumer::DrainChecks() {
  MutexLock lock(&check_mu_);
  while (!check_stop_ && !(check_queue_.empty() && !checking_)) check_cv_.Wait(&check_mu_);
}

// Reads each queued file back from the cache (its bytes are written, not yet
// durable: the page cache has them) and checks it against the format.
void WholeFileConsumer::CheckLoop() {
  pthread_setname_np(pthread_self(), "exlr8-dense");
  check_mu_.Lock();
  while (true) {
    while (!check_stop_ && check_queue_.empty()) check_cv_.Wait(&check_mu_);
    if (check_stop_) break;
    const WholeFileTarget& t = targets_[check_queue_.front()];
    check_queue_.pop_front();
    checking_ = true;
    check_mu_.Unlock();
    Result<std::unique_ptr<ByteSource>> src = cache_.OpenCheckedByCaller(t.file);
    std::shared_ptr<const std::vector<FileRecord>> records;
    Status s = src.status();
    if (src.ok()) {
      const RepoPathSource named(**src, t.path);
      if (t.check_dense) {
        s = CheckDenseFile(named);
      } else {  // check_lvq5
        Result<bool> lvq5 = HasLvq5Magic(named);
        s = lvq5.status();
        if (lvq5.ok() && *lvq5) {
          Result<std::vector<FileRecord>> index = IndexLvq5File(named);
          s = index.status();
          if (index.ok()) records = std::make_shared<const std::vector<FileRecord>>(*std::move(index));
        }
      }
    }
    if (s.ok()) {
      s = Accepted(t, std::move(records));
    } else if (s.code() == StatusCode::kCorruption) {
      // Its hash matched the hub's listing: the release itself is bad, and
      // fetching it again brings the same bytes. Not a resume point either.
      counters_.checksum_failures.fetch_add(1, std::memory_order_relaxed);
      (void)batch_.NotePrefix(t.file, 0);
      s = CorruptionError(s.message() + " (the file matches the hub's " +
                          (t.sha256.empty() ? "git blob id" : "SHA-256") +
                          ": the release itself is malformed)");
    }
    if (!s.ok()) NoteFailure(s);
    check_mu_.Lock();
    checking_ = false;
    check_cv_.SignalAll();
  }
  check_mu_.Unlock();
}

Status WholeFileConsumer::Accepted(const WholeFileTarget& t,
                                   std::shared_ptr<const std::vector<FileRecord>> records) {
  // A resumed prefix was written, and not claimed, by an earlier run.
  EXLR8_RETURN_IF_ERROR(
      batch_.Add({t.file, 0, t.size, /*whole_file=*/true, std::move(records)}, t.size - t.resume_from));
  counters_.bytes_verified.fetch_add(t.size, std::memory_order_relaxed);
  counters_.bytes_written_verified.fetch_add(t.size - t.resume_from, std::memory_order_relaxed);
  MutexLock lock(&verified_mu_);
  verified_.push_back(t.file);
  return Status::Ok();
}

bool WholeFileConsumer::NextRequest(RangeRequest* out) {
  if (next_ >= targets_.size()) return false;
  const WholeFileTarget& t = targets_[next_];
  auto digest = StreamDigest::Create(t.sha256.empty() ? StreamDigest::Kind::kGitBlobSha1 : StreamDigest::Kind::kSha256,
                                     t.size);
  if (!digest.ok()) return false;  // OpenSSL broken: nothing can be verified
  if (next_ < prefix_digests_.size() && prefix_digests_[next_]) {
    live_.Emplace(next_, Live{std::move(*prefix_digests_[next_]), true});
    prefix_digests_[next_].reset();
  } else {
    live_.Emplace(next_, Live{std::move(*digest), t.resume_from == 0});
  }
  out->path = t.path;
  out->offset = t.resume_from;
  out->length = t.size - t.resume_from;
  out->id = next_;
  out->label = t.path;
  ++next_;
  return true;
}

// The durable prefix of an interrupted download, read back from the cache
// file into the digest: reading it is far cheaper than fetching it again.
Status WholeFileConsumer::HashPrefix(const WholeFileTarget& t, StreamDigest& digest) {
  std::vector<std::byte> buf(std::min<std::uint64_t>(t.resume_from, 4u << 20));
  for (std::uint64_t at = 0; at < t.resume_from;) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(buf.size(), t.resume_from - at));
    EXLR8_RETURN_IF_ERROR(cache_.ReadDurablePrefix(t.file, at, std::span(buf).first(n)));
    digest.Update(std::span<const std::byte>(buf).first(n));
    at += n;
  }
  return Status::Ok();
}

Status WholeFileConsumer::HashPrefixes() {
  prefix_digests_.resize(targets_.size());
  for (std::size_t i = 0; i < targets_.size(); ++i) {
    const WholeFileTarget& t = targets_[i];
    if (t.resume_from == 0) continue;
    EXLR8_ASSIGN_OR_RETURN(
        StreamDigest d,
        StreamDigest::Create(t.sha256.empty() ? StreamDigest::Kind::kGitBlobSha1 : StreamDigest::Kind::kSha256, t.size));
    EXLR8_RETURN_IF_ERROR(HashPrefix(t, d));
    prefix_digests_[i] = std::move(d);
  }
  return Status::Ok();
}

Status WholeFileConsumer::OnData(std::uint64_t id, std::uint64_t offset, std::span<const std::byte> bytes) {
  const WholeFileTarget& t = targets_[id];
  Live& lv = live_.At(id);
  if (!lv.prefix_hashed) {
    EXLR8_RETURN_IF_ERROR(HashPrefix(t, lv.digest));
    lv.prefix_hashed = true;
  }
  EXLR8_RETURN_IF_ERROR(cache_.WriteAt(t.file, offset, bytes));
  bytes_written_.fetch_add(bytes.size(), std::memory_order_relaxed);
  lv.digest.Update(bytes);
  // In order from 0 (or from a durable prefix): a resume point once synced.
  return batch_.NotePrefix(t.file, offset + bytes.size());
}

RangeVerdict WholeFileConsumer::OnComplete(std::uint64_t id) {
  const WholeFileTarget& t = targets_[id];
  const std::string got = live_.At(id).digest.FinishHex();
  const std::string& want = t.sha256.empty() ? t.git_sha1 : t.sha256;
  if (got != want && t.resume_from > 0) {
    // Fetching the rest again cannot mend the prefix read from disk: forget
    // it (recorded at the next commit), so the next run fetches it all.
    counters_.checksum_failures.fetch_add(1, std::memory_order_relaxed);
    // Unavailable, not Corruption: the next run (systemd's restart too, which
    // stops on exit 3) fetches the file whole and most likely succeeds.
    (void)batch_.NotePrefix(t.file, 0);
    return RangeVerdict::Fail(UnavailableError(t.path + ": " + (t.sha256.empty() ? "git blob sha1 " : "sha256 ") +
                                               got + ", the hub lists " + want + " (download resumed at byte " +
                                               std::to_string(t.resume_from) +
                                               "; that prefix is discarded: run the pull again, it fetches the "
                                               "file whole)"));
  }
  if (got != want) {
    counters_.checksum_failures.fetch_add(1, std::memory_order_relaxed);
    // The bytes written are no resume point: were this the last attempt, a
    // rerun would resume over them and fail once more before starting over.
    (void)batch_.NotePrefix(t.file, 0);
    return RangeVerdict::Refetch(CorruptionError(t.path + ": " + (t.sha256.empty() ? "git blob sha1 " : "sha256 ") +
                                                 got + ", the hub lists " + want));
  }
  Forget(id);
  if (t.check_dense || t.check_lvq5) {
    QueueCheck(id);  // recorded (or failed) by the checker thread
    return RangeVerdict::Accept();
  }
  Status s = Accepted(t);
  if (!s.ok()) return RangeVerdict::Fail(s);
  return RangeVerdict::Accept();
}

void WholeFileConsumer::OnReset(std::uint64_t id) { live_.At(id).digest.Reset(); }

// ---- width-file headers ----

bool HeaderConsumer::NextRequest(RangeRequest* out) {
  while (next_ < targets_.size() && (targets_[next_].done || targets_[next_].wanted <= targets_[next_].bytes.size()))
    ++next_;
  if (next_ >= targets_.size()) return false;
  HeaderTarget& t = targets_[next_];
  out->path = t.path;
  out->offset = t.bytes.size();
  out->length = t.wanted - t.bytes.size();
  out->id = next_;
  out->label = t.path + " header";
  {
    MutexLock lock(&mu_);
    start_size_[next_] = t.bytes.size();
  }
  ++next_;
  return true;
}

Status HeaderConsumer::OnData(std::uint64_t id, std::uint64_t offset, std::span<const std::byte> bytes) {
  HeaderTarget& t = targets_[id];
  if (offset != t.bytes.size()) return InternalError(t.path + ": header bytes out of order");
  // One allocation per target, not a doubling series; made here rather than
  // in NextRequest, so only transfers in flight hold a buffer.
  if (t.bytes.capacity() < t.wanted) t.bytes.reserve(t.wanted);
  t.bytes.insert(t.bytes.end(), bytes.begin(), bytes.end());
  return Status::Ok();
}

RangeVerdict HeaderConsumer::OnComplete(std::uint64_t id) {
  HeaderTarget& t = targets_[id];
  if (on_complete_ && !t.done) {
    Status s = on_complete_(t);
    if (!s.ok()) return RangeVerdict::Fail(std::move(s));
  }
  return RangeVerdict::Accept();
}

void HeaderConsumer::OnReset(std::uint64_t id) {
  std::size_t start;
  {
    MutexLock lock(&mu_);
    start = start_size_[id];
  }
  targets_[id].bytes.resize(start);
}

// ---- expert halves ----

void BuildRequests(FileWork& work, std::uint64_t gap) {
  work.requests.clear();
  for (std::uint32_t i = 0; i < work.halves.size(); ++i) {
    const HalfWork& h = work.halves[i];
    if (!work.requests.empty()) {
      FileWork::Request& last = work.requests.back();
      const std::uint64_t end = last.offset + last.length;
      if (h.offset >= end && h.offset - end <= gap) {
        last.length = h.offset + h.length - last.offset;
        ++last.count;
        continue;
      }
    }
    work.requests.push_back({h.offset, h.length, i, 1});
  }
}

HalfConsumer::HalfConsumer(RangeFetcher& fetcher, Cache& cache, CommitBatcher& batch, JobCounters& counters,
                           std::vector<FileWork>& files)
    : ConsumerBase(fetcher), cache_(cache), batch_(batch), counters_(counters), files_(files) {}

bool HalfConsumer::NextRequest(RangeRequest* out) {
  while (next_file_ < files_.size() && next_request_ >= files_[next_file_].requests.size()) {
    ++next_file_;
    next_request_ = 0;
  }
  if (next_file_ >= files_.size()) return false;
  FileWork& fw = files_[next_file_];
  const FileWork::Request& rq = fw.requests[next_request_++];
  const std::uint64_t id = next_id_++;
  Live live{&fw, &rq, std::vector<Xxh64>(rq.count), 0};
  live_.Emplace(id, std::move(live));
  out->path = fw.path;
  out->offset = rq.offset;
  out->length = rq.length;
  out->id = id;
  out->label = fw.halves[rq.first].tag.What();
  if (rq.count > 1) out->label += " (+" + std::to_string(rq.count - 1) + " adjacent)";
  return true;
}

Status HalfConsumer::OnData(std::uint64_t id, std::uint64_t offset, std::span<const std::byte> bytes) {
  Live& lv = live_.At(id);
  const std::uint64_t end = offset + bytes.size();
  // Only the halves' own bytes are written, never a coalesced request's
  // gaps: a gap may hold bytes the cache already records as verified (the
  // halves of another rank), which an unverified response must not replace.
  // Adjacent halves are still one write.
  std::uint64_t run_from = offset, run_to = offset;
  auto write_run = [&]() -> Status {
    if (run_to == run_from) return Status::Ok();
    return cache_.WriteAt(lv.file->file, run_from, bytes.subspan(run_from - offset, run_to - run_from));
  };
  while (lv.cursor < lv.request->count) {
    const HalfWork& h = lv.file->halves[lv.request->first + lv.cursor];
    if (h.offset >= end) break;  // this chunk ends before the half (in a gap)
    const std::uint64_t from = std::max(h.offset, offset);
    const std::uint64_t to = std::min(h.offset + h.length, end);
    if (to > from) {
      if (from != run_to) {
        EXLR8_RETURN_IF_ERROR(write_run());
        run_from = from;
      }
      run_to = to;
      lv.hashes[lv.cursor].Update(bytes.subspan(from - offset, to - from));
    }
    if (h.offset + h.length > end) break;  // half continues in the next chunk
    ++lv.cursor;
  }
  return write_run();
}

RangeVerdict HalfConsumer::OnComplete(std::uint64_t id) {
  Live& lv = live_.At(id);
  std::vector<std::byte> tail;  // a few hundred bytes (a vector slice, a block row)
  for (std::uint32_t i = 0; i < lv.request->count; ++i) {
    const HalfWork& h = lv.file->halves[lv.request->first + i];
    Xxh64& hash = lv.hashes[i];
    for (const ByteRun& run : h.tail) {
      tail.resize(run.length);
      Status s = lv.file->index->ReadAt(run.offset, tail);
      if (!s.ok()) return RangeVerdict::Fail(s);
      hash.Update(tail);
    }
    if (hash.Digest() != h.xxh64) {
      counters_.checksum_failures.fetch_add(1, std::memory_order_relaxed);
      return RangeVerdict::Refetch(CorruptionError(lv.file->path + " offset " + std::to_string(h.offset) + " (" +
                                                   h.tag.What() + "): xxh64 " + Hex64(hash.Digest()) +
                                                   ", expected " + Hex64(h.xxh64)));
    }
  }
  for (std::uint32_t i = 0; i < lv.request->count; ++i) {
    const HalfWork& h = lv.file->halves[lv.request->first + i];
    Status s = batch_.Add({lv.file->file, h.offset, h.length});
    if (!s.ok()) return RangeVerdict::Fail(s);
    counters_.bytes_verified.fetch_add(h.length, std::memory_order_relaxed);
    counters_.bytes_written_verified.fetch_add(h.length, std::memory_order_relaxed);
    counters_.ranges_done.fetch_add(1, std::memory_order_relaxed);
  }
  Forget(id);
  return RangeVerdict::Accept();
}

void HalfConsumer::OnReset(std::uint64_t id) {
  Live& lv = live_.At(id);
  for (auto& h : lv.hashes) h.Reset();
  lv.cursor = 0;
}

}  // namespace exlr8
