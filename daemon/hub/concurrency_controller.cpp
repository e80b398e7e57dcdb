#include "daemon/hub/concurrency_controller.h"

#include <algorithm>
#include <cmath>

namespace exlr8 {
namespace {

ConcurrencyOptions Clamped(ConcurrencyOptions o) {
  o.ceiling = std::max(1, o.ceiling);
  o.floor = std::clamp(o.floor, 1, o.ceiling);
  o.initial = std::clamp(o.initial, o.floor, o.ceiling);
  o.pressure_floor = std::clamp(o.pressure_floor, o.floor, o.ceiling);
  o.min_window = std::max(o.min_window, std::chrono::milliseconds(1));
  o.max_window = std::max(o.max_window, o.min_window);
  o.reprobe_windows = std::max(1, o.reprobe_windows);
  return o;
}

constexpr double kStartStep = 2.0;
constexpr double kProbeStep = 1.25;
// A halving stays when it keeps this much of the throughput.
constexpr double kShrinkKeeps = 0.95;

}  // namespace

ConcurrencyController::ConcurrencyController(Clock& clock, ConcurrencyOptions options)
    : clock_(clock), opts_(Clamped(options)), limit_(opts_.initial), peak_(opts_.initial) {
  // The first window holds the start (connections, TLS, small requests):
  // measured, it would make any step look like a gain.
  settling_ = true;
  OpenWindow();
}

void ConcurrencyController::OpenWindow() {
  window_start_ = clock_.Now();
  window_bytes_ = 0;
  window_ended_ = 0;
  window_used_ = false;
  window_pressure_ = false;
}

void ConcurrencyController::SetLimit(int n) {
  limit_ = std::clamp(n, opts_.floor, opts_.ceiling);
  peak_ = std::max(peak_, limit_);
}

void ConcurrencyController::InFlight(int in_flight) {
  if (in_flight >= limit_) window_used_ = true;
}

void ConcurrencyController::Decrease(double factor, int lowest) {
  window_pressure_ = true;
  const auto now = clock_.Now();
  if (decreased_once_ && now - last_decrease_ < opts_.min_window) return;  // one per window's time
  decreased_once_ = true;
  last_decrease_ = now;
  ++backoffs_;
  settling_ = false;
  // A step under test is abandoned: its window would measure the backoff.
  SetLimit(std::max(std::min(lowest, limit_), static_cast<int>(std::floor(limit_ * factor))));
  phase_ = Phase::kHolding;
  recovering_ = true;
  clean_windows_ = 0;
  OpenWindow();
  window_pressure_ = true;
}

void ConcurrencyController::Throttled() { Decrease(0.5, opts_.floor); }
void ConcurrencyController::Failed() { Decrease(0.75, opts_.floor); }
// Up to `initial` transfers the memory is what a fixed --jobs of that size
// always used; what pressure takes back is the growth beyond it.
void ConcurrencyController::Pressure() { Decrease(0.875, opts_.pressure_floor); }

void ConcurrencyController::StartProbe(double factor) {
  const int next = std::clamp(static_cast<int>(std::ceil(limit_ * factor)), opts_.floor, opts_.ceiling);
  if (next == limit_) {  // at the ceiling: nothing to try
    phase_ = Phase::kHolding;
    return;
  }
  before_step_ = limit_;
  rate_before_step_ = last_rate_;
  step_gain_ = factor >= kStartStep ? opts_.gain : opts_.small_gain;
  SetLimit(next);
  settling_ = true;
  if (phase_ != Phase::kStart) phase_ = Phase::kProbing;
}

void ConcurrencyController::StartShrink() {
  const int next = std::max(limit_ / 2, opts_.pressure_floor);
  if (next >= limit_) {
    phase_ = Phase::kHolding;
    return;
  }
  before_step_ = limit_;
  rate_before_step_ = last_rate_;
  SetLimit(next);
  phase_ = Phase::kShrinking;
  settling_ = true;
}

void ConcurrencyController::OnWindow(double rate) {
  last_rate_ = rate;
  switch (phase_) {
    case Phase::kStart:
    case Phase::kProbing: {
      const bool first = before_step_ == 0;
      if (first || rate >= rate_before_step_ * step_gain_) {
        StartProbe(phase_ == Phase::kStart ? kStartStep : kProbeStep);
        if (phase_ == Phase::kHolding) clean_windows_ = 0;
        return;
      }
      // The step bought too little: back to the limit before it, whose
      // throughput stands (the better of the two measurements).
      const bool climb_ended = phase_ == Phase::kStart;
      SetLimit(before_step_);
      last_rate_ = std::max(rate, rate_before_step_);
      before_step_ = 0;
      phase_ = Phase::kHolding;
      recovering_ = false;
      clean_windows_ = 0;
      if (climb_ended) StartShrink();
      return;
    }
    case Phase::kShrinking:
      if (rate >= rate_before_step_ * kShrinkKeeps) {  // fewer transfers lose nothing
        last_rate_ = std::max(rate, rate_before_step_);
        StartShrink();
        return;
      }
      SetLimit(before_step_);
      last_rate_ = rate_before_step_;
      before_step_ = 0;
      phase_ = Phase::kHolding;
      clean_windows_ = 0;
      return;
    case Phase::kHolding:
      if (++clean_windows_ >= (recovering_ ? 2 : opts_.reprobe_windows)) {
        clean_windows_ = 0;
        phase_ = Phase::kProbing;
        StartProbe(kProbeStep);
      }
      return;
  }
}

void ConcurrencyController::Tick() {
  const auto now = clock_.Now();
  const auto elapsed = now - window_start_;
  const bool due = elapsed >= opts_.max_window || (elapsed >= opts_.min_window && window_ended_ >= limit_);
  if (!due) return;
  if (settling_) {  // the new transfers were still connecting and starting
    settling_ = false;
    OpenWindow();
    return;
  }
  const bool counts = window_used_ && !window_pressure_ && window_bytes_ > 0;
  const double seconds = std::chrono::duration<double>(elapsed).count();
  const double rate = static_cast<double>(window_bytes_) / seconds;
  OpenWindow();
  if (counts) OnWindow(rate);
}

}  // namespace exlr8
