#include "daemon/hub/file_resolver.h"

#include <utility>

#include "daemon/hub/http_common.h"
#include "daemon/hub/hub_protocol.h"

namespace exlr8 {

FileResolver::FileResolver(Naming naming, TransferScheduler& sched, Options options)
    : naming_(std::move(naming)), sched_(sched), opts_(options) {}

std::uint32_t FileResolver::FileFor(const std::string& path) {
  auto it = index_.find(std::string_view(path));
  if (it != index_.end()) return it->second;
  const auto idx = static_cast<std::uint32_t>(files_.size());
  files_.emplace_back();
  files_.back().path = path;
  index_.emplace(path, idx);
  return idx;
}

void FileResolver::ExpectServedByHub(const std::string& path, std::uint64_t size) {
  if (!ValidateHubPath(path).ok()) return;
  File& f = files_[FileFor(path)];
  if (f.state != File::State::kUnresolved || f.ever_resolved) return;
  f.state = File::State::kReady;
  f.url = naming_.resolve_url(path);
  f.on_hub = true;
  f.presumed = true;
  f.size = size;
  f.expires = Clock::TimePoint::max();
  ++f.generation;
}

void FileResolver::StartRun() {
  queue_.clear();
  for (File& f : files_) {
    f.reresolves_this_run = 0;
    f.failed_tries = 0;
    if (f.state == File::State::kFailed) f.state = File::State::kUnresolved;
  }
}

void FileResolver::CancelRun() {
  running_ = 0;
  for (File& f : files_) {
    f.waiters.clear();
    if (f.state == File::State::kQueued || f.state == File::State::kResolving)
      f.state = File::State::kUnresolved;
  }
  queue_.clear();
}

FileResolver::Outcome FileResolver::Fail(std::uint32_t fi, Status status) {
  File& f = files_[fi];
  f.state = File::State::kFailed;
  f.failure = std::move(status);
  Outcome out;
  out.failed.swap(f.waiters);
  out.failure = f.failure;
  return out;
}

bool FileResolver::ExpireIfDue(std::uint32_t fi, Clock::TimePoint now) {
  const File& f = files_[fi];
  if (f.state != File::State::kReady || f.expires > now) return true;
  return Invalidate(fi, "signed URL expired");
}

bool FileResolver::Invalidate(std::uint32_t fi, std::string_view why) {
  File& f = files_[fi];
  if (f.state != File::State::kReady) return true;
  if (f.reresolves_this_run >= opts_.max_reresolves_per_file) {
    // The token never goes to the CDN, so this is not the token's fault:
    // the hub signs URLs its CDN refuses (a mirror's signing, a clock
    // skewed, access revoked meanwhile). Unavailable: a later rerun may pass.
    // A ready file has no waiters, so nobody else fails with it now.
    Fail(fi, UnavailableError(naming_.describe(f.path) + ": " + std::string(why) + " after " +
                              std::to_string(f.reresolves_this_run) +
                              " re-resolves: the CDN refuses the URLs the hub signs (the token is never "
                              "sent to the CDN)"));
    return false;
  }
  // A URL refused again right after a fresh resolve: back off before the
  // next one, so a CDN refusing everything is not met with a resolve storm
  // (the hub rate-limits /resolve/). Expiry (the first one) waits for nothing.
  if (f.reresolves_this_run > 0)
    sched_.PauseResolvesUntil(sched_.Now() + sched_.Backoff(f.reresolves_this_run));
  f.state = File::State::kUnresolved;
  return true;
}

void FileResolver::Unpresume(std::uint32_t fi) {
  File& f = files_[fi];
  if (f.state != File::State::kReady) return;
  f.presumed = false;
  f.state = File::State::kUnresolved;
}

void FileResolver::Queue(std::uint32_t fi) {
  File& f = files_[fi];
  if (f.state != File::State::kUnresolved) return;
  f.state = File::State::kQueued;
  f.hops = 0;
  f.next_url = naming_.resolve_url(f.path);
  queue_.push_back(fi);
}

void FileResolver::Wait(std::uint32_t fi, std::uint32_t job) {
  Queue(fi);
  files_[fi].waiters.push_back(job);
}

bool FileResolver::CanStartResolve() const {
  return !queue_.empty() && running_ < opts_.max_parallel_resolves && !sched_.ResolvesPaused();
}

std::optional<std::uint32_t> FileResolver::StartNextResolve() {
  while (!queue_.empty()) {
    const std::uint32_t fi = queue_.front();
    queue_.pop_front();
    File& f = files_[fi];
    if (f.waiters.empty()) {  // nobody needs it any more
      f.state = File::State::kUnresolved;
      continue;
    }
    f.state = File::State::kResolving;
    ++running_;
    return fi;
  }
  return std::nullopt;
}

FileResolver::Outcome FileResolver::OnResolveEnd(std::uint32_t fi, HubClient::ResolveStep step) {
  --running_;
  File& f = files_[fi];
  if (step.resolved) {
    if (f.ever_resolved) ++f.reresolves_this_run;
    f.ever_resolved = true;
    f.failed_tries = 0;
    f.url = std::move(step.resolved->url);
    f.presumed = false;
    f.on_hub = step.resolved->on_hub;
    f.size = step.resolved->size;
    f.expires = step.resolved->expires;
    ++f.generation;
    f.state = File::State::kReady;
    Outcome out;
    out.ready.swap(f.waiters);
    return out;
  }
  if (step.follow) {
    if (++f.hops >= kMaxResolveHops)
      return Fail(fi, IOError(naming_.describe(f.path) + ": too many redirects on the hub"));
    f.next_url = std::move(*step.follow);
    f.state = File::State::kQueued;
    queue_.push_front(fi);
    return {};
  }
  if (!step.retryable) return Fail(fi, std::move(step.status));
  ++f.failed_tries;
  if (f.failed_tries >= opts_.max_attempts) {
    return Fail(fi, Status(step.status.code(), step.status.message() + " (resolve failed " +
                                                   std::to_string(f.failed_tries) + " times)"));
  }
  if (step.wait && *step.wait > opts_.max_throttle_wait) {
    return Fail(fi, Status(step.status.code(),
                           step.status.message() + WaitPastCap(*step.wait, opts_.max_throttle_wait)));
  }
  sched_.PauseResolvesUntil(sched_.Now() + (step.wait ? *step.wait : sched_.Backoff(f.failed_tries)));
  f.state = File::State::kQueued;
  queue_.push_back(fi);
  return {};
}

}  // namespace exlr8
