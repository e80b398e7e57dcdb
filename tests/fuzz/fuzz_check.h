// Shared by fuzz targets: invariant checks that abort, so that libFuzzer
// (and the replay driver) report the input that broke them.
#pragma once

#include <cstdio>
#include <cstdlib>

// Aborts with the failed condition when `cond` is false. Unlike assert(), it
// is never compiled out.
#define EXLR8_FUZZ_CHECK(cond)                                                      \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      std::fprintf(stderr, "%s:%d: fuzz invariant failed: %s\n", __FILE__, __LINE__, \
                   #cond);                                                          \
      std::abort();                                                                 \
    }                                                                               \
  } while (0)
