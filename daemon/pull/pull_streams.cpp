#include "daemon/pull/pull_streams.h"

#include <pthread.h>

#include <algorithm>
#include <future>

namespace exlr8 {

PullStreams::PullStreams(Env env)
    : env_(std::move(env)),
      session_(std::make_unique<FetchSession>(env_.fetcher, env_.cancel, env_.write_threads)) {}

PullStreams::~PullStreams() {
  if (prefix_hasher_.joinable()) prefix_hasher_.join();  // it submits to the session
  session_.reset();                                      // aborts it if it still runs
}

std::unique_ptr<CommitBatcher> PullStreams::NewBatch(bool report) {
  return std::make_unique<CommitBatcher>(env_.cache, env_.commit_interval, env_.commit_bytes,
                                         report ? env_.on_commit : std::function<void()>(),
                                         env_.space.recorded_counter(), &env_.fetcher.clock());
}

Status PullStreams::RunStep(RangeConsumer& consumer, const ConsumerBase& base) {
  Status s = session_->Wait(session_->Submit(consumer, FetchSession::kStep));
  if (env_.cancel != nullptr && env_.cancel->load()) return CancelledError("pull cancelled");
  if (!base.first_error().ok()) return base.first_error();
  return s;
}

CommitBatcher& PullStreams::NewStepBatch() {
  step_batches_.push_back(NewBatch(/*report=*/false));
  return *step_batches_.back();
}

// The whole files depend on nothing the planner computes, and are the
// largest (dense layers, vocab). They get a quarter of the transfer slots
// (at most while the planner's steps run, so those never wait for a slot;
// at least while the halves stream, so they end with them). A whole file
// is flagged verified by the commit that makes it durable and records it
// (at most about a commit interval after its last byte, see
// CommitBatcher); a dense or vocab file only once it has also passed the
// format's checks.
Status PullStreams::StartFiles(std::vector<WholeFileTarget> targets) {
  if (targets.empty()) return Status::Ok();
  std::vector<WholeFileTarget> fresh, resumed;
  // Largest first: a big file started last would be the pull's tail, one
  // transfer streaming alone after everything else has ended.
  std::stable_sort(targets.begin(), targets.end(),
                   [](const WholeFileTarget& a, const WholeFileTarget& b) { return a.size > b.size; });
  std::uint64_t file_bytes = 0;  // a resumed prefix is on disk already
  for (WholeFileTarget& t : targets) {
    file_bytes += t.size - t.resume_from;
    (t.resume_from > 0 ? resumed : fresh).push_back(std::move(t));
  }
  EXLR8_RETURN_IF_ERROR(env_.space.CheckAndClaim(file_bytes));
  files_batch_ = NewBatch(/*report=*/true);
  files_ = std::make_unique<WholeFileConsumer>(env_.fetcher, env_.cache, *files_batch_, env_.counters,
                                               std::move(fresh));
  if (env_.background_jobs != 0) session_->Submit(*files_, FetchSession::kBackground, BackgroundCap());
  // Interrupted downloads resume once the plan is made (StartResumes):
  // reading their prefixes back competes for the disk with the planner's
  // reads.
  if (!resumed.empty())
    resumed_ = std::make_unique<WholeFileConsumer>(env_.fetcher, env_.cache, *files_batch_, env_.counters,
                                                   std::move(resumed));
  return Status::Ok();
}

// The prefixes of interrupted downloads are read back and hashed on a
// thread of their own (gigabytes at GLM scale), then those files join the
// background.
void PullStreams::StartResumes() {
  if (!resumed_ || prefix_hasher_.joinable()) return;
  const int cap = BackgroundCap();
  prefix_hasher_ = std::thread([this, cap] {
    pthread_setname_np(pthread_self(), "exlr8-resume");
    prefix_status_ = resumed_->HashPrefixes();
    if (prefix_status_.ok()) session_->Submit(*resumed_, FetchSession::kBackground, cap);
  });
}

void PullStreams::StartHeldBack() {
  if (files_ && env_.background_jobs == 0)  // held back until now
    session_->Submit(*files_, FetchSession::kBackground, env_.max_parallel);
  StartResumes();
}

void PullStreams::StartHalves(std::vector<FileWork> work) {
  work_ = std::move(work);
  halves_batch_ = NewBatch(/*report=*/true);
  halves_ = std::make_unique<HalfConsumer>(env_.fetcher, env_.cache, *halves_batch_, env_.counters, work_);
  session_->Submit(*halves_, FetchSession::kForeground);
}

Status PullStreams::EndTransfers() {
  StartResumes();                                        // a dry run never started them; nor will it have any
  if (prefix_hasher_.joinable()) prefix_hasher_.join();  // it may still submit
  return session_->Finish();
}

Status PullStreams::Flush() {
  // The dense files' format checks run on threads of their own; what passes
  // joins the files' batch.
  if (files_) files_->DrainChecks();
  if (resumed_) resumed_->DrainChecks();
  std::vector<CommitBatcher*> batches;
  if (halves_batch_) batches.push_back(halves_batch_.get());
  if (files_batch_) batches.push_back(files_batch_.get());
  for (auto& b : step_batches_) batches.push_back(b.get());
  std::vector<std::future<Status>> flushes;
  for (CommitBatcher* b : batches)
    flushes.push_back(std::async(std::launch::async, [b] { return b->Flush(); }));
  Status flushed;
  for (auto& f : flushes) {
    Status r = f.get();
    if (flushed.ok()) flushed = std::move(r);
  }
  // (Whole files were flagged verified by the commits that recorded them.)
  return flushed;
}

Status PullStreams::StreamError() const {
  if (files_ && !files_->first_error().ok()) return files_->first_error();
  if (resumed_ && !prefix_status_.ok()) return prefix_status_;
  if (resumed_ && !resumed_->first_error().ok()) return resumed_->first_error();
  if (halves_ && !halves_->first_error().ok()) return halves_->first_error();
  return Status::Ok();
}

}  // namespace exlr8
