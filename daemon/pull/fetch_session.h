// FetchSession: one RangeFetcher run that lasts a whole pull, fed with work
// while it runs.
//
// A pull is a chain of dependent steps (index files -> headers -> plan ->
// halves), but its largest files (dense layers, vocab) depend on nothing
// but the listing. With one fetcher run per step, the link sat idle while
// the planner parsed, and the dense files waited for the plan. A session
// keeps one run going on a thread of its own; the planner submits each
// step's consumer and waits for it, while consumers submitted earlier (the
// dense files) keep streaming on the slots the current step leaves free.
//
//   FetchSession session(fetcher, &cancel);
//   auto files = session.Submit(file_consumer, kBackground, /*cap=*/4);
//   auto meta = session.Submit(metadata_consumer, kForeground);
//   Status s = session.Wait(meta);      // files keep streaming meanwhile
//   ...
//   Status end = session.Finish();      // everything submitted has ended
//
// Scheduling: requests of higher priority are handed out first, and start
// first (RangeRequest::priority) even when the fetcher already holds
// requests of lower priority waiting for a slot; within a priority,
// consumers in the order submitted. A consumer's `cap` is its share of the
// transfer slots: it bounds its requests in flight while the session is
// open or any consumer of higher priority still has requests to hand out
// (so background work never holds every slot when the next step arrives),
// and it is also reserved: below its cap, a background consumer's requests
// go before the foreground's, so the dense files stream beside the halves
// rather than after them. Steps always go first, and while a step has
// requests in flight the background transfers are held back (ReadyFor; for
// at most 10 s per step, well inside libcurl's stall timeout) where each
// has its own connection (HTTP/1.1). Multiplexed on one HTTP/2 connection
// they are not: holding a stream there held the step's streams too.
//
// Threads: the fetch runs on the session's thread, and every consumer
// callback on the session's OffloadConsumer workers (with one worker, one
// at a time, so consumers need no locks of their own). Submit, Wait and Finish are for
// one planner thread. After Wait(ticket) returned, the consumer's state may
// be read from the planner thread; the consumer must outlive the session.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "daemon/hub/range_fetcher.h"
#include "daemon/pull/offload_consumer.h"
#include "format/status.h"

namespace exlr8 {

class FetchSession {
 public:
  // kStep: a planner step the pull waits on (index files, headers);
  // kForeground: the halves; kBackground: the whole files.
  enum Priority : int { kBackground = 0, kForeground = 1, kStep = 2 };
  using Ticket = std::size_t;

  // Starts fetcher.Run on a new thread. `cancel` (optional) is passed on to
  // Run. `write_threads`: the OffloadConsumer's workers (more than one asks
  // the submitted consumers to take concurrent calls for different requests,
  // see consumers.h). `max_hold`: the longest a step holds the background
  // transfers back. REQUIRES: `fetcher` outlives the session and is run by
  // no one else.
  FetchSession(RangeFetcher& fetcher, const std::atomic<bool>* cancel, int write_threads = 1,
               std::chrono::milliseconds max_hold = std::chrono::seconds(10));
  // Cancels what is still running (if Finish was not called) and joins.
  ~FetchSession();
  FetchSession(const FetchSession&) = delete;
  FetchSession& operator=(const FetchSession&) = delete;

  // Hands `consumer`'s requests to the running fetch. `cap` = 0: no bound.
  // At most 255 submissions per session.
  Ticket Submit(RangeConsumer& consumer, Priority priority, int cap = 0);

  // Blocks until every request `consumer` handed out has ended (accepted or
  // failed: see the consumer's own errors) and it has no more. If the fetch
  // ended first (cancelled, libcurl failure), returns why.
  Status Wait(Ticket ticket);

  // No more submissions; waits for everything submitted to end, then for
  // the fetch; returns fetcher.Run's status.
  Status Finish();

  // Stops the fetch now (requests end as Cancelled) and waits for it.
  void Abort();

 private:
  class Mux;
  void RunFetch(const std::atomic<bool>* cancel);

  RangeFetcher& fetcher_;
  std::unique_ptr<Mux> mux_;
  std::unique_ptr<OffloadConsumer> offload_;
  std::thread thread_;
};

}  // namespace exlr8
