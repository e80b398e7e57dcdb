#include "tests/daemon/base/failing_data_sync.h"

#include <dlfcn.h>
#include <errno.h>
#include <unistd.h>

#include <atomic>

namespace {
std::atomic<int> g_fail_next{0};  // fdatasync calls still to fail
std::atomic<int> g_calls{0};      // fdatasync calls seen
}  // namespace

extern "C" int fdatasync(int fd) {
  g_calls.fetch_add(1);
  int left = g_fail_next.load();
  while (left > 0 && !g_fail_next.compare_exchange_weak(left, left - 1)) {
  }
  if (left > 0) {
    errno = EIO;
    return -1;
  }
  using Fn = int (*)(int);
  static const Fn real = reinterpret_cast<Fn>(::dlsym(RTLD_NEXT, "fdatasync"));
  return real(fd);
}

namespace exlr8::testing {

void FailNextDataSyncs(int n) { g_fail_next.store(n); }

int DataSyncFailuresLeft() { return g_fail_next.load(); }

int DataSyncCalls() { return g_calls.load(); }

}  // namespace exlr8::testing
