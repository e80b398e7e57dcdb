// ConcurrencyController: how many range transfers the fetcher keeps in
// flight when no --jobs was given, learnt from the throughput it gets.
//
// The rule (a hill climb on measured throughput, with AIMD-style backoff):
//  - Time is cut into windows, each at least `min_window` long and, while
//    transfers end, long enough for about `limit` of them to end (one
//    turnover of every slot), at most `max_window`. A window counts only
//    if the limit was used in it (as many transfers in flight as allowed at
//    some point): a pull that has too little work to fill the limit says
//    nothing about what more transfers would bring.
//  - Probing: the limit is raised by a step (x2 from the start, x1.25
//    later) and the next counted window's throughput is compared with the
//    one before the step. If it grew by at least `gain`, the step is kept
//    and another tried; else the limit goes back to where it was and
//    holds: more transfers no longer bought throughput. The window right
//    after a step up is not measured (new transfers are still connecting:
//    a TLS handshake is several round trips), the one after it is; nor is
//    the first window of all.
//  - Shrinking, once the climb ended: the limit is halved (not below
//    `pressure_floor`) while the halving keeps 95% of the throughput, so
//    that a path bound by something else (the CPU, the disk) does not keep
//    transfers and connections that buy nothing; the first halving that
//    costs more is undone.
//  - Holding: every `reprobe_windows` clean windows a x1.25 step is tried
//    again (the path may have changed); after a backoff, every 2.
//  - Backing off, at once and at most once per `min_window`: a 429 or 503
//    halves the limit; a transport error or other 5xx takes a quarter off;
//    a transfer held back because the consumer's buffers are full (memory
//    pressure) takes an eighth off, down to `pressure_floor` at most, and
//    stops growth for that window.
//  - Always floor <= limit <= ceiling.
// The bytes counted are bytes received off the wire, measured on the
// injected Clock, so a test drives it with a FakeClock and made-up bytes.
//
// Thread rules: not thread-safe; RangeFetcher::Run's thread alone calls it.
#pragma once

#include <chrono>
#include <cstdint>

#include "daemon/base/clock.h"

namespace exlr8 {

struct ConcurrencyOptions {
  int floor = 4;      // never fewer transfers allowed than this
  int initial = 16;   // the limit a fetch starts with (the old default)
  int ceiling = 128;  // never more than this (the fetcher's slots)
  // Memory pressure takes the limit down to this at most: up to it, the
  // memory is what the old fixed default of 16 always used.
  int pressure_floor = 16;
  std::chrono::milliseconds min_window{100};
  std::chrono::milliseconds max_window{2000};
  double gain = 1.1;         // a x2 step must raise throughput this much to stay
  double small_gain = 1.05;  // ... and a x1.25 step this much
  int reprobe_windows = 20;  // clean windows between probes while holding
};

class ConcurrencyController {
 public:
  enum class Phase : std::uint8_t {
    kStart,      // doubling while throughput follows
    kProbing,    // one x1.25 step under test
    kShrinking,  // after the climb: one halving under test
    kHolding,    // the limit stays; a probe comes every reprobe_windows
  };

  // REQUIRES: `clock` outlives the controller. Options are clamped so that
  // 1 <= floor <= initial <= ceiling.
  ConcurrencyController(Clock& clock, ConcurrencyOptions options = {});

  // Transfers that may be in flight now.
  int limit() const { return limit_; }
  Phase phase() const { return phase_; }
  // The highest limit reached, and how many backoffs there were.
  int peak() const { return peak_; }
  std::uint64_t backoffs() const { return backoffs_; }
  // Throughput of the last counted window, bytes per second (0 before one).
  double last_rate() const { return last_rate_; }

  // `in_flight` transfers run now (after one started): tells the window
  // whether the limit was used.
  void InFlight(int in_flight);
  // Bytes received off the wire.
  void Received(std::uint64_t bytes) { window_bytes_ += bytes; }
  // A transfer ended (whatever its outcome).
  void Ended() { ++window_ended_; }
  // A 429 or 503 answer.
  void Throttled();
  // A transport error (reset, stall, refused connection) or a 5xx other
  // than 503.
  void Failed();
  // A transfer was held back because its consumer could take no more
  // (its buffers are full).
  void Pressure();

  // Closes the window if it is due and acts on it. Call often (each turn
  // of the fetcher's loop); cheap when nothing is due.
  void Tick();

 private:
  // Multiplies the limit by `factor`, not below `lowest` (nor floor).
  void Decrease(double factor, int lowest);
  void SetLimit(int n);
  void OpenWindow();
  void OnWindow(double rate);
  void StartProbe(double factor);
  void StartShrink();

  Clock& clock_;
  const ConcurrencyOptions opts_;
  int limit_;
  int peak_;
  Phase phase_ = Phase::kStart;
  // The limit before the step under test, and the throughput it gave.
  int before_step_ = 0;
  double rate_before_step_ = 0;
  double step_gain_ = 1.1;
  bool settling_ = false;    // the window after a step up: not measured
  bool recovering_ = false;  // a backoff happened since the last hold began
  int clean_windows_ = 0;
  double last_rate_ = 0;
  std::uint64_t backoffs_ = 0;
  Clock::TimePoint last_decrease_{};
  bool decreased_once_ = false;

  // The window.
  Clock::TimePoint window_start_{};
  std::uint64_t window_bytes_ = 0;
  int window_ended_ = 0;
  bool window_used_ = false;      // in flight reached the limit
  bool window_pressure_ = false;  // Pressure() or a decrease happened in it
};

}  // namespace exlr8
