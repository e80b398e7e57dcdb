#include "daemon/serve/cache_owner.h"

#include <utility>

namespace exlr8 {

CacheOwner::Opener CacheOwner::OpenerFor(std::filesystem::path dir, CacheOptions options) {
  return [dir = std::move(dir), options = std::move(options)] { return Cache::Open(dir, options); };
}

CacheOwner::CacheOwner(Opener open, Clock& clock, std::chrono::milliseconds retry)
    : open_(std::move(open)), clock_(clock), retry_(retry) {}

CacheOwner::~CacheOwner() = default;

Result<Cache*> CacheOwner::Acquire() {
  if (cache_) return cache_.get();
  if (!locked_.ok() && clock_.Now() < retry_at_) return locked_;
  Result<std::unique_ptr<Cache>> opened = open_();
  if (!opened.ok()) {
    if (opened.status().code() == StatusCode::kFailedPrecondition) {
      locked_ = opened.status();
      retry_at_ = clock_.Deadline(retry_);
    } else {
      locked_ = Status();
    }
    return opened.status();
  }
  locked_ = Status();
  cache_ = std::move(*opened);
  return cache_.get();
}

std::string CacheOwner::WaitingMessage(const Status& locked) const {
  return "waiting for the cache: " + locked.message() + "; retrying every " + std::to_string(retry_.count()) +
         " ms";
}

}  // namespace exlr8
