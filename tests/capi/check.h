/* The plain-C tests' one assertion: counts a failure, prints the check and the C API's last error,
 * and goes on (each test is one executable; check_exit() gives its exit status). */
#ifndef ZIPCCL_TESTS_CAPI_CHECK_H_
#define ZIPCCL_TESTS_CAPI_CHECK_H_

#include <stdio.h>

#include "zipccl/zipccl_c.h"

static int g_failures = 0;

#define CHECK(cond)                                                                             \
  do {                                                                                          \
    if (!(cond)) {                                                                              \
      fprintf(stderr, "%s:%d: CHECK(%s) failed; last error: '%s'\n", __FILE__, __LINE__, #cond, \
              zipccl_last_error());                                                             \
      ++g_failures;                                                                             \
    }                                                                                           \
  } while (0)

/* 0 when every check passed; otherwise 1, after saying how many failed. */
static int check_exit(const char* test) {
  if (g_failures) {
    fprintf(stderr, "%s: %d checks failed\n", test, g_failures);
    return 1;
  }
  printf("%s: all checks passed\n", test);
  return 0;
}

#endif /* ZIPCCL_TESTS_CAPI_CHECK_H_ */
