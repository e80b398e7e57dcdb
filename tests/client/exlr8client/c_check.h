/* Checks for the C programs that test libexlr8client from C: CHECK and
 * CHECK_OK count a failure in `failures` and go on; REQUIRE and REQUIRE_OK
 * end main() with 1. Each names the file, line and, for a call, the
 * status and the library's message. */
#ifndef EXLR8_TESTS_C_CHECK_H
#define EXLR8_TESTS_C_CHECK_H

#include <exlr8/exlr8client.h>
#include <stdio.h>

static int failures __attribute__((unused)) = 0;

#define EXLR8_C_CHECK_(cond, fail)                                             \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      fail;                                                                    \
    }                                                                          \
  } while (0)

#define EXLR8_C_CHECK_OK_(call, fail)                                                          \
  do {                                                                                         \
    exlr8_status s_ = (call);                                                                  \
    if (s_ != EXLR8_OK) {                                                                      \
      fprintf(stderr, "%s:%d: %s: %s: %s\n", __FILE__, __LINE__, #call, exlr8_status_name(s_), \
              exlr8_last_error_message());                                                     \
      fail;                                                                                    \
    }                                                                                          \
  } while (0)

#define CHECK(cond) EXLR8_C_CHECK_(cond, ++failures)
#define REQUIRE(cond) EXLR8_C_CHECK_(cond, return 1)
#define CHECK_OK(call) EXLR8_C_CHECK_OK_(call, ++failures)
#define REQUIRE_OK(call) EXLR8_C_CHECK_OK_(call, return 1)

#endif
