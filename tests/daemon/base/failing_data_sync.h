// fdatasync that fails on demand, for tests of what a failed sync leaves.
//
// Linking this file into a test executable (through exlr8d::test_support,
// by calling either function below) replaces libc's fdatasync for the
// whole process: each call counts, and the next FailNextDataSyncs(n) calls
// fail with EIO without syncing; the others go to libc's. Safe from any
// thread.
#pragma once

namespace exlr8::testing {

// The next `n` fdatasync calls fail with EIO (replacing any earlier count).
void FailNextDataSyncs(int n);

// Failures FailNextDataSyncs asked for that no call has taken yet.
int DataSyncFailuresLeft();

// fdatasync calls made since the process started.
int DataSyncCalls();

}  // namespace exlr8::testing
