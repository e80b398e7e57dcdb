#include "daemon/pull/header_step.h"

#include <algorithm>
#include <array>

#include "format/checksum.h"
#include "format/safetensors.h"

namespace exlr8 {

namespace {

// First bytes fetched from each width file whose index locates no half in
// it; with halves, up to the lowest one (the header ends there), at most:
constexpr std::uint64_t kHeaderProbeBytes = 64 * 1024;
constexpr std::uint64_t kMaxHeaderFirstRound = 4ull << 20;

}  // namespace

HeaderStep::HeaderStep(Env env, const std::map<std::string, WidthFileSpan>& spans)
    : env_(std::move(env)), spans_(spans) {}

std::map<std::string, std::uint64_t> HeaderStep::TakeHeaderBytes() {
  MutexLock lock(&mu_);
  return std::move(header_bytes_);
}

Status HeaderStep::Validate(const std::string& path, std::span<const std::byte> bytes, std::uint64_t size) {
  EXLR8_ASSIGN_OR_RETURN(SafetensorsHeader header, ParseSafetensorsHeader(bytes, size, path));
  auto span = spans_.find(path);
  if (span == spans_.end()) return InternalError(path + ": no span of its halves");
  EXLR8_RETURN_IF_ERROR(span->second.Validate(header, size, path));
  MutexLock lock(&mu_);
  header_bytes_[path] = header.data_start();
  return Status::Ok();
}

// Once a fetch agreed with an earlier one: fetched again from byte 0.
void HeaderStep::FetchAgain(HeaderTarget& t) {
  std::vector<std::byte>().swap(t.bytes);
  t.header_bytes.reset();
  t.wanted = t.first_round;
}

// A complete header: checked against the index; then, since no checksum
// covers headers (spec 5.3) and a byte damaged on the way may still parse
// (in a tensor name, say), it is recorded only when two fetches agree: any
// two, not just the last two, so that a good fetch after a damaged one is
// not wasted (with damage at rate p, a header then fails when at most one
// of its max_refetches + 2 fetches is good, about 4p^3 at the default 2,
// near the 3p^3 of a half's three tries; agreeing with the last fetch only
// would fail at about 3p^2). Then written, queued for commit, freed. A
// fetch that agrees with an earlier one is not parsed again: those bytes
// passed the checks (a digest is kept only then), and the parse is most of
// a header's CPU (225 headers of ~1.3 MB in GLM-5.3's rank plan).
Status HeaderStep::Finish(HeaderTarget& t) {
  const std::uint64_t n = *t.header_bytes;
  std::span<const std::byte> header(t.bytes.data(), n);
  Xxh64 digest;
  digest.Update(header);
  const std::uint64_t d = digest.Digest();
  if (std::find(t.earlier_digests.begin(), t.earlier_digests.end(), d) == t.earlier_digests.end()) {
    EXLR8_RETURN_IF_ERROR(Validate(t.path, header, t.size));
    t.earlier_digests.push_back(d);
    if (t.earlier_digests.size() > 1)  // all but one of these fetches were damaged: RetryOrFail counts it
      return CorruptionError(t.path + ": no two of the " + std::to_string(t.earlier_digests.size()) +
                             " fetches of its header that parsed agree");
    FetchAgain(t);  // the first valid fetch: a second must agree
    return Status::Ok();
  }
  EXLR8_RETURN_IF_ERROR(env_.cache.WriteAt(t.file, 0, header));
  EXLR8_RETURN_IF_ERROR(batch_->Add({t.file, 0, n}));
  env_.counters.bytes_verified.fetch_add(n, std::memory_order_relaxed);
  env_.counters.bytes_written_verified.fetch_add(n, std::memory_order_relaxed);
  written_.fetch_add(n, std::memory_order_relaxed);
  t.done = true;
  std::vector<std::byte>().swap(t.bytes);
  return Status::Ok();
}

// A header that does not parse or validate may have been damaged on the
// way (there is no checksum for it): it is fetched again from byte 0, at
// most max_refetches times, like a half whose checksum fails. What a
// release really gets wrong fails after the last try, with its message.
Status HeaderStep::RetryOrFail(HeaderTarget& t, Status bad) {
  if (bad.code() != StatusCode::kCorruption) return bad;
  env_.counters.checksum_failures.fetch_add(1, std::memory_order_relaxed);
  if (++refetches_[static_cast<std::size_t>(&t - targets_.data())] > env_.max_refetches)
    return CorruptionError(bad.message() + " (the header failed verification " +
                           std::to_string(env_.max_refetches + 1) + " times)");
  FetchAgain(t);
  return Status::Ok();
}

// Learns a header's size from its first 8 bytes, and finishes it if all of
// it is there.
Status HeaderStep::Advance(HeaderTarget& t) {
  if (t.done) return Status::Ok();
  if (!t.header_bytes) {
    if (t.size < 8) return CorruptionError(t.path + ": " + std::to_string(t.size) + " bytes, too short");
    if (t.bytes.size() < 8) return Status::Ok();  // not fetched yet
    Result<std::uint64_t> n = SafetensorsHeaderSize(std::span(t.bytes).first(8), t.size, t.path);
    if (n.ok() && *n > env_.max_header_bytes)
      n = CorruptionError(t.path + ": header of " + std::to_string(*n) + " bytes exceeds the limit");
    if (!n.ok()) return RetryOrFail(t, n.status());
    t.header_bytes = *n;
    t.wanted = std::max<std::uint64_t>(t.bytes.size(), *n);
  }
  if (t.bytes.size() < *t.header_bytes) return Status::Ok();
  Status s = Finish(t);
  return s.ok() ? s : RetryOrFail(t, std::move(s));
}

Status HeaderStep::Run(const std::vector<const FileInfo*>& files, std::uint64_t* reused) {
  for (const FileInfo* f : files) {
    const std::string& path = f->path;
    // Already verified in the cache?
    std::array<std::byte, 8> first{};
    if (f->size >= 8) {
      EXLR8_ASSIGN_OR_RETURN(auto src, env_.cache.OpenVerified(f->id));
      if (src->ReadAt(0, first).ok()) {
        auto n = SafetensorsHeaderSize(first, f->size, path);
        if (n.ok()) {
          std::vector<std::byte> bytes(*n);
          if (src->ReadAt(0, bytes).ok()) {
            EXLR8_RETURN_IF_ERROR(Validate(path, bytes, f->size));
            *reused += bytes.size();
            continue;
          }
        }
      }
    }
    HeaderTarget t;
    t.file = f->id;
    t.path = path;
    t.size = f->size;
    // The header ends at or before the file's lowest half (checked once it
    // is here), so one request up to there usually brings all of it.
    t.first_round = kHeaderProbeBytes;
    if (auto span = spans_.find(path); span != spans_.end() && !span->second.empty)
      t.first_round = std::clamp<std::uint64_t>(span->second.lowest_offset, 8, kMaxHeaderFirstRound);
    t.first_round = std::min(t.first_round, f->size);
    t.wanted = t.first_round;
    targets_.push_back(std::move(t));
  }
  if (targets_.empty()) return Status::Ok();
  if (env_.offline)
    return FailedPreconditionError("offline mode: the header of " + targets_[0].path +
                                   " is not in the cache");
  // A header's size is known only once its first bytes are here: claimed as
  // the first round's bytes (a header ends at or before its lowest half),
  // then set to what was written once every header is.
  std::uint64_t claim = 0;
  for (const HeaderTarget& t : targets_) claim += t.first_round;
  if (env_.fetcher == nullptr) return InternalError("header fetch without a fetcher");
  EXLR8_RETURN_IF_ERROR(env_.space.CheckAndClaim(claim));

  batch_ = &env_.new_batch();
  refetches_.assign(targets_.size(), 0);
  // Rounds: the first fetches each file up to its lowest half, which gives
  // the header's size and usually all of it; the next the rest of any
  // longer ones; any later round refetches damaged ones. Each is finished
  // as soon as its request ends (on the fetch session's worker), so memory
  // stays about one header per transfer.
  Status fetched;
  while (fetched.ok() &&
         std::any_of(targets_.begin(), targets_.end(), [](const HeaderTarget& t) { return !t.done; })) {
    HeaderConsumer consumer(*env_.fetcher, targets_, [this](HeaderTarget& t) { return Advance(t); });
    fetched = env_.run_round(consumer);
    for (auto& t : targets_)
      if (fetched.ok()) fetched = Advance(t);
  }
  // Recorded as soon as durable, not at the pull's end (also the headers
  // done when another failed).
  const Status committing = batch_->CommitSoon();
  EXLR8_RETURN_IF_ERROR(fetched);
  // Modulo 2^64, so this also adds what headers longer than their first
  // round wrote beyond the claim.
  env_.space.Adjust(written_.load() - claim);
  return committing;
}

}  // namespace exlr8
