// The text of a pull's progress display, apart from the drawing: pure, so
// tests can check what a terminal of any width gets.
#pragma once

#include <string>

#include "daemon/pull/pull_job.h"

namespace exlr8 {

// The one-line bar for a terminal `columns` wide: phase, a bar, percent,
// bytes done of planned, rate, ETA, ranges done, retries. It never takes
// more than columns - 1 characters (a full line would wrap on some
// terminals, and every redraw would then start a new line): where the width
// is short it drops, in this order, retries, the bar, ranges, the rate and
// the bytes, then cuts what is left. `rate` is in bytes per second (0: not
// known yet).
std::string PullProgressBar(const PullProgress& p, double rate, int columns);

// The log line printed every few seconds when stderr is not a terminal.
std::string PullProgressLogLine(const PullProgress& p, double rate);

// "mm:ss", "h:mm:ss", or "--:--" for negative or absurd values.
std::string ProgressDuration(double seconds);

}  // namespace exlr8
